"""Recognizer messages <-> engine types (RecognitionOptions, Endpointing, AsrEvent). Checking a request's fields
against a server's limits is the servicer's (asr_servicer.endpointing_from_config); this only converts. The
endpointing conversion follows services/common/endpointing.py's SETTINGS field by field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.common.audio import S16LE
from services.common.endpointing import BY_NAME, CHOICE, SWITCH, WORDS, BadSetting, Setting
from services.common.endpointing import SETTINGS as ENDPOINTING
from services.common.engines import (
    DRAFT,
    PHRASE_SPOTTED,
    RESULT,
    SPEECH_END,
    SPEECH_START,
    TURN_ESTIMATE,
    AsrEvent,
    Draft,
    Endpointing,
    Hypothesis,
    RecognitionOptions,
    SpottedPhrase,
    TurnEstimate,
    WordTiming,
)
from voice.v1 import audio_pb2, recognizer_pb2

_ENDPOINTING = recognizer_pb2.EndpointingConfig.DESCRIPTOR


def _enum_values(s: Setting) -> dict[int, str]:
    """A choice's proto enum (X_UNSPECIFIED = 0, then X_<CHOICE>) -> the engine's values ("" = unspecified)."""
    enum = _ENDPOINTING.fields_by_name[s.name].enum_type
    prefix = enum.values_by_number[0].name.removesuffix("UNSPECIFIED")
    return {0: "", **{enum.values_by_name[prefix + c.upper()].number: c for c in s.choices}}


# EndpointingConfig's enums (mode, text_check) -> Endpointing's values, per setting ("" = unspecified: the defaults'
# value, "" again in the router), and back.
ENUMS = {s.name: _enum_values(s) for s in ENDPOINTING if s.kind in (CHOICE, SWITCH)}
PROTO_ENUMS = {name: {value: number for number, value in table.items()} for name, table in ENUMS.items()}


def config_to_proto(options: RecognitionOptions) -> recognizer_pb2.RecognitionConfig:
    return recognizer_pb2.RecognitionConfig(
        input_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.sample_rate_hz, channels=1),
        language=options.language,
        interim_results=options.interim_results,
        endpointing=endpointing_to_proto(options.endpointing),
        phrase_hints=list(options.phrase_hints),
        spot_phrases=list(options.spot_phrases),
        draft_interval_ms=options.draft_interval_ms,
    )


def endpointing_to_proto(e: Endpointing) -> recognizer_pb2.EndpointingConfig:
    """Engine Endpointing -> EndpointingConfig (Recognizer and Conversation configs alike)."""
    return endpointing_proto({s.name: getattr(e, s.name) for s in ENDPOINTING})


def endpointing_proto(values: Mapping[str, Any]) -> recognizer_pb2.EndpointingConfig:
    """Endpointing settings in the engine's terms (any of them; one left out stays unset: the service's default) ->
    EndpointingConfig."""
    fields = {}
    for name, value in values.items():
        if name in PROTO_ENUMS:
            value = PROTO_ENUMS[name][value]
        elif BY_NAME[name].kind == WORDS:
            value = list(value)
        fields[name] = value
    return recognizer_pb2.EndpointingConfig(**fields)


def endpointing_values(e: recognizer_pb2.EndpointingConfig) -> dict[str, Any]:
    """An EndpointingConfig's fields in the engine's terms, unchecked (0, "" and () = unset); BadSetting for an enum
    value this server does not know."""
    values: dict[str, Any] = {}
    for s in ENDPOINTING:
        value = getattr(e, s.name)
        if s.name in ENUMS:
            if value not in ENUMS[s.name]:
                known = ", ".join(f"{n} {v or 'unspecified'}" for n, v in ENUMS[s.name].items())
                raise BadSetting(s.name, f"{value} is not a known setting ({known})")
            value = ENUMS[s.name][value]
        elif s.kind == WORDS:
            value = tuple(value)
        values[s.name] = value
    return values


def event_fields(event: AsrEvent) -> dict:
    """An engine event as the oneof fields shared by StreamingRecognizeResponse and RecognizeResponse."""
    if event.kind == TURN_ESTIMATE:
        return {"end_of_turn": end_of_turn_to_proto(event.turn)}
    if event.kind == PHRASE_SPOTTED:
        return {"phrase_spotted": spotted_to_proto(event.spotted)}
    if event.kind == DRAFT:
        d = event.draft
        return {
            "draft": recognizer_pb2.Draft(
                transcript=d.transcript,
                utterance_index=d.utterance_index,
                utterance_start_ms=d.utterance_start_ms,
                offset_ms=d.offset_ms,
            )
        }
    if event.kind in (SPEECH_START, SPEECH_END):
        kind = (
            recognizer_pb2.VadEvent.KIND_SPEECH_START
            if event.kind == SPEECH_START
            else recognizer_pb2.VadEvent.KIND_SPEECH_END
        )
        return {"vad": recognizer_pb2.VadEvent(kind=kind, offset_ms=event.offset_ms)}
    return {"result": result_to_proto(event.result)}


def event_from_proto(reply) -> AsrEvent:
    """A StreamingRecognizeResponse (or RecognizeResponse) -> the engine event it carries."""
    which = reply.WhichOneof("event")
    if which == "vad":
        kind = SPEECH_START if reply.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START else SPEECH_END
        return AsrEvent(kind, offset_ms=reply.vad.offset_ms)
    if which == "end_of_turn":
        turn = end_of_turn_from_proto(reply.end_of_turn)
        return AsrEvent(TURN_ESTIMATE, offset_ms=turn.offset_ms, turn=turn)
    if which == "phrase_spotted":
        spotted = spotted_from_proto(reply.phrase_spotted)
        return AsrEvent(PHRASE_SPOTTED, offset_ms=spotted.offset_ms, spotted=spotted)
    if which == "draft":
        d = reply.draft
        draft = Draft(d.transcript, d.utterance_index, d.utterance_start_ms, d.offset_ms)
        return AsrEvent(DRAFT, offset_ms=d.offset_ms, draft=draft)
    return AsrEvent(RESULT, result=result_from_proto(reply.result))


def end_of_turn_to_proto(t: TurnEstimate) -> recognizer_pb2.EndOfTurn:
    return recognizer_pb2.EndOfTurn(
        probability=t.probability,
        complete=t.complete,
        silence_ms=t.silence_ms,
        offset_ms=t.offset_ms,
        utterance_index=t.utterance_index,
        vetoed_by_word=t.vetoed_by_word,
        sentence_end=t.sentence_end,
        transcript=t.transcript,
    )


def end_of_turn_from_proto(t: recognizer_pb2.EndOfTurn) -> TurnEstimate:
    return TurnEstimate(
        probability=round(t.probability, 4),  # a float32 on the wire
        complete=t.complete,
        silence_ms=t.silence_ms,
        offset_ms=t.offset_ms,
        utterance_index=t.utterance_index,
        vetoed_by_word=t.vetoed_by_word,
        sentence_end=t.sentence_end,
        transcript=t.transcript,
    )


def spotted_to_proto(s: SpottedPhrase) -> recognizer_pb2.PhraseSpotted:
    return recognizer_pb2.PhraseSpotted(
        phrase=s.phrase,
        transcript=s.transcript,
        utterance_index=s.utterance_index,
        utterance_start_ms=s.utterance_start_ms,
        offset_ms=s.offset_ms,
    )


def spotted_from_proto(s: recognizer_pb2.PhraseSpotted) -> SpottedPhrase:
    return SpottedPhrase(
        phrase=s.phrase,
        transcript=s.transcript,
        utterance_index=s.utterance_index,
        utterance_start_ms=s.utterance_start_ms,
        offset_ms=s.offset_ms,
    )


def result_to_proto(r: Hypothesis) -> recognizer_pb2.RecognitionResult:
    return recognizer_pb2.RecognitionResult(
        transcript=r.transcript,
        is_final=r.is_final,
        stability=r.stability,
        confidence=r.confidence,
        utterance_index=r.utterance_index,
        utterance_start_ms=r.utterance_start_ms,
        utterance_end_ms=r.utterance_end_ms,
        audio_processed_ms=r.audio_processed_ms,
        language=r.language,
        words=[
            recognizer_pb2.WordInfo(word=w.word, start_ms=w.start_ms, end_ms=w.end_ms, confidence=w.confidence)
            for w in r.words
        ],
    )


def result_from_proto(r: recognizer_pb2.RecognitionResult) -> Hypothesis:
    return Hypothesis(
        transcript=r.transcript,
        is_final=r.is_final,
        utterance_index=r.utterance_index,
        utterance_start_ms=r.utterance_start_ms,
        utterance_end_ms=r.utterance_end_ms,
        audio_processed_ms=r.audio_processed_ms,
        stability=r.stability,
        confidence=r.confidence,
        language=r.language,
        words=tuple(WordTiming(w.word, w.start_ms, w.end_ms, w.confidence) for w in r.words),
    )
