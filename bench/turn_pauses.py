"""Thinking pauses mid-phrase, at many points of each sentence (issue 45): how often the agent takes the turn in the
pause (a false cut-off), through a fresh CPU fleet at the shipped defaults, one session at a time, each line said at
the pace of real time by bench.turn_taking's caller.

The points: every word boundary of the turn-taking set's medium and long sentences (bench/turn_set.py) after the
second word and before the last, except at a clause mark, drawn over ``--seeds`` (each seed draws ``--per-length``
points per pause length, and a piper rendition of its own). Each point is labelled by the word before the pause: a
function word (the text check's closed-class list, services/common/turn_text.py) or a content word.

    python -m bench.turn_pauses [--pauses 500,800,1200] [--per-length 20] [--seeds 3] [--out FILE.json]
        [--speech piper|human|librivox] ['{"moss_sts": {...}}' config overrides]

``--speech human``: recorded human speech instead of piper (bench/human_speech.py: a LibriVox reader's verses, the
pauses at the word gaps the reader left), ``--per-length`` points drawn per pause length from all of them.
``--speech librivox``: the held-out judge, pocketsphinx's five LibriVox sentences of prose, made the same way (never
used to tune the turn judgement).

Prints the false cut-offs per pause length and per kind of word, and each cut line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from pathlib import Path

from bench import human_speech, turn_taking
from bench.harness import machine
from bench.turn_set import LONG, MEDIUM, Voice, paused_line
from services.common.turn_text import NON_FINAL_WORDS


def pause_points(seed: int, count: int) -> list[str]:
    """``count`` sentences marked with '|' at a drawn mid-phrase word boundary."""
    rng = random.Random(seed)
    points = []
    for marked in MEDIUM + LONG:
        words = marked.replace("|", " ").split()
        for i in range(2, len(words) - 1):
            if words[i - 1][-1] in ",;:":
                continue  # a clause mark: a pause there is a speaker's right
            points.append(" ".join(words[:i]) + " | " + " ".join(words[i:]))
    rng.shuffle(points)
    return points[:count]


def human_lines(pauses: list[int], per_length: int, recording: str = "sonnet") -> list[tuple[str, object]]:
    """(marked text, Line) of a recording's lines: ``per_length`` points per pause length, drawn per length."""
    human = human_speech.lines(recording)
    return [
        (human_speech.marked(line, before), human_speech.paused_line(line, before, pause_ms))
        for pause_ms in pauses
        for line, before in human_speech.pause_points(human, pause_ms, per_length)
    ]


def word_before(marked: str) -> str:
    return marked.split("|")[0].split()[-1].strip(",.?!").lower()


def summary(records: list[dict], pauses: list[int]) -> dict[int, dict]:
    """Per pause length: false cut-offs (the agent took the turn in the pause), by the word before the pause, and the
    lines whose first turn lacks the words after the pause (the recognizer's misses; not cut-offs). Printed."""
    rows = {}
    for pause_ms in pauses:
        said = [r for r in records if r.get("pause_ms") == pause_ms and "false_cut_off" in r]
        function = [r for r in said if r["word_before"] in NON_FINAL_WORDS]
        content = [r for r in said if r["word_before"] not in NON_FINAL_WORDS]
        rows[pause_ms] = {
            "lines": len(said),
            "false_cut_offs": sum(r["false_cut_off"] for r in said),
            "after_function_words": f"{sum(r['false_cut_off'] for r in function)}/{len(function)}",
            "after_content_words": f"{sum(r['false_cut_off'] for r in content)}/{len(content)}",
            "misheard_not_cut": sum(r.get("after_words_missing", False) and not r["false_cut_off"] for r in said),
        }
    print(
        "\n| pause | false cut-offs | after function words | after content words |"
        " words after the pause misheard, no cut-off |\n|---|---|---|---|---|"
    )
    for pause_ms, row in rows.items():
        share = 100 * row["false_cut_offs"] / max(1, row["lines"])
        print(
            f"| {pause_ms} ms | {row['false_cut_offs']}/{row['lines']} ({share:.0f} %) |"
            f" {row['after_function_words']} | {row['after_content_words']} | {row['misheard_not_cut']}/{row['lines']} |"
        )
    for r in records:
        if r.get("false_cut_off"):
            print(f"  cut at {r['pause_ms']} ms: {r['marked']!r} -> turns {[t.get('user_text') for t in r['turns']]}")
    return rows


def rescore(path: Path) -> int:
    """A committed run's records scored again by bench.turn_taking's rule (``--rescore FILE.json``, or a gzipped
    FILE.json.gz as large committed runs are kept)."""
    raw = path.read_bytes()
    run = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    for r in run["records"]:
        if "pause_ms" in r:
            turn_taking.score_pause(r)
    pauses = sorted({r["pause_ms"] for r in run["records"] if "pause_ms" in r})
    summary(run["records"], pauses)
    print(f"\nspeech: {run.get('speech', 'piper')}; machine: {run['machine']}; run {run['date']}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_pauses", description=__doc__)
    parser.add_argument("--pauses", default="500,800,1200")
    parser.add_argument("--per-length", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--speech", choices=("piper", "human", "librivox"), default="piper")
    parser.add_argument("--rescore", type=Path, help="print a committed run's table by today's rule, and stop")
    parser.add_argument("overrides", nargs="?", default="{}")
    args = parser.parse_args()
    if args.rescore:
        return rescore(args.rescore)
    overrides = json.loads(args.overrides)
    pauses = [int(p) for p in args.pauses.split(",")]
    started = machine()
    recording = {"human": "sonnet", "librivox": "librivox"}.get(args.speech)
    lines = human_lines(pauses, args.per_length, recording) if recording else []
    voice = Voice() if args.speech == "piper" else None
    for pause_ms in pauses if voice is not None else ():
        for s in range(args.seeds):
            seed = 1000 * pause_ms + s
            n = args.per_length // args.seeds + (s < args.per_length % args.seeds)  # per_length in all
            for marked in pause_points(seed, n):
                try:
                    lines.append((marked, paused_line(marked, pause_ms, seed=seed, voice=voice)))
                except ValueError:
                    continue  # piper joins the words either side of the mark: no gap to pause in
    print(f"{len(lines)} paused lines", flush=True)
    records = []
    with turn_taking.conversation_fleet(overrides) as channel:
        for i, (marked, line) in enumerate(lines):
            line.id = f"p{i}"
            record = turn_taking.one_line(channel, line, line.id)[0]
            record.update(marked=marked, word_before=word_before(marked))
            records.append(record)
            cut = record.get("false_cut_off")
            print(f"{line.pause_ms:5d} ms {'CUT ' if cut else 'ok  '} {marked}", flush=True)
    rows = summary(records, pauses)
    print(f"\nspeech: {args.speech}; machine: {started}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": started,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "overrides": json.loads(args.overrides),
                    "speech": args.speech,
                    "rows": rows,
                    "records": records,
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
