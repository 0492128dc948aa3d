"""What config sections are built from: the error a bad value raises (``ConfigError``, its message names the
field), the model every section is (``Section``: pydantic, unknown fields refused), how a field states its bounds
(``Field(ge=..., le=...)``, with ``says`` where the message needs more than the bounds) and the checks that span
fields, and the sections that more than one service's section is made of.

Each section has its module in this package (``services/common/config/<section>.py``, built from these);
``services/common/config/__init__.py`` composes all sections and loads the file. This module imports nothing of the
project but services.common.text, services.common.turn_text and services.common.endpointing (which import nothing
of it), so any section module can import it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from services.common.endpointing import CHOICE, INT, SWITCH, WORDS, Setting
from services.common.endpointing import SEMANTIC_MODE as SEMANTIC_MODE  # the section modules import only this module
from services.common.endpointing import SETTINGS as ENDPOINTING_SETTINGS
from services.common.text import FirstSegment
from services.common.turn_text import bad_word

MODEL_SERVICES = ("cosyvoice_tts", "qwen_tts", "asr", "moss_sts")
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message names the field."""


class FieldValueError(ValueError):
    """A check that spans fields failed; ``field`` is the one the message is about (the loader names it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check(name: str, ok: bool, message: str) -> None:
    """In a section's ``model_validator``: fail naming field ``name`` unless ``ok``."""
    if not ok:
        raise FieldValueError(name, message)


class Says:
    """Field metadata: what a value out of the field's bounds is told (default: the bounds, e.g. 'must be 1..100')."""

    def __init__(self, text: str):
        self.text = text


def bounded(default: Any, *, says: str | None = None, **bounds: Any) -> Any:
    """``Field(default, **bounds)`` (ge, gt, le, lt, min_length) whose error message is ``says``."""
    info: FieldInfo = Field(default, **bounds)
    if says:
        info.metadata.append(Says(says))
    return info


def is_host_port(address: str) -> bool:
    """``host:port`` with a numeric port (the form of every fleet address in the config)."""
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit())


def comma_list(value: Any) -> Any:
    # "a,b" (an environment variable, or YAML written that way) is the list [a, b].
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


# A list of strings that may also be written "a,b,c".
Names = Annotated[list[str], BeforeValidator(comma_list)]


def _lower_words(value: Any) -> Any:
    # Like Names, written in any case: ["The", "To"] is ["the", "to"].
    value = comma_list(value)
    if isinstance(value, list):
        return [v.strip().lower() if isinstance(v, str) else v for v in value]
    return value


# Words of a word list (the text check's), lower-cased; a list or "a,b,c".
Words = Annotated[list[str], BeforeValidator(_lower_words)]


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


Level = Annotated[LogLevel, BeforeValidator(_upper), Says("must be DEBUG, INFO, WARNING or ERROR")]


