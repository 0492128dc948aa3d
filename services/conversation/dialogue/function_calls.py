"""The agent's function calls in a dialogue: a call goes to the caller, the reply waits for its output
(docs/conversation.md#tools).

A reply that calls a function (the cascade's brain chose one of the session's tools) hands the call here. A held
reply (started before its turn committed) waits for the commit first: a call the user never finished asking for
never reaches the caller. Then FUNCTION_CALL events go out (the arguments, then done), and the reply waits for the
caller's output (``answer``) at most the session's ``tool_timeout_s``:

* the output comes: the reply goes on from it, and the call and its output join the context with the turn;
* the time passes: FUNCTION_CALL_CANCELLED (reason "timeout"), and the turn fails with DEADLINE_EXCEEDED naming
  ``tool_timeout_ms``;
* the reply is cancelled meanwhile (barge-in, the caller's interrupt, a discarded held reply that somehow got here):
  FUNCTION_CALL_CANCELLED with the reply's reason, and an output that comes later is dropped.

An output for a call id this session never emitted is INVALID_ARGUMENT naming ``function_call_output.call_id``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.common import metrics
from services.common.engines import FUNCTION_CALL, FUNCTION_CALL_CANCELLED, FunctionCall, StsEvent
from services.common.errors import DeadlineExceeded, InvalidArgument
from services.conversation.dialogue.reply import Reply

log = logging.getLogger("voicefleet.conversation.dialogue")

# The call ids a session remembers (to tell a late output from a wrong one), oldest dropped first.
REMEMBERED_CALLS = 256


@dataclass
class CompletedCall:
    """A call and its output, as the context keeps them."""

    call_id: str
    name: str
    arguments: str
    output: str


class FunctionCalls:
    """One session's calls. ``emit(event)`` sends an event to the caller."""

    def __init__(
        self, emit: Callable[[StsEvent], None], timeout_s: float, labels: tuple[str, str], filler_s: float = 0.0
    ):
        self._emit = emit
        self.timeout_s = timeout_s
        self.filler_s = filler_s  # a call waiting this long gets its reply's filler (0: never)
        self._labels = labels
        self._waiting: dict[str, asyncio.Future[str]] = {}
        self._issued: list[str] = []

    async def call(
        self, reply: Reply, name: str, arguments: str, filler: Callable[[], Awaitable[None]] | None = None
    ) -> CompletedCall:
        """Send the call to the caller once ``reply``'s turn has committed and wait for its output (module doc);
        ``filler`` (the reply speaking a short filler) runs once the output has been waited for ``filler_s``."""
        if reply.held:
            await reply.released.wait()
        if reply.discarded:
            raise asyncio.CancelledError
        call_id = f"call_{uuid.uuid4().hex[:20]}"
        self._issued.append(call_id)
        del self._issued[:-REMEMBERED_CALLS]
        output: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = output
        index = reply.turn.index
        self._emit(StsEvent(FUNCTION_CALL, index, call=FunctionCall(call_id, name, arguments_delta=arguments)))
        self._emit(StsEvent(FUNCTION_CALL, index, call=FunctionCall(call_id, name, done=True, arguments=arguments)))
        metrics.STS_FUNCTION_CALLS.labels(*self._labels, "called").inc()
        try:
            waited = 0.0
            if filler is not None and 0 < self.filler_s < self.timeout_s:
                done, _ = await asyncio.wait({output}, timeout=self.filler_s)
                waited = self.filler_s
                if not done:
                    await filler()  # the line is not dead while the function runs; its words are heard
            done, _ = await asyncio.wait({output}, timeout=max(0.0, self.timeout_s - waited))
            if not done:
                self._cancelled(index, call_id, "timeout")
                raise DeadlineExceeded(  # the turn fails with it (turn_end.py)
                    f"function_call_output: no output for {name} (call {call_id}) within"
                    f" {self.timeout_s * 1000:.0f} ms (config.tool_timeout_ms, moss_sts.tool_timeout_ms); the turn"
                    " ends without its reply"
                )
            metrics.STS_FUNCTION_CALLS.labels(*self._labels, "answered").inc()
            return CompletedCall(call_id, name, arguments, output.result())
        except asyncio.CancelledError:
            self._cancelled(index, call_id, reply.interrupted_reason or "barge_in")
            raise
        finally:
            self._waiting.pop(call_id, None)

    def _cancelled(self, turn_index: int, call_id: str, reason: str) -> None:
        if call_id not in self._waiting:
            return
        self._waiting.pop(call_id, None)
        metrics.STS_FUNCTION_CALLS.labels(*self._labels, reason).inc()
        self._emit(StsEvent(FUNCTION_CALL_CANCELLED, turn_index, call=FunctionCall(call_id, ""), reason=reason))

    def answer(self, call_id: str, output: str) -> None:
        """The caller's output for ``call_id``."""
        waiting = self._waiting.get(call_id)
        if waiting is not None and not waiting.done():
            waiting.set_result(output)
            return
        if call_id not in self._issued:
            raise InvalidArgument("function_call_output.call_id", f"{call_id!r}: this session made no such call")
        log.info("output for call %s came after it was cancelled or answered: dropped", call_id)
