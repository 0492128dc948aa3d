"""Where a recognition stream is: its audio, cut into VAD windows and kept for the decoders, and the utterance in
progress (a part of the two-pass stream, services/engines/asr/pipeline.py).

Every other part reads these and none keeps its own copy: the decoders' input (an utterance with a little audio
before and after it), offsets in events, and which utterance a late decode belongs to all come from here. Offsets
are samples at 16 kHz from the start of the stream; events carry them as ms (``ms``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np

from services.engines.asr.vad import RATE, WINDOW

PREROLL = int(0.3 * RATE)  # audio kept while silent, so decoders hear the start the VAD confirmed a bit late
PAD_BEFORE = int(0.2 * RATE)  # audio before the utterance's start given to both passes
PAD_AFTER = int(0.15 * RATE)  # audio after its end given to the final pass


def ms(samples: int) -> int:
    return samples * 1000 // RATE


@dataclass
class StreamState:
    """What every part of one stream reads about it; only the stream (TwoPassStream) writes it.

    ``utt_start`` is written by the stream's step (a thread) when a candidate utterance starts, ``index`` and
    ``closed`` on the event loop: a part that delivers later (a spotting or draft decode) compares the index it
    started with against ``index`` to know whether its utterance's final already went out."""

    language: str | None  # the stream's whisper language; None: detected per utterance
    index: int = 0  # the utterance in progress = finals sent so far
    utt_start: int = 0  # where it (or its candidate) started
    closed: bool = False  # the caller closed the stream: nothing more goes out
    heard_language: str | None = None  # the language of the last final (what a stream that detects decodes in)


class StreamAudio:
    """The stream's audio: fed samples not yet windowed (``pending``), the windowed position (``pos``), and the
    recent windows from ``start`` to ``pos`` that the decoders read. Windows are dropped from the front as the stream
    goes on (``trim``): while silent, ``PREROLL`` is kept; in an utterance, all of it. Used by one thread at a time
    (the stream's step, or the loop between steps)."""

    def __init__(self) -> None:
        self.pending = np.zeros(0, dtype=np.int16)  # not yet windowed
        self.pos = 0  # samples windowed so far = stream offset of the next window
        self.start = 0  # stream offset of the first window kept
        self._windows: collections.deque[np.ndarray] = collections.deque()

    def add(self, samples: np.ndarray) -> int:
        """Fed audio (int16) waits for the step; returns the stream offset where it ends."""
        self.pending = np.concatenate([self.pending, samples]) if len(self.pending) else samples
        return self.pos + len(self.pending)

    def batch(self, flush: bool) -> tuple[np.ndarray, int]:
        """The pending audio for one step and the stream offset where the real audio in it ends: at the end of the
        stream (``flush``) padded with silence to whole windows."""
        pending = self.pending
        real_end = self.pos + len(pending)
        if flush and len(pending) % WINDOW:
            pending = np.concatenate([pending, np.zeros(WINDOW - len(pending) % WINDOW, dtype=np.int16)])
        return pending, real_end

    def push(self, window: np.ndarray) -> int:
        """One window of the batch is windowed: kept, ``pos`` advanced; returns its start."""
        start = self.pos
        self.pos += WINDOW
        self._windows.append(window)
        return start

    def trim(self, keep: int) -> None:
        """Drop whole windows from the front, keeping at least ``keep`` samples."""
        while self._windows and (len(self._windows) - 1) * WINDOW >= keep:
            self._windows.popleft()
            self.start += WINDOW

    def slice(self, start: int, end: int) -> np.ndarray:
        """The kept audio (int16) from ``start`` to ``end``, clipped to what is kept."""
        first = max(0, (start - self.start) // WINDOW)
        last = min(len(self._windows), -(-(end - self.start) // WINDOW))
        if last <= first:
            return np.zeros(0, dtype=np.int16)
        base = self.start + first * WINDOW
        joined = np.concatenate([self._windows[i] for i in range(first, last)])
        return joined[max(0, start - base) : max(0, end - base)]

    def utterance(self, utt_start: int, end: int) -> tuple[np.ndarray, int]:
        """Pass 2's input: the utterance from PAD_BEFORE before ``utt_start`` to ``end`` (float32), and the stream
        offset where it starts. At the very start of a stream less than PAD_BEFORE was heard before the speech:
        silence stands in for the rest (the offset is then before 0). Given speech from its first sample, whisper
        tiny.en dropped an utterance's short last word far more often ("… it takes to" heard as "… it takes?"; the
        text check needs that word: docs/asr.md#the-text-check)."""
        start = utt_start - PAD_BEFORE
        audio = self.slice(max(self.start, start), end)
        if start < self.start:
            audio = np.concatenate([np.zeros(self.start - start, dtype=np.int16), audio])
        return audio.astype(np.float32) / 32768.0, start
