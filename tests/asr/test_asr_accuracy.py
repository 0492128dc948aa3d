"""What a user of asr checks: speech found where it is, the words right, interim results before each final.

Real speech from the fleet's CPU TTS engines (piper joe, espeak-ng en-US; bench/evaluation.py), several
sentences per stream with silence before, between and after, sent to the asr service as s16le at 8, 16 and 24 kHz.
16 kHz runs all 24 sentences per voice; 8 and 24 kHz run 8 each (whisper time is what a test run pays for).
Bounds (docs/asr.md has the measured numbers behind them):
  - SPEECH_START / SPEECH_END within +-100 ms of where the synthesized samples begin / end;
  - corpus WER of the finals (tiny.en, numbers spelled out) under WER_BOUND for each voice and rate.
"""

from __future__ import annotations

import grpc
import pytest

from bench import evaluation as ev
from tests.conftest import start_fleet
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

# Streams sent as fast as they are read, and bounds on words and stream offsets, not on time: the second lane
# (scripts/test-lanes.sh), with room for the idle priority's waits.
pytestmark = [pytest.mark.timeout(600), pytest.mark.background]

TOLERANCE_MS = 100
# Corpus WER bounds: measured 2026-11-25 (2 cores AMD EPYC, three runs) plus a margin of about five words of the
# corpus (187 words at 16 kHz: +3 points; 61 and 64 at 8 and 24 kHz: +8 points), for run-to-run differences (the
# streamed service's finals are not bit-identical: espeak at 8 kHz gave 39.3, 36.1 and 31.1 %) and another machine's
# arithmetic. Measured joe 2.1 / 0.0 / 1.6 %, espeak 10.7 / 31.1-39.3 / 9.4 % at 16 / 8 / 24 kHz (espeak at 8 kHz
# loses its fricatives and stop bursts). The same transcripts against the wrong sentences score near 100 %: every
# bound fails that, and the test checks it on each run.
WER_BOUND = {
    ("joe", 16000): 0.05,
    ("joe", 8000): 0.08,
    ("joe", 24000): 0.10,
    ("espeak", 16000): 0.14,
    ("espeak", 8000): 0.48,
    ("espeak", 24000): 0.17,
}
GROUP = 4  # sentences per stream

CASES = [(voice, rate) for voice in ev.VOICES for rate in (16000, 8000, 24000)]


def sentences_for(rate: int) -> list[str]:
    if rate == 16000:
        return list(ev.SENTENCES)
    return list(ev.SENTENCES[0::3] if rate == 8000 else ev.SENTENCES[1::3])


def recognize(stub, stream: ev.PaddedStream, **config) -> list[recognizer_pb2.StreamingRecognizeResponse]:
    cfg = ev.config(stream.rate, **config)
    return list(stub.StreamingRecognize(ev.requests(stream.pcm, stream.rate, cfg, request_id="acc"), timeout=120))


@pytest.fixture(scope="module")
def asr_fleet(tmp_path_factory):
    """This module's own asr (the session's has a 2 s idle timeout): at idle priority a stream may wait its turn for
    the CPU longer than that between two messages, which is not what these tests are about."""
    running = start_fleet(
        tmp_path_factory.mktemp("asr-accuracy-fleet"), services=("asr",), asr={"max_stream_seconds": 60}
    )
    yield running
    running.fleet.stop()


@pytest.fixture(scope="module")
def asr(asr_fleet):
    with asr_fleet.channel("asr") as channel:
        yield recognizer_pb2_grpc.RecognizerStub(channel)


def check_stream(replies, stream: ev.PaddedStream, interim: bool) -> list[str]:
    """Offsets, order and interims of one stream; returns its final transcripts."""
    assert {r.request_id for r in replies} == {"acc"}
    vad = [r.vad for r in replies if r.WhichOneof("event") == "vad"]
    starts = [v.offset_ms for v in vad if v.kind == recognizer_pb2.VadEvent.KIND_SPEECH_START]
    ends = [v.offset_ms for v in vad if v.kind == recognizer_pb2.VadEvent.KIND_SPEECH_END]
    finals = [r.result for r in replies if r.WhichOneof("event") == "result" and r.result.is_final]
    n = len(stream.utterances)
    assert len(starts) == len(ends) == len(finals) == n, (starts, ends, [f.transcript for f in finals])
    for u, start, end, final in zip(stream.utterances, starts, ends, finals, strict=True):
        assert abs(start - u.start_ms) <= TOLERANCE_MS, f"{u.text!r}: speech start {start} ms, truth {u.start_ms:.0f}"
        assert abs(end - u.end_ms) <= TOLERANCE_MS, f"{u.text!r}: speech end {end} ms, truth {u.end_ms:.0f}"
        assert (final.utterance_start_ms, final.utterance_end_ms) == (start, end)
    assert [f.utterance_index for f in finals] == list(range(n))
    # Each utterance: interim results (is_final false) came before its final, and the events are in stream order.
    for i in range(n if interim else 0):
        positions = [
            k
            for k, r in enumerate(replies)
            if r.WhichOneof("event") == "result" and r.result.utterance_index == i and r.result.transcript
        ]
        kinds = [replies[k].result.is_final for k in positions]
        assert kinds[-1] is True and kinds.count(True) == 1 and kinds[0] is False, kinds
    assert all(f.audio_processed_ms >= f.utterance_end_ms for f in finals)
    assert {f.language for f in finals} == {"en"}
    return [f.transcript for f in finals]


