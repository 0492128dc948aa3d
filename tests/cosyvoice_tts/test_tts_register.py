"""RegisterVoice on the CPU fleet: piper cannot clone (FAILED_PRECONDITION naming the engine), ids are unique
across the fleet (ALREADY_EXISTS naming voice_id), direct and through the router. Cloning itself is tested with the
CosyVoice3 engine in tests/cosyvoice_tts/test_tts_cosyvoice.py."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from services.common import audio
from voice.v1 import audio_pb2, synthesizer_pb2


def speechlike(seconds=5.0, rate=16000):
    t = np.arange(int(rate * seconds)) / rate
    return audio.to_int16(0.3 * (np.sin(2 * np.pi * 4 * t) > 0) * np.sin(2 * np.pi * 180 * t)).tobytes()


def request(voice_id):
    return synthesizer_pb2.RegisterVoiceRequest(
        voice_id=voice_id,
        prompt_audio=speechlike(),
        prompt_format=audio_pb2.AudioFormat(encoding=audio.S16LE, sample_rate_hz=16000, channels=1),
        prompt_transcript="hello there this is my voice and I am reading a prompt",
    )


@pytest.mark.parametrize("target", ["router", "cosyvoice_tts"])
def test_piper_cannot_clone(router_tts, direct_tts, target):
    stub = router_tts if target == "router" else direct_tts
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterVoice(request("new_voice"), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "engine cosyvoice_tts/piper cannot clone voices" in err.value.details()
    voices = stub.ListVoices(synthesizer_pb2.ListVoicesRequest(), timeout=10).voices
    assert "new_voice" not in {v.id for v in voices}


@pytest.mark.parametrize("target", ["router", "cosyvoice_tts"])
def test_id_clash_with_a_preset_voice(router_tts, direct_tts, target):
    stub = router_tts if target == "router" else direct_tts
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterVoice(request("joe"), timeout=10)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "voice_id: 'joe' is already a preset voice of cosyvoice_tts/piper" in err.value.details()
