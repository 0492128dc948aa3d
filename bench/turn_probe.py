"""The turn-taking set's complete lines through a fresh CPU fleet in semantic mode, one session at a time, with config
overrides: a quick A/B of one setting's effect on speech end -> first reply audio (docs/conversation.md
#turn-taking-2026-11-27-b). Not part of `make bench` (`make bench conversation` is the committed measure):

    python -m bench.turn_probe '{"moss_sts": {"reply_first_segment_words": 2}}' [rounds]

Prints caller p50 / p95 and the server's steps (speech end -> transcript, transcript -> first text, the rest to the
first audio), p50 / p95 each. Alternate runs with '{}' (the defaults): a 2-core machine drifts between runs.
"""

from __future__ import annotations

import json
import statistics
import sys

from bench import turn_taking
from bench.conversation import TURN_SET_SEED
from bench.harness import machine
from bench.turn_set import Counts, build


def p50_p95(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):.0f} / {ordered[round(0.95 * (len(ordered) - 1))]:.0f} ms"


def main() -> int:
    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    started = machine()
    turn_set = build(TURN_SET_SEED, Counts(6, 4, 6, 6, 2))  # the committed run's lines (cached)
    records = []
    with turn_taking.conversation_fleet(overrides) as channel:
        for _ in range(rounds):
            for i, line_id in enumerate(turn_set.complete):
                records.append(turn_taking.one_line(channel, turn_set.line(line_id), f"{i}:{line_id}")[0])
    turns = [r["turns"][0] for r in records if r["turns"]]
    transcript = [t["speech_end_to_transcript_ms"] for t in turns]
    text = [t["transcript_to_first_text_ms"] for t in turns]
    rest = [t["speech_end_to_first_audio_ms"] - a - b for t, a, b in zip(turns, transcript, text, strict=True)]
    print(
        f"{json.dumps(sys.argv[1:2])} n={len(records)}: caller speech end -> first reply audio"
        f" {p50_p95([r['speech_end_to_first_audio_s'] * 1000 for r in records])}; server: -> transcript"
        f" {p50_p95(transcript)}, -> first text {p50_p95(text)}, -> first audio {p50_p95(rest)};"
        f" machine {started}; load after {machine()['load_average_1min']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
