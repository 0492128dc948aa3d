"""rt_probe-cold-vs-cold.log's per-line figures: each route's first reply audio at its client and at the server, the
client's share (gateway and transport), and cold-vs-cold medians (the route that said the line first).

    python bench/results/realtime-ratio-2026-11-29-alternated/cold_vs_cold.py
"""

import json
import re
import statistics
from pathlib import Path

text = (Path(__file__).parent / "rt_probe-cold-vs-cold.log").read_text()
rt_client = [json.loads(m).get("response.output_audio.delta") for m in re.findall(r"realtime client: (\{.*\})", text)]
cv_client = [int(x) for x in re.findall(r"converse client: first audio (\d+) ms", text)]
cv_server = [int(x) for x in re.findall(r"converse server: .* first audio (\d+) pre", text)]
rt_server = [int(x) for x in re.findall(r"realtime turn \d+: .*speech end -> first audio (\d+) ms", text)]
rows = []
for n, (a, b, c, d) in enumerate(zip(rt_client, rt_server, cv_client, cv_server, strict=True)):
    first = "Converse" if n % 2 else "Realtime"
    rows.append((first, a, b, c, d))
    print(
        f"line {n:2d} ({first} first): Realtime client {a} server {b} (+{a - b}) | Converse client {c} server {d} (+{c - d})"
    )
for who in ("Realtime", "Converse"):
    said = [r for r in rows if r[0] == who]
    print(
        f"{who} first (n={len(said)}): Realtime client / server {statistics.median(r[1] for r in said):.0f} /"
        f" {statistics.median(r[2] for r in said):.0f} ms; Converse {statistics.median(r[3] for r in said):.0f} /"
        f" {statistics.median(r[4] for r in said):.0f} ms"
    )
print(
    f"client minus server, median: Realtime {statistics.median(r[1] - r[2] for r in rows):.0f} ms,"
    f" Converse {statistics.median(r[3] - r[4] for r in rows):.0f} ms"
)
cold_rt = [r for r in rows if r[0] == "Realtime"]
cold_cv = [r for r in rows if r[0] == "Converse"]
print(
    f"cold vs cold: client {statistics.median(r[1] for r in cold_rt):.0f} vs {statistics.median(r[3] for r in cold_cv):.0f}"
    f" ms; server {statistics.median(r[2] for r in cold_rt):.0f} vs {statistics.median(r[4] for r in cold_cv):.0f} ms"
)

# Paired by line (each line said once per route): the first-goer's extra over the second, per route, and the ratio
# Realtime / Converse per line. Line 0 is the fleet's first turn ever (a cold brain) and is left out.
later = list(enumerate(rows))[1:]
for who in ("Realtime", "Converse"):
    extra = [(r[1] - r[3]) if who == "Realtime" else (r[3] - r[1]) for n, r in later if r[0] == who]
    print(f"{who} said the line first: its first audio minus the other's, median {statistics.median(extra):.0f} ms")
ratios = [r[1] / r[3] for _, r in later]
print(
    f"lines 1-{len(rows) - 1}: Realtime / Converse client median {statistics.median(r[1] for _, r in later):.0f} /"
    f" {statistics.median(r[3] for _, r in later):.0f} ms; per-line ratio median {statistics.median(ratios):.2f}"
)
print("the split by which route went first compares different lines (even vs odd); per line either route pays for it")
