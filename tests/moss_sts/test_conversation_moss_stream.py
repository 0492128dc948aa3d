"""CPU tests of the MOSS-Speech streaming logic (services/moss_sts/moss_stream.py) and of the dialogue's pure parts.

The real decoder first, where its stack is installed: MOSS-Speech's own ``CosyVoice2Model`` (cosyvoice/cli/model.py of
the checkout at moss_sts.gpu.repo_dir) around a tiny random flow + HiFT (scripts/gpu_stack_probe.py
``tiny_moss_decoder``), on CPU, driven by the engine's own ``MossSpeech.token2wav`` (tests marked ``stack``: they skip,
saying why, without torch or the checkout; `make test-gpu` runs them in the moss_sts stack's venv). With random weights
its audio is noise, so they check what does not depend on the weights: lengths, chunk sizes, windows, state.

Where the stack is not installed (as on CI), and for what random weights cannot show, the codec decoder is replaced
by ``CodecDecoderTestDouble`` -- a test double at the library boundary (the GPU codec's ``token2wav`` with a per-stream
cache key), written to the two contracts of the decoder classes in
OpenMOSS/MOSS-Speech's cosyvoice/cli/model.py that the module documents: ``CosyVoiceModel`` (a non-final call holds
back the audio of its last ``token_overlap_len`` frames and cross-fades it into the head of the next call) and
``CosyVoice2Model`` (each call decodes frames from 0 with a ``token_offset`` and returns the audio from the offset
up to its last ``pre_lookahead_len`` frames, which have no mel yet); a final call returns everything. Its "audio" is a sine whose
phase is a function of the absolute sample position, which the test encodes in the frame values, so correctly
windowed chunks join into exactly the continuous signal and a wrong window shows up as a jump (a click) or as
missing or repeated audio.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from services.conversation.dialogue import Context, Message, SentPiece, heard_text
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

    def __call__(self, window: list[int], token_offset: int, finalize: bool) -> np.ndarray:
        self.calls.append((window[0], len(window), finalize))
        if self.plan.from_start:  # CosyVoice2Model: all frames from 0, audio from the offset on
            assert window[0] == 0, "the causal flow decodes from the first frame"
            last = len(window) if finalize else len(window) - self.plan.lookahead_frames
            n = np.arange(token_offset * SAMPLES_PER_FRAME, last * SAMPLES_PER_FRAME)
            return np.sin(2 * np.pi * FREQ * n / RATE).astype(np.float32)
        assert token_offset == 0
        start = window[0] * SAMPLES_PER_FRAME
        n = np.arange(start, start + len(window) * SAMPLES_PER_FRAME)
        wav = np.sin(2 * np.pi * FREQ * n / RATE).astype(np.float32)
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


# --- the real decoder (the moss_sts stack: torch + the MOSS-Speech checkout), tiny and random, on CPU -------------
ROOT = Path(__file__).resolve().parents[2]


def _stack_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed: the moss_sts GPU stack (`make check-gpu-stacks`; `make test-gpu` runs this)"
    from services.common.config import load_config

    repo = Path(os.environ.get("GPU_STACK_REPO") or load_config().moss_sts.gpu.repo_dir)
    if not (repo / "cosyvoice" / "cli" / "model.py").is_file():
        return f"no MOSS-Speech checkout at {repo} (moss_sts.gpu.repo_dir)"
    for path in (str(repo), str(repo / "Matcha-TTS")):  # as the engine's load puts them on sys.path
        if path not in sys.path:
            sys.path.insert(0, path)
    return None


@pytest.fixture(scope="module")
def real_moss():
    """MossSpeech (the engine's decode path) around the real CosyVoice2Model with a tiny random flow + HiFT."""
    reason = _stack_reason()
    if reason:
        pytest.skip(reason)
    import torch

    from services.common.config.moss_sts import MossGpuConfig
    from services.moss_sts.moss_engine import MossSpeech, decoder_plan

    spec = importlib.util.spec_from_file_location("gpu_stack_probe", ROOT / "scripts" / "gpu_stack_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    decoder = probe.tiny_moss_decoder()
    moss = MossSpeech(MossGpuConfig(device="cpu"))
    moss.torch = torch
    moss.codec = type("Codec", (), {"audio_decoder": decoder})()
    moss.plan, moss.offset_protocol = decoder_plan(decoder, moss.plan)
    torch.manual_seed(1)
    moss.conditioning = {
        "prompt_token": torch.randint(0, 16384, (1, 6), dtype=torch.int32),
        "prompt_feat": torch.randn(1, 4 * 6, 80) * 0.1,
        "embedding": torch.randn(1, 192),
    }
    return moss


def real_stream(moss, frames: list[int], step: int, key: str):
    """Frames handed on ``step`` at a time (as generation steps would) through the engine's streaming decode."""
    calls = []

    def token2wav(window, offset, final):
        calls.append((list(window), offset, final))
        return moss.token2wav(key, window, offset, final)

    decoder = StreamingCodecDecoder(token2wav, moss.plan)
    chunks = []
    for start in range(0, len(frames), step):
        chunks += decoder.push(frames[start : start + step])
    tail = decoder.finish()
    chunks += [tail] if tail is not None else []
    moss.release(key)
    return chunks, calls


@pytest.mark.stack
def test_the_real_decoders_contract_is_read_from_it(real_moss):
    """CosyVoice2Model: causal flow, decoded from frame 0 with a token offset, 3 frames of pre-lookahead."""
    assert real_moss.offset_protocol
    assert real_moss.plan.from_start and real_moss.plan.lookahead_frames == 3 and real_moss.plan.overlap_frames == 0


@pytest.mark.stack
@pytest.mark.parametrize("step", [1, 7])  # frames one at a time, and in bursts bigger than a chunk
def test_the_real_decoder_streams_every_frame_once_in_planned_chunks(real_moss, step):
    """Streamed: exactly 1920 samples a frame in all (none missing, none repeated), the small first chunk, then
    chunk_frames each, every window from frame 0 (the causal flow's contract), and the reply's state released.
    The vocoder holds back the last ``mel_cache_len`` mel frames of every non-final call (2 codec frames here) and
    cross-fades them into the next: the first chunk's audio is its frames less those (found by this test: 3 frames
    planned, 80 ms of audio out), later chunks come out whole."""
    import torch

    plan, decoder = real_moss.plan, real_moss.codec.audio_decoder
    held = decoder.mel_cache_len // decoder.flow.token_mel_ratio
    frames = torch.randint(0, 16384, (21,), generator=torch.Generator().manual_seed(step)).tolist()
    chunks, calls = real_stream(real_moss, frames, step, f"stream-{step}")
    sizes = [len(c) for c in chunks]
    assert sum(sizes) == len(frames) * SAMPLES_PER_FRAME, sizes
    assert sizes[0] == (plan.first_frames - held) * SAMPLES_PER_FRAME, sizes
    assert all(s == plan.chunk_frames * SAMPLES_PER_FRAME for s in sizes[1:-1]), sizes
    assert all(window == frames[: len(window)] for window, _, _ in calls), "a window not decoded from frame 0"
    assert [offset for _, offset, _ in calls] == [0] + [
        plan.first_frames + plan.chunk_frames * i for i in range(len(calls) - 1)
    ]
    assert calls[-1][2] and not any(final for *_, final in calls[:-1])
    assert all(np.isfinite(c).all() and np.abs(c).max() > 0 for c in chunks), "a chunk with no audio"
    assert not real_moss.codec.audio_decoder.hift_cache_dict, "the reply's decoder state was not released"
    whole = real_moss.token2wav("whole", frames, 0, True)
    real_moss.release("whole")
    assert len(whole) == len(frames) * SAMPLES_PER_FRAME


@pytest.mark.stack
def test_the_real_decoder_decodes_a_short_answer_whole_at_the_end(real_moss):
    plan = real_moss.plan
    frames = list(range(100, 100 + plan.first_frames + plan.lookahead_frames - 1))  # one frame short of a chunk
    chunks, calls = real_stream(real_moss, frames, len(frames), "short")
    assert [len(c) for c in chunks] == [len(frames) * SAMPLES_PER_FRAME]
    assert calls == [(frames, 0, True)]


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
    [
        ChunkPlan(2, 4, overlap_frames=2),
        ChunkPlan(1, 3, overlap_frames=20),  # CosyVoiceModel's token_overlap_len
        ChunkPlan(2, 5),
        ChunkPlan(2, 4, lookahead_frames=3, from_start=True),  # CosyVoice2Model's pre_lookahead_len
        ChunkPlan(1, 4, lookahead_frames=2, from_start=True),
    ],
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


@pytest.mark.parametrize(
    "plan, calls",
    [
        (ChunkPlan(2, 4, overlap_frames=5), [(0, 7, False), (2, 9, False)]),  # window from the chunk's start
        (ChunkPlan(2, 4, lookahead_frames=5, from_start=True), [(0, 7, False), (0, 11, False)]),  # from frame 0
    ],
    ids=["overlap", "from_start"],
)
def test_a_chunk_waits_only_for_its_overlap_or_lookahead(plan, calls):
    double = CodecDecoderTestDouble(plan)
    decoder = StreamingCodecDecoder(double, plan)
    assert decoder.push(list(range(6))) == []  # 2 + 5 = 7 frames needed
    first = decoder.push([6])
    assert len(first) == 1 and len(first[0]) == 2 * SAMPLES_PER_FRAME
    assert decoder.push(list(range(7, 11))) and double.calls == calls


def test_a_short_answer_is_decoded_whole_at_the_end():
    audio, sizes, double = stream(ChunkPlan(2, 4, overlap_frames=3), total=4, step=4)  # 2 + 3 > 4
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
    # rate 1000 (a sample a millisecond): the second piece 2 s, 1.3 s of it sent (1 s heard past the last word's worth)
    pieces = [
        SentPiece(*a, total_samples=2000, sent_samples=2000, rate=1000),
        SentPiece(*b, total_samples=2000, sent_samples=1300, rate=1000),
    ]
    heard = heard_text(text, pieces)
    assert heard.startswith("First sentence here. Second")
    assert text.startswith(heard) and len(heard) < len(text)
    assert not heard.endswith("lon"), "cut back to a word boundary"
    assert heard_text(text, [SentPiece(*a, total_samples=100, sent_samples=0)]) == ""


def test_the_silence_before_a_pieces_first_sound_holds_none_of_its_words():
    """A voice pauses before a sentence: a piece cut inside that pause was heard as none of its words (pro rata over
    the whole piece counted a quarter of them); cut halfway through its sound, about half."""
    from services.conversation.dialogue import voiced_span
    from services.conversation.dialogue.heard import CUT_WORD_MARGIN_MS

    rate = 16_000
    tone = (np.sin(np.arange(rate) * 2 * np.pi * 220 / rate) * 8000).astype(np.int16)
    pcm = np.concatenate([np.zeros(rate // 2, dtype=np.int16), tone]).tobytes()  # 0.5 s pause, then 1 s of sound
    start, end = voiced_span(pcm)
    assert abs(start - rate // 2) <= 512 and abs(end - len(pcm) // 2) <= 512  # to a 32 ms window
    text = "One sentence. She was a fluffy white cat."
    b = (text.index("She"), len(text))
    first = SentPiece(0, len("One sentence."), total_samples=100, sent_samples=100)
    in_pause = SentPiece(
        *b, total_samples=len(pcm) // 2, sent_samples=rate * 2 // 5, voiced_start=start, voiced_end=end
    )
    assert heard_text(text, [first, in_pause]) == "One sentence."
    halfway = SentPiece(
        *b,
        total_samples=len(pcm) // 2,
        sent_samples=rate + rate * CUT_WORD_MARGIN_MS // 1000,  # half its sound, and a word's worth past it
        voiced_start=start,
        voiced_end=end,
    )
    assert heard_text(text, [first, halfway]) == "One sentence. She was a"


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


def test_a_full_context_drops_half_its_turns_at_once_so_its_prefix_holds_for_the_next_turns():
    """The brain resumes from the longest prompt prefix it has seen: a context that dropped its oldest turn every turn
    shared only the system prompt with the last one (every turn evaluated whole: first text 2.8 s, not 0.1 s, past
    the 13th turn with SmolLM2 on 2 cores; docs/conversation.md#the-brain)."""
    context = Context(max_turns=8, max_chars=100_000)
    firsts = []
    for i in range(24):
        context.add(Message("user", f"question {i}"))
        context.add(Message("assistant", f"answer {i}"))
        firsts.append(context.messages[0].text)
    users = [m for m in context.messages if m.role == "user"]
    assert 1 <= len(users) <= 8 and users[-1].text == "question 23"
    # The first message changed on 4 of 24 turns (down to 4 turns each time a 9th came in), not on every turn past
    # the 8th.
    changes = [i for i in range(1, 24) if firsts[i] != firsts[i - 1]]
    assert changes == [8, 13, 18, 23], changes


# --- the decoder's contract, read at load (services/moss_sts/moss_engine.py) -----------------------------------
class CosyVoiceModelShape:
    """Signature and attributes of CosyVoiceModel in OpenMOSS/MOSS-Speech's cosyvoice/cli/model.py (no torch)."""

    token_overlap_len = 20

    def __init__(self):
        self.lock, self.hift_cache_dict, self.mel_overlap_dict, self.flow_cache_dict = object(), {}, {}, {}

    def token2wav(self, token, prompt_token, prompt_feat, embedding, uuid, finalize=False, speed=1.0):
        raise AssertionError("not called here")


class CosyVoice2ModelShape:
    """Signature and attributes of CosyVoice2Model there (causal flow with a pre-lookahead)."""

    mel_cache_len = 8  # mel frames its vocoder holds back per non-final call

    def __init__(self):
        self.lock, self.hift_cache_dict = object(), {}
        self.flow = type("Flow", (), {"pre_lookahead_len": 3, "token_mel_ratio": 4})()

    def token2wav(
        self, token, prompt_token, prompt_feat, embedding, token_offset, uuid, stream=False, finalize=False, speed=1.0
    ):
        raise AssertionError("not called here")


def test_the_decoder_contract_comes_from_the_decoder_itself():
    from services.moss_sts.moss_engine import decoder_plan

    plan, offset = decoder_plan(CosyVoiceModelShape(), ChunkPlan(2, 4))
    assert (plan, offset) == (ChunkPlan(2, 4, lookahead_frames=0, overlap_frames=20), False)
    plan, offset = decoder_plan(CosyVoice2ModelShape(), ChunkPlan(3, 4))
    assert (plan, offset) == (ChunkPlan(3, 4, lookahead_frames=3, overlap_frames=0, from_start=True), True)


def test_the_first_chunk_is_longer_than_what_the_vocoder_holds_back():
    """8 mel frames held = 2 tokens at 4 mel frames per token: a 1- or 2-frame first chunk would return no audio."""
    from services.moss_sts.moss_engine import decoder_plan

    plan, _ = decoder_plan(CosyVoice2ModelShape(), ChunkPlan(1, 2))
    assert (plan.first_frames, plan.chunk_frames) == (3, 3)


def test_a_decoder_without_the_state_the_contract_needs_fails_at_load():
    from services.common.errors import FailedPrecondition
    from services.moss_sts.moss_engine import decoder_plan

    decoder = CosyVoiceModelShape()
    del decoder.mel_overlap_dict
    with pytest.raises(FailedPrecondition, match="lacks mel_overlap_dict"):
        decoder_plan(decoder, ChunkPlan(2, 4))


class CodecStandIn:
    """Test double of MOSS-Speech-Codec's remote code (it ships with the weights, not installable here): the
    methods the engine calls, with a decoder of the token-offset contract."""

    def __init__(self, decoder=None):
        self.audio_decoder = decoder if decoder is not None else CosyVoice2ModelShape()

    def _extract_speech_feat(self, wav):
        raise NotImplementedError  # only its presence is checked at load

    def encode(self, batch):
        raise NotImplementedError

    def _extract_spk_embedding(self, wav):
        raise NotImplementedError


def test_a_codec_with_the_surface_the_engine_calls_passes():
    from services.moss_sts.moss_engine import check_codec_surface

    check_codec_surface(CodecStandIn())


@pytest.mark.parametrize("method", ["_extract_speech_feat", "encode", "_extract_spk_embedding"])
def test_a_codec_lacking_a_method_is_refused_at_load_naming_it(method):
    from services.common.errors import FailedPrecondition
    from services.moss_sts.moss_engine import check_codec_surface

    codec = type("OtherCodec", (CodecStandIn,), {method: None})()
    with pytest.raises(FailedPrecondition, match=rf"OtherCodec\) lacks codec\.{method};"):
        check_codec_surface(codec)


def test_a_stream_inference_decoder_is_named_not_driven():
    from services.common.errors import FailedPrecondition
    from services.moss_sts.moss_engine import check_codec_surface

    class ChunkedFlowDecoder:
        def stream_inference(self, *args):
            raise NotImplementedError

    with pytest.raises(FailedPrecondition, match="token2wav \\(it has stream_inference"):
        check_codec_surface(CodecStandIn(ChunkedFlowDecoder()))


def moss_mounts(tmp_path, weights_gib: float, codec_gib: float):
    """Mount directories with the LM's real attention shape (Qwen3-8B: 36 layers, 8 KV heads of 128) and weight files
    of the given sizes (sparse: only their sizes are read)."""
    import json

    from services.common.config.moss_sts import MossGpuConfig

    model, codec = tmp_path / "MOSS-Speech", tmp_path / "MOSS-Speech-Codec"
    for directory, gib in ((model, weights_gib), (codec, codec_gib)):
        directory.mkdir()
        with open(directory / "model.safetensors", "wb") as f:
            f.truncate(int(gib * 2**30))
    shape = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128}
    (model / "config.json").write_text(json.dumps(shape))
    return MossGpuConfig(model_dir=str(model), codec_dir=str(codec))


def test_the_memory_plan_of_the_published_sizes_fits_the_21_gib_lease_with_headroom(tmp_path):
    from services.moss_sts.moss_engine import memory_plan

    plan = memory_plan(moss_mounts(tmp_path, 17, 1))
    assert plan.kv == 2 * 36 * 8 * 128 * 2 * (4096 + 600)  # 144 KiB a token
    assert round(plan.total / 2**30, 2) == 19.64
    plan.check(21 << 30)
    assert "= 19.64 GiB; lease 21.00 GiB, of which 5% is headroom" in plan.line(21 << 30)


def test_a_lease_that_leaves_no_headroom_is_refused_at_load_with_the_numbers(tmp_path):
    """The old 20 GiB lease: 19.64 GiB planned is more than its 95 % (19.0): refused before any weight loads."""
    from services.common.errors import FailedPrecondition
    from services.moss_sts.moss_engine import MossSpeech

    config = moss_mounts(tmp_path, 17, 1)
    with pytest.raises(FailedPrecondition) as refused:
        MossSpeech(config, memory_budget_bytes=20 << 30).load()
    message = str(refused.value)
    assert message.startswith("residency.services.moss_sts.declared_gb: weights 17.00 + codec 1.00 + KV 0.64")
    assert "raise it to >= 20.7" in message


def test_a_session_with_tools_is_refused_by_moss_speech_naming_tools():
    """MOSS-Speech has no function calling (docs/conversation.md#tools): a session that declares tools is refused at
    its config, before anything loads (the engine is made, not started: no weights, no torch)."""
    from services.common.config import load_config
    from services.common.engines import SessionOptions, Tool
    from services.common.errors import FailedPrecondition
    from services.moss_sts.moss_engine import MossSpeechEngine

    section = load_config().moss_sts
    engine = MossSpeechEngine("moss_sts", section.gpu, asr=None, limits=None, chunking=None)
    engine.check_options(SessionOptions())  # no tools: nothing to refuse
    with pytest.raises(FailedPrecondition) as info:
        engine.check_options(SessionOptions(tools=(Tool("get_weather"),)))
    assert info.value.message.startswith("config.tools:")
