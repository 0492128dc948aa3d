"""Endpointing, declared once: when speech starts, and when an utterance (a caller's turn) ends.

Every field of ``voice.v1.EndpointingConfig`` is one ``Setting`` in ``SETTINGS`` below, with its default, its
bounds, its unit and a line on what it does. The rest is derived from that list:

- ``Endpointing``: the engines' frozen dataclass, one attribute per setting (Silero VAD windows of 32 ms; how the
  engine applies them: services/engines/asr/vad.py). A choice left "" or a word list left () means the service's
  default, resolved by whoever owns the config;
- the config sections ``asr.endpointing`` and ``moss_sts.endpointing`` (config/base.py ``endpointing_section``:
  fields, defaults, bounds, descriptions; docs/config.schema.json is generated from them);
- a request's checks (``resolve``; the servicers' ``asr_servicer.endpointing_from_config`` turns a refusal into
  INVALID_ARGUMENT naming ``config.endpointing.<field>``) and the proto <-> engine conversion (convert/asr.py);
- the conversation WebSocket's ``endpointing`` object (services/gateway/protocol.py): the config file's names and
  values, 0 or absent meaning the service's default;
- the bounds of the Realtime route's ``turn_detection`` where it maps onto these fields (gateway/realtime_config.py).

In a request (proto, WebSocket JSON) 0, unspecified or an empty list means the service's default; a service's
default is its config section's value. A new setting is one field of the proto message, one ``Setting`` here and
the engine code that uses it; tests/common/test_endpointing.py fails while the proto and this list disagree.

This module imports nothing of the project but services.common.turn_text (the text check's word list), so the
config, the engines, the servicers and the gateway can all import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.turn_text import MAX_WORDS, NON_FINAL_WORDS, bad_word

# Endpointing modes: how an utterance ends. "" = the service's default (resolved by whoever owns the config).
SILENCE_MODE, SEMANTIC_MODE = "silence", "semantic"
# Semantic endpointing's text check: on, off; "" = the service's default.
TEXT_CHECK_ON, TEXT_CHECK_OFF = "on", "off"
WINDOW_MS = 32  # one VAD window: the least silence that can be judged
MAX_SILENCE_MS = 10_000

# What a setting holds. INT and FLOAT: a number with bounds (ms or a probability); CHOICE: one of ``choices``;
# SWITCH: on or off (a boolean in the config file and the WebSocket's JSON, ``choices`` = (on, off) in the engine);
# WORDS: a list of single words.
INT, FLOAT, CHOICE, SWITCH, WORDS = "int", "float", "choice", "switch", "words"


class BadSetting(ValueError):
    """A request's value that ``resolve`` refuses: ``name`` is the setting, ``message`` says what to fix."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


