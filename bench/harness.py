"""Shared benchmark plumbing: percentiles, machine description, JSON + markdown output.

Each benchmark module exposes ``run() -> (rows, extra)``; ``python -m bench.run [names]`` runs them and writes
``bench/results/latest/<name>.json`` and ``bench/results/latest/results.md`` (a table of every JSON there). The
directory is committed: the README quotes it (``python -m bench.readme``; tests/project/test_bench_claims.py checks the
quote). Each JSON says the machine, date and load average (1 min) before and after its run, because a shared
machine's load moves every compute figure. A run whose load before exceeds the core count (or after, twice it) is busy:
``write`` refuses it (BusyMachine) unless ``BENCH_ALLOW_BUSY=1``, which writes it marked ``"busy"``; the README
never quotes a busy run (tests/project/test_bench_claims.py). Numbers are measurements, never test asserts.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from services.common.config.base import SchedulingConfig

RESULTS = Path(__file__).parent / "results" / "latest"
ALLOW_BUSY_ENV = "BENCH_ALLOW_BUSY"


class BusyMachine(RuntimeError):
    """A run on a machine loaded beyond its cores: its compute figures measure the other work, not ours."""


def busy(at: dict) -> str | None:
    """Why a run described by ``at`` (machine(), plus the load after) is busy: its 1-minute load average before it
    exceeds the core count (other work was running), or after it exceeds twice the cores (the run's own fleet and
    callers can fill the cores — 16 callers of a fleet on 2 cores reach a load of 2-3 — but not twice over); None
    when neither. A missing load counts as busy: it cannot be shown quiet."""
    cores = at.get("cores") or 0
    before, after = at.get("load_average_1min"), at.get("load_average_1min_after")
    over = []
    if not isinstance(before, (int, float)) or before > cores:
        over.append(f"before {before} exceeds {cores} cores")
    if not isinstance(after, (int, float)) or after > 2 * cores:
        over.append(f"after {after} exceeds twice the {cores} cores")
    if over:
        return f"1-minute load average {', '.join(over)}"
    return None


def allow_busy() -> bool:
    return os.environ.get(ALLOW_BUSY_ENV, "") == "1"


def check_quiet(name: str, at: dict) -> None:
    """Refuse a busy run (BusyMachine) unless BENCH_ALLOW_BUSY=1."""
    reason = busy(at)
    if reason and not allow_busy():
        raise BusyMachine(
            f"{name}: not written: {reason}; its figures would measure the other work on this machine. Run it when"
            f" the machine is quiet, or set {ALLOW_BUSY_ENV}=1 to write it marked busy (the README never quotes it)."
        )


# The TTS benchmarks measure synthesis by saying one text many times; said again, its first segment would come from
# the engine's segment cache (docs/scheduling.md#segment-cache), so their piper engines run without it: a fleet's
# section takes UNCACHED_TTS, an engine made in process UNCACHED_SCHEDULING.
UNCACHED_TTS = {"scheduling": {"segment_cache_mb": 0}}
UNCACHED_SCHEDULING = SchedulingConfig(**UNCACHED_TTS["scheduling"])


def scrape(port: int) -> list:
    """Every sample a service's /metrics endpoint (on loopback) exposes now."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def total(samples: list, name: str, **labels) -> float:
    """Sum of the samples named ``name`` (a counter's ``…_total``, a histogram's ``…_sum``) matching ``labels``."""
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def buckets(samples: list, metric: str, **labels) -> dict[float, float]:
    """A histogram's cumulative buckets (upper bound -> count) matching ``labels``."""
    return {
        float(s.labels["le"]): s.value
        for s in samples
        if s.name == f"{metric}_bucket" and all(s.labels.get(k) == v for k, v in labels.items())
    }


