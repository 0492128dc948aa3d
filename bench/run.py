"""``make bench``: run the benchmarks, write JSON per benchmark and a markdown table (bench/results/latest.md).

Usage: python -m bench.run [NAME ...]   (default: all). NAMEs are modules in bench/ with a ``run()``.
"""

from __future__ import annotations

import importlib
import sys

from bench.harness import RESULTS, markdown, write

BENCHMARKS = [
    "tts_ttfa",
    "qwen_tts",
    "tts_streaming",
    "tts_load",
    "asr",
    "leases",
    "conversation",
    "router",
    "supervisor",
    "brain",
]


def main(argv: list[str]) -> int:
    names = argv or BENCHMARKS
    reports = []
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}: {module.__doc__.strip().splitlines()[0]}", flush=True)
        rows, extra = module.run()
        reports.append(write(name, rows, extra))
    table = markdown(reports)
    (RESULTS / "latest.md").write_text(table)
    print(table)
    print(f"JSON in {RESULTS}/; table in {RESULTS / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
