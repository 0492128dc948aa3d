"""The deploy files agree with the code: what compose builds exists, ports match the config, Prometheus scrapes
every service's metrics port, Grafana's queries use metric names the code defines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from services.common import metrics
from services.common.config import load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def test_gpu_override_builds_gpu_stages_that_exist():
    override = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())
    built = {name: svc for name, svc in override["services"].items() if "build" in svc}
    assert set(built) == {"cosyvoice_tts", "qwen_tts", "asr", "moss_sts"}
    for name, svc in built.items():
        dockerfile = ROOT / svc["build"]["dockerfile"]
        assert re.search(r"^FROM .* AS gpu$", dockerfile.read_text(), re.M), f"{name}: no gpu stage"
        assert svc["environment"][f"VOICEFLEET_{name.upper()}__ENGINE"] == "gpu"


def test_compose_builds_what_exists_and_mounts_a_valid_config():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    config = load_config(DEPLOY / "voicefleet.yaml", env={})
    for name, svc in compose["services"].items():
        if "build" in svc:
            dockerfile = ROOT / svc["build"]["dockerfile"]
            assert dockerfile.exists(), f"{name}: {dockerfile} missing"
            target = svc["build"].get("target")
            if target:
                assert re.search(rf"^FROM .* AS {target}$", dockerfile.read_text(), re.M), f"{name}: no stage {target}"
            assert name in config.fleet.services, f"compose runs {name} but the fleet config does not enable it"
            assert getattr(config, name).host == "0.0.0.0", f"{name} must listen on all interfaces in a container"
    for name, address in config.router.backends.items():
        assert address == f"{name}:{getattr(config, name).port}", "router must reach backends by compose name"
    assert compose["services"]["router"]["ports"] == [f"{config.router.port}:{config.router.port}"]


def test_prometheus_scrapes_every_service():
    config = load_config(DEPLOY / "voicefleet.yaml", env={})
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = {
        f"{name}:{getattr(config, name).metrics_port}"
        for name in config.fleet.services
        if getattr(config, name).metrics_port  # the brain (llama.cpp server) has no Prometheus endpoint
    }
    assert targets == expected


def test_dashboard_and_rules_use_defined_metric_names():
    defined = {m._name for m in vars(metrics).values() if hasattr(m, "_name") and hasattr(m, "_type")}
    texts = [
        (DEPLOY / "grafana" / "dashboards" / "voicefleet.json").read_text(),
        (DEPLOY / "prometheus" / "rules.yml").read_text(),
    ]
    json.loads(texts[0])
    used = {m for t in texts for m in re.findall(r"voicefleet_[a-z_]+", t)}
    base = {re.sub(r"_(bucket|count|sum|total)$", "", u) for u in used}
    unknown = {u for u in base if u not in defined and u.removesuffix("_total") not in defined}
    assert not unknown, f"dashboards/rules use metrics the code does not define: {unknown}"
