"""GPU engine of moss_sts: MOSS-Speech (OpenMOSS) on its official path, streamed.

Official path (OpenMOSS/MOSS-Speech ``utils/interface.py``; HF remote code of fnlp/MOSS-Speech and
fnlp/MOSS-Speech-Codec): ``AutoProcessor.from_pretrained(model_dir, codec_path=codec_dir, device=..,
trust_remote_code=True)`` builds the chat-template token grid (text and audio channels) from a conversation whose
turns are text or ``{"path": wav, "type": "audio/wav"}``; ``AutoModel.from_pretrained(model_dir,
trust_remote_code=True)`` generates (``output_modalities`` picks speech or text), stopped by stopping criteria on
the text channel (pad or ``<|im_end|>``). Weights come from mounted directories; nothing is downloaded
(HF_HUB_OFFLINE). The codec's flow decoder code comes from the GitHub checkout (``repo_dir`` on sys.path, with its
Matcha-TTS submodule).

What we add (no MOSS code copied): bfloat16 (the checkpoint's dtype) and FlashAttention-2 when the flash-attn
package imports (else sdpa); streaming by tapping each generation step's tokens and decoding codec frames in chunks
(moss_stream.py: first chunk 1-2 frames, then 3-5) with the codec decoder's own streaming contract, read at load
from its ``token2wav`` signature (CosyVoiceModel: per-key mel overlap; CosyVoice2Model: decode from frame 0 with a
token offset), its per-key state created and dropped the way its ``tts()`` does; interruption at the next
generation step (a stopping criterion reads the session's stop flag) and at the next chunk. A decoder without the
attributes that contract needs, or a ``generate`` that never calls the streamer per step, fails at start with
FAILED_PRECONDITION (never a silent reply). The process's CUDA allocator is capped at the lease's bytes. Heavy
libraries are imported only in ``load``.

Residency (docs/leases.md): ``offload()`` moves every torch module the engine holds -- the LM, the processor's and
codec's modules, the codec decoder's ``flow`` / ``hift`` (CosyVoice2Model is not a module itself, so they are
named one by one) -- and the voice conditioning tensors to pinned host memory and empties the CUDA cache;
``reload()`` moves them back (services/residency/torch_offload.py). It runs on the generation thread after the
decode thread has drained. What stays: the CUDA context, anything the remote-code codec holds outside torch
modules, and the turn-taking ASR (CPU).

Speech -> speech (Conversation): the user's turn goes in as audio (the dialogue keeps each turn's audio, bounded),
earlier turns as the audio that was actually sent (an interrupted reply is cut where its audio stopped).
Text -> speech (Synthesizer): the text as a user turn under a system prompt asking to read it as written
(moss_sts.gpu.tts_system_prompt); MOSS-Speech is a dialogue model, so this is "MOSS as a low-latency dialogue
TTS", not a verbatim reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import sys
import tempfile
import time
import uuid
import wave
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common import audio as audio_util
from services.common.config.base import ChunkingConfig
from services.common.config.moss_sts import MossGpuConfig
from services.common.engines import (
    AsrEngine,
    AudioPiece,
    Offloadable,
    Sampling,
    SessionOptions,
    StsEngine,
    StsSession,
    SynthesisOptions,
    TtsEngine,
    VoiceInfo,
)
from services.common.errors import FailedPrecondition
from services.common.tools import calls_no_tools
from services.common.voices import unknown_voice
from services.conversation.dialogue import RATE, DialogueLimits, DialogueSession, Message, Reply, ReplySink, UserTurn
from services.moss_sts.moss_stream import ChunkPlan, StreamingCodecDecoder, TokenTap

log = logging.getLogger("voicefleet.moss_sts.moss")

OUTPUT_RATE = 24_000
MODALITY_PAD = 151667  # text-channel placeholder inside audio segments (config.json of fnlp/MOSS-Speech)
VOICE_ID = "moss"
SPEECH_SYSTEM_PROMPT = "You are a helpful voice assistant. Answer the user's questions with spoken responses."


def _wav_file(directory: str, pcm: bytes, rate: int) -> str:
    path = os.path.join(directory, f"{uuid.uuid4().hex}.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return path


class MossSpeech:
    """The loaded model, processor and codec; one generation at a time on the card (a lock), decode beside it."""

    def __init__(self, config: MossGpuConfig, memory_budget_bytes: int = 0):
        self.config = config
        self.memory_budget_bytes = memory_budget_bytes
        self.model = None
        self.processor = None
        self.codec = None
        self.conditioning = None
        self.torch = None
        self.plan = ChunkPlan(config.first_chunk_frames, config.chunk_frames)  # completed from the decoder at load
        self.offset_protocol = False
        self.generate_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="moss-generate")
        self.decode_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="moss-decode")
        self.modality_pad = MODALITY_PAD
        self.stop_ids: list[int] = []
        self.host = None  # HostOffload over everything above that holds weights, made at load

    # --- loading (heavy imports here only) ------------------------------------------------------------------
    def load(self) -> None:
        c = self.config
        for path, what in ((c.model_dir, "model_dir"), (c.codec_dir, "codec_dir")):
            if not Path(path).is_dir():
                raise FailedPrecondition(
                    f"moss_sts.gpu.{what}: {path} is not a directory; mount the MOSS-Speech weights"
                )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        for extra in (c.repo_dir, os.path.join(c.repo_dir, "Matcha-TTS")):
            if os.path.isdir(extra) and extra not in sys.path:
                sys.path.append(extra)
        if c.device.startswith("cuda") and self.memory_budget_bytes > 0:
            plan = memory_plan(c)  # before any import or weight: a lease too small is refused with the numbers
            log.info("MOSS-Speech memory plan: %s", plan.line(self.memory_budget_bytes))
            plan.check(self.memory_budget_bytes)
        import torch
        from transformers import AutoModel, AutoProcessor

        self.torch = torch
        if c.device.startswith("cuda"):
            from services.residency.gpu_host import cap_torch_process

            cap_torch_process(torch, "moss_sts", c.device, self.memory_budget_bytes)
        dtype = getattr(torch, c.dtype)
        attn = c.attn_implementation
        if attn == "auto":
            try:
                import flash_attn  # noqa: F401

                attn = "flash_attention_2"
            except ImportError:
                attn = "sdpa"
        t0 = time.monotonic()
        self.processor = AutoProcessor.from_pretrained(
            c.model_dir, codec_path=c.codec_dir, device=c.device, trust_remote_code=True
        )
        self.model = AutoModel.from_pretrained(
            c.model_dir, trust_remote_code=True, torch_dtype=dtype, attn_implementation=attn, device_map=c.device
        ).eval()
        self.modality_pad = int(getattr(self.model.config, "modality_pad_token_id", MODALITY_PAD) or MODALITY_PAD)
        tok = self.processor.tokenizer
        self.stop_ids = [i for i in (tok.pad_token_id, tok.convert_tokens_to_ids("<|im_end|>")) if i is not None]
        self.codec = getattr(self.processor, "audio_codec", None) or getattr(self.processor, "codec", None)
        check_codec_surface(self.codec)
        self.plan, self.offset_protocol = decoder_plan(self.codec.audio_decoder, self.plan)
        log.info(
            "MOSS codec decoder: %s, %s contract (%s)",
            type(self.codec.audio_decoder).__name__,
            "token-offset" if self.offset_protocol else "mel-overlap",
            self.plan,
        )
        self.conditioning = self._voice_conditioning()
        self.track_weights()
        log.info("MOSS-Speech loaded in %.1fs (%s, %s)", time.monotonic() - t0, c.dtype, attn)

    def _prompt_path(self) -> str:
        p = self.config.prompt_wav
        return p if os.path.isabs(p) else os.path.join(self.config.repo_dir, p)

    def _voice_conditioning(self) -> dict:
        """The decoder's voice: prompt codec frames, prompt mel and speaker embedding of the prompt WAV, computed once
        with the codec's own feature extractors (what its ``decode(prompt_speech=...)`` does per call)."""
        torch = self.torch
        import torchaudio

        path = self._prompt_path()
        if not os.path.isfile(path):
            raise FailedPrecondition(f"moss_sts.gpu.prompt_wav: {path} does not exist")
        pcm, rate = audio_util.read_wav(path)
        wav = torch.from_numpy(np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0).unsqueeze(0)
        wav24 = torchaudio.functional.resample(wav, rate, OUTPUT_RATE)
        feat, _ = self.codec._extract_speech_feat(wav24)
        tokens = torch.tensor(self.codec.encode([(wav24, OUTPUT_RATE)])[0]).unsqueeze(0)
        n = min(feat.shape[1] // 4, tokens.shape[1])
        embedding = self.codec._extract_spk_embedding(torchaudio.functional.resample(wav24, OUTPUT_RATE, 16_000))
        return {"prompt_token": tokens[:, :n].int(), "prompt_feat": feat[:, : 4 * n], "embedding": embedding}

    def track_weights(self) -> None:
        """What offload moves: the LM, the processor's and codec's torch modules, the decoder's flow / HiFT (and its
        LM, where it has one), and the voice conditioning tensors."""
        from services.residency.torch_offload import HostOffload, collect_modules

        decoder = getattr(self.codec, "audio_decoder", None)
        modules = collect_modules(self.model, self.processor, self.codec, decoder)
        self.host = HostOffload(modules, [self.conditioning])

    def resident_bytes(self) -> int:
        """Measured: 0 while offloaded; the CUDA allocator's reserved bytes on a card, the tensors' bytes on CPU."""
        return self.host.resident_bytes() if self.host is not None else 0

    def offload(self):
        """Blocking (generation thread): weights to pinned host memory, CUDA cache emptied."""
        return self.host.offload()

    def reload(self):
        """Blocking (generation thread): weights back where they were."""
        return self.host.reload()

    # --- generation -----------------------------------------------------------------------------------------
    def token2wav(self, key: str, frames: list[int], token_offset: int, finalize: bool) -> np.ndarray:
        """One chunk through the codec's decoder under the reply's cache key, with the decoder's own streaming
        contract (moss_stream.py); its per-key state is created on the first call, as its ``tts()`` does."""
        torch = self.torch
        decoder = self.codec.audio_decoder
        c = self.conditioning
        with decoder.lock:
            if key not in decoder.hift_cache_dict:
                decoder.hift_cache_dict[key] = None
                if not self.offset_protocol:
                    decoder.mel_overlap_dict[key] = torch.zeros(1, 80, 0)
                    decoder.flow_cache_dict[key] = torch.zeros(1, 80, 0, 2)
        token = torch.tensor([frames], dtype=torch.int32)
        common = dict(prompt_token=c["prompt_token"], prompt_feat=c["prompt_feat"], embedding=c["embedding"], uuid=key)
        with torch.inference_mode():
            if self.offset_protocol:
                speech = decoder.token2wav(
                    token=token, token_offset=token_offset, stream=True, finalize=finalize, **common
                )
            else:
                speech = decoder.token2wav(token=token, finalize=finalize, **common)
        if isinstance(speech, tuple):  # a decoder that also returns its source excitation
            speech = speech[0]
        return speech.float().squeeze().cpu().numpy()

    def release(self, key: str) -> None:
        """Drop the reply's decoder state (what ``tts()`` pops at its end)."""
        decoder = self.codec.audio_decoder
        with decoder.lock:
            for cache in DECODER_STATE:
                getattr(decoder, cache, {}).pop(key, None)

    def generate(self, conversation: list[dict], sampling: Sampling, max_tokens: int, tap: TokenTap) -> None:
        """Blocking: speech-out generation with ``tap`` as the streamer; stops at the stop tokens or ``tap.stop``."""
        torch = self.torch
        from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

        stop_ids, stop = set(self.stop_ids), tap.stop

        class StopTokens(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                last = input_ids[:, -1] if input_ids.dim() == 2 else input_ids[:, -1, 0]
                done = torch.tensor([int(t) in stop_ids for t in last.tolist()], device=input_ids.device)
                return done | stop.is_set()

        inputs = self.processor([conversation], ["audio"])
        generation = GenerationConfig(
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=self.config.top_k,
            repetition_penalty=self.config.repetition_penalty,
            max_new_tokens=max_tokens,
            use_cache=True,
        )
        if sampling.seed:
            torch.manual_seed(sampling.seed)
        with torch.inference_mode():
            self.model.generate(
                input_ids=inputs["input_ids"].to(self.config.device),
                attention_mask=inputs["attention_mask"].to(self.config.device),
                generation_config=generation,
                stopping_criteria=StoppingCriteriaList([StopTokens()]),
                streamer=tap,
            )

    async def speak(
        self, conversation: list[dict], sampling: Sampling, max_tokens: int, served_by: str
    ) -> AsyncIterator[AudioPiece]:
        """Stream the spoken answer to ``conversation`` as 24 kHz pieces; closing this stops generation at its next
        step and decoding at its next chunk."""
        loop = asyncio.get_running_loop()
        frames: asyncio.Queue = asyncio.Queue()
        tap = TokenTap(lambda f: loop.call_soon_threadsafe(frames.put_nowait, f), self.modality_pad)
        key = uuid.uuid4().hex
        decoder = StreamingCodecDecoder(
            lambda window, offset, final: self.token2wav(key, window, offset, final), self.plan
        )
        generating = loop.run_in_executor(self.generate_pool, self.generate, conversation, sampling, max_tokens, tap)
        generating.add_done_callback(lambda _f: loop.call_soon_threadsafe(frames.put_nowait, None))
        try:
            while True:
                item = await frames.get()
                if item is None:
                    break
                batch = list(item)
                while not frames.empty():  # take every frame that is waiting, decode in as few calls as possible
                    more = frames.get_nowait()
                    if more is None:
                        frames.put_nowait(None)
                        break
                    batch.extend(more)
                for wav in await loop.run_in_executor(self.decode_pool, decoder.push, batch):
                    if len(wav):  # a chunk whose audio the decoder still holds back returns none
                        yield self._piece(wav, served_by)
            await generating  # its error, if it failed
            if tap.steps == 0:
                raise FailedPrecondition(
                    "MOSS-Speech's generate never called the streamer per step with (text, audio) tokens: this model"
                    " revision cannot be streamed by the engine (docs/conversation.md, streaming)"
                )
            tail = await loop.run_in_executor(self.decode_pool, decoder.finish)
            if tail is not None and len(tail):
                yield self._piece(tail, served_by)
        finally:
            tap.stop.set()  # interrupt: the generation stops at its next step
            with contextlib.suppress(BaseException):
                await asyncio.shield(generating)
            self.decode_pool.submit(self.release, key)

    @staticmethod
    def _piece(wav: np.ndarray, served_by: str) -> AudioPiece:
        pcm = audio_util.to_int16(np.asarray(wav, dtype=np.float32)).tobytes()
        return AudioPiece(pcm=pcm, sample_rate_hz=OUTPUT_RATE, text_start=0, text_end=0, served_by=served_by)


# Per-reply state of CosyVoice's token2wav models (cosyvoice/cli/model.py of the MOSS-Speech checkout).
DECODER_STATE = ("hift_cache_dict", "mel_overlap_dict", "flow_cache_dict")


# The memory plan (docs/leases.md, "MOSS-Speech on one card"): what the lease must hold besides the weights.
CONTEXT_TOKENS = 4096  # the dialogue's context (bounded by turns and characters) in LM tokens, plus max_new_tokens
ACTIVATIONS_BYTES = 1 << 30  # activations of a forward over the context, sampler, codec decode workspace
HEADROOM_FRACTION = 0.05  # the allocator's fragmentation: 5 % of the lease is never planned for
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class MemoryPlan:
    weights: int  # the LM's checkpoint, in the configured dtype
    codec: int  # Whisper-VQ encoder, flow and HiFT (the codec directory's weights)
    kv: int  # KV cache of CONTEXT_TOKENS + max_new_tokens
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.codec + self.kv + self.activations

    def line(self, lease: int) -> str:
        g = 2**30
        return (
            f"weights {self.weights / g:.2f} + codec {self.codec / g:.2f} + KV {self.kv / g:.2f}"
            f" + activations {self.activations / g:.2f} = {self.total / g:.2f} GiB;"
            f" lease {lease / g:.2f} GiB, of which {HEADROOM_FRACTION:.0%} is headroom"
        )

    def check(self, lease: int) -> None:
        usable = int(lease * (1 - HEADROOM_FRACTION))
        if self.total > usable:
            need = self.total / (1 - HEADROOM_FRACTION) / 2**30
            raise FailedPrecondition(
                f"residency.services.moss_sts.declared_gb: {self.line(lease)}: the plan does not fit; raise it to"
                f" >= {need:.1f} (a 24 GB card grants 22: MOSS-Speech is resident alone there; docs/leases.md)"
            )


def _weights_bytes(directory: Path) -> int:
    files = [p for ext in ("safetensors", "bin", "pt", "onnx") for p in directory.glob(f"**/*.{ext}")]
    return sum(p.stat().st_size for p in files if p.is_file())


def memory_plan(config: MossGpuConfig) -> MemoryPlan:
    """The plan from the mounted directories: checkpoint bytes (published in bfloat16, rescaled to the configured
    dtype), the codec's files, and the KV cache from the LM's config.json (2 x layers x KV heads x head dim x dtype
    bytes per token)."""
    model_dir, codec_dir = Path(config.model_dir), Path(config.codec_dir)
    dtype = DTYPE_BYTES[config.dtype]
    try:
        lm = json.loads((model_dir / "config.json").read_text())
        lm = lm.get("text_config") or lm
        layers, heads = int(lm["num_hidden_layers"]), int(lm.get("num_key_value_heads") or lm["num_attention_heads"])
        head_dim = int(lm.get("head_dim") or int(lm["hidden_size"]) // int(lm["num_attention_heads"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FailedPrecondition(
            f"moss_sts.gpu.model_dir: cannot read the LM's attention shape from {model_dir / 'config.json'} ({e})"
        ) from None
    kv = 2 * layers * heads * head_dim * dtype * (CONTEXT_TOKENS + config.max_new_tokens)
    return MemoryPlan(_weights_bytes(model_dir) * dtype // 2, _weights_bytes(codec_dir), kv, ACTIVATIONS_BYTES)


# What the engine calls on the codec's remote code (it ships with the weights; the underscored ones are private
# methods of it): checked at load so that another codec revision is refused by name, not by an AttributeError on the
# first reply. The decoder's own contract is checked by ``decoder_plan``.
CODEC_METHODS = ("_extract_speech_feat", "encode", "_extract_spk_embedding")


def check_codec_surface(codec) -> None:
    """Refuses, naming each missing method, a codec that lacks what the engine calls. A decoder that streams by
    ``stream_inference`` (chunked flow weights) instead of ``token2wav`` is named as such: the engine drives
    ``token2wav`` only."""
    if codec is None:
        raise FailedPrecondition(
            "moss_sts.gpu.codec_dir: the processor has no audio_codec (nor codec); is it MOSS-Speech's processor?"
        )
    missing = [f"codec.{m}" for m in CODEC_METHODS if not callable(getattr(codec, m, None))]
    decoder = getattr(codec, "audio_decoder", None)
    if not callable(getattr(decoder, "token2wav", None)):
        other = " (it has stream_inference: a chunked-flow decoder this engine does not drive)"
        missing.append("codec.audio_decoder.token2wav" + (other if hasattr(decoder, "stream_inference") else ""))
    if missing:
        raise FailedPrecondition(
            f"moss_sts.gpu.codec_dir: the codec ({type(codec).__name__}) lacks {', '.join(missing)}; the engine calls"
            " the remote code of fnlp/MOSS-Speech-Codec as docs/conversation.md names it"
        )


def decoder_plan(decoder, plan: ChunkPlan) -> tuple[ChunkPlan, bool]:
    """The chunk plan completed with the decoder's own streaming contract, and whether it is the offset contract.

    ``token2wav(..., token_offset, ..., stream, finalize)`` is CosyVoice2Model's (causal flow: decode from frame 0,
    ``flow.pre_lookahead_len`` frames past the chunk); ``token2wav(..., uuid, finalize)`` is CosyVoiceModel's
    (window plus its ``token_overlap_len``, mel overlap cross-faded). CosyVoice2Model's vocoder also holds back
    ``mel_cache_len`` mel frames of every non-final call, so a first chunk of fewer tokens than that would return
    no audio at all (seen on the tiny decoder in `make check-gpu-stacks`): the first chunk is raised above it."""
    params = inspect.signature(decoder.token2wav).parameters
    offset = "token_offset" in params
    needed = ["lock", "hift_cache_dict"]
    needed += ["mel_cache_len"] if offset else ["mel_overlap_dict", "flow_cache_dict", "token_overlap_len"]
    missing = [a for a in needed if not hasattr(decoder, a)]
    flow = getattr(decoder, "flow", None)
    if offset:
        missing += [f"flow.{a}" for a in ("pre_lookahead_len", "token_mel_ratio") if not hasattr(flow, a)]
    if missing or not {"uuid", "finalize"} <= set(params):
        raise FailedPrecondition(
            f"moss_sts.gpu.codec_dir: the codec's audio_decoder ({type(decoder).__name__}) lacks"
            f" {', '.join(missing) or 'token2wav(uuid=, finalize=)'}; the engine streams with the token2wav contract"
            " of cosyvoice/cli/model.py in OpenMOSS/MOSS-Speech @ 6b86ef6 (moss_sts.gpu.repo_dir)"
        )
    if not offset:
        return ChunkPlan(plan.first_frames, plan.chunk_frames, 0, int(decoder.token_overlap_len), False), False
    held = -(-int(decoder.mel_cache_len) // int(flow.token_mel_ratio))  # tokens' worth of mel the vocoder holds
    first = max(plan.first_frames, held + 1)
    if first != plan.first_frames:
        log.info("first chunk %d -> %d frames: the vocoder holds back %d frames' mel", plan.first_frames, first, held)
    chunk = max(plan.chunk_frames, first)
    return ChunkPlan(first, chunk, int(flow.pre_lookahead_len), 0, True), True


class MossSession(DialogueSession):
    speaks_unprompted = False  # MOSS-Speech's turn is an answer to the user's audio
    keeps_user_audio = True

    def __init__(self, engine: MossSpeechEngine, options: SessionOptions):
        super().__init__(engine.service, engine.served_by, engine.asr, options, engine.limits)
        self.engine = engine
        self._dir = tempfile.mkdtemp(prefix="moss-session-")
        self._files: dict[int, str] = {}
        self._reply_audio = bytearray()
        if not options.system_prompt:
            self.system_prompt = SPEECH_SYSTEM_PROMPT

    def _content(self, message: Message):
        if message.audio is None:
            return message.text
        path = self._files.get(id(message))
        if path is None:
            rate = RATE if message.role == "user" else OUTPUT_RATE
            path = self._files[id(message)] = _wav_file(self._dir, message.audio, rate)
        return {"path": path, "type": "audio/wav"}

    async def generate_reply(self, turn: UserTurn, sink: ReplySink) -> None:
        conversation = [{"role": "system", "content": self.system_prompt}]
        conversation += [{"role": m.role, "content": self._content(m)} for m in self.context.messages]
        current = _wav_file(self._dir, turn.audio or b"", RATE)
        conversation.append({"role": "user", "content": {"path": current, "type": "audio/wav"}})
        self._reply_audio = bytearray()
        try:
            pieces = self.engine.model.speak(
                conversation, self.options.sampling, self.engine.max_new_tokens, self.served_by
            )
            async with contextlib.aclosing(pieces) as stream:
                async for piece in stream:
                    self._reply_audio += piece.pcm
                    await sink.audio(piece)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(current)

    def assistant_message(self, reply: Reply, heard: str) -> Message | None:
        """The context keeps the reply as the audio that was sent (a speech model has no reply text)."""
        sent = int(reply.sent_s * OUTPUT_RATE) * 2
        pcm = bytes(self._reply_audio[:sent])
        return Message("assistant", heard, pcm) if pcm else None

    async def release(self) -> None:
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)


class MossSpeechEngine(StsEngine, Offloadable):
    name = "moss-speech"

    def __init__(
        self,
        service: str,
        config: MossGpuConfig,
        asr: AsrEngine,
        limits: DialogueLimits,
        chunking: ChunkingConfig,
        memory_budget_bytes: int = 0,
    ):
        self.service = service
        self.config = config
        self.asr = asr
        self.limits = limits
        self.chunking = chunking
        self.model = MossSpeech(config, memory_budget_bytes)
        self.max_new_tokens = config.max_new_tokens
        self._tts: MossTtsEngine | None = None

    @property
    def device(self) -> str:
        return self.config.device

    def resident_bytes(self) -> int:
        return self.model.resident_bytes()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(self.asr.start(), loop.run_in_executor(self.model.generate_pool, self.model.load))
        # Warm up: one short spoken answer end to end (CUDA kernels, the decoder caches).
        async with contextlib.aclosing(
            self.model.speak([{"role": "user", "content": "Hi."}], Sampling(), 24, self.served_by)
        ) as pieces:
            async for _ in pieces:
                pass

    async def offload(self) -> None:
        """The residency's revoke: weights off the card (the residency has waited for in-flight sessions)."""
        if self.model.host is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.model.decode_pool, lambda: None)  # a reply's last decoder release is done
        moved = await loop.run_in_executor(self.model.generate_pool, self.model.offload)
        log.info("MOSS-Speech offloaded: %s", moved.line())

    async def reload(self) -> None:
        if self.model.host is None:
            raise FailedPrecondition("moss_sts: reload before MOSS-Speech was ever loaded (start() loads it)")
        moved = await asyncio.get_running_loop().run_in_executor(self.model.generate_pool, self.model.reload)
        log.info("MOSS-Speech reloaded: %s", moved.line())

    async def close(self) -> None:
        await self.asr.close()
        self.model.generate_pool.shutdown(wait=False, cancel_futures=True)
        self.model.decode_pool.shutdown(wait=False, cancel_futures=True)

    async def voices(self) -> list[VoiceInfo]:
        return [self.voice_info()]

    def voice_info(self) -> VoiceInfo:
        return VoiceInfo(
            id=VOICE_ID,
            display_name="MOSS-Speech (decoder prompt voice)",
            languages=("en-US", "zh-CN"),
            native_sample_rate_hz=OUTPUT_RATE,
            service=self.service,
            engine=self.name,
            description=f"MOSS-Speech codec decoder conditioned on {self.config.prompt_wav}",
        )

    def check_options(self, options: SessionOptions) -> None:
        if options.tools:
            # MOSS-Speech answers speech with speech; its text channel has no function-call format to constrain.
            raise calls_no_tools(
                "MOSS-Speech, moss_sts.engine gpu; a session with tools needs a cascade: moss_sts.engine cpu, or the"
                " router's own with router.routes.conversation_tools cascade: docs/conversation.md#tools"
            )

    async def open_session(self, options: SessionOptions) -> StsSession:
        if self.model.model is None:
            raise FailedPrecondition("moss_sts is still loading MOSS-Speech; retry when the service reports SERVING")
        if options.voice and options.voice != VOICE_ID:
            raise unknown_voice(options.voice, [VOICE_ID], self.service, service=self.service)
        session = MossSession(self, options)
        await session.start()
        return session

    def tts_engine(self) -> MossTtsEngine:
        if self._tts is None:
            self._tts = MossTtsEngine(self)
        return self._tts


class MossTtsEngine(TtsEngine):
    """The Synthesizer side: text in, MOSS-Speech's spoken rendering out (one stream per request)."""

    name = "moss-speech"

    def __init__(self, sts: MossSpeechEngine):
        self.sts = sts
        self.service = sts.service

    @property
    def native_sample_rate(self) -> int:
        return OUTPUT_RATE

    @property
    def device(self) -> str:
        return self.sts.device

    async def voices(self) -> list[VoiceInfo]:
        return [self.sts.voice_info()]

    async def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        if self.sts.model.model is None:
            raise FailedPrecondition("moss_sts is still loading MOSS-Speech; retry when the service reports SERVING")
        conversation = [
            {"role": "system", "content": self.sts.config.tts_system_prompt},
            {"role": "user", "content": text},
        ]
        # About 5 codec frames per word is generous for read speech; bounded by the configured maximum.
        max_tokens = min(self.sts.max_new_tokens, 40 + 6 * len(text.split()))
        pieces = self.sts.model.speak(conversation, Sampling(seed=options.seed), max_tokens, self.served_by)
        async with contextlib.aclosing(pieces) as stream:
            async for piece in stream:
                yield AudioPiece(piece.pcm, piece.sample_rate_hz, 0, len(text), piece.served_by)
