"""Conversation messages <-> engine types (SessionOptions, StsEvent, TurnResult)."""

from __future__ import annotations

from services.common.audio import S16LE
from services.common.convert.asr import (
    end_of_turn_from_proto,
    end_of_turn_to_proto,
    endpointing_to_proto,
    result_from_proto,
    result_to_proto,
)
from services.common.engines import (
    END_OF_TURN,
    END_OF_TURN_JUDGED,
    FUNCTION_CALL,
    FUNCTION_CALL_CANCELLED,
    INTERRUPT,
    INTERRUPTED,
    LISTENING,
    MUTE,
    REPLY_AUDIO,
    REPLY_TEXT,
    RESPOND,
    SPEAKING,
    STATE,
    THINKING,
    TOOL_AUTO,
    TOOL_FUNCTION,
    TOOL_NONE,
    TOOL_REQUIRED,
    TURN_COMPLETE,
    TURN_ERROR,
    UNMUTE,
    USER_TRANSCRIPT,
    AudioPiece,
    FunctionCall,
    SessionOptions,
    StsEvent,
    Tool,
    ToolChoice,
    TurnResult,
    TurnTimings,
)
from voice.v1 import audio_pb2, conversation_pb2, routing_pb2

ACTIONS = {
    conversation_pb2.ConversationControl.ACTION_INTERRUPT: INTERRUPT,
    conversation_pb2.ConversationControl.ACTION_END_OF_TURN: END_OF_TURN,
    conversation_pb2.ConversationControl.ACTION_MUTE: MUTE,
    conversation_pb2.ConversationControl.ACTION_UNMUTE: UNMUTE,
    conversation_pb2.ConversationControl.ACTION_RESPOND: RESPOND,
}
PROTO_ACTIONS = {action: proto for proto, action in ACTIONS.items()}
STATES = {
    LISTENING: conversation_pb2.CONVERSATION_STATE_LISTENING,
    THINKING: conversation_pb2.CONVERSATION_STATE_THINKING,
    SPEAKING: conversation_pb2.CONVERSATION_STATE_SPEAKING,
}
STATE_NAMES = {v: k for k, v in STATES.items()}
_Mode = conversation_pb2.ToolChoice
TOOL_MODES = {
    _Mode.MODE_UNSPECIFIED: TOOL_AUTO,
    _Mode.MODE_AUTO: TOOL_AUTO,
    _Mode.MODE_NONE: TOOL_NONE,
    _Mode.MODE_REQUIRED: TOOL_REQUIRED,
    _Mode.MODE_FUNCTION: TOOL_FUNCTION,
}
PROTO_TOOL_MODES = {TOOL_AUTO: _Mode.MODE_AUTO, TOOL_NONE: _Mode.MODE_NONE, TOOL_REQUIRED: _Mode.MODE_REQUIRED}
PROTO_TOOL_MODES[TOOL_FUNCTION] = _Mode.MODE_FUNCTION


def ms(seconds: float | None) -> int:
    return max(0, round(seconds * 1000)) if seconds is not None else 0


def seconds(ms: int) -> float | None:
    """A TurnTimings field: 0 is "not measured"."""
    return ms / 1000 if ms else None


def config_to_proto(options: SessionOptions) -> conversation_pb2.ConversationConfig:
    e, s, b = options.endpointing, options.sampling, options.barge_in
    return conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.input_sample_rate_hz, channels=1),
        output_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.output_sample_rate_hz, channels=1),
        voice=options.voice,
        system_prompt=options.system_prompt,
        sampling=conversation_pb2.SamplingConfig(
            temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed
        ),
        language=options.language,
        endpointing=endpointing_to_proto(e),
        barge_in=conversation_pb2.BargeInConfig(
            disabled=not b.enabled,
            min_speech_ms=b.min_speech_ms,
            stop_words=list(b.stop_words),
            min_words=b.min_words,
            backchannels=list(b.backchannels),
        ),
        routing=routing_pb2.Routing(
            mode=options.routing.mode,
            engine=options.routing.engine,
            latency_budget_ms=options.routing.latency_budget_ms,
        ),
        client_cancels_echo=options.client_cancels_echo,
        tools=[tool_to_proto(t) for t in options.tools],
        tool_choice=conversation_pb2.ToolChoice(
            mode=PROTO_TOOL_MODES[options.tool_choice.mode], function_name=options.tool_choice.function
        ),
        tool_timeout_ms=ms(options.tool_timeout_s),
        tool_filler_ms=ms(options.tool_filler_s),  # resolved by the router's servicer: passed on as it decided
    )


def tool_to_proto(t: Tool) -> conversation_pb2.ToolDeclaration:
    return conversation_pb2.ToolDeclaration(name=t.name, description=t.description, parameters_json=t.parameters_json)


def tool_choice_from_proto(c: conversation_pb2.ToolChoice) -> ToolChoice | None:
    """None for a mode this version does not know (the servicer names the field)."""
    mode = TOOL_MODES.get(c.mode)
    return ToolChoice(mode, c.function_name) if mode else None


