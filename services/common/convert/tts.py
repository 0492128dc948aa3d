"""Synthesizer messages <-> engine types (VoiceInfo, Routing, SynthesisOptions, AudioPiece)."""

from __future__ import annotations

from services.common.audio import S16LE
from services.common.engines import AudioPiece, Routing, SynthesisOptions, VoiceInfo
from voice.v1 import audio_pb2, synthesizer_pb2


def routing_from_proto(r) -> Routing:
    return Routing(mode=r.mode, engine=r.engine, latency_budget_ms=r.latency_budget_ms)


def voice_to_proto(v: VoiceInfo) -> synthesizer_pb2.Voice:
    return synthesizer_pb2.Voice(
        id=v.id,
        display_name=v.display_name,
        languages=list(v.languages),
        native_sample_rate_hz=v.native_sample_rate_hz,
        service=v.service,
        engine=v.engine,
        kind=synthesizer_pb2.VOICE_KIND_CLONED if v.cloned else synthesizer_pb2.VOICE_KIND_PRESET,
        description=v.description,
    )


def voice_from_proto(v: synthesizer_pb2.Voice, service: str = "") -> VoiceInfo:
    """``service``: the backend's name, for a voice that does not say which service it is."""
    return VoiceInfo(
        id=v.id,
        display_name=v.display_name,
        languages=tuple(v.languages),
        native_sample_rate_hz=v.native_sample_rate_hz,
        service=v.service or service,
        engine=v.engine,
        cloned=v.kind == synthesizer_pb2.VOICE_KIND_CLONED,
        description=v.description,
    )


def options_to_config(options: SynthesisOptions) -> synthesizer_pb2.SynthesisConfig:
    """A request's options as the SynthesisConfig a backend takes (its audio in S16LE mono)."""
    return synthesizer_pb2.SynthesisConfig(
        voice=options.voice,
        language=options.language,
        output_format=audio_pb2.AudioFormat(encoding=S16LE, sample_rate_hz=options.sample_rate_hz, channels=1),
        speaking_rate=options.speaking_rate,
        seed=options.seed,
    )


def piece_from_proto(reply: synthesizer_pb2.SynthesizeResponse) -> AudioPiece:
    return AudioPiece(
        pcm=reply.audio.data,
        sample_rate_hz=reply.audio.format.sample_rate_hz,
        text_start=reply.text_span.start_char,
        text_end=reply.text_span.end_char,
        served_by=reply.served_by,
    )
