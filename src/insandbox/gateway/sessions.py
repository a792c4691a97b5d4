"""Sessions: each one's conversations, token for token, kept on disk as they are answered.

A session (its id in the URL, /sessions/SID/v1) holds chains. A chain is one growing conversation:

    prompt_ids                   template(system, user, tools) + the assistant header   (mask 0)
    per turn:  observation ids   what the environment said since the last turn          (mask 0)
               sampled ids       what the upstream sampled, its log-probabilities       (mask 1)

A request whose messages are a chain's so far (its prompt, then every reply the gateway gave with
what followed it) extends that chain by one turn. One that goes on from an earlier turn of a chain
(a retry, a branch) makes a new chain sharing those ids; one that matches none (another prompt,
history edited or summarised by the harness) starts a new chain, its whole conversation rendered as
the prompt, so a token is marked the model's only when this gateway sampled it.

Every answered turn is appended to STORE/sessions/SID.jsonl and flushed to disk before the reply
leaves: a gateway killed mid-session keeps every turn a client was answered, and one started again
on the same store goes on with them. A session is bound to the API key of its first request (a hash
of it): another key gets 403, so one client cannot write into another's records.
"""
from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..core.errors import InsandboxError
from ..rl.rollout.chat import ChatFormat
from ..rl.rollout.check import check_record
from ..rl.rollout.types import RolloutRecord, Sampled
from .messages import BadRequest, assistant_text, environment_messages, reply_message, same_reply, split_turns

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class Forbidden(InsandboxError, PermissionError):
    """The request's API key is not the session's."""


@dataclass
class Turn:
    observation: list[dict]  # the environment's messages before this turn, as the harness sent them (normalised)
    observation_ids: list[int]
    sampled_ids: list[int]
    logprobs: Optional[list[float]]
    policy_version: int
    stopped: bool  # ended on its end-of-turn token
    text: str  # the sampled ids as message content
    reply: dict  # the assistant message sent back
    generate_s: float = 0.0
    tokenized: list[dict] = field(default_factory=list)  # the observation as tokenized (escaped)


@dataclass
class Chain:
    index: int
    tools: Optional[list[dict]]
    prompt: list[dict]  # the messages before the first turn (normalised)
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    forked_from: Optional[tuple[int, int]] = None  # (chain, turns shared)

    def context(self) -> list[int]:
        ids = list(self.prompt_ids)
        for t in self.turns:
            ids += t.observation_ids + t.sampled_ids
        return ids


@dataclass
class Plan:
    """Where a request's turn goes, decided before sampling."""

    chain: Chain  # the chain it extends (a new one is not registered until its turn is answered)
    new: bool
    turns_before: int  # the chain's turns when planned (a concurrent turn on it makes this one a branch)
    observation: list[dict]
    observation_ids: list[int]
    context: list[int]
    tokenized: list[dict] = field(default_factory=list)  # the observation as tokenized (escaped)


class ChatFormats:
    """A ChatFormat per tool set (building one probes the chat template)."""

    def __init__(self, tokenizer: Any, template_kwargs: Optional[dict] = None):
        self.tokenizer = tokenizer
        self.kwargs = template_kwargs or {}
        self._formats: dict[str, ChatFormat] = {}

    def get(self, tools: Optional[list[dict]]) -> ChatFormat:
        key = json.dumps(tools or [], sort_keys=True)
        if key not in self._formats:
            self._formats[key] = ChatFormat(self.tokenizer, list(tools or []), self.kwargs)
        return self._formats[key]


