"""The dialogue so far, as the reply engine reads it: bounded by turns and characters, trimmed in halves.

It exists apart from the session because its bound is a latency decision, not bookkeeping: the brain resumes from
the longest prompt prefix it has seen (llama.cpp's prompt cache), so the context drops half its turns at once when
full rather than one each turn (docs/conversation.md#the-brain)."""

from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass
class Message:
    """One entry of the dialogue context. ``audio`` (16 kHz s16le) is kept only for engines that answer audio."""

    role: str  # "user" or "assistant"
    text: str
    audio: bytes | None = None
    # An assistant's function calls and their outputs (function_calls.CompletedCall), before its words.
    calls: tuple = ()

    def size(self) -> int:
        return len(self.text) + sum(len(c.arguments) + len(c.output) for c in self.calls)

    def chat(self) -> list[dict]:
        """As OpenAI chat messages: the calls (an assistant message with tool_calls, then each output as a tool
        message), then the words."""
        out: list[dict] = []
        if self.calls:
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in self.calls
                    ],
                }
            )
            out += [{"role": "tool", "tool_call_id": c.call_id, "content": c.output} for c in self.calls]
        if self.text or not self.calls:
            out.append({"role": self.role, "content": self.text})
        return out


class Context:
    """The dialogue so far, bounded: the last ``max_turns`` user+assistant pairs within ``max_chars`` characters.

    Past a bound it drops its oldest turns down to ``TRIM_TO`` of both bounds at once, not one turn each time: the
    brain resumes from the longest prompt prefix it has seen (llama.cpp's prompt cache), and a context that lost its
    first turn every turn shared only the system prompt with the one before, so from there on every turn evaluated
    the whole context again (docs/conversation.md#the-brain)."""

    TRIM_TO = 0.5

    def __init__(self, max_turns: int, max_chars: int):
        self.max_turns = max_turns
        self.max_chars = max_chars
        self.messages: collections.deque[Message] = collections.deque()

    def add(self, message: Message) -> None:
        if not message.text and message.audio is None and not message.calls:
            return
        last = self.messages[-1] if self.messages else None
        if last is not None and last.role == message.role == "user" and last.audio is None and message.audio is None:
            last.text = f"{last.text} {message.text}".strip()  # a user turn that got no reply: merge, keep alternation
        else:
            self.messages.append(message)
        self._trim()

    def _over(self, turns: int, chars: int) -> bool:
        users = sum(m.role == "user" for m in self.messages)
        return len(self.messages) > 1 and (users > turns or sum(m.size() for m in self.messages) > chars)

    def _trim(self) -> None:
        if self._over(self.max_turns, self.max_chars):
            turns, chars = max(1, int(self.max_turns * self.TRIM_TO)), int(self.max_chars * self.TRIM_TO)
            while self._over(turns, chars):
                self.messages.popleft()
            while self.messages and self.messages[0].role != "user":  # start with the user, like a chat
                self.messages.popleft()
        # Untrimmed, a first assistant message stays: the agent spoke first (ACTION_RESPOND, a greeting).

    def chat(self, system_prompt: str) -> list[dict]:
        """OpenAI chat messages: the system prompt, then the turns."""
        out = [{"role": "system", "content": system_prompt}] if system_prompt else []
        for m in self.messages:
            out += m.chat()
        return out