class Section(BaseModel):
    """A config section: unknown fields are refused (a typo never silently falls back to a default); numbers given
    where text is expected are taken as text (a voice named 1234)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        # An empty section (``router:``) is its defaults. YAML (and the environment, read as YAML) gives numbers and
        # booleans their type; pydantic's lax mode would also take "6000" or "yes", which the config never did.
        if data is None:
            return {}
        for name, value in data.items() if isinstance(data, dict) else ():
            info = cls.model_fields.get(name)
            kind = info.annotation if info is not None else None
            if kind in (int, float) and isinstance(value, (bool, str)):
                raise FieldValueError(name, f"must be a number, got {value!r}")
            if kind is bool and not isinstance(value, bool):
                raise FieldValueError(name, f"must be true or false, got {value!r}")
        return data


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


class ServerConfig(Section):
    """What every gRPC service has."""

    host: str = "127.0.0.1"
    port: int = bounded(0, ge=1, le=65535)
    # Prometheus /metrics on this port (0 = no metrics endpoint).
    metrics_port: int = bounded(0, ge=0, le=65535)
    # A second port serving grpc.health only, always plaintext (0 = none): for Kubernetes' gRPC probes, which cannot
    # speak TLS, when the service's own port has TLS (docs/security.md). It tells health, nothing else.
    health_port: int = bounded(0, ge=0, le=65535)
    # SIGTERM: report NOT_SERVING, let in-flight streams finish for up to this long, then stop.
    grace_seconds: float = bounded(10.0, ge=0)
    # Pause between NOT_SERVING and refusing new calls, so health watchers route away first.
    drain_notice_seconds: float = bounded(0.2, ge=0)
    # Clients are asked (HTTP/2 GOAWAY) to open a new connection for new calls after this long; calls in flight go on
    # to their end. A client balancing over DNS (routers over a Kubernetes headless Service) resolves again when it
    # reconnects, so replicas added by a scale-up get traffic within this long. 0 = never.
    max_connection_age_seconds: float = 300.0
    # Largest request message; bigger ones get RESOURCE_EXHAUSTED from gRPC itself.
    max_message_bytes: int = bounded(4 * 1024 * 1024, ge=64 * 1024)
    log_level: Level = "INFO"
    # Deep probe (model services; docs/architecture.md#health-and-drain): when no stream has sent anything for
    # health_probe_interval_seconds, a tiny real request goes through the engine; health_probe_failures in a row that
    # fail or take longer than health_probe_deadline_ms turn health NOT_SERVING until one passes. 0 switches it off.
    health_probe_interval_seconds: float = 10.0
    health_probe_deadline_ms: int = bounded(5000, ge=50, le=600_000)
    health_probe_failures: int = bounded(2, ge=1, le=100)
    # Chaos drills: while this file exists, every engine call of the service waits, as a wedged engine would (to
    # rehearse deep probe, ejection and failover). Empty: off.
    chaos_hang_file: str = ""

    @model_validator(mode="after")
    def _server_checks(self):
        check(
            "health_port",
            self.health_port == 0 or self.health_port not in (self.port, self.metrics_port),
            f"must differ from port and metrics_port, got {self.health_port}",
        )
        check(
            "max_connection_age_seconds",
            self.max_connection_age_seconds == 0 or self.max_connection_age_seconds >= 1,
            f"must be 0 (never) or >= 1, got {self.max_connection_age_seconds}",
        )
        check(
            "health_probe_interval_seconds",
            self.health_probe_interval_seconds == 0 or 0.1 <= self.health_probe_interval_seconds <= 3600,
            f"must be 0 (off) or 0.1..3600, got {self.health_probe_interval_seconds}",
        )
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ChunkingConfig(Section):
    """How an engine cuts its output: a small first piece for time to first audio, bigger ones after."""

    # The first segment of a text is spoken early (services/common/text.py FirstSegment; docs/tts.md#chunking):
    # a first sentence longer than first_segment_max_chars (0: never cut) is cut at its first clause mark (, ; :)
    # past min_first_chars, else after first_segment_words words (0: clause marks only), or in text without spaces
    # (CJK) after first_segment_cjk_chars characters. Streaming text cuts its first segment the same way as soon
    # as the cut is there (it cannot know the sentence's length). Later segments stay whole sentences (prosody).
    first_segment_max_chars: int = bounded(60, ge=0)
    min_first_chars: int = bounded(12, ge=1)
    first_segment_words: int = bounded(5, ge=0, le=50, says="must be 0 (clause marks only) or 1..50")
    first_segment_cjk_chars: int = bounded(10, ge=1, le=200)
    # Audio is sent in chunks of at most this many ms (the engine's own pieces are cut to fit).
    max_chunk_ms: int = bounded(200, ge=10, le=2000)
    # The first chunk of a stream is at most this many ms (0: max_chunk_ms), so a player can start early.
    first_chunk_ms: int = 100

    @field_validator("first_chunk_ms")
    @classmethod
    def _zero_or_range(cls, v: int) -> int:
        if not (v == 0 or 10 <= v <= 2000):
            raise ValueError(f"must be 0 or 10..2000, got {v}")
        return v

    def first_segment(self) -> FirstSegment:
        """The first-segment rule these knobs make (one rule for Synthesize and streaming text)."""
        return FirstSegment(
            max_chars=self.first_segment_max_chars,
            min_chars=self.min_first_chars,
            words=self.first_segment_words,
            cjk_chars=self.first_segment_cjk_chars,
        )


class SchedulingConfig(Section):
    """How a TTS engine shares its workers among streams (docs/scheduling.md)."""

    # Segments synthesized at once. CPU engines: 0 = one per core, each with cores / workers intra-op threads.
    # GPU engines that batch: the concurrent requests the library batches well (0 = the engine's own default).
    workers: int = bounded(0, ge=0, le=256)
    # A continuation segment is due this long before its stream's audio runs out (covers its own synthesis).
    margin_ms: int = bounded(300, ge=0, le=10_000)
    # CPU engines on Linux: first segments run on threads of their own (one per worker) at normal priority and
    # continuations on threads at this nice value, so the OS runs a newcomer's first segment ahead of continuations
    # already running (docs/scheduling.md#the-queue). 0 = one pool for both, with reserved_for_first.
    continuation_nice: int = bounded(10, ge=0, le=19, says="must be 0..19 (a nice value; 0 = no priority lanes)")
    # Without priority lanes: workers kept for new streams' first segments; a continuation that is not due yet may
    # not take them, so a caller arriving at a busy service starts at once (capped at workers - 1; 0 = none).
    reserved_for_first: int = bounded(1, ge=0, le=256)
    # Admission: a new stream whose first audio is predicted to wait longer than this is refused at once with
    # RESOURCE_EXHAUSTED and a retry hint (0 = only max_concurrent_syntheses limits admission).
    max_first_wait_ms: int = bounded(2000, ge=0, le=60_000)
    # Admission: while a continuation already waits this long past the end of its stream's audio (its listener
    # hears a gap), new streams are refused at once: more would lengthen the gap (0 = off).
    max_late_ms: int = bounded(300, ge=0, le=60_000)
    # CPU engines: streams' first segments kept for reuse, up to this many MB of audio (0 = off): a segment is a pure
    # function of text, rate and seed, and openings repeat ("I'm sorry,", a greeting). docs/scheduling.md#segment-cache
    segment_cache_mb: int = bounded(8, ge=0, le=1024)
    # CPU engines on onnxruntime (piper): graph-run memory kept between runs, in MB; what a longer segment needs
    # beyond it (~16 MB per second of audio) is given back when its run ends. docs/architecture.md#memory
    arena_kept_mb: int = bounded(64, ge=1, le=4096)


class TtsServiceConfig(ServerConfig):
    """A model service that serves Synthesizer."""

    # "cpu" (embedded engine, the default) or "gpu" (the real model; needs CUDA and mounted weights).
    engine: Literal["cpu", "gpu"] = "cpu"
    max_text_chars: int = bounded(5000, ge=1, le=100_000)
    # Capacity: streams served at once; a new one past it is refused at once with RESOURCE_EXHAUSTED and a retry
    # hint (the router then tries another backend). docs/scheduling.md#admission
    max_concurrent_syntheses: int = bounded(16, ge=1)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    scheduling: SchedulingConfig = Field(default_factory=SchedulingConfig)


class EspeakConfig(Section):
    """qwen_tts CPU engine: espeak-ng (formant synthesis) from the espeakng-loader wheel."""

    # Voice used when a request names none (an espeak voice id from ListVoices, or a Qwen preset name).
    default_voice: str = bounded("en-US", pattern=r"\S", says="must name a voice, e.g. en-US")
    # Audio per espeak callback (espeak_Initialize's buflength): the first audio piece of a stream, one engine
    # step, and how much audio at most is synthesized after a cancel. espeak-ng 1.52 never goes below 60 ms.
    callback_ms: int = bounded(60, ge=10, le=1000)
    # Load libespeak-ng afresh for every segment (~5 ms) so the same text, voice, rate and seed give bit-identical
    # PCM; espeak-ng otherwise carries pitch/phase state from one utterance to the next (see docs/tts.md).
    deterministic: bool = True


class EndpointingSection(Section):
    """An endpointing section: defaults for a stream's EndpointingConfig fields left at 0. Its fields, defaults,
    bounds and descriptions are services/common/endpointing.py's SETTINGS (``endpointing_section`` makes one)."""

    @model_validator(mode="after")
    def _settings(self):
        for s in ENDPOINTING_SETTINGS:
            value = getattr(self, s.name)
            if s.zero and value != 0:
                check(s.name, s.in_bounds(value), f"must be 0 ({s.zero}) or {s.bounds_text()}")
            if s.at_most:
                check(s.name, value <= getattr(self, s.at_most), f"must be <= {s.at_most}")
            if s.kind == WORDS:
                check(s.name, bool(value), "must list at least one word (text_check: false turns it off)")
                problem = bad_word(value)
                check(s.name, not problem, problem)
        return self


