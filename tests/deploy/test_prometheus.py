"""Observability checked with real Prometheus (Debian's `prometheus` package; `make test` and .ci/run install it as
root): the SLO rules pass their promtool unit tests, and a real Prometheus scrapes the fleet and evaluates them."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from services.cli.fleet import free_port
from voice.v1 import synthesizer_pb2

PROM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="needs Debian's prometheus package (apt-get install prometheus; make test and .ci/run install it as root)",
)


def _reach(test: dict) -> float:
    """How far (hours) a promtool unit test evaluates: its latest eval_time ("7h", "70m", "3m")."""
    times = [c["eval_time"] for c in test.get("alert_rule_test", []) + test.get("promql_expr_test", [])]
    return max(float(t[:-1]) / {"h": 1, "m": 60, "s": 3600}[t[-1]] for t in times)


@needs_prometheus
@pytest.mark.background  # CPU work with no clock in it: `make test` runs it in its background lane
def test_rules_and_config_pass_promtool(tmp_path):
    for args in (
        ["check", "config", str(PROM_DIR / "prometheus.yml")],
        ["check", "rules", str(PROM_DIR / "rules.yml")],
    ):
        result = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    # rules_test.yml's unit tests, every one of them, in two promtool processes side by side: promtool runs a file's
    # tests one after another on one core (about 18 s of a 2-core machine's wall time with the other core idle).
    # Each half is rules_test.yml with half its tests (balanced by how far they evaluate) and the same rule files.
    spec = yaml.safe_load((PROM_DIR / "rules_test.yml").read_text())
    spec["rule_files"] = [str(PROM_DIR / f) for f in spec["rule_files"]]
    tests = spec.pop("tests")
    halves: list[list[dict]] = [[], []]
    load = [0.0, 0.0]
    for test in sorted(tests, key=_reach, reverse=True):
        i = load.index(min(load))
        halves[i].append(test)
        load[i] += _reach(test)
    assert sorted(t["name"] for h in halves for t in h) == sorted(t["name"] for t in tests) and all(halves)
    runs = []
    for n, half in enumerate(halves):
        path = tmp_path / f"rules_test_{n}.yml"
        path.write_text(yaml.safe_dump({**spec, "tests": half}, sort_keys=False, allow_unicode=True))
        runs.append(
            subprocess.Popen(
                ["promtool", "test", "rules", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    for run in runs:
        output, _ = run.communicate(timeout=600)  # ~20 s alone; the background lane runs on idle CPU only
        assert run.returncode == 0, output


def query(port: int, promql: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]


@needs_prometheus
def test_real_prometheus_scrapes_the_fleet_and_evaluates_the_slo_rules(cpu_fleet, router_tts, tmp_path):
    targets = [f"127.0.0.1:{getattr(cpu_fleet.config, n).metrics_port}" for n in ("router", "cosyvoice_tts")]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(PROM_DIR / "rules.yml")],
        "scrape_configs": [{"job_name": "voicefleet", "static_configs": [{"targets": targets}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        up, ok, p95, availability = [], [], [], []
        while time.monotonic() < deadline:
            time.sleep(1)
            # Traffic while Prometheus watches: rates need counters that grow between scrapes.
            list(router_tts.Synthesize(synthesizer_pb2.SynthesizeRequest(text="Scrape me."), timeout=30))
            try:
                up = query(port, 'up{job="voicefleet"} == 1')
                ok = query(port, 'voicefleet_requests_total{service="router",method="Synthesize",code="OK"}')
                p95 = query(port, 'voicefleet:tts_ttfa_seconds:p95_5m{service="router"}')
                # Its rule group evaluates on its own tick: empty until a rate over two scrapes exists there too.
                availability = query(port, "voicefleet:slo_availability_errors:ratio_rate5m")
            except OSError:
                continue
            if (
                len(up) == 2
                and ok
                and float(ok[0]["value"][1]) >= 3
                and p95
                and not math.isnan(float(p95[0]["value"][1]))
                and availability
            ):
                break
        assert len(up) == 2, f"targets up: {up}"
        assert float(ok[0]["value"][1]) >= 3
        assert p95 and float(p95[0]["value"][1]) > 0, p95
        assert availability and float(availability[0]["value"][1]) == 0.0, availability
    finally:
        prom.terminate()
        prom.wait(10)