@dataclass(frozen=True)
class Setting:
    """One endpointing field. ``default`` is the service's default in the config file's terms (a boolean for a
    SWITCH, a list for WORDS); a config section may start from other defaults (moss_sts: hangover_ms 400, mode
    semantic). Bounds hold for every non-zero value, in the config file and in a request alike."""

    name: str
    kind: str
    default: Any
    doc: str
    unit: str = ""  # "ms" or "probability" (0..1); "" for choices and words
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    # What 0 means in a config file when it is not "the default" there (early_silence_ms: "none"); "" = 0 is out of
    # bounds in the config file unless the bounds take it. In a request 0 always means the service's default.
    zero: str = ""
    # Another setting this one may not exceed (checked on the values in force, after defaults).
    at_most: str = ""
    # The server's own value is also the most a request may ask for (max_utterance_ms).
    limit: bool = False

    @property
    def low(self) -> float | None:
        return self.ge if self.ge is not None else self.gt

    @property
    def high(self) -> float | None:
        return self.le if self.le is not None else self.lt

    @property
    def unset(self) -> Any:
        """The value that means "the service's default" in the engine's terms (a request's 0, "" or empty list)."""
        return {CHOICE: "", SWITCH: "", WORDS: ()}.get(self.kind, 0)

    def engine_value(self, value: Any) -> Any:
        """A value in the config file's terms (also the WebSocket's JSON) in the engine's."""
        if self.kind == SWITCH:
            return "" if value == "" else (self.choices[0] if value else self.choices[1])
        if self.kind == WORDS:
            return tuple(value)
        return value

    def in_bounds(self, value: float, high: float | None = None) -> bool:
        """``value`` within the bounds (``high``: a lower upper bound in force, e.g. a server's limit)."""
        high = self.high if high is None else high
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > high)
            or (self.lt is not None and value >= high)
        )

    def bounds_text(self) -> str:
        """The bounds as the messages say them: "32..5000", "between 0 and 1", "above 0 and at most 1"."""
        if self.gt is None and self.lt is None:
            return f"{_num(self.ge)}..{_num(self.le)}"
        low = f"above {_num(self.gt)}" if self.gt is not None else f"at least {_num(self.ge)}"
        high = f"below {_num(self.lt)}" if self.lt is not None else f"at most {_num(self.le)}"
        if self.gt is not None and self.lt is not None:
            return f"between {_num(self.gt)} and {_num(self.lt)}"
        return f"{low} and {high}"

    def resolve(self, value: Any, default: Any) -> Any:
        """A request's value (engine terms; ``unset`` = ``default``) checked; BadSetting when out of bounds."""
        if self.kind in (INT, FLOAT):
            if value == 0:
                return default
            if self.limit and not self.in_bounds(value, default):
                raise BadSetting(
                    self.name,
                    f"{_num(value)} is outside {_num(self.low)}..{_num(default)} (this server's limit; 0 means the"
                    " limit)",
                )
            if not self.in_bounds(value):
                span = f"{_num(self.low)}..{_num(self.high)}"
                raise BadSetting(self.name, f"{_num(value)} is outside {span} (0 means {_num(default)})")
            return value
        if self.kind in (CHOICE, SWITCH):
            if value == "":
                return default
            if value not in self.choices:
                raise BadSetting(self.name, f"{value!r} is not one of {', '.join(self.choices)}")
            return value
        words = tuple(w.strip().lower() for w in value)
        problem = bad_word(words)
        if problem:
            raise BadSetting(self.name, problem)
        return words or default


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "threshold",
        FLOAT,
        0.5,
        "Speech probability (Silero VAD, per 32 ms window) at or above which a window counts as speech.",
        unit="probability",
        gt=0,
        lt=1,
    ),
    Setting("min_speech_ms", INT, 250, "Shortest speech that starts an utterance.", unit="ms", ge=0, le=5000),
    Setting(
        "hangover_ms",
        INT,
        200,
        "Silence mode: silence after speech that ends an utterance.",
        unit="ms",
        ge=WINDOW_MS,
        le=5000,
    ),
    Setting(
        "max_utterance_ms",
        INT,
        30_000,
        "Longest utterance: it gets its final there. A server's value is also the most a request may ask for.",
        unit="ms",
        ge=1000,
        le=120_000,
        limit=True,
    ),
    Setting(
        "mode",
        CHOICE,
        SILENCE_MODE,
        "How an utterance ends: silence (after hangover_ms) or semantic (a turn model judges each pause, min_silence_ms"
        " to max_silence_ms; needs the pipecat-ai wheel, docs/asr.md#semantic-endpointing).",
        choices=(SILENCE_MODE, SEMANTIC_MODE),
    ),
    Setting(
        "turn_threshold",
        FLOAT,
        0.5,
        'Semantic mode: end-of-turn probability at or above which the turn model\'s "complete" ends the utterance.',
        unit="probability",
        gt=0,
        lt=1,
    ),
    Setting(
        "min_silence_ms",
        INT,
        160,
        "Semantic mode: silence after which the turn model is first asked (and a complete turn ends); at most"
        " max_silence_ms.",
        unit="ms",
        ge=WINDOW_MS,
        le=MAX_SILENCE_MS,
        at_most="max_silence_ms",
    ),
    Setting(
        "max_silence_ms",
        INT,
        1500,
        "Semantic mode: silence that ends an utterance the turn model calls incomplete.",
        unit="ms",
        ge=WINDOW_MS,
        le=MAX_SILENCE_MS,
    ),
    Setting(
        "text_check",
        SWITCH,
        True,
        'Semantic mode, English: on (true), a "complete" at a pause right after one of non_final_words keeps the turn'
        ' open, and an "incomplete" on words that read as a finished sentence ends it after sentence_end_silence_ms'
        " (docs/asr.md#the-text-check); off (false): the turn model alone decides.",
        choices=(TEXT_CHECK_ON, TEXT_CHECK_OFF),
    ),
    Setting(
        "non_final_words",
        WORDS,
        NON_FINAL_WORDS,
        "Semantic mode, text check on: the words a pause right after which does not end a turn (single words, any"
        f" case, at most {MAX_WORDS}); by default closed-class words that (almost) never end an English sentence"
        " (articles, possessive determiners, conjunctions, most prepositions, auxiliaries; services/common/turn_text.py).",
    ),
    Setting(
        "sentence_end_silence_ms",
        INT,
        600,
        "Semantic mode, text check on: silence that ends an utterance the turn model calls incomplete when its words"
        " read as a finished sentence ('.', '?' or '!' after a word that may end one); at or above max_silence_ms it"
        " never applies.",
        unit="ms",
        ge=WINDOW_MS,
        le=MAX_SILENCE_MS,
    ),
    Setting(
        "early_silence_ms",
        INT,
        96,
        "Semantic mode: an earlier, stricter first judgement after this much silence: the turn ends there only when"
        " the turn model is sure (early_turn_threshold), anything less waits for min_silence_ms; at or above"
        " min_silence_ms it never comes first.",
        unit="ms",
        ge=WINDOW_MS,
        le=MAX_SILENCE_MS,
        zero="none",
    ),
    Setting(
        "early_turn_threshold",
        FLOAT,
        0.85,
        "Semantic mode: end-of-turn probability the early judgement needs (never less than turn_threshold).",
        unit="probability",
        gt=0,
        le=1,
    ),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def _engine_field(s: Setting) -> tuple[str, type, Any]:
    kinds = {INT: int, FLOAT: float, CHOICE: str, SWITCH: str, WORDS: tuple[str, ...]}
    default = s.unset if s.kind in (CHOICE, SWITCH, WORDS) else s.default
    return s.name, kinds[s.kind], dataclasses.field(default=default)


