"""What config sections are built from: the error a bad value raises (``ConfigError``, its message names the
field), the check that raises it, and the sections that more than one service's section is made of.

Each section has its module in this package (``services/common/config/<section>.py``, built from these);
``services/common/config/__init__.py`` composes all sections and loads the file. This module imports nothing of the
project but services.common.text (which imports nothing of it), so any section module can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.text import FirstSegment


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the field."""


def check(path: str, name: str, ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(f"{path}.{name}: {message}")


def is_host_port(address: str) -> bool:
    """``host:port`` with a numeric port (the form of every fleet address in the config)."""
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit())


# Barge-in by words (services/conversation/barge_in.py): the defaults of moss_sts.barge_in_stop_words,
# barge_in_backchannels and barge_in_min_words. Here, with the config, so config sections import no dialogue code.
DEFAULT_STOP_WORDS: tuple[str, ...] = (
    "stop",
    "wait",
    "hold on",
    "hang on",
    "cancel",
    "pause",
    "shut up",
    "be quiet",
    "excuse me",
    "no no",
    "enough",
)

# Single words (normalised): what listeners say to show they follow, and how recognizers spell it.
DEFAULT_BACKCHANNELS: tuple[str, ...] = (
    "mmhm",
    "mmhmm",
    "mhm",
    "mm",
    "mmm",
    "hmm",
    "hm",
    "uhhuh",
    "uh",
    "huh",
    "um",
    "ah",
    "oh",
    "yeah",
    "yes",
    "yep",
    "yup",
    "ok",
    "okay",
    "right",
    "sure",
    "alright",
    "i",
    "see",
    "got",
    "it",
    "cool",
    "nice",
    "great",
)
DEFAULT_MIN_WORDS = 3


