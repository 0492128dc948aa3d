"""``make bench``: run the benchmarks, write JSON per benchmark and a markdown table into bench/results/latest/.

Usage: python -m bench.run [NAME ...]   (default: all). NAMEs are modules in bench/ with a ``run()``.
A run of some names replaces only their JSON; results.md and the README's quoted table (``bench.readme``) are
rebuilt from every JSON in the directory, so each section keeps the date, machine and load of its own run.
"""

from __future__ import annotations

import importlib
import sys

from bench import readme
from bench.harness import RESULTS, machine, write

BENCHMARKS = [
    "tts_ttfa",
    "qwen_tts",
    "tts_streaming",
    "tts_load",
    "asr",
    "asr_noise",
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
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}: {module.__doc__.strip().splitlines()[0]}", flush=True)
        started = machine()
        rows, extra = module.run()
        write(name, rows, extra, started)
    readme.update()  # results.md and the README's quoted table, from every JSON in RESULTS
    print((RESULTS / "results.md").read_text())
    print(f"JSON and results.md in {RESULTS}/; README's benchmark table regenerated from them (python -m bench.readme)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