def _endpointing_field(s: Setting, default: Any) -> tuple[Any, FieldInfo]:
    if s.kind == WORDS:
        return Words, Field(default_factory=lambda: list(default), description=f'{s.doc} A list or "a,b,c".')
    if s.kind == CHOICE:
        return Literal[s.choices], Field(default, description=s.doc)
    if s.kind == SWITCH:
        return bool, Field(default, description=s.doc)
    kind = int if s.kind == INT else float
    if s.zero:  # 0 or the bounds: the section's validator checks; the schema shows 0..high
        says = f"must be 0 ({s.zero}) or {s.bounds_text()}"
        return kind, bounded(default, says=says, description=f"{s.doc} 0: {s.zero}.", ge=0, le=s.high)
    bounds = {k: getattr(s, k) for k in ("ge", "gt", "le", "lt") if getattr(s, k) is not None}
    return kind, bounded(default, says=f"must be {s.bounds_text()}", description=s.doc, **bounds)


def endpointing_section(name: str, doc: str, **defaults: Any) -> type[EndpointingSection]:
    """A config section (pydantic model) with one field per endpointing setting, named ``name``; ``defaults``: the
    settings whose default in this section is not the definition's (e.g. moss_sts's ``hangover_ms=400``)."""
    unknown = set(defaults) - {s.name for s in ENDPOINTING_SETTINGS}
    if unknown:
        raise TypeError(f"{name}: no endpointing setting {sorted(unknown)}")
    fields = {s.name: _endpointing_field(s, defaults.get(s.name, s.default)) for s in ENDPOINTING_SETTINGS}
    return create_model(name, __base__=EndpointingSection, __doc__=doc, __module__=__name__, **fields)


AsrEndpointingConfig = endpointing_section(
    "AsrEndpointingConfig", "Defaults for a stream's EndpointingConfig fields left at 0 (Silero VAD, 32 ms windows)."
)
