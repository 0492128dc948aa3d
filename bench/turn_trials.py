"""Barge-in, backchannel and echo trials alone, in the numbers issue 45 judges them by (stop words spoken at the pace of
speech interrupt within 400 ms p95, at most 10 % of backchannels interrupt, the echo never interrupts over at least
10 trials): ``make bench conversation`` runs 4 / 5 / 2 of them beside everything else, too few to judge.

``python -m bench.turn_trials [--stop-words N] [--backchannels N] [--echo N] [--seed S] [--out FILE.json]
[OVERRIDES]`` builds the turn-taking set's trials (bench/turn_set.py: piper joe's cues and prompts, cues spoken
1.0-1.5 s into a long reply, echo played back 50-250 ms late at -20 ... -6 dB), says each into a fresh CPU fleet
at the shipped defaults (plus OVERRIDES, JSON sections by name) through the router, one session at a time at real
time (bench/turn_taking.py's caller), and prints the barge-in table with the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench import turn_taking
from bench.harness import machine
from bench.turn_set import Counts
from bench.turn_set import build as build_turn_set


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_trials", description=__doc__)
    parser.add_argument("--stop-words", type=int, default=12)
    parser.add_argument("--backchannels", type=int, default=12)
    parser.add_argument("--echo", type=int, default=10)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--logs", type=Path, help="copy the fleet's logs here at the end")
    parser.add_argument("overrides", nargs="?", default="{}")
    args = parser.parse_args()
    counts = Counts(
        complete_per_length=0,
        paused_per_pause=0,
        backchannels=args.backchannels,
        stop_words=args.stop_words,
        echo=args.echo,
    )
    turn_set = build_turn_set(args.seed, counts)
    started = machine()
    print(f"{len(turn_set.trials)} trials, seed {args.seed}", flush=True)
    with turn_taking.conversation_fleet_and_channel(json.loads(args.overrides)) as (fleet, channel):
        trials = turn_taking.run_trials(channel, turn_set, turn_taking.MODES["semantic"])
        if args.logs:
            shutil.copytree(fleet.log_dir, args.logs, dirs_exist_ok=True)
    _, tables, raw = turn_taking.report({}, trials, "semantic")
    for name, value in tables["turn_taking_barge_in"].items():
        print(f"{name}: {value['semantic']}")
    print(f"\nmachine: {started}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": started,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "seed": args.seed,
                    "overrides": json.loads(args.overrides),
                    "barge_in": tables["turn_taking_barge_in"],
                    "trials": raw["trials"],
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
