"""Token ids of a conversation, built turn by turn, never by re-rendering what the model wrote.

The model's tokens are kept as sampled. Only what the environment adds is tokenized, once per
turn, with the model's own chat template:

    prompt_ids                     template(system, user) + the assistant header
    + sampled ids                  the model's turn, ending on its end-of-turn token
    + observation_ids(results)     what the template puts after a finished assistant turn (e.g. "\\n"),
                                   the results as a user turn, and the next assistant header
    + sampled ids ...

The pieces are found by rendering around a marker: a conversation ending in an assistant turn
"<marker>" shows what follows an assistant turn's text (its end, e.g. "<|im_end|>\\n"); the same
conversation plus the results, with the generation prompt, shows exactly the text to append. So
the ids decode to the template's own rendering of the conversation (see check.py).

Templates that know tools (Qwen's) get the schemas through `tools=`; for one that ignores them
(SmolLM2's), the schemas and the call format go into the system message.

What the environment says is escaped before it is tokenized: a tool output that prints
`<|im_end|>\n<|im_start|>assistant` would otherwise become the template's own special-token ids
(tokenizers find special tokens in any text they are given) and forge a turn boundary inside the
policy's context. Each special token's text in it gets a WORD JOINER (U+2060, invisible) after its
first character, so it is read as plain text; the conversation holds the escaped text, so the ids
still decode to it.
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional

from ...core.errors import ConfigError

MARKER = "\u2063insandbox-turn\u2063"  # invisible separator: text no model or template writes
JOINER = "\u2060"  # WORD JOINER: breaks a special token's text without changing how it reads

TOOLS_SECTION = """

# Tools

Call a tool by writing, anywhere in your reply, a block
<tool_call>
{{"name": <tool name>, "arguments": <arguments as a JSON object>}}
</tool_call>
You may write several blocks. Their results come back in <tool_response> blocks. The tools:
{tools}"""


class ChatTemplateError(ConfigError):
    """The tokenizer's chat template cannot be used turn by turn (told why)."""


