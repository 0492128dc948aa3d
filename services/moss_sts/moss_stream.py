"""Streaming MOSS-Speech output: audio tokens as they are generated -> codec chunks -> audio, no library imports.

MOSS-Speech has no official streaming: ``generate`` returns the whole token grid and the processor decodes it at
once. We stream by (1) reading the tokens of each generation step through a transformers streamer (``TokenTap``),
(2) cutting the audio-channel tokens (codec frames, 12.5 Hz: 80 ms each) into chunks, a small first chunk for early
first audio and bigger ones after (``ChunkPlan``), and (3) decoding each chunk with the codec's ``token2wav`` under
one cache key per stream (``StreamingCodecDecoder``), the way the decoder's own streaming ``tts()`` loop calls it.

The codec's decoder is CosyVoice's token-to-wave model from the OpenMOSS/MOSS-Speech checkout
(``cosyvoice/cli/model.py`` @ 6b86ef6). That file has two classes with two streaming contracts, and the engine
takes the one its decoder has (read from ``token2wav``'s signature at load, moss_engine.py):
  * ``CosyVoiceModel`` ("overlap"): chunk [a, b) is decoded from frames [a, b + overlap), where ``overlap`` is the
    decoder's own ``token_overlap_len``; the decoder holds back that much mel and cross-fades it into the next call,
    which starts at b. ``tts()`` does exactly this (``token_hop_len + token_overlap_len`` tokens, then drops
    ``token_hop_len``).
  * ``CosyVoice2Model`` ("from start"): its flow is causal with a pre-lookahead, and each call decodes all frames
    from 0 up to b + ``flow.pre_lookahead_len`` with ``token_offset=a``; the decoder returns only the new audio.
The end of the stream is decoded with ``finalize`` (nothing held back). Both contracts are tested on CPU against a
test double of ``token2wav`` (tests/moss_sts/test_conversation_moss_stream.py). Whether the join is click-free on real
weights is not proven here (no GPU, and the codec's remote code ships only with its weights): the GPU test
(tests/moss_sts/test_conversation_gpu.py) compares a streamed decode with a whole-utterance decode of the same frames.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CODEC_FRAME_RATE = 12.5  # codec frames per second (MOSS-Speech-Codec)
EOSP = 16384  # end of speech: the audio channel's stop token
CODEBOOK = 16384  # valid codec frames are 0..16383


@dataclass(frozen=True)
class ChunkPlan:
    first_frames: int = 2
    chunk_frames: int = 4
    lookahead_frames: int = 0  # frames past a chunk its decode needs (CosyVoice2Model: flow.pre_lookahead_len)
    overlap_frames: int = 0  # frames past a chunk the decoder holds back (CosyVoiceModel: token_overlap_len)
    from_start: bool = False  # each call decodes frames [0, ...) with token_offset (CosyVoice2Model)

    def size(self, index: int) -> int:
        return self.first_frames if index == 0 else self.chunk_frames


class StreamingCodecDecoder:
    """Frames in (as generated), audio chunks out. ``decode(window, token_offset, finalize)`` is the codec
    boundary: it decodes a window of frames with the stream's cache key and returns float32 audio (see the module
    doc for the two contracts; ``token_offset`` is 0 in the overlap contract)."""

    def __init__(self, decode: Callable[[list[int], int, bool], np.ndarray], plan: ChunkPlan):
        self._decode = decode
        self.plan = plan
        self.frames: list[int] = []
        self.start = 0  # first frame of the next chunk (= first frame the decoder holds back, after a chunk)
        self.chunks = 0
        self.finished = False

    def push(self, frames: list[int]) -> list[np.ndarray]:
        """Add generated frames; decode every chunk that now has its overlap and lookahead."""
        self.frames.extend(frames)
        out = []
        while True:
            n = self.plan.size(self.chunks)
            end = self.start + n
            if len(self.frames) < end + self.plan.overlap_frames + self.plan.lookahead_frames:
                return out
            first = 0 if self.plan.from_start else self.start
            window = self.frames[first : end + self.plan.overlap_frames + self.plan.lookahead_frames]
            out.append(self._decode(window, self.start if self.plan.from_start else 0, False))
            self.start = end
            self.chunks += 1

    def finish(self) -> np.ndarray | None:
        """The stream ended: decode what is left (with the held-back tail), nothing held back."""
        if self.finished:
            return None
        self.finished = True
        if self.start >= len(self.frames):
            return None  # nothing held back (overlap and lookahead 0) and nothing new
        if self.plan.from_start:
            return self._decode(self.frames, self.start, True)
        return self._decode(self.frames[self.start :], 0, True)


class TokenTap:
    """A transformers streamer (duck-typed ``put``/``end``) that picks the codec frames out of MOSS-Speech's
    two-channel token grid as generation goes, and hands them to ``on_frames`` (called in the generation thread).

    The first ``put`` is the prompt (transformers streams it before the first step) and is skipped. A step's value is
    (batch, 2) = (text channel, audio channel); in audio mode the text channel carries ``modality_pad`` and the
    audio channel a codec frame (0..16383) or EOSP. ``stop`` is set to end generation at its next step (interrupt):
    ``InterruptStop`` reads it as a stopping criterion."""

    def __init__(self, on_frames: Callable[[list[int]], None], modality_pad: int, eosp: int = EOSP):
        self.on_frames = on_frames
        self.modality_pad = modality_pad
        self.eosp = eosp
        self.stop = threading.Event()
        self.steps = 0
        self.frames = 0
        self.ended_speech = False
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        step = np.asarray(value.cpu() if hasattr(value, "cpu") else value)
        if step.ndim == 0 or step.shape[-1] != 2:
            return  # not a grid step (a plain text step of another model)
        step = step.reshape(-1, 2)[0]
        self.steps += 1
        text, audio = int(step[0]), int(step[1])
        if self.ended_speech or text != self.modality_pad:
            return
        if audio == self.eosp:
            self.ended_speech = True
            return
        if 0 <= audio < CODEBOOK:
            self.frames += 1
            self.on_frames([audio])

    def end(self) -> None:
        pass


def frames_seconds(frames: int) -> float:
    return frames / CODEC_FRAME_RATE