def bucket_quantile(before: dict, after: dict, q: float) -> tuple[float, int]:
    """Quantile of the observations between two scrapes of a cumulative histogram (``buckets``; linear within a
    bucket), and how many there were."""
    edges = sorted(after)
    counts = [after[e] - before.get(e, 0.0) for e in edges]
    total = counts[-1] if counts else 0
    rank, lower, below = q * total, 0.0, 0.0
    for edge, cum in zip(edges, counts, strict=True):
        if cum >= rank:
            if edge == float("inf"):
                return lower, int(total)
            inside = cum - below
            return lower + (edge - lower) * ((rank - below) / inside if inside else 0.0), int(total)
        lower, below = edge, cum
    return lower, int(total)


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


def cpu_name() -> str:
    """The CPU's model name, with its x86 family and model: a cloud VM's "AMD EPYC" alone names a Zen 1 (family 23
    model 1) and a Zen 5 (family 26) alike, and they differ ~3x in the brain's tokens/s."""
    try:
        fields: dict[str, str] = {}
        for line in open("/proc/cpuinfo"):
            key, colon, value = line.partition(":")
            if not colon:
                break  # the first processor's block ends
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor()
    name = fields.get("model name", platform.processor())
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def machine() -> dict:
    cpu = cpu_name()
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
        "load_average_1min": round(os.getloadavg()[0], 2),
        "commit": _head(),  # the code measured (bench/freshness.py: a change to it after this makes the run stale)
    }


def git(*args: str) -> str:
    """``git ARGS`` in this checkout: its output (CalledProcessError / OSError when git cannot answer)."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def _head() -> str:
    """HEAD's short id, with "+" when the checkout has uncommitted changes; "" outside a git checkout."""
    try:
        head = git("rev-parse", "--short=7", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+" if dirty else "")


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e6:.0f} µs" if value < 0.001 else f"{value * 1000:.1f} ms"
    return f"{value:.3f}"


def write(
    name: str, rows: list[Row], extra: dict | None = None, started: dict | None = None, directory: Path = RESULTS
) -> dict:
    """``started``: machine() taken when the benchmark began (its date and load); the load at the end is added. A busy
    run (``busy``) raises BusyMachine and writes nothing, unless BENCH_ALLOW_BUSY=1: then it is written marked."""
    at = dict(started or machine())
    at["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    check_quiet(name, at)
    reason = busy(at)
    if reason:
        at["busy"] = reason
    report = {"benchmark": name, "machine": at, "rows": [r.summary() for r in rows], **(extra or {})}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(report, indent=2))
    return report


def markdown(reports: list[dict]) -> str:
    lines = []
    for rep in reports:
        m = rep["machine"]
        load = ""
        if "load_average_1min" in m:
            load = f", load average {m['load_average_1min']} → {m.get('load_average_1min_after', '?')}"
        if busy(m):
            load += f" — **BUSY** ({busy(m)}): not a result"
        lines.append(f"### {rep['benchmark']} — {m['date']}, {m['cores']} cores {m['cpu']}, GPU: {m['gpu']}{load}\n")
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
            if key in ("benchmark", "machine", "rows"):
                continue
            if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
                lines += ["", f"{key}:", "", *table(value)]  # {row: {column: value}}
            else:
                lines.append(f"\n{key}: {value}")
        lines.append("")
    return "\n".join(lines)


def table(rows: dict[str, dict]) -> list[str]:
    """A markdown table from {row name: {column: value}} (columns in first-seen order)."""
    columns = list(dict.fromkeys(c for cells in rows.values() for c in cells))
    lines = ["| | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [
        f"| {name} | " + " | ".join(str(cells.get(c, "")) for c in columns) + " |" for name, cells in rows.items()
    ]
    return lines


def load_reports(directory: Path = RESULTS, order: list[str] | None = None) -> list[dict]:
    """Every ``<name>.json`` in ``directory``; names in ``order`` first, in that order."""
    reports = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}
    first = [n for n in (order or []) if n in reports]
    return [reports[n] for n in first] + [r for n, r in reports.items() if n not in first]
