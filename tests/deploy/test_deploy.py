"""The deploy files agree with the code: what compose builds exists, ports match the config, Prometheus scrapes
every service's metrics port, Grafana's queries use metric names the code defines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from services.common import metrics
from services.common.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def test_gpu_override_builds_gpu_stages_that_exist():
    override = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())
    built = {name: svc for name, svc in override["services"].items() if "build" in svc}
    assert set(built) == {"cosyvoice_tts", "qwen_tts", "asr", "moss_sts"}
    for name, svc in built.items():
        dockerfile = ROOT / svc["build"]["dockerfile"]
        assert re.search(r"^FROM .* AS gpu$", dockerfile.read_text(), re.M), f"{name}: no gpu stage"
        assert svc["environment"][f"VOICEFLEET_{name.upper()}__ENGINE"] == "gpu"


def compose_file() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_builds_what_exists_and_mounts_a_valid_config():
    compose = compose_file()
    assert "name" not in compose, "a top-level name: breaks docker-compose v1; the project name is in deploy/.env"
    config = load_config(DEPLOY / "voicefleet.yaml", env={})
    members = {name: svc for name, svc in compose["services"].items() if "build" in svc}
    assert set(members) == set(config.fleet.services)
    for name, svc in members.items():
        dockerfile = ROOT / svc["build"]["dockerfile"]
        assert dockerfile.exists(), f"{name}: {dockerfile} missing"
        target = svc["build"]["target"]
        assert re.search(rf"^FROM \S+ AS {target}$", dockerfile.read_text(), re.M), f"{name}: no stage {target}"
        assert svc["build"]["args"]["BASE_IMAGE"] == "${VOICEFLEET_BASE_IMAGE:-python:3.11-slim}"
        assert getattr(config, name).host == "0.0.0.0", f"{name} must listen on all interfaces in a container"
    for name, address in config.router.backends.items():
        assert address == f"{name}:{getattr(config, name).port}", "router must reach backends by compose name"
    assert (DEPLOY / ".env").read_text().strip() == "COMPOSE_PROJECT_NAME=voicefleet"


def test_cpu_stages_take_the_base_image_and_the_wheelhouse_as_build_args():
    for dockerfile in sorted((ROOT / "services").glob("*/Dockerfile")):
        text = dockerfile.read_text()
        assert text.startswith("# Build arguments") and "\nARG BASE_IMAGE=python:3.11-slim\n" in text, dockerfile
        for stage in re.findall(r"^FROM \$\{BASE_IMAGE\} AS (\S+)$", text, re.M):
            body = text.split(f"AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
            if stage.endswith("deps"):  # installs from the wheelhouse when there is one, never compiles
                assert "ARG PIP_NO_INDEX" in body and "--find-links /wheels" in body, f"{dockerfile}: {stage}"
        assert "RUN --mount" not in text, f"{dockerfile}: needs BuildKit, which Debian's Docker lacks"
    assert "cmake" not in (ROOT / "services/brain/Dockerfile").read_text(), "the brain is never compiled in an image"


def test_images_run_members_with_the_fleets_malloc_settings():
    """A container runs a member as `voicefleet up` does (services/cli/fleet.py MEMBER_MALLOC_ENV: without it the
    brain's heap kept every large buffer it freed)."""
    from services.cli.fleet import MEMBER_MALLOC_ENV

    for dockerfile in sorted((ROOT / "services").glob("*/Dockerfile")):
        cpu_env = re.search(r"^ENV PATH=/opt/venv/bin.*$", dockerfile.read_text(), re.M)
        assert cpu_env, f"{dockerfile}: no ENV line in its CPU stage"
        for key, value in MEMBER_MALLOC_ENV.items():
            assert f" {key}={value}" in cpu_env.group(0), f"{dockerfile}: its CPU stage does not set {key}={value}"


def test_compose_runs_like_production():
    compose = compose_file()
    config = load_config(DEPLOY / "voicefleet.yaml", env={})
    for name in config.fleet.services:
        svc = compose["services"][name]
        assert svc["restart"] == "unless-stopped"
        assert svc["healthcheck"]["test"][:5] == ["CMD", "python", "-m", "services.common.health_probe", name]
        limits = svc["deploy"]["resources"]["limits"]
        assert limits["cpus"] and limits["memory"], f"{name}: resource limits"
        for dependency, condition in svc.get("depends_on", {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
        if name not in ("router", "gateway"):
            assert "ports" not in svc, f"{name} must stay on the compose network"
    router_deps = set(compose["services"]["router"]["depends_on"])
    assert router_deps == set(config.fleet.services) - {"router", "gateway"}
    assert compose["services"]["router"]["ports"] == ["127.0.0.1:${VOICEFLEET_ROUTER_PORT:-50051}:50051"]
    assert config.router.port == 50051
    # The gateway: the page and HTTP API on 127.0.0.1:8080, in front of the router (by compose name).
    assert compose["services"]["gateway"]["ports"] == ["127.0.0.1:${VOICEFLEET_GATEWAY_PORT:-8080}:8080"]
    assert set(compose["services"]["gateway"]["depends_on"]) == {"router"}
    assert config.gateway.port == 8080 and config.gateway.router == f"router:{config.router.port}"
    for name in ("prometheus", "grafana"):
        image = compose["services"][name]["image"]
        assert re.fullmatch(r"[a-z/]+:v?\d+\.\d+\.\d+", image), f"{name} image must be pinned: {image}"
        assert all(p.startswith("127.0.0.1:") for p in compose["services"][name].get("ports", []))


def test_rules_are_generated_from_the_slo_table():
    result = subprocess.run([sys.executable, str(DEPLOY / "prometheus" / "slos.py"), "--check"], capture_output=True)
    assert result.returncode == 0, "deploy/prometheus/rules.yml is stale: run python deploy/prometheus/slos.py"


def test_dashboard_has_a_panel_for_every_slo():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "voicefleet.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    slos = {r["labels"]["slo"] for g in rules["groups"] for r in g["rules"] if "slo" in r.get("labels", {})}
    for slo in slos:
        assert f"voicefleet:slo_{slo}_errors:ratio_rate" in exprs, f"no error-budget panel for SLO {slo}"
    for metric in re.findall(r"(voicefleet_[a-z_]+)_count\{", (DEPLOY / "prometheus" / "rules.yml").read_text()):
        assert metric in exprs, f"SLO metric {metric} has no latency panel"


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


def interpolate(value, env: dict):
    """Compose's variable substitution (${VAR}, ${VAR:-default}, ${VAR:?error}) over a parsed compose file."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        name, op, arg = m["name"], m["op"], m["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            raise LookupError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(?P<name>\w+)(?:(?P<op>:[-?])(?P<arg>[^}]*))?\}", one, value)


def test_the_webrtc_override_runs_a_pinned_relay_wired_to_the_gateway():
    """deploy/compose.webrtc.yaml: coturn (pinned) with its UDP port and a bounded relay range published, its
    password required from the environment (no default in any file), and the gateway's config naming the relay: by
    compose name for its own peer, by the published address for browsers. The default stack has none of it."""
    raw = yaml.safe_load((DEPLOY / "compose.webrtc.yaml").read_text())
    assert set(raw["services"]) == {"turn", "gateway"}
    assert "turn" not in compose_file()["services"] and "environment" not in compose_file()["services"]["gateway"]
    text = (DEPLOY / "compose.webrtc.yaml").read_text() + (DEPLOY / "compose.yaml").read_text()
    text += (DEPLOY / ".env").read_text()
    uses = re.findall(r"\$\{VOICEFLEET_TURN_PASSWORD([^}]*)\}", text)
    assert uses and all(use.startswith(":?") for use in uses), "the password is required, with no default"
    assert not re.search(r"VOICEFLEET_TURN_PASSWORD=[^$]", text), "no password is committed"
    with pytest.raises(LookupError, match="VOICEFLEET_TURN_PASSWORD"):
        interpolate(raw, {})

    override = interpolate(raw, {"VOICEFLEET_TURN_PASSWORD": "0123abcd"})
    turn = override["services"]["turn"]
    assert re.fullmatch(r"coturn/coturn:\d+\.\d+\.\d+", turn["image"]), f"pin coturn: {turn['image']}"
    assert turn["restart"] == "unless-stopped" and turn["deploy"]["resources"]["limits"]["memory"]
    options = dict(arg.removeprefix("--").partition("=")[::2] for arg in turn["command"])
    assert options["user"] == "voicefleet:0123abcd" and "lt-cred-mech" in options and options["realm"]
    assert "-n" in options, "turnserver reads no config file of the image's: every option is in the command"
    low, high = int(options["min-port"]), int(options["max-port"])
    assert 0 < high - low <= 100, "a bounded relay range (Docker publishes each port)"
    listen = int(options["listening-port"])
    assert turn["ports"] == [f"127.0.0.1:{listen}:{listen}/udp", f"127.0.0.1:{low}-{high}:{low}-{high}/udp"]
    assert options["external-ip"] == "127.0.0.1"

    gateway = override["services"]["gateway"]
    assert gateway["depends_on"] == {"turn": {"condition": "service_started"}}
    config = load_config(DEPLOY / "voicefleet.yaml", env=gateway["environment"]).gateway
    (own,) = config.webrtc_ice_servers
    (client,) = config.webrtc_client_ice_servers
    assert own.urls == [f"turn:turn:{listen}"], "the gateway's peer reaches the relay by compose name"
    assert client.urls == [f"turn:{options['external-ip']}:{listen}"], "browsers reach it where it is published"
    for server in (own, client):
        assert f"{server.username}:{server.credential.get_secret_value()}" == options["user"]

    # Set for the host's public address and every interface, the relay says so and is published there.
    env = {"VOICEFLEET_TURN_PASSWORD": "0123abcd", "VOICEFLEET_TURN_EXTERNAL_IP": "203.0.113.7"}
    override = interpolate(raw, {**env, "VOICEFLEET_TURN_BIND": "0.0.0.0"})
    assert "--external-ip=203.0.113.7" in override["services"]["turn"]["command"]
    assert all(p.startswith("0.0.0.0:") for p in override["services"]["turn"]["ports"])
    config = load_config(DEPLOY / "voicefleet.yaml", env=override["services"]["gateway"]["environment"]).gateway
    assert config.webrtc_client_ice_servers[0].urls == [f"turn:203.0.113.7:{listen}"]
