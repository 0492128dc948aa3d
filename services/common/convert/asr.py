"""Recognizer messages <-> engine types (RecognitionOptions, Endpointing, AsrEvent). Checking a request's fields
against a server's limits is the servicer's (asr_servicer.endpointing_from_config); this only converts."""

from __future__ import annotations

from services.common.audio import S16LE
from services.common.engines import (
    DRAFT,
    PHRASE_SPOTTED,
    RESULT,
    SEMANTIC_MODE,
    SILENCE_MODE,
    SPEECH_END,
    SPEECH_START,
    TEXT_CHECK_OFF,
    TEXT_CHECK_ON,
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

# EndpointingConfig.Mode -> Endpointing.mode ("" = unspecified: the defaults' mode, "" again in the router).
MODES = {
    recognizer_pb2.EndpointingConfig.MODE_UNSPECIFIED: "",
    recognizer_pb2.EndpointingConfig.MODE_SILENCE: SILENCE_MODE,
    recognizer_pb2.EndpointingConfig.MODE_SEMANTIC: SEMANTIC_MODE,
}
# Endpointing.mode -> EndpointingConfig.Mode ("" stays unspecified: the backend's default).
PROTO_MODES = {mode: proto for proto, mode in MODES.items()}
# EndpointingConfig.TextCheck -> Endpointing.text_check ("" = unspecified: the defaults' setting), and back.
TEXT_CHECKS = {
    recognizer_pb2.EndpointingConfig.TEXT_CHECK_UNSPECIFIED: "",
    recognizer_pb2.EndpointingConfig.TEXT_CHECK_ON: TEXT_CHECK_ON,
    recognizer_pb2.EndpointingConfig.TEXT_CHECK_OFF: TEXT_CHECK_OFF,
}
PROTO_TEXT_CHECKS = {check: proto for proto, check in TEXT_CHECKS.items()}


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
    return recognizer_pb2.EndpointingConfig(
        threshold=e.threshold,
        min_speech_ms=e.min_speech_ms,
        hangover_ms=e.hangover_ms,
        max_utterance_ms=e.max_utterance_ms,
        mode=PROTO_MODES[e.mode],
        turn_threshold=e.turn_threshold,
        min_silence_ms=e.min_silence_ms,
        max_silence_ms=e.max_silence_ms,
        text_check=PROTO_TEXT_CHECKS[e.text_check],
        non_final_words=list(e.non_final_words),
        sentence_end_silence_ms=e.sentence_end_silence_ms,
        early_silence_ms=e.early_silence_ms,
        early_turn_threshold=e.early_turn_threshold,
    )


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
