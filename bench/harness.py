"""Shared benchmark plumbing: percentiles, machine description, JSON + markdown output.

Each benchmark module exposes ``run(ctx) -> list[Row]``; ``python -m bench.run [names]`` runs them and writes
``bench/results/<name>.json`` and ``bench/results/latest.md``. Numbers are measurements, never test asserts.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


@dataclass
class Row:
    """One measured figure: samples in seconds (latencies) or plain values (RTF, counts)."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    note: str = ""

    def summary(self) -> dict:
        xs = sorted(self.samples)
        if not xs:
            return {"name": self.name, "unit": self.unit, "n": 0, "note": self.note}
        p95 = xs[min(len(xs) - 1, max(0, round(0.95 * len(xs)) - 1))]
        return {
            "name": self.name,
            "unit": self.unit,
            "n": len(xs),
            "median": statistics.median(xs),
            "p95": p95,
            "min": xs[0],
            "max": xs[-1],
            "note": self.note,
        }


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    try:
        gpu = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        gpu = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpu": gpu or "none",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e6:.0f} µs" if value < 0.001 else f"{value * 1000:.1f} ms"
    return f"{value:.3f}"


def write(name: str, rows: list[Row], extra: dict | None = None) -> dict:
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": name, "machine": machine(), "rows": [r.summary() for r in rows], **(extra or {})}
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    return report


def markdown(reports: list[dict]) -> str:
    lines = []
    for rep in reports:
        m = rep["machine"]
        lines.append(f"### {rep['benchmark']} — {m['date']}, {m['cores']} cores {m['cpu']}, GPU: {m['gpu']}\n")
        lines.append("| figure | n | median | p95 | min | max | note |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in rep["rows"]:
            if not r["n"]:
                lines.append(f"| {r['name']} | 0 | | | | | {r['note']} |")
                continue
            u = r["unit"]
            lines.append(
                f"| {r['name']} | {r['n']} | {fmt(r['median'], u)} | {fmt(r['p95'], u)} | {fmt(r['min'], u)} |"
                f" {fmt(r['max'], u)} | {r['note']} |"
            )
        for key, value in rep.items():
            if key not in ("benchmark", "machine", "rows"):
                lines.append(f"\n{key}: {value}")
        lines.append("")
    return "\n".join(lines)