Endpointing = dataclasses.make_dataclass(
    "Endpointing",
    [_engine_field(s) for s in SETTINGS],
    frozen=True,
    namespace={"__module__": __name__},
)
Endpointing.__doc__ = """A stream's endpointing: one attribute per setting of ``SETTINGS``, with its default (Silero VAD
probabilities per 32 ms window; services/engines/asr/vad.py applies them).

``mode`` SILENCE_MODE: an utterance ends after ``hangover_ms`` of silence. SEMANTIC_MODE: after ``min_silence_ms`` of
silence a turn model judges whether the speaker has finished (a TURN_ESTIMATE event); complete (probability >=
``turn_threshold``) ends the utterance there, incomplete keeps it open (judged again while the silence lasts) up to
``max_silence_ms``. ``text_check`` (TEXT_CHECK_ON / TEXT_CHECK_OFF): a "complete" after a word of ``non_final_words``
in the English text so far keeps the turn open, and an "incomplete" on words that read as a finished sentence ends the
utterance after ``sentence_end_silence_ms`` (services/common/turn_text.py). A first judgement after
``early_silence_ms`` (when that is under ``min_silence_ms``) ends the utterance only if the model is sure
(probability >= ``early_turn_threshold``); anything less waits for the judgement at ``min_silence_ms``. ``mode`` and
``text_check`` "" and ``non_final_words`` () mean the service's default."""


def from_config(section: Any) -> Endpointing:
    """An endpointing config section (config.base.endpointing_section) as the defaults of a stream's settings."""
    return Endpointing(**{s.name: s.engine_value(getattr(section, s.name)) for s in SETTINGS})


def resolve(given: Mapping[str, Any], defaults: Endpointing) -> Endpointing:
    """A request's settings in the engine's terms (absent, 0, "" or () = ``defaults``' value) checked against the
    bounds: the settings in force, or BadSetting naming the first one refused."""
    values = {s.name: s.resolve(given.get(s.name, s.unset), getattr(defaults, s.name)) for s in SETTINGS}
    for s in SETTINGS:
        if s.at_most and values[s.name] > values[s.at_most]:
            raise BadSetting(
                s.name,
                f"{_num(values[s.name])} must be {_num(s.low)}..{s.at_most} ({_num(values[s.at_most])});"
                f" 0 means {_num(getattr(defaults, s.name))}",
            )
    return Endpointing(**values)
