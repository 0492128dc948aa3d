"""The 18 complete lines of the turn-taking set through a CPU fleet, semantic mode, ROUNDS rounds: caller speech end ->
first reply audio over all rounds, per length; the last round's raw records to DUMP (README.md beside this file)."""

import json
import os
import statistics

from bench import conversation as c
from bench import turn_taking as tt
from bench.harness import machine


def summary(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"p50 {1000 * statistics.median(xs):.0f} p95 {1000 * xs[round(0.95 * (len(xs) - 1))]:.0f} n={len(xs)}"


def main() -> None:
    turn_set = c.build_turn_set(c.TURN_SET_SEED, c.turn_set_counts())
    by_length: dict[str, list[float]] = {}
    with c.cpu_fleet() as (channel, _fleet):
        say = c._speaker(channel)
        for line in c.LINES[:2]:
            say(line)  # warm the fleet
        for round_ in range(int(os.environ.get("ROUNDS", "1"))):
            records = tt.run_pass(channel, turn_set, tt.MODES["semantic"], c.TURN_SET_SEED + round_)
            with open(os.environ.get("DUMP", "probe.json"), "w") as f:
                json.dump(records, f, indent=1, default=str)
            for r in records:
                one_turn = r.get("kind") == "complete" and r.get("turns_with_words") == 1
                if one_turn and r.get("speech_end_to_first_audio_s") is not None:
                    by_length.setdefault(r["length"], []).append(r["speech_end_to_first_audio_s"])
    every = [v for vs in by_length.values() for v in vs]
    lengths = {k: summary(v) for k, v in by_length.items()}
    print("all", summary(every), lengths, machine().get("load_average_1min"), flush=True)


if __name__ == "__main__":
    main()
