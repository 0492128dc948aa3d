"""Render the dashboard's panels to PNG from Prometheus query_range answers, so the latency picture can be looked at
without a Grafana: ``python scripts/render-dashboards.py DATA_DIR OUT_DIR`` (``make dashboards`` runs it with the
answers tests/deploy/test_dashboards.py kept from a real run in DATA_DIR/panels.json). Runs in build/tools-venv
(matplotlib, requirements/tools.txt), never in the fleet's environment.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

UNITS = {"s": ("seconds", 1.0), "bytes": ("GiB", 1 / (1 << 30)), "reqps": ("requests/s", 1.0)}


def legend(template: str, labels: dict) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template or "")
    return " ".join(text.split()) or json.dumps(labels)


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def render(panel: dict, start: float, out: Path) -> None:
    label, scale = UNITS.get(panel["unit"], ("", 1.0))
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    lines = 0
    for target in panel["targets"]:
        for series in target["result"]:
            points = [(float(t) - start, float(v) * scale) for t, v in series["values"] if math.isfinite(float(v))]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.plot(
                xs, ys, marker=".", markersize=3, linewidth=1.2, label=legend(target["legendFormat"], series["metric"])
            )
            lines += 1
    ax.set_title(panel["title"], fontsize=11)
    ax.set_xlabel("seconds into the run")
    if label:
        ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    if lines:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="red")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(data_dir: str, out_dir: str) -> None:
    data = json.loads((Path(data_dir) / "panels.json").read_text())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = data["meta"]["start"]
    for panel in data["panels"]:
        render(panel, start, out / f"{slug(panel['title'])}.png")
    when = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{len(data['panels'])} panels from the run of {when} -> {out}/")


if __name__ == "__main__":
    main(*sys.argv[1:3])