def turn_complete_to_proto(r: TurnResult) -> conversation_pb2.TurnComplete:
    t = r.timings
    return conversation_pb2.TurnComplete(
        user_text=r.user_text,
        reply_text=r.reply_text,
        interrupted=r.interrupted,
        timings=conversation_pb2.TurnTimings(
            speech_end_to_first_audio_ms=ms(t.speech_end_to_first_audio),
            speech_end_to_transcript_ms=ms(t.speech_end_to_transcript),
            transcript_to_first_text_ms=ms(t.transcript_to_first_text),
            reply_audio_ms=ms(t.reply_audio),
            speech_end_to_commit_ms=ms(t.speech_end_to_commit),
            discarded_replies=t.discarded_replies,
            preemptive=t.preemptive,
        ),
        served_by=r.served_by,
    )


def turn_complete_from_proto(c: conversation_pb2.TurnComplete) -> TurnResult:
    t = c.timings
    timings = TurnTimings(
        speech_end_to_first_audio=seconds(t.speech_end_to_first_audio_ms),
        speech_end_to_transcript=seconds(t.speech_end_to_transcript_ms),
        transcript_to_first_text=seconds(t.transcript_to_first_text_ms),
        reply_audio=t.reply_audio_ms / 1000,
        speech_end_to_commit=seconds(t.speech_end_to_commit_ms),
        discarded_replies=t.discarded_replies,
        preemptive=t.preemptive,
    )
    return TurnResult(c.user_text, c.reply_text, c.interrupted, timings, c.served_by)


def event_fields(event: StsEvent) -> dict:
    """A session event as the oneof fields of its ConverseResponse; {} for reply audio (the servicer resamples it
    into the caller's format and counts it) and for what is not sent (an end-of-turn estimate without its turn)."""
    kind = event.kind
    if kind == STATE:
        return {"state": conversation_pb2.StateChange(state=STATES[event.state])}
    if kind == USER_TRANSCRIPT:
        return {"user_transcript": result_to_proto(event.transcript)}
    if kind == REPLY_TEXT:
        return {"reply_text": conversation_pb2.ReplyText(delta=event.text)}
    if kind == INTERRUPTED:
        return {
            "interrupted": conversation_pb2.Interrupted(
                reason=event.reason, audio_sent_ms=event.audio_sent_ms, heard_text=event.heard_text
            )
        }
    if kind == TURN_COMPLETE:
        return {"turn_complete": turn_complete_to_proto(event.result)}
    if kind == END_OF_TURN_JUDGED and event.turn is not None:
        return {"end_of_turn": end_of_turn_to_proto(event.turn)}
    if kind == TURN_ERROR:
        return {"turn_error": conversation_pb2.TurnError(code=event.code, message=event.message)}
    if kind == FUNCTION_CALL:
        c = event.call
        return {
            "function_call": conversation_pb2.FunctionCall(
                call_id=c.call_id, name=c.name, arguments_delta=c.arguments_delta, done=c.done, arguments=c.arguments
            )
        }
    if kind == FUNCTION_CALL_CANCELLED:
        cancelled = conversation_pb2.FunctionCallCancelled(call_id=event.call.call_id, reason=event.reason)
        return {"function_call_cancelled": cancelled}
    return {}


def event_from_response(reply: conversation_pb2.ConverseResponse, served_by: str) -> StsEvent | None:
    """A ConverseResponse -> the session event it carries (None for one this version does not know). ``served_by``
    labels its reply audio."""
    kind, turn = reply.WhichOneof("event"), reply.turn_index
    if kind == "state":
        return StsEvent(STATE, turn, state=STATE_NAMES.get(reply.state.state, ""))
    if kind == "user_transcript":
        return StsEvent(USER_TRANSCRIPT, turn, transcript=result_from_proto(reply.user_transcript))
    if kind == "reply_text":
        return StsEvent(REPLY_TEXT, turn, text=reply.reply_text.delta)
    if kind == "reply_audio":
        a = reply.reply_audio
        return StsEvent(REPLY_AUDIO, turn, audio=AudioPiece(a.data, a.format.sample_rate_hz, 0, 0, served_by=served_by))
    if kind == "interrupted":
        i = reply.interrupted
        return StsEvent(INTERRUPTED, turn, reason=i.reason, audio_sent_ms=i.audio_sent_ms, heard_text=i.heard_text)
    if kind == "turn_complete":
        return StsEvent(TURN_COMPLETE, turn, result=turn_complete_from_proto(reply.turn_complete))
    if kind == "turn_error":
        return StsEvent(TURN_ERROR, turn, code=reply.turn_error.code, message=reply.turn_error.message)
    if kind == "end_of_turn":
        return StsEvent(END_OF_TURN_JUDGED, turn, turn=end_of_turn_from_proto(reply.end_of_turn))
    if kind == "function_call":
        c = reply.function_call
        return StsEvent(
            FUNCTION_CALL, turn, call=FunctionCall(c.call_id, c.name, c.arguments_delta, c.done, c.arguments)
        )
    if kind == "function_call_cancelled":
        c = reply.function_call_cancelled
        return StsEvent(FUNCTION_CALL_CANCELLED, turn, call=FunctionCall(c.call_id, ""), reason=c.reason)
    return None
