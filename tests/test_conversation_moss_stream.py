"""CPU tests of the MOSS-Speech streaming logic (services/moss_sts/moss_stream.py) and of the dialogue's pure parts.

The codec decoder is replaced by ``CodecDecoderTestDouble`` -- a test double at the library boundary (the GPU
codec's ``token2wav`` with a per-stream cache key), written to the contract the module documents: a non-final
call drops the audio of its last ``lookahead`` frames, holds back the audio of the ``overlap`` frames before them
and cross-fades that into the head of the next call; a final call returns everything. Its "audio" is a sine whose
phase is a function of the absolute sample position, which the test encodes in the frame values, so correctly
windowed chunks join into exactly the continuous signal and a wrong window shows up as a jump (a click) or as
missing or repeated audio.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.conversation.dialogue import Context, Message, _SentPiece, heard_text
from services.moss_sts.moss_stream import EOSP, ChunkPlan, StreamingCodecDecoder, TokenTap

SAMPLES_PER_FRAME = 1920  # 80 ms at 24 kHz
FREQ = 220.0
RATE = 24_000


def ideal(frames: int) -> np.ndarray:
    n = np.arange(frames * SAMPLES_PER_FRAME)
    return np.sin(2 * np.pi * FREQ * n / RATE).astype(np.float32)


class CodecDecoderTestDouble:
    """Test double of the codec's AudioDecoder.token2wav (library boundary): frame value = absolute frame index."""

    def __init__(self, plan: ChunkPlan):
        self.plan = plan
        self.held: np.ndarray | None = None
        self.calls: list[tuple[int, int, bool]] = []

    def __call__(self, window: list[int], finalize: bool) -> np.ndarray:
        self.calls.append((window[0], len(window), finalize))
        start = window[0] * SAMPLES_PER_FRAME
        n = np.arange(start, start + len(window) * SAMPLES_PER_FRAME)
        wav = np.sin(2 * np.pi * FREQ * n / RATE).astype(np.float32)
        if not finalize:
            wav = wav[: len(wav) - self.plan.lookahead_frames * SAMPLES_PER_FRAME]  # pre-lookahead: no mel yet
        if self.held is not None:  # cross-fade the previous call's held-back tail into this head
            k = len(self.held)
            fade = np.linspace(0, 1, k, dtype=np.float32)
            wav[:k] = wav[:k] * fade + self.held * (1 - fade)
        if finalize:
            self.held = None
            return wav
        hold = self.plan.overlap_frames * SAMPLES_PER_FRAME
        self.held = wav[len(wav) - hold :].copy() if hold else None
        return wav[: len(wav) - hold]


def stream(plan: ChunkPlan, total: int, step: int) -> tuple[np.ndarray, list[int], CodecDecoderTestDouble]:
    double = CodecDecoderTestDouble(plan)
    decoder = StreamingCodecDecoder(double, plan)
    chunks = []
    for start in range(0, total, step):
        chunks += decoder.push(list(range(start, min(total, start + step))))
    tail = decoder.finish()
    if tail is not None:
        chunks.append(tail)
    return np.concatenate(chunks), [len(c) // SAMPLES_PER_FRAME for c in chunks], double


@pytest.mark.parametrize(
    "plan",
    [ChunkPlan(2, 4, 3, 2), ChunkPlan(1, 3, 3, 2), ChunkPlan(2, 5, 0, 0), ChunkPlan(1, 4, 2, 1)],
    ids=str,
)
@pytest.mark.parametrize("step", [1, 3, 7])
def test_chunks_join_into_the_continuous_signal(plan, step):
    audio, sizes, _ = stream(plan, total=37, step=step)
    expected = ideal(37)
    assert len(audio) == len(expected), "audio missing or repeated at a chunk join"
    assert np.max(np.abs(audio - expected)) < 1e-4, "a chunk join is not seamless"
    assert sizes[0] == plan.first_frames, "the first chunk is the small one (early first audio)"
    assert all(s == plan.chunk_frames for s in sizes[1:-1])


def test_first_chunk_waits_only_for_its_overlap_and_lookahead():
    plan = ChunkPlan(2, 4, 3, 2)
    double = CodecDecoderTestDouble(plan)
    decoder = StreamingCodecDecoder(double, plan)
    assert decoder.push(list(range(6))) == []  # 2 + 2 + 3 = 7 frames needed
    first = decoder.push([6])
    assert len(first) == 1 and len(first[0]) == 2 * SAMPLES_PER_FRAME
    assert double.calls == [(0, 7, False)]


def test_a_short_answer_is_decoded_whole_at_the_end():
    audio, sizes, double = stream(ChunkPlan(2, 4, 3, 2), total=4, step=4)
    assert len(audio) == 4 * SAMPLES_PER_FRAME and sizes == [4]
    assert double.calls == [(0, 4, True)]


def test_token_tap_picks_codec_frames_of_the_audio_channel():
    got: list[int] = []
    pad = 151667
    tap = TokenTap(got.extend, modality_pad=pad)
    tap.put(np.zeros((1, 10, 2), dtype=np.int64))  # the prompt: skipped
    for step in ([[pad, 11]], [[pad, 12]], [[42, 512]], [[pad, 13]], [[pad, EOSP]], [[pad, 14]]):
        tap.put(np.array(step))
    assert got == [11, 12, 13], "text-channel steps are not audio; nothing after EOSP"
    assert tap.ended_speech


def test_heard_text_is_cut_at_the_audio_sent():
    text = "First sentence here. Second sentence is longer than that."
    a, b = (0, 20), (21, len(text))
    pieces = [_SentPiece(*a, total_samples=100, sent_samples=100), _SentPiece(*b, total_samples=100, sent_samples=50)]
    heard = heard_text(text, pieces)
    assert heard.startswith("First sentence here. Second")
    assert text.startswith(heard) and len(heard) < len(text)
    assert not heard.endswith("lon"), "cut back to a word boundary"
    assert heard_text(text, [_SentPiece(*a, total_samples=100, sent_samples=0)]) == ""


def test_context_is_bounded_by_turns_and_characters():
    context = Context(max_turns=3, max_chars=200)
    for i in range(10):
        context.add(Message("user", f"question {i} " + "x" * 20))
        context.add(Message("assistant", f"answer {i}"))
    users = [m for m in context.messages if m.role == "user"]
    assert len(users) <= 3 and users[-1].text.startswith("question 9")
    assert sum(len(m.text) for m in context.messages) <= 200
    assert context.messages[0].role == "user"
    chat = context.chat("be brief")
    assert chat[0] == {"role": "system", "content": "be brief"}