class ChatFormat:
    def __init__(self, tokenizer: Any, tools: list[dict], template_kwargs: Optional[dict] = None):
        self.tokenizer = tokenizer
        self.tools = tools
        self.kwargs = dict(template_kwargs or {})
        if getattr(tokenizer, "chat_template", None) is None:
            raise ChatTemplateError("the tokenizer has no chat template")
        self.native_tools = self._renders_tools()
        self.turn_end = self._turn_end()  # the text after an assistant turn's content, e.g. "<|im_end|>\n"
        self.stop_token_ids, self.glue = self._stop_tokens()
        texts = sorted(self._special_texts(), key=len, reverse=True)  # the longest first where one holds another
        self._special = re.compile("|".join(map(re.escape, texts))) if texts else None

    # ------------------------------------------------------------------ rendering
    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        kwargs = dict(self.kwargs)
        if self.native_tools:
            kwargs["tools"] = self.tools
        else:
            messages = self._with_tools_in_system(messages)
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **kwargs)

    def _with_tools_in_system(self, messages: list[dict]) -> list[dict]:
        if not self.tools or not messages or messages[0].get("role") != "system":
            return messages
        schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in self.tools)
        first = {**messages[0], "content": messages[0]["content"] + TOOLS_SECTION.format(tools=schemas)}
        return [first, *messages[1:]]

    def escape(self, text: str) -> str:
        """`text` with no special token's text left in it (each broken by a word joiner after its first
        character): text from the sandbox, which must never tokenize as the template's own tokens."""
        if self._special is None:
            return text
        for _ in range(8):  # one pass does it; more only if a break made another token's text (none known)
            if not self._special.search(text):
                break
            text = self._special.sub(lambda m: m.group(0)[0] + JOINER + m.group(0)[1:], text)
        return text

    def escape_messages(self, messages: list[dict]) -> None:
        """Escape the text of environment messages in place (see `escape`), so the conversation holds what
        their ids say."""
        for m in messages:
            if isinstance(m.get("content"), str):
                m["content"] = self.escape(m["content"])
            elif isinstance(m.get("content"), list):
                for part in m["content"]:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        part["text"] = self.escape(part["text"])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    # ------------------------------------------------------------------ turn by turn
    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.encode(self.render(messages, add_generation_prompt=True))

    def assistant_text(self, sampled: list[int]) -> str:
        """The model's turn as message content: its ids decoded, without the end-of-turn token."""
        if sampled and sampled[-1] in self.stop_token_ids:
            sampled = sampled[:-1]
        return self.decode(sampled)

    def observation_ids(self, messages: list[dict], stopped: bool) -> list[int]:
        """The ids that follow a model turn: the rest of its turn end (all of it when the turn was cut
        off without its end-of-turn token), `messages` as the template renders them, and the next
        assistant header. `messages` are the environment's: escaped in place first (`escape`)."""
        self.escape_messages(messages)
        before = self._probe_context() + [{"role": "assistant", "content": MARKER}]
        closed = self.render(before)
        full = self.render(before + list(messages), add_generation_prompt=True)
        if not full.startswith(closed):
            raise ChatTemplateError("the chat template renders earlier turns differently once later turns "
                                    "follow; it cannot be used turn by turn")
        head = self.glue if stopped else self.turn_end
        return self.encode(head + full[len(closed):])

    # ------------------------------------------------------------------ probing the template
    @staticmethod
    def _probe_context() -> list[dict]:
        return [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]

    def _renders_tools(self) -> bool:
        if not self.tools:
            return False
        try:
            with_tools = self.tokenizer.apply_chat_template(self._probe_context(), tokenize=False, tools=self.tools,
                                                            **self.kwargs)
        except Exception:
            return False
        return with_tools != self.tokenizer.apply_chat_template(self._probe_context(), tokenize=False, **self.kwargs)

    def _turn_end(self) -> str:
        text = self.render(self._probe_context() + [{"role": "assistant", "content": MARKER}])
        at = text.rfind(MARKER)
        if at < 0:
            raise ChatTemplateError("the chat template drops the assistant's text")
        return text[at + len(MARKER):]

    def _special_texts(self) -> set[str]:
        """The text of every special token: all_special_tokens, and the added tokens marked special (some
        tokenizers list only a few in the former; <|im_end|> may be in the latter only)."""
        texts = {t for t in getattr(self.tokenizer, "all_special_tokens", None) or [] if isinstance(t, str)}
        for entry in (getattr(self.tokenizer, "added_tokens_decoder", None) or {}).values():
            if getattr(entry, "special", False) and isinstance(getattr(entry, "content", None), str):
                texts.add(entry.content)
        return {t for t in texts if len(t) > 1}  # a one-character token cannot be broken, and none is a marker

    def _is_special(self, token_id: int) -> bool:
        """A special or added token (<|im_end|>, <|eot_id|>): some tokenizers list only a few of theirs
        in all_special_ids, every one is in added_tokens_decoder."""
        added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
        entry = added.get(token_id)
        return token_id in (getattr(self.tokenizer, "all_special_ids", None) or []) or bool(
            entry is not None and getattr(entry, "special", True))

    def _stop_tokens(self) -> tuple[list[int], str]:
        """The token that ends an assistant turn (the first token of the turn end, when it is a
        single special token such as <|im_end|>, else the tokenizer's EOS), and the glue the
        template puts after it."""
        ids = self.encode(self.turn_end)
        if ids:
            first = self.decode(ids[:1])
            if self._is_special(ids[0]) and self.turn_end.startswith(first):
                return [ids[0]], self.turn_end[len(first):]
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            raise ChatTemplateError("no end-of-turn token: the template ends a turn with plain text and the "
                                    "tokenizer has no EOS")
        eos_text = self.decode([eos])
        return [eos], self.turn_end[len(eos_text):] if self.turn_end.startswith(eos_text) else self.turn_end