@dataclass
class ServerConfig:
    """What every gRPC service has."""

    host: str = "127.0.0.1"
    port: int = 0
    # Prometheus /metrics on this port (0 = no metrics endpoint).
    metrics_port: int = 0
    # A second port serving grpc.health only, always plaintext (0 = none): for Kubernetes' gRPC probes, which cannot
    # speak TLS, when the service's own port has TLS (docs/security.md). It tells health, nothing else.
    health_port: int = 0
    # SIGTERM: report NOT_SERVING, let in-flight streams finish for up to this long, then stop.
    grace_seconds: float = 10.0
    # Pause between NOT_SERVING and refusing new calls, so health watchers route away first.
    drain_notice_seconds: float = 0.2
    # Clients are asked (HTTP/2 GOAWAY) to open a new connection for new calls after this long; calls in flight go on
    # to their end. A client balancing over DNS (routers over a Kubernetes headless Service) resolves again when it
    # reconnects, so replicas added by a scale-up get traffic within this long. 0 = never.
    max_connection_age_seconds: float = 300.0
    # Largest request message; bigger ones get RESOURCE_EXHAUSTED from gRPC itself.
    max_message_bytes: int = 4 * 1024 * 1024
    log_level: str = "INFO"
    # Deep probe (model services; docs/architecture.md#health-and-drain): when no stream has sent anything for
    # health_probe_interval_seconds, a tiny real request goes through the engine; health_probe_failures in a row that
    # fail or take longer than health_probe_deadline_ms turn health NOT_SERVING until one passes. 0 switches it off.
    health_probe_interval_seconds: float = 10.0
    health_probe_deadline_ms: int = 5000
    health_probe_failures: int = 2
    # Chaos drills: while this file exists, every engine call of the service waits, as a wedged engine would (to
    # rehearse deep probe, ejection and failover). Empty: off.
    chaos_hang_file: str = ""

    def validate(self, path: str) -> None:
        check(path, "port", 1 <= self.port <= 65535, f"must be 1..65535, got {self.port}")
        check(path, "metrics_port", 0 <= self.metrics_port <= 65535, f"must be 0..65535, got {self.metrics_port}")
        check(path, "health_port", 0 <= self.health_port <= 65535, f"must be 0..65535, got {self.health_port}")
        check(
            path,
            "health_port",
            self.health_port == 0 or self.health_port not in (self.port, self.metrics_port),
            f"must differ from port and metrics_port, got {self.health_port}",
        )
        check(path, "grace_seconds", self.grace_seconds >= 0, f"must be >= 0, got {self.grace_seconds}")
        check(path, "drain_notice_seconds", self.drain_notice_seconds >= 0, "must be >= 0")
        check(path, "max_message_bytes", self.max_message_bytes >= 64 * 1024, "must be >= 65536")
        check(
            path,
            "max_connection_age_seconds",
            self.max_connection_age_seconds == 0 or self.max_connection_age_seconds >= 1,
            f"must be 0 (never) or >= 1, got {self.max_connection_age_seconds}",
        )
        check(
            path,
            "health_probe_interval_seconds",
            self.health_probe_interval_seconds == 0 or 0.1 <= self.health_probe_interval_seconds <= 3600,
            f"must be 0 (off) or 0.1..3600, got {self.health_probe_interval_seconds}",
        )
        check(path, "health_probe_deadline_ms", 50 <= self.health_probe_deadline_ms <= 600_000, "must be 50..600000")
        check(path, "health_probe_failures", 1 <= self.health_probe_failures <= 100, "must be 1..100")
        check(
            path,
            "log_level",
            self.log_level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"),
            f"must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}",
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ChunkingConfig:
    """How an engine cuts its output: a small first piece for time to first audio, bigger ones after."""

    # The first segment of a text is spoken early (services/common/text.py FirstSegment; docs/tts.md#chunking):
    # a first sentence longer than first_segment_max_chars (0: never cut) is cut at its first clause mark (, ; :)
    # past min_first_chars, else after first_segment_words words (0: clause marks only), or in text without spaces
    # (CJK) after first_segment_cjk_chars characters. Streaming text cuts its first segment the same way as soon
    # as the cut is there (it cannot know the sentence's length). Later segments stay whole sentences (prosody).
    first_segment_max_chars: int = 60
    min_first_chars: int = 12
    first_segment_words: int = 5
    first_segment_cjk_chars: int = 10
    # Audio is sent in chunks of at most this many ms (the engine's own pieces are cut to fit).
    max_chunk_ms: int = 200
    # The first chunk of a stream is at most this many ms (0: max_chunk_ms), so a player can start early.
    first_chunk_ms: int = 100

    def validate(self, path: str) -> None:
        check(path, "first_segment_max_chars", self.first_segment_max_chars >= 0, "must be >= 0")
        check(path, "min_first_chars", self.min_first_chars >= 1, "must be >= 1")
        check(
            path,
            "first_segment_words",
            0 <= self.first_segment_words <= 50,
            f"must be 0 (clause marks only) or 1..50, got {self.first_segment_words}",
        )
        check(
            path,
            "first_segment_cjk_chars",
            1 <= self.first_segment_cjk_chars <= 200,
            f"must be 1..200, got {self.first_segment_cjk_chars}",
        )
        check(path, "max_chunk_ms", 10 <= self.max_chunk_ms <= 2000, f"must be 10..2000, got {self.max_chunk_ms}")
        check(
            path,
            "first_chunk_ms",
            self.first_chunk_ms == 0 or 10 <= self.first_chunk_ms <= 2000,
            f"must be 0 or 10..2000, got {self.first_chunk_ms}",
        )

    def first_segment(self) -> FirstSegment:
        """The first-segment rule these knobs make (one rule for Synthesize and streaming text)."""
        return FirstSegment(
            max_chars=self.first_segment_max_chars,
            min_chars=self.min_first_chars,
            words=self.first_segment_words,
            cjk_chars=self.first_segment_cjk_chars,
        )


@dataclass
class SchedulingConfig:
    """How a TTS engine shares its workers among streams (docs/scheduling.md)."""

    # Segments synthesized at once. CPU engines: 0 = one per core, each with cores / workers intra-op threads.
    # GPU engines that batch: the concurrent requests the library batches well (0 = the engine's own default).
    workers: int = 0
    # A continuation segment is due this long before its stream's audio runs out (covers its own synthesis).
    margin_ms: int = 300
    # CPU engines on Linux: first segments run on threads of their own (one per worker) at normal priority and
    # continuations on threads at this nice value, so the OS runs a newcomer's first segment ahead of continuations
    # already running (docs/scheduling.md#priority-lanes). 0 = one pool for both, with reserved_for_first.
    continuation_nice: int = 10
    # Without priority lanes: workers kept for new streams' first segments; a continuation that is not due yet may
    # not take them, so a caller arriving at a busy service starts at once (capped at workers - 1; 0 = none).
    reserved_for_first: int = 1
    # Admission: a new stream whose first audio is predicted to wait longer than this is refused at once with
    # RESOURCE_EXHAUSTED and a retry hint (0 = only max_concurrent_syntheses limits admission).
    max_first_wait_ms: int = 2000
    # Admission: while a continuation already waits this long past the end of its stream's audio (its listener
    # hears a gap), new streams are refused at once: more would lengthen the gap (0 = off).
    max_late_ms: int = 300

    def validate(self, path: str) -> None:
        check(path, "workers", 0 <= self.workers <= 256, f"must be 0..256, got {self.workers}")
        check(path, "margin_ms", 0 <= self.margin_ms <= 10_000, f"must be 0..10000, got {self.margin_ms}")
        check(
            path,
            "continuation_nice",
            0 <= self.continuation_nice <= 19,
            f"must be 0..19 (a nice value; 0 = no priority lanes), got {self.continuation_nice}",
        )
        check(
            path,
            "reserved_for_first",
            0 <= self.reserved_for_first <= 256,
            f"must be 0..256, got {self.reserved_for_first}",
        )
        check(path, "max_late_ms", 0 <= self.max_late_ms <= 60_000, f"must be 0..60000, got {self.max_late_ms}")
        check(
            path,
            "max_first_wait_ms",
            0 <= self.max_first_wait_ms <= 60_000,
            f"must be 0..60000, got {self.max_first_wait_ms}",
        )


@dataclass
class TtsServiceConfig(ServerConfig):
    """A model service that serves Synthesizer."""

    # "cpu" (embedded engine, the default) or "gpu" (the real model; needs CUDA and mounted weights).
    engine: str = "cpu"
    max_text_chars: int = 5000
    # Capacity: streams served at once; a new one past it is refused at once with RESOURCE_EXHAUSTED and a retry
    # hint (the router then tries another backend). docs/scheduling.md#admission
    max_concurrent_syntheses: int = 16
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    scheduling: SchedulingConfig = field(default_factory=SchedulingConfig)

    def validate(self, path: str) -> None:
        super().validate(path)
        check(path, "engine", self.engine in ("cpu", "gpu"), f"must be 'cpu' or 'gpu', got {self.engine!r}")
        check(path, "max_text_chars", 1 <= self.max_text_chars <= 100_000, "must be 1..100000")
        check(path, "max_concurrent_syntheses", self.max_concurrent_syntheses >= 1, "must be >= 1")
        self.chunking.validate(f"{path}.chunking")
        self.scheduling.validate(f"{path}.scheduling")


@dataclass
class EspeakConfig:
    """qwen_tts CPU engine: espeak-ng (formant synthesis) from the espeakng-loader wheel."""

    # Voice used when a request names none (an espeak voice id from ListVoices, or a Qwen preset name).
    default_voice: str = "en-US"
    # Audio per espeak callback (espeak_Initialize's buflength): the first audio piece of a stream, one engine
    # step, and how much audio at most is synthesized after a cancel. espeak-ng 1.52 never goes below 60 ms.
    callback_ms: int = 60
    # Load libespeak-ng afresh for every segment (~5 ms) so the same text, voice, rate and seed give bit-identical
    # PCM; espeak-ng otherwise carries pitch/phase state from one utterance to the next (see docs/tts.md).
    deterministic: bool = True

    def validate(self, path: str) -> None:
        check(path, "callback_ms", 10 <= self.callback_ms <= 1000, f"must be 10..1000, got {self.callback_ms}")
        check(path, "default_voice", bool(self.default_voice.strip()), "must name a voice, e.g. en-US")


@dataclass
class AsrEndpointingConfig:
    """Defaults for a stream's EndpointingConfig fields left at 0 (Silero VAD, 32 ms windows)."""

    threshold: float = 0.5
    min_speech_ms: int = 250
    hangover_ms: int = 200
    max_utterance_ms: int = 30_000
    # How an utterance ends when a stream leaves the mode unspecified: "silence" (after hangover_ms) or "semantic"
    # (a turn model judges each pause; needs the pipecat-ai wheel, docs/asr.md#semantic-endpointing).
    mode: str = "silence"
    # Semantic mode: probability at or above which the turn model's "complete" ends the utterance.
    turn_threshold: float = 0.5
    # Semantic mode: silence before the first judgement, and the most silence an utterance judged incomplete gets.
    min_silence_ms: int = 160
    max_silence_ms: int = 1500

    def validate(self, path: str) -> None:
        check(path, "threshold", 0 < self.threshold < 1, f"must be between 0 and 1, got {self.threshold}")
        check(path, "min_speech_ms", 0 <= self.min_speech_ms <= 5000, "must be 0..5000")
        check(path, "hangover_ms", 32 <= self.hangover_ms <= 5000, "must be 32..5000")
        check(path, "max_utterance_ms", 1000 <= self.max_utterance_ms <= 120_000, "must be 1000..120000")
        check(path, "mode", self.mode in ("silence", "semantic"), f"must be 'silence' or 'semantic', got {self.mode!r}")
        check(
            path, "turn_threshold", 0 < self.turn_threshold < 1, f"must be between 0 and 1, got {self.turn_threshold}"
        )
        check(path, "min_silence_ms", 32 <= self.min_silence_ms <= 10_000, "must be 32..10000")
        check(path, "max_silence_ms", 32 <= self.max_silence_ms <= 10_000, "must be 32..10000")
        check(path, "min_silence_ms", self.min_silence_ms <= self.max_silence_ms, "must be <= max_silence_ms")