@pytest.mark.parametrize("voice,rate", CASES, ids=[f"{v}-{r // 1000}k" for v, r in CASES])
def test_offsets_words_and_interims(asr, asr_speakers, voice, rate):
    texts = sentences_for(rate)
    references, hypotheses = [], []
    for i in range(0, len(texts), GROUP):
        stream = asr_speakers.padded(voice, texts[i : i + GROUP], rate)
        interim = i == 0  # pass 1 costs CPU; its interims are checked on the first stream of each case
        hypotheses += check_stream(recognize(asr, stream, interim=interim), stream, interim)
        references += texts[i : i + GROUP]
    error = ev.wer(references, hypotheses)
    bound = WER_BOUND[voice, rate]
    print(f"\nWER {voice} {rate} Hz over {len(texts)} sentences: {error:.3f}")
    misheard = [(r, h) for r, h in zip(references, hypotheses, strict=True) if ev.wer([r], [h])]
    assert error <= bound, f"WER {error:.3f} > {bound} for {voice} at {rate} Hz: {misheard}"
    # The bound fails garbage: the same transcripts scored against the wrong sentences do not pass it.
    assert ev.wer(references[1:] + references[:1], hypotheses) > bound


def test_the_oracle_fails_wrong_transcripts():
    """The WER check can fail: other words, missing words and a wrong rate's garble do not pass."""
    refs = ["please call me back when you get home", "my order number is four five six seven"]
    assert ev.wer(refs, ["Please call me back when you get home.", "My order number is 4567."]) == 0
    assert ev.wer(refs, ["please call", "my order"]) > 0.5
    assert ev.wer(refs, ["lease all be back wen", "i order numbers for five sick seven"]) > 0.35


def test_unary_recognize_gives_the_same_events(asr, asr_speakers):
    stream = asr_speakers.padded("joe", list(ev.SENTENCES[:2]), 16000)
    request = recognizer_pb2.RecognizeRequest(request_id="unary", config=ev.config(16000), audio=stream.pcm)
    replies = list(asr.Recognize(request, timeout=60))
    assert {r.request_id for r in replies} == {"unary"}
    finals = [r.result.transcript for r in replies if r.WhichOneof("event") == "result" and r.result.is_final]
    assert ev.wer(list(ev.SENTENCES[:2]), finals) <= 0.1
    vad = [r.vad.kind for r in replies if r.WhichOneof("event") == "vad"]
    assert vad == [recognizer_pb2.VadEvent.KIND_SPEECH_START, recognizer_pb2.VadEvent.KIND_SPEECH_END] * 2


def test_language_detection_and_phrase_hints(asr, asr_speakers):
    """No language: the multilingual model detects English. Phrase hints bias whisper; they must not eat the words
    they name (a bare list as prompt made whisper drop "she sells fresh fruit")."""
    stream = asr_speakers.padded("joe", [ev.SENTENCES[14]], 16000)
    replies = recognize(asr, stream, language="", interim=False)
    finals = [r.result for r in replies if r.WhichOneof("event") == "result"]
    assert len(finals) == 1 and finals[0].is_final and finals[0].language == "en"
    assert ev.wer([ev.SENTENCES[14]], [finals[0].transcript]) <= 0.15
    stream = asr_speakers.padded("joe", [ev.SENTENCES[12]], 16000)
    cfg = ev.config(16000, interim=False)
    cfg.phrase_hints.extend(["she sells", "fresh fruit", "market"])
    replies = list(asr.StreamingRecognize(ev.requests(stream.pcm, 16000, cfg), timeout=60))
    hinted = [r.result.transcript for r in replies if r.WhichOneof("event") == "result"]
    assert ev.wer([ev.SENTENCES[12]], hinted) <= 0.15, hinted


def test_unknown_language_is_refused(asr):
    cfg = ev.config(16000, language="xx-YY")
    with pytest.raises(grpc.RpcError) as err:
        list(asr.StreamingRecognize(ev.requests(bytes(3200), 16000, cfg), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.language" in err.value.details()


def test_a_pause_shorter_than_the_hangover_keeps_one_utterance(asr, asr_speakers):
    """150 ms of silence inside an utterance: past speculative_final_ms (96), under the hangover (200). The
    speculative final started in the pause is dropped; the one final has both halves."""
    first, second = ev.SENTENCES[6], ev.SENTENCES[8]
    (a, rate), (b, _) = asr_speakers._cache[("joe", first)], asr_speakers._cache[("joe", second)]
    a = a[: 2 * ev.truth_bounds(a)[1]]  # piper's own trailing and leading quiet cut off: the pause is exactly 150 ms
    b = b[2 * ev.truth_bounds(b)[0] :]
    half_s = bytes(rate)  # 0.5 s
    pcm = half_s + a + bytes(int(rate * 0.15) * 2) + b + half_s * 2
    replies = list(asr.StreamingRecognize(ev.requests(pcm, rate, ev.config(rate, interim=False)), timeout=60))
    finals = [r.result.transcript for r in replies if r.WhichOneof("event") == "result"]
    assert len(finals) == 1, finals
    assert ev.wer([f"{first} {second}"], finals) <= 0.15, finals
