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
"""
from __future__ import annotations

import json
from typing import Any, Optional

MARKER = "\u2063insandbox-turn\u2063"  # invisible separator: text no model or template writes

TOOLS_SECTION = """

# Tools

Call a tool by writing, anywhere in your reply, a block
<tool_call>
{{"name": <tool name>, "arguments": <arguments as a JSON object>}}
</tool_call>
You may write several blocks. Their results come back in <tool_response> blocks. The tools:
{tools}"""


class ChatTemplateError(ValueError):
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
        assistant header."""
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