class Session:
    def __init__(self, sid: str, path: Path, formats: ChatFormats):
        self.id = sid
        self.path = path
        self.formats = formats
        self.chains: list[Chain] = []
        self.owner: Optional[str] = None  # sha256 of the first request's API key
        self.lock = asyncio.Lock()
        self.created = time.time()
        self.active = 0  # requests between their plan and their commit: the session stays in memory

    # ------------------------------------------------------------------ planning a turn
    def authorize(self, key_hash: str) -> None:
        if self.owner is not None and self.owner != key_hash:
            raise Forbidden(f"session {self.id} belongs to another API key")

    def plan(self, messages: list[dict], tools: Optional[list[dict]]) -> Plan:
        prefix, raw_turns = split_turns(messages)
        prompt = environment_messages(prefix)
        turns = [(message, environment_messages(after)) for message, after in raw_turns]  # normalised once
        chat = self.formats.get(tools)
        best: Optional[tuple[Chain, int]] = None
        for chain in reversed(self.chains):  # the newest first: a retry goes on from the latest branch
            shared = self._shared_turns(chain, prompt, turns, tools)
            if shared is not None and (best is None or shared > best[1]):
                best = (chain, shared)
        if best is not None and best[1] == len(turns) and turns:
            chain, shared = best
            if shared < len(chain.turns):  # goes on from an earlier turn: a branch sharing its ids
                chain = self._branch(chain, shared)
            observation = turns[-1][1]
            tokenized = copy.deepcopy(observation)  # observation_ids escapes it in place
            obs_ids = chat.observation_ids(tokenized, chain.turns[-1].stopped)
            return Plan(chain, chain.index < 0, len(chain.turns), observation, obs_ids, chain.context() + obs_ids,
                        tokenized)
        for message, after in turns:  # history this gateway did not sample: all of it is the prompt
            prompt += [{"role": "assistant", "content": assistant_text(message)}, *after]
        prompt_ids = chat.prompt_ids(prompt)
        chain = Chain(index=-1, tools=tools, prompt=prompt, prompt_ids=prompt_ids)
        return Plan(chain, True, 0, [], [], list(prompt_ids))

    def _shared_turns(self, chain: Chain, prompt: list[dict], turns: list[tuple[dict, list[dict]]],
                      tools: Optional[list[dict]]) -> Optional[int]:
        """How many of the request's turns (each reply with what followed it, normalised) are the chain's
        (None: not even its prompt)."""
        if chain.prompt != prompt or (chain.tools or []) != (tools or []) or len(turns) > len(chain.turns):
            return None
        n = 0
        for i, (message, after) in enumerate(turns):
            ours = chain.turns[i]
            if not same_reply(message, ours.text, ours.reply):
                return None
            if i + 1 < len(turns):  # what came after it must be what the chain holds
                if i + 1 >= len(chain.turns) or after != chain.turns[i + 1].observation:
                    return None
            n += 1
        return n

    def _branch(self, chain: Chain, shared: int) -> Chain:
        return Chain(index=-1, tools=chain.tools, prompt=chain.prompt, prompt_ids=chain.prompt_ids,
                     turns=list(chain.turns[:shared]), forked_from=(chain.index, shared))

    # ------------------------------------------------------------------ answering it
    def commit(self, plan: Plan, sampled: Sampled, version: int, generate_s: float, key_hash: str) -> Turn:
        """The sampled turn added to its chain and appended to the session's file (flushed) before the
        caller replies. A turn planned on a chain that meanwhile grew becomes a branch of it."""
        chat = self.formats.get(plan.chain.tools)
        chain = plan.chain
        if not plan.new and len(chain.turns) != plan.turns_before:
            chain = self._branch(chain, plan.turns_before)
        event: dict[str, Any] = {}
        if chain.index < 0:
            chain.index = len(self.chains)
            self.chains.append(chain)
            event.update(new_chain=True, tools=chain.tools, prompt=chain.prompt, prompt_ids=chain.prompt_ids,
                         forked_from=chain.forked_from)
        ids = list(sampled.token_ids)
        stopped = bool(ids) and ids[-1] in chat.stop_token_ids
        text = chat.assistant_text(ids)
        tokenized = plan.tokenized
        turn = Turn(observation=plan.observation, observation_ids=plan.observation_ids, sampled_ids=ids,
                    logprobs=list(sampled.logprobs) if sampled.logprobs is not None else None,
                    policy_version=version, stopped=stopped, text=text, reply=reply_message(text),
                    generate_s=round(generate_s, 4), tokenized=tokenized)  # as the file keeps it
        chain.turns.append(turn)
        if self.owner is None:
            self.owner = key_hash
            event["owner"] = key_hash
        event.update(chain=chain.index, turn=len(chain.turns) - 1, at=time.time(), observation=turn.observation,
                     tokenized=tokenized, observation_ids=turn.observation_ids, sampled_ids=ids,
                     logprobs=turn.logprobs, policy_version=version, stopped=stopped, text=text, reply=turn.reply,
                     generate_s=turn.generate_s)
        self._append(event)
        return turn

    def _append(self, event: dict) -> None:
        line = json.dumps(event, ensure_ascii=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    # ------------------------------------------------------------------ reading it back
    @classmethod
    def load(cls, sid: str, path: Path, formats: ChatFormats) -> Session:
        """A session as its file holds it (a last line cut by a crash was never answered: skipped)."""
        session = cls(sid, path, formats)
        if not path.exists():
            return session
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            session._replay(event)
        return session

    def _replay(self, e: dict) -> None:
        if e.get("owner"):
            self.owner = e["owner"]
        if e.get("new_chain"):
            fork = e.get("forked_from")
            turns = list(self.chains[fork[0]].turns[:fork[1]]) if fork else []
            self.chains.append(Chain(index=len(self.chains), tools=e.get("tools"), prompt=e["prompt"],
                                     prompt_ids=e["prompt_ids"], turns=turns,
                                     forked_from=tuple(fork) if fork else None))
        chain = self.chains[e["chain"]]
        chain.turns.append(Turn(observation=e["observation"], observation_ids=e["observation_ids"],
                                sampled_ids=e["sampled_ids"], logprobs=e.get("logprobs"),
                                policy_version=e["policy_version"], stopped=e["stopped"], text=e["text"],
                                reply=e["reply"], generate_s=e.get("generate_s", 0.0),
                                tokenized=e.get("tokenized") or []))

    def records(self) -> list[RolloutRecord]:
        return [self.record(chain) for chain in self.chains]

    def record(self, chain: Chain) -> RolloutRecord:
        """The chain as a rollout record (rl/rollout/types.py): its ids, the mask (1 where the upstream
        sampled), a log-probability per model token, the version of each turn. Its reward is the trainer's
        to give."""
        response, mask, logprobs = [], [], []
        messages = [dict(m) for m in chain.prompt]
        have_logprobs = all(t.logprobs is not None for t in chain.turns)
        for i, t in enumerate(chain.turns):
            if i:
                messages += copy.deepcopy(t.tokenized)
            response += t.observation_ids + t.sampled_ids
            mask += [0] * len(t.observation_ids) + [1] * len(t.sampled_ids)
            logprobs += [None] * len(t.observation_ids) + list(t.logprobs or [None] * len(t.sampled_ids))
            messages.append({"role": "assistant", "content": t.text})
        versions = [t.policy_version for t in chain.turns]
        last = chain.turns[-1] if chain.turns else None
        return RolloutRecord(
            id=f"{self.id}/c{chain.index}", task_id=self.id, sample=chain.index, prompt_ids=list(chain.prompt_ids),
            response_ids=response, response_mask=mask, response_logprobs=logprobs if have_logprobs else None,
            num_turns=len(chain.turns), tool_calls=sum(len(t.reply.get("tool_calls") or []) for t in chain.turns),
            truncated=bool(last and not last.stopped), policy_versions=list(versions),
            policy_version=min(versions) if versions else None,
            timings={"generate_s": round(sum(t.generate_s for t in chain.turns), 4)},
            reward_detail={"why": "not scored: the gateway records tokens, the trainer gives the reward"},
            trajectory={"messages": messages, "tools": chain.tools or [],
                        "prompt_turns": sum(1 for m in chain.prompt if m.get("role") == "assistant"),
                        "forked_from": list(chain.forked_from) if chain.forked_from else None})

    def check(self, records: list[RolloutRecord]) -> dict[str, list[str]]:
        """The decode check of the session's records, in chain order (rl/rollout/check.py): {record id:
        problems}, empty when sound."""
        found = {}
        for chain, record in zip(self.chains, records):
            problems = check_record(record, self.formats.get(chain.tools))
            if problems:
                found[record.id] = problems
        return found


class Sessions:
    """Every session of a store, loaded from its file on first use. At most `max_open` are kept in memory
    (a long-lived gateway serves many episodes): the least recently used with no request under way is
    let go, and read back from its file when asked for again."""

    def __init__(self, store: Path, formats: ChatFormats, max_open: int = 1024):
        self.folder = Path(store) / "sessions"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.formats = formats
        self.max_open = max_open
        self._open: OrderedDict[str, Session] = OrderedDict()

    def get(self, sid: str) -> Session:
        if not SESSION_ID.fullmatch(sid or ""):
            raise BadRequest(f"session id {sid[:40]!r}: letters, digits, '.', '_' and '-', at most 128, "
                             "not starting with a punctuation mark")
        if sid not in self._open:
            self._open[sid] = Session.load(sid, self.folder / f"{sid}.jsonl", self.formats)
            idle = [k for k, s in self._open.items() if k != sid and not s.active and not s.lock.locked()]
            for k in idle[:max(len(self._open) - self.max_open, 0)]:
                del self._open[k]
        self._open.move_to_end(sid)
        return self._open[sid]

    def exists(self, sid: str) -> bool:
        return SESSION_ID.fullmatch(sid or "") is not None and (sid in self._open
                                                               or (self.folder / f"{sid}.jsonl").exists())

    def ids(self) -> list[str]:
        on_disk = {p.stem for p in self.folder.glob("*.jsonl")}
        return sorted(on_disk | set(self._open))


def key_hash(authorization: Optional[str]) -> str:
    return hashlib.sha256((authorization or "").encode()).hexdigest()
