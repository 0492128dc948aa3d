"""Drafts (RecognitionConfig.draft_interval_ms, docs/asr.md#drafts): while an utterance is spoken, the real asr service
decodes it so far again with its final recognizer and sends the text (Draft) before the utterance's final, through
the router too; none when not asked for; a bad interval is INVALID_ARGUMENT naming the field.

The audio is piper joe's, streamed at the pace of real time in 20 ms messages, as a live caller's microphone (sent all
at once, the utterance would end before its first draft is due).
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from bench import evaluation as ev
from services.common.text import spoken_words
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

RATE = 16000
Req = recognizer_pb2.StreamingRecognizeRequest
SENTENCE = "The train to the city leaves from the second platform every morning at half past seven."
SHORTER = "The train leaves at half past seven."  # long enough for drafts, were they asked for
DRAFTS = "voicefleet_asr_draft_decode_seconds_count"


def draft_config(interval_ms: int) -> recognizer_pb2.RecognitionConfig:
    config = ev.config(RATE, interim=False)
    config.draft_interval_ms = interval_ms
    return config


def live(asr_fleet, target: str, samples: np.ndarray, config) -> list:
    """One stream to the fleet's ``target`` at the pace of real time, 20 ms per message: its replies."""
    pcm = np.concatenate([np.zeros(int(0.4 * RATE), np.int16), samples, np.zeros(int(0.8 * RATE), np.int16)])
    with asr_fleet.channel(target) as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        return list(
            stub.StreamingRecognize(ev.requests(pcm.tobytes(), RATE, config, chunk_ms=20, realtime=True), timeout=60)
        )


async def test_drafts_preview_the_utterance_before_its_final(joe, asr_fleet):
    """Through the router (it passes the config and the events on; the asr service makes them)."""
    said = await joe(SENTENCE)
    before = asr_fleet.metric("asr", DRAFTS)
    replies = live(asr_fleet, "router", said, draft_config(800))
    kinds = [r.WhichOneof("event") for r in replies]
    finals = [r.result for r in replies if r.WhichOneof("event") == "result" and r.result.is_final]
    assert len(finals) == 1, kinds
    final = finals[0]
    assert "platform" in final.transcript.lower(), final.transcript
    drafts = [r.draft for r in replies if r.WhichOneof("event") == "draft"]
    # 5 s of speech, a draft due every 0.8 s of it: several, all after the speech started and before the final.
    assert len(drafts) >= 2, kinds
    assert kinds.index("vad") < kinds.index("draft") and max(
        i for i, k in enumerate(kinds) if k == "draft"
    ) < kinds.index("result"), kinds
    final_words = spoken_words(final.transcript)
    for d in drafts:
        assert d.utterance_index == final.utterance_index == 0
        assert d.utterance_start_ms == final.utterance_start_ms
        assert final.utterance_start_ms < d.offset_ms <= final.utterance_end_ms
        # What was said so far: the final's words from its start (whisper may still guess the last word of a cut one).
        words = spoken_words(d.transcript)
        assert words[:2] == final_words[:2], (d.transcript, final.transcript)
    assert [d.offset_ms for d in drafts] == sorted(d.offset_ms for d in drafts)
    # Later drafts heard more of it.
    assert len(spoken_words(drafts[-1].transcript)) > len(spoken_words(drafts[0].transcript)), drafts
    assert "platform" in drafts[-1].transcript.lower() or "morning" in drafts[-1].transcript.lower(), drafts[-1]
    assert asr_fleet.metric("asr", DRAFTS) >= before + len(drafts)


async def test_no_drafts_unless_asked(joe, asr_fleet):
    said = await joe(SHORTER)
    before = asr_fleet.metric("asr", DRAFTS)
    replies = live(asr_fleet, "asr", said, draft_config(0))
    kinds = [r.WhichOneof("event") for r in replies]
    assert "draft" not in kinds and "result" in kinds, kinds
    assert asr_fleet.metric("asr", DRAFTS) == before


@pytest.mark.parametrize("interval", [50, 199, 10_001])
@pytest.mark.parametrize("target", ["asr", "router"])
def test_a_bad_draft_interval_is_invalid_argument_naming_the_field(asr_fleet, target, interval):
    with asr_fleet.channel(target) as channel:
        stub = recognizer_pb2_grpc.RecognizerStub(channel)
        with pytest.raises(grpc.RpcError) as bad:
            list(stub.StreamingRecognize(iter([Req(config=draft_config(interval))]), timeout=10))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "config.draft_interval_ms" in bad.value.details(), bad.value.details()
        # The server is still up: a good stream goes through.
        replies = list(
            stub.StreamingRecognize(iter([Req(config=draft_config(800)), Req(audio=bytes(6400))]), timeout=10)
        )
        assert all(r.WhichOneof("event") != "draft" for r in replies)
