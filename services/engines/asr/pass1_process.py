"""Pass 1 (pocketsphinx interims) in a process of its own.

pocketsphinx's binding gives up and retakes the GIL so often inside a call that, in the asr process, it thrashed
against every other thread (gRPC's event loop, VAD, the other streams' steps): a pass-1 decode beside one busy
Python thread took 2-3x its time alone. Here every decoder lives in one child process (``python -m
services.engines.asr.pass1_process``, a fresh interpreter: the parent has threads and gRPC, which must not be forked), and
streams talk to it through two pipes: audio goes down without a reply; a hypothesis is a request and its answer,
which comes after all audio sent before it (the child reads in order).

Decoders are made three ways: ``warm`` at start (the parent waits for them), at an utterance's ``start`` when its
decoder does not exist yet (it blocks every stream's pass 1 for the ~0.3-0.6 s making one takes: pocketsphinx holds
the GIL throughout, so a thread would not help), and ``spare``: made ahead, only while no message is waiting, so a
burst of callers finds one made without a stall.

The child only imports pocketsphinx. It ends when its input pipe closes (the asr process ended or closed the pool).
If it dies, the pool starts another at the next call (at most one start per ``RESTART_PAUSE_S``; calls meanwhile
get no interims); decoders are made again at their next utterance, so interims of the utterances in progress stop
and the finals (whisper, in the asr process) are untouched.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from types import SimpleNamespace

log = logging.getLogger("voicefleet.asr.pass1")
RESTART_PAUSE_S = 5.0


def _serve(conns: tuple[Connection, Connection], rate: int, search: dict) -> None:
    """The child: decoders by id; ops in the order they came."""
    from pocketsphinx import Decoder

    inbox, outbox = conns

    decoders: dict[int, Decoder] = {}
    spares: list[int] = []  # ids to make ahead, while the inbox is empty

    def make(did: int) -> Decoder:
        if did not in decoders:
            decoders[did] = Decoder(samprate=rate, loglevel="FATAL", **search)
        return decoders[did]

    while True:
        try:
            while spares and not inbox.poll(0):
                make(spares.pop(0))
        except (EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 - the spare is made at its first start instead
            print(f"pass 1: making a spare decoder failed: {type(e).__name__}: {e}", flush=True)
        try:
            op, *args = inbox.recv()
        except (EOFError, OSError):
            return
        try:
            if op == "raw":
                decoder = decoders.get(args[0])
                if decoder is not None:
                    decoder.process_raw(args[1], False, False)
            elif op == "hyp":
                decoder = decoders.get(args[0])
                hyp = decoder.hyp() if decoder is not None else None
                outbox.send(hyp.hypstr if hyp else "")
            elif op == "start":
                make(args[0]).start_utt()
            elif op == "end":
                decoder = decoders.get(args[0])
                if decoder is not None:
                    decoder.end_utt()
            elif op == "warm":  # make decoders ahead of the first callers (each loads its models, ~0.3 s)
                for did in args[0]:
                    make(did)
                outbox.send(True)
            elif op == "spare":
                spares.append(args[0])
            elif op == "quit":
                return
        except Exception as e:  # noqa: BLE001 - one stream's bad call must not end every stream's interims
            if op in ("hyp", "warm"):
                outbox.send("" if op == "hyp" else False)
            print(f"pass 1: {op} failed: {type(e).__name__}: {e}", flush=True)


class Pass1Process:
    """The parent's side: one pipe to the child, used by every stream's thread."""

    def __init__(self, rate: int, search: dict):
        self.rate = rate
        self.search = search
        self._lock = threading.Lock()  # one message at a time on the pipe; a request holds it until its answer
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self._process: subprocess.Popen | None = None
        self._started_at = float("-inf")
        self._ids = iter(range(1, 1 << 62))
        self.restarts = 0

    def _ensure(self) -> bool:
        """The child is running (started now if it was not); False while a restart must wait."""
        if self._process is not None and self._process.poll() is None:
            return True
        if self._process is not None:
            if time.monotonic() - self._started_at < RESTART_PAUSE_S:
                return False
            self.restarts += 1
            log.warning("pass-1 process ended (exit %s): starting another", self._process.returncode)
            self._drop()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        args = [str(to_child_r), str(from_child_w), str(self.rate), json.dumps(self.search)]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "services.engines.asr.pass1_process", *args], pass_fds=(to_child_r, from_child_w)
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._to_child = Connection(to_child_w, readable=False)
        self._from_child = Connection(from_child_r, writable=False)
        self._started_at = time.monotonic()
        return True

    def _drop(self) -> None:
        for conn in (self._to_child, self._from_child):
            if conn is not None:
                conn.close()
        self._to_child = self._from_child = None

    def _send(self, message: tuple, answer: bool = False, failed=None):
        """Send ``message``; with ``answer``, wait for the child's reply (``failed`` if the child died meanwhile: the
        next call starts another)."""
        with self._lock:
            try:
                if not self._ensure():
                    return failed
                self._to_child.send(message)
                return self._from_child.recv() if answer else None
            except (OSError, EOFError) as e:
                if self._process is not None and self._process.poll() is None:
                    log.warning("pass-1 process lost (%s): interims of utterances in progress stop", e)
                    self._process.kill()
                return failed

    def new_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def warm(self, count: int) -> list[int]:
        ids = [self.new_id() for _ in range(count)]
        self._send(("warm", ids), answer=True, failed=False)
        return ids

    def spare(self) -> int:
        """A new decoder id, made by the child ahead of need once nothing waits in its inbox (or at its first
        ``start``, if that comes first)."""
        did = self.new_id()
        self._send(("spare", did))
        return did

    def decoder(self, did: int) -> RemoteDecoder:
        return RemoteDecoder(self, did)

    def close(self) -> None:
        with self._lock:
            self._drop()  # the child reads EOF and ends
            if self._process is not None:
                try:
                    self._process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()


class RemoteDecoder:
    """Looks like the pocketsphinx Decoder calls pass 1 makes; the decoder itself is in the child."""

    def __init__(self, process: Pass1Process, did: int):
        self._process, self.did = process, did

    def start_utt(self) -> None:
        self._process._send(("start", self.did))

    def process_raw(self, data: bytes, no_search: bool = False, full_utt: bool = False) -> None:
        self._process._send(("raw", self.did, data))

    def end_utt(self) -> None:
        self._process._send(("end", self.did))

    def hyp(self):
        text = self._process._send(("hyp", self.did), answer=True, failed="")
        return SimpleNamespace(hypstr=text) if text else None


if __name__ == "__main__":
    _serve_fds = sys.argv[1:3]
    _serve(
        (Connection(int(_serve_fds[0]), writable=False), Connection(int(_serve_fds[1]), readable=False)),
        int(sys.argv[3]),
        json.loads(sys.argv[4]),
    )
