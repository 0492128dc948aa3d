"""The Kubernetes manifests (deploy/k8s) render, validate against the Kubernetes schemas, and agree with the code.

Every kustomization (the base and each overlay) is rendered with ``kubectl kustomize`` and every object validated by
kubernetes-validate against pinned Kubernetes versions, strictly (an unknown field fails). prometheus-operator's
objects (PodMonitor, PrometheusRule) have no schema there: ``crd_problems`` checks them by hand (known fields, a
selector, ports, rules).

Then each rendered fleet is checked against the services' own config, the way each process would load it: the
ConfigMap's voicefleet.yaml mounted at --config, with the image's and the container's VOICEFLEET_* variables applied
by ``load_config``. Every containerPort, probe port, Service targetPort, NetworkPolicy port and PodMonitor port must
be a port that process serves; images and commands are the ones compose builds from the Dockerfiles; gRPC probes ask
the process's plaintext health_port (never its TLS port) for health names it serves; terminationGracePeriodSeconds
outlasts grace_seconds + drain_notice_seconds; the router's backends and lease authorities name Services that exist
with those ports; security (TLS, mTLS, fleet token) is the same in every gRPC container, its files come from a
mounted Secret. ``fleet_problems`` returns what is wrong as sentences naming the object and the port;
test_checker_catches tests that it does.

``make k8s-check`` runs this file. kubectl: $KUBECTL, else the one on PATH (scripts/k8s-check.sh installs Debian's
kubernetes-client when root). $KUBECTL_OLD (the script fetches Debian's kubectl 1.20, whose kustomize is v2.0.3):
the manifests must render the same objects with it.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import kubernetes_validate
import prometheus_client
import pytest
import yaml

from services.cli.fleet import MODULES as MEMBER_MODULES
from services.common import metrics
from services.common.config import Config, ConfigError, load_config
from services.common.config.base import MODEL_SERVICES
from services.common.health import LIVENESS
from services.moss_sts.service import asr_address

# CPU work with no clock in it: `make test` runs it in its background lane (scripts/test-lanes.sh).
pytestmark = pytest.mark.background

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
FLEETS = ("base", "overlays/gpu", "overlays/tls", "overlays/production")  # kustomizations holding a whole fleet
ADDONS = ("overlays/scale", "overlays/monitoring")  # only their own objects, applied on top of a fleet
KUSTOMIZATIONS = FLEETS + ADDONS
# The oldest Kubernetes the manifests claim (deploy/k8s/README.md) and the newest schemas of the pinned
# kubernetes-validate (requirements/dev.txt).
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
CONFIG_FILE = "/etc/voicefleet/voicefleet.yaml"
NAMESPACE = "voicefleet"
TLS_DIR = "/etc/voicefleet/tls"  # the Secret voicefleet-security's tls.crt, tls.key, ca.crt in every pod
MONITORING_NAMESPACE = {"kubernetes.io/metadata.name": "monitoring"}
MODELS_CLAIM = "voicefleet-models"
STARTUP_BUDGET_S = 300  # compose: start_period 300s (model load + warm-up)
INSTALL_HINT = (
    "kubectl not found: `make k8s-check` installs Debian's kubernetes-client when run as root; otherwise "
    "`apt-get install kubernetes-client` (or any kubectl >= 1.20), or set KUBECTL=/path/to/kubectl"
)


# --- rendering ------------------------------------------------------------------------------------------------------
def kubectl() -> str:
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not path:
        pytest.fail(INSTALL_HINT)
    return path


@functools.cache
def _render(kustomization: str, binary: str) -> tuple[dict, ...]:
    run = subprocess.run(
        [binary, "kustomize", str(K8S / kustomization)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, f"{binary} kustomize deploy/k8s/{kustomization} failed:\n{run.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(run.stdout) if doc)


def render(*kustomizations: str, binary: str | None = None) -> list[dict]:
    """The objects of these kustomizations together (a deep copy: callers may change them)."""
    binary = binary or kubectl()
    return copy.deepcopy([obj for k in kustomizations for obj in _render(k, binary)])


def fleet_renders() -> dict[str, tuple[str, ...]]:
    """Every fleet as applied: each fleet kustomization, and the add-ons on top of the CPU base."""
    return {**{k: (k,) for k in FLEETS}, **{f"base + {a}": ("base", a) for a in ADDONS}}


def where(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# --- what the repository says: compose, Dockerfiles, the code --------------------------------------------------------
@functools.cache
def dockerfile_stages(dockerfile: str) -> dict[str, str]:
    """Stage name -> its text (from its FROM line to the next)."""
    text = (ROOT / dockerfile).read_text()
    return {m.group(1): m.group(0) for m in re.finditer(r"^FROM \S+ AS (\S+)\n(?:(?!FROM ).*\n?)*", text, re.M)}


def stage_cmd(stage: str) -> list[str]:
    cmds = re.findall(r"^CMD (\[.*\])$", stage, re.M)
    assert cmds, "stage has no CMD"
    return json.loads(cmds[-1])


def stage_env(stage: str) -> dict[str, str]:
    """The stage's ENV variables (`ENV A=1 B=2 \\` continued lines)."""
    env: dict[str, str] = {}
    for block in re.findall(r"^ENV ((?:.*\\\n)*.*)$", stage, re.M):
        for item in shlex.split(block.replace("\\\n", " ")):
            key, _, value = item.partition("=")
            env[key] = value
    return env


@functools.cache
def compose_images() -> dict[str, dict[str, tuple[str, str, str]]]:
    """Image repository -> tag kind ("cpu" / "gpu") -> (compose service, Dockerfile, stage)."""
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    gpu = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())["services"]
    images: dict[str, dict[str, tuple[str, str, str]]] = {}
    for name, svc in compose.items():
        if "build" not in svc:
            continue
        repo = svc["image"].split(":", 1)[0]
        images[repo] = {"cpu": (name, svc["build"]["dockerfile"], svc["build"]["target"])}
        if "build" in gpu.get(name, {}):
            images[repo]["gpu"] = (name, gpu[name]["build"]["dockerfile"], gpu[name]["build"]["target"])
    return images


@functools.cache
def health_names(section: str) -> frozenset[str]:
    """What a fleet process's grpc.health answers: "" and voicefleet.liveness (services/common/server.py), and one
    name per gRPC service its code registers (Servicer(..., "voice.v1.X") in its package)."""
    if section == "lease_authority":  # the residency package's entry point (python -m services.residency)
        files = [ROOT / "services" / "residency" / "__main__.py"]
    else:
        files = sorted((ROOT / "services" / section).glob("*.py"))
    registered = r"Servicer\(.*\"(voice\.v1\.[A-Za-z]+)\"\)"
    names = {n for f in files if f.exists() for n in re.findall(registered, f.read_text())}
    return frozenset({"", LIVENESS, *names})


def quantity(value: str | int) -> float:
    """A Kubernetes quantity as a number (cores or bytes)."""
    text = str(value)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    assert match and match.group(2) in ("", *units), f"not a quantity: {text!r}"
    return float(match.group(1)) * units.get(match.group(2), 1)


def matches(selector: dict | None, labels: dict) -> bool:
    assert not (selector or {}).get("matchExpressions"), "matchExpressions: not checked here, use matchLabels"
    return all(labels.get(k) == v for k, v in ((selector or {}).get("matchLabels") or {}).items())


# --- one container as the process it runs ----------------------------------------------------------------------------
class Member:
    """A container of a Deployment/DaemonSet and what it runs: its config section, effective config and ports."""

    def __init__(self, workload: dict, container: dict, objects: list[dict], problems: list[str]):
        self.workload = workload
        self.pod = workload["spec"]["template"]
        self.container = container
        self.where = f"{where(workload)} container {container['name']}"
        self.labels = self.pod["metadata"].get("labels", {})
        self.problems = problems
        self.objects = objects
        self.config: Config | None = None
        self.section = ""
        repo, _, tag = container["image"].partition(":")
        built = compose_images().get(repo)
        if built is None:
            self.problem(f"image {repo} is not an image compose builds ({', '.join(sorted(compose_images()))})")
            return
        kind = self.image_kind = "gpu" if tag == "gpu" else "cpu"
        if kind not in built:
            self.problem(f"image tag {tag!r}: compose builds no {kind} stage for {repo}")
            return
        service, dockerfile, target = built[kind]
        stage = dockerfile_stages(dockerfile).get(target)
        if stage is None:
            self.problem(f"{dockerfile} has no stage {target}")
            return
        image_cmd = stage_cmd(stage)
        self.interpreter = image_cmd[0]  # exec probes and our own commands run the image's interpreter
        argv = container.get("command", image_cmd) + container.get("args", [])
        if "-m" not in argv or "--config" not in argv:
            self.problem(f"runs {argv}: not `python -m services.NAME --config {CONFIG_FILE}`")
            return
        module = argv[argv.index("-m") + 1]
        if "command" in container:
            # A command of our own (the lease authority in the router's image): the same interpreter as the image's
            # CMD, a module whose package the stage copies, and the section named by the module.
            if argv[0] != image_cmd[0]:
                self.problem(f"runs {argv[0]!r}, but {dockerfile} stage {target} runs {image_cmd[0]!r}")
            package = "/".join(module.split(".")[:2])
            if not re.search(rf"^COPY {package} {package}$", stage, re.M):
                self.problem(f"module {module}: {dockerfile} stage {target} does not copy {package}")
            path = ROOT / module.replace(".", "/")
            if not (path.with_suffix(".py").exists() or (path / "__main__.py").exists()):
                self.problem(f"module {module} does not exist")
            # The section the module runs: as the supervisor names it (python -m services.residency runs
            # lease_authority), else the module's last name.
            self.section = {m: s for s, m in MEMBER_MODULES.items()}.get(module, module.rsplit(".", 1)[-1])
        else:
            self.section = service  # compose's service names are the config sections (tests/deploy/test_deploy.py)
        if self.section not in Config.model_fields:
            self.problem(f"runs {module}, which is no fleet config section")
            return
        config_path = argv[argv.index("--config") + 1]
        text = self.mounted_file(config_path)
        if text is None:
            return
        self.config_text = text
        env = {k: v for k, v in stage_env(stage).items() if k.startswith("VOICEFLEET_")}
        env.update(self.env())
        self.env_vars = env
        try:
            self.config = load_config(_config_file(text), env=env)
        except ConfigError as e:
            self.problem(f"its config does not load: {e}")
            return
        self.settings = getattr(self.config, self.section)

    def problem(self, text: str) -> None:
        self.problems.append(f"{self.where}: {text}")

    def find(self, kind: str, name: str) -> dict | None:
        return next((o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    def mounted_file(self, path: str) -> str | None:
        mount = next((m for m in self.container.get("volumeMounts", []) if m["mountPath"] == path), None)
        volume = mount and next((v for v in self.pod["spec"].get("volumes", []) if v["name"] == mount["name"]), None)
        if not volume or "configMap" not in volume or "subPath" not in mount:
            self.problem(f"--config {path} is not a file mounted from a ConfigMap (subPath)")
            return None
        config_map = self.find("ConfigMap", volume["configMap"]["name"])
        if config_map is None or mount["subPath"] not in config_map.get("data", {}):
            self.problem(f"ConfigMap {volume['configMap']['name']} with key {mount['subPath']} is not in the render")
            return None
        return config_map["data"][mount["subPath"]]

    def env(self) -> dict[str, str]:
        """The container's environment as Kubernetes sets it (envFrom, then env over it)."""
        env: dict[str, str] = {}
        for source in self.container.get("envFrom", []):
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if key in source:
                    env.update(self.data(kind, source[key]["name"]) or {})
        for var in self.container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
                continue
            ref = var.get("valueFrom", {})
            if "fieldRef" in ref:
                env[var["name"]] = "node-a"  # spec.nodeName and the like
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in ref:
                    data = self.data(kind, ref[key]["name"]) or {}
                    if ref[key]["key"] not in data:
                        self.problem(f"env {var['name']}: {kind} {ref[key]['name']} has no key {ref[key]['key']}")
                    env[var["name"]] = data.get(ref[key]["key"], "")
        return env

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        obj = self.find(kind, name)
        if obj is None:
            self.problem(f"{kind} {name} is not in the render")
            return None
        data = dict(obj.get("data") or {})
        if kind == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in data.items()}
            data.update(obj.get("stringData") or {})
        return data

    @property
    def ports(self) -> dict[str, int]:
        """What the process serves: gRPC (or HTTP) port, metrics port and plaintext health port (0: none)."""
        return {
            "port": self.settings.port,
            "metrics_port": self.settings.metrics_port,
            "health_port": self.health_port,
        }

    @property
    def health_port(self) -> int:
        """The plaintext grpc.health-only port (0: none; the brain, HTTP, has no such field)."""
        return getattr(self.settings, "health_port", 0)

    def secret_file(self, path: str) -> bool:
        """Whether `path` is a file of a Secret volume mounted in the container, whose Secret has that key."""
        for mount in self.container.get("volumeMounts", []):
            root = mount["mountPath"].rstrip("/") + "/"
            if "subPath" in mount or not path.startswith(root):
                continue
            volume = next((v for v in self.pod["spec"].get("volumes", []) if v["name"] == mount["name"]), {})
            if "secret" not in volume:
                continue
            name = path.removeprefix(root)
            items = volume["secret"].get("items")
            key = next((i["key"] for i in items if i["path"] == name), None) if items else name
            data = self.data("Secret", volume["secret"]["secretName"]) or {}
            return key in data
        return False

    def served(self) -> str:
        return ", ".join(f"{self.section}.{k} {v}" for k, v in self.ports.items() if v)

    def resolve(self, port: int | str) -> int | None:
        """A port number, or a named containerPort, as a number (None: no such name)."""
        if isinstance(port, int):
            return port
        return next((p["containerPort"] for p in self.container.get("ports", []) if p.get("name") == port), None)


_CONFIGS = tempfile.TemporaryDirectory(prefix="voicefleet-k8s-")  # removed at exit


@functools.cache
def _config_file(text: str) -> str:
    """A file holding `text` (load_config reads a path)."""
    path = Path(_CONFIGS.name) / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    path.write_text(text)
    return str(path)


def members(objects: list[dict], problems: list[str]) -> list[Member]:
    return [
        Member(obj, container, objects, problems)
        for obj in objects
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
        for container in obj["spec"]["template"]["spec"]["containers"]
    ]


# --- the checks -----------------------------------------------------------------------------------------------------
def fleet_problems(objects: list[dict]) -> list[str]:
    """Everything in a rendered fleet that disagrees with the services' code and config, one sentence each."""
    problems: list[str] = []
    fleet = [m for m in members(objects, problems) if m.config is not None]
    for m in fleet:
        check_member(m)
    check_services(objects, fleet, problems)
    check_routes(objects, fleet, problems)
    check_network_policies(objects, fleet, problems)
    check_scaling(objects, fleet, problems)
    check_monitoring(objects, fleet, problems)
    check_security(fleet, problems)
    return problems


def check_member(m: Member) -> None:
    c, spec, s = m.container, m.pod["spec"], m.settings
    if s.host != "0.0.0.0":
        m.problem(f"{m.section}.host is {s.host!r}: a pod's process must listen on 0.0.0.0")
    for p in c.get("ports", []):
        if p["containerPort"] not in [port for port in m.ports.values() if port]:
            m.problem(f"containerPort {p['containerPort']} ({p.get('name')}) is not a port it serves ({m.served()})")
        elif p["containerPort"] == m.health_port and p.get("name") != "health":
            m.problem(f"containerPort {p['containerPort']} ({m.section}.health_port) must be named 'health'")
    declared = {p["containerPort"] for p in c.get("ports", [])}
    for key, port in m.ports.items():
        if port and port not in declared:
            m.problem(f"{m.section}.{key} {port} is not among its containerPorts {sorted(declared)}")

    # Probes: each of the three, gRPC ones on the plaintext health port (the kubelet cannot speak TLS), asking a name
    # its health serves.
    tls = bool(m.config.security.tls_cert)
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = c.get(kind)
        if probe is None:
            m.problem(f"has no {kind}")
            continue
        if "grpc" in probe:
            port, name = probe["grpc"]["port"], probe["grpc"].get("service", "")
            if port == s.port and tls:
                m.problem(
                    f"{kind} grpc port {port} is {m.section}.port, which speaks TLS (security.tls_cert is set): the "
                    f"kubelet's gRPC probes speak plaintext only and would always fail; probe {m.section}.health_port"
                    + (f" {m.health_port}" if m.health_port else " (set it)")
                )
            elif not m.health_port:
                m.problem(
                    f"{kind} is a gRPC probe but {m.section}.health_port is not set: gRPC probes ask the plaintext "
                    "health port (set it in the ConfigMap's voicefleet.yaml)"
                )
            elif port != m.health_port:
                m.problem(f"{kind} grpc port {port} is not its health port ({m.section}.health_port {m.health_port})")
            if name not in health_names(m.section):
                m.problem(f"{kind} asks health name {name!r}; {m.section} serves {sorted(health_names(m.section))}")
            want = LIVENESS if kind == "livenessProbe" else ""
            if name != want:
                m.problem(f"{kind} asks {name!r}: it must ask {want!r}")
        elif "tcpSocket" in probe or "httpGet" in probe:
            port = m.resolve((probe.get("tcpSocket") or probe.get("httpGet"))["port"])
            if port != s.port:
                m.problem(f"{kind} port {port} is not the port it serves ({m.section}.port {s.port})")
        elif "exec" in probe:
            argv = probe["exec"]["command"]
            want = [m.interpreter, "-m", "services.common.health_probe", m.section, "--config", CONFIG_FILE]
            if argv != want:
                m.problem(f"{kind} runs {argv}; expected {want}")
        if kind == "startupProbe":
            budget = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
            if budget < STARTUP_BUDGET_S:
                m.problem(f"startupProbe allows {budget} s; model load needs up to {STARTUP_BUDGET_S} s")

    if getattr(s, "engine", m.image_kind) != m.image_kind:
        m.problem(f"{m.section}.engine is {s.engine}, but its image {c['image']} is the {m.image_kind} build")
    if c.get("imagePullPolicy") != "IfNotPresent":
        m.problem("imagePullPolicy must be IfNotPresent (images loaded onto nodes, no registry: README.md)")

    # Drain: the pod is killed only after the process's own drain.
    drain = s.grace_seconds + getattr(s, "drain_notice_seconds", 0.0)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace <= drain:
        m.problem(
            f"terminationGracePeriodSeconds {grace} <= {m.section}.grace_seconds + drain_notice_seconds ({drain:g})"
        )
    raw = yaml.safe_load(m.config_text) or {}
    if "grace_seconds" not in (raw.get(m.section) or {}):
        m.problem(f"the ConfigMap's voicefleet.yaml does not set {m.section}.grace_seconds (set it explicitly)")

    # Security: the images' unprivileged user.
    pod_sc, sc = spec.get("securityContext", {}), c.get("securityContext", {})
    uid = re.search(r"useradd .*--uid (\d+)", (ROOT / "services/router/Dockerfile").read_text()).group(1)
    if not pod_sc.get("runAsNonRoot") or str(pod_sc.get("runAsUser")) != uid:
        m.problem(f"pod securityContext must be runAsNonRoot with runAsUser {uid} (the images' user)")
    if sc.get("allowPrivilegeEscalation") is not False or "ALL" not in sc.get("capabilities", {}).get("drop", []):
        m.problem("container securityContext must set allowPrivilegeEscalation: false and drop ALL capabilities")

    # Resources: requests and limits, requests within limits.
    res = c.get("resources", {})
    for r in ("cpu", "memory"):
        if r not in res.get("limits", {}) or r not in res.get("requests", {}):
            m.problem(f"resources: needs requests and limits of {r}")
        elif quantity(res["requests"][r]) > quantity(res["limits"][r]):
            m.problem(f"resources: {r} request {res['requests'][r]} above its limit {res['limits'][r]}")

    # gRPC targets by short DNS name resolve with the cluster's search domains only with the system resolver.
    targets = [*m.config.router.backends.values()] if m.section == "router" else []
    targets += m.config.router.leases.authorities if m.section == "router" else []
    targets += [m.config.residency.lease_authority] if m.section in MODEL_SERVICES else []
    targets += [m.config.gateway.router] if m.section == "gateway" else []
    if any(t for t in targets) and m.env_vars.get("GRPC_DNS_RESOLVER") != "native":
        m.problem("names gRPC targets by Service name but has no GRPC_DNS_RESOLVER=native")

    # GPU engines: a GPU, the weights read-only where the config looks, writable state.
    if getattr(s, "engine", "cpu") == "gpu":
        if "nvidia.com/gpu" not in res.get("limits", {}):
            m.problem(f"{m.section}.engine is gpu but it has no nvidia.com/gpu limit")
        if not spec.get("nodeSelector"):
            m.problem(f"{m.section}.engine is gpu but it has no nodeSelector for GPU nodes")
        for key, path in vars(s.gpu).items():
            if not (isinstance(path, str) and path.startswith("/") and key.endswith("_dir")):
                continue
            mount = max(
                (x for x in c.get("volumeMounts", []) if f"{path}/".startswith(x["mountPath"].rstrip("/") + "/")),
                key=lambda x: len(x["mountPath"]),
                default=None,
            )
            volume = mount and next(v for v in spec["volumes"] if v["name"] == mount["name"])
            if key == "state_dir":
                if not mount or mount.get("readOnly"):
                    m.problem(f"{m.section}.gpu.state_dir {path} is not on a writable volume")
            elif path.startswith("/models/") and (
                not volume or volume.get("persistentVolumeClaim", {}).get("claimName") != MODELS_CLAIM
            ):
                m.problem(f"{m.section}.gpu.{key} {path} is not on the PersistentVolumeClaim {MODELS_CLAIM}")
            elif volume and not mount.get("readOnly"):
                m.problem(f"{m.section}.gpu.{key}: mount the weights read-only")


def selected(objects_or_members: list[Member], selector: dict | None) -> list[Member]:
    return [m for m in objects_or_members if matches(selector, m.labels)]


def check_services(objects: list[dict], fleet: list[Member], problems: list[str]) -> None:
    for svc in (o for o in objects if o["kind"] == "Service"):
        pods = selected(fleet, {"matchLabels": svc["spec"].get("selector", {})})
        if not pods:
            problems.append(f"{where(svc)}: its selector {svc['spec'].get('selector')} selects no pod")
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            for m in pods:
                number = m.resolve(target)
                if number and number == m.health_port:
                    problems.append(
                        f"{where(svc)}: port {p['port']} targets {target}, {m.where}'s health_port: it is the "
                        "kubelet's (grpc.health only); Services forward its gRPC and metrics ports"
                    )
                elif number not in (m.settings.port, m.settings.metrics_port) or not number:
                    problems.append(
                        f"{where(svc)}: port {p['port']} targets {target}, which {m.where} does not serve ({m.served()})"
                    )
                elif p["port"] != number:
                    problems.append(f"{where(svc)}: port {p['port']} forwards to {number}: keep the numbers equal")


def service_for(objects: list[dict], fleet: list[Member], address: str, section: str, headless: bool, who: str):
    """Problems with `address` (host:port) naming a Service whose pods run `section` on that port."""
    host, _, port = address.rpartition(":")
    svc = next((o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == host), None)
    if svc is None:
        return [f"{who}: {address}: no Service {host!r} in the render"]
    out = []
    if headless and svc["spec"].get("clusterIP") != "None":
        out.append(f"{who}: {address}: Service {host} must be headless (clusterIP: None) to resolve every pod")
    if int(port) not in [p["port"] for p in svc["spec"]["ports"]]:
        out.append(f"{who}: {address}: Service {host} has no port {port}")
    pods = selected(fleet, {"matchLabels": svc["spec"].get("selector", {})})
    for m in pods:
        if m.section != section:
            out.append(f"{who}: {address}: Service {host} selects {m.where}, which runs {m.section}, not {section}")
        elif m.settings.port != int(port):
            out.append(f"{who}: {address}: port {port} is not {section}'s port ({section}.port {m.settings.port})")
    return out


def check_routes(objects: list[dict], fleet: list[Member], problems: list[str]) -> None:
    sections = {m.section for m in fleet}
    for m in fleet:
        if m.section == "router":
            backends = m.config.router.backends
            missing = sorted(s for s in sections & set(MODEL_SERVICES) if s not in backends)
            if missing:
                m.problem(f"router.backends lacks {', '.join(missing)}")
            for name, target in backends.items():
                headless = target.startswith("dns:///")
                problems += service_for(
                    objects, fleet, target.removeprefix("dns:///"), name, headless, f"{m.where} router.backends.{name}"
                )
            for address in m.config.router.leases.authorities:
                problems += service_for(
                    objects, fleet, address, "lease_authority", True, f"{m.where} router.leases.authorities"
                )
            if "lease_authority" in sections and not m.config.router.leases.authorities:
                m.problem("lease authorities run, but router.leases.authorities is empty (routers cannot see them)")
        if m.section == "gateway":
            problems += service_for(
                objects, fleet, m.config.gateway.router or "", "router", False, f"{m.where} gateway.router"
            )
        if m.section == "moss_sts" and m.settings.asr == "remote" and "asr" in sections:
            target = asr_address(m.config)
            headless = target.startswith("dns:///")
            problems += service_for(
                objects, fleet, target.removeprefix("dns:///"), "asr", headless, f"{m.where} moss_sts.asr_address"
            )
        if m.section in ("router", "moss_sts") and "brain" in sections:
            url = re.fullmatch(r"https?://([^/]+)/v1", m.config.brain.url)
            if not url:
                m.problem(f"brain.url {m.config.brain.url} is not http://HOST:PORT/v1")
            else:
                problems += service_for(objects, fleet, url.group(1), "brain", False, f"{m.where} brain.base_url")
        if m.section in MODEL_SERVICES:
            authority = m.config.residency.lease_authority
            gpu = getattr(m.settings, "engine", "cpu") == "gpu"
            if "lease_authority" in sections and gpu and not authority:
                m.problem("a GPU engine beside lease authorities must set residency.lease_authority")
            if authority:
                problems += service_for(
                    objects, fleet, authority, "lease_authority", False, f"{m.where} residency.lease_authority"
                )
                host = authority.rpartition(":")[0]
                svc = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == host)
                if svc["spec"].get("internalTrafficPolicy") != "Local":
                    m.problem(f"residency.lease_authority: Service {host} must have internalTrafficPolicy: Local")
                node = m.pod["spec"].get("nodeSelector", {})
                for a in selected(fleet, {"matchLabels": svc["spec"]["selector"]}):
                    if a.workload["kind"] != "DaemonSet":
                        problems.append(f"{a.where}: a lease authority must be a DaemonSet (one per card)")
                    if not set(a.pod["spec"].get("nodeSelector", {}).items()) <= set(node.items()):
                        m.problem(f"runs on nodes ({node}) where {a.where} may not run")


def allows(objects: list[dict], src: dict, src_namespace: dict, dst: Member, port: int) -> bool:
    """Whether the NetworkPolicies let a pod with labels `src` in a namespace with labels `src_namespace` reach
    `dst` on `port`."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy" and matches(o["spec"]["podSelector"], dst.labels)]
    policies = [p for p in policies if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not policies:
        return True
    same = src_namespace.get("kubernetes.io/metadata.name") == NAMESPACE
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = [dst.resolve(p["port"]) for p in rule.get("ports", []) if "port" in p]
            if rule.get("ports") and port not in ports:
                continue
            if not rule.get("from"):
                return True  # no from: every source
            for peer in rule["from"]:
                if "ipBlock" in peer:
                    return True  # pod addresses may fall in it: counted as open
                ok = matches(peer["namespaceSelector"], src_namespace) if "namespaceSelector" in peer else same
                if ok and matches(peer.get("podSelector"), src):
                    return True
    return False


def check_network_policies(objects: list[dict], fleet: list[Member], problems: list[str]) -> None:
    ns = {"kubernetes.io/metadata.name": NAMESPACE}
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        pods = selected(fleet, policy["spec"]["podSelector"])
        if not pods:
            problems.append(f"{where(policy)}: its podSelector selects no pod")
        for rule in policy["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                for m in pods:
                    if m.health_port and m.resolve(p["port"]) == m.health_port:
                        problems.append(
                            f"{where(policy)}: port {p['port']} is {m.where}'s health_port: only the kubelet probes "
                            "it (from the pod's node, which NetworkPolicies do not block); open no rule for it"
                        )
                    elif m.resolve(p["port"]) not in (m.settings.port, m.settings.metrics_port):
                        problems.append(f"{where(policy)}: port {p['port']} is not served by {m.where} ({m.served()})")
            for peer in rule.get("from", []):
                if (
                    "podSelector" in peer
                    and "namespaceSelector" not in peer
                    and not selected(fleet, peer["podSelector"])
                ):
                    problems.append(f"{where(policy)}: a from podSelector {peer['podSelector']} selects no pod")
    by_section: dict[str, list[Member]] = {}
    for m in fleet:
        by_section.setdefault(m.section, []).append(m)
    # Who must reach whom, and that nobody else reaches the model services, the brain and the lease authorities.
    needs = [("router", s) for s in (*MODEL_SERVICES, "brain", "lease_authority")] + [("moss_sts", "brain")]
    needs += [("moss_sts", "asr")]  # its dialogue listens through the asr service (moss_sts.asr remote)
    needs += [(s, "lease_authority") for s in MODEL_SERVICES]
    for src, dst in needs:
        for a in by_section.get(src, []):
            for b in by_section.get(dst, []):
                if not allows(objects, a.labels, ns, b, b.settings.port):
                    problems.append(f"NetworkPolicy: {a.where} may not reach {b.where} on port {b.settings.port}")
    intruder = {"app.kubernetes.io/name": "intruder", "app.kubernetes.io/part-of": "voicefleet"}
    for m in fleet:
        if m.section in ("router", "gateway"):  # the front doors: exposed as you choose
            continue
        for labels, namespace, what in ((intruder, ns, "another pod of the namespace"), ({}, {}, "another namespace")):
            if allows(objects, labels, namespace, m, m.settings.port):
                problems.append(f"NetworkPolicy: {what} may reach {m.where} on port {m.settings.port}")
        if allows(objects, {}, MONITORING_NAMESPACE, m, m.settings.port):
            problems.append(f"NetworkPolicy: the monitoring namespace may reach {m.where} on port {m.settings.port}")
        if m.settings.metrics_port and not allows(objects, {}, MONITORING_NAMESPACE, m, m.settings.metrics_port):
            problems.append(f"NetworkPolicy: Prometheus may not scrape {m.where} on port {m.settings.metrics_port}")


def check_scaling(objects: list[dict], fleet: list[Member], problems: list[str]) -> None:
    gauges = {g._name: g for g in vars(metrics).values() if isinstance(g, prometheus_client.Gauge)}
    for hpa in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        target = next((o for o in objects if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"]), None)
        if target is None:
            problems.append(f"{where(hpa)}: scales {ref['kind']}/{ref['name']}, which is not in the render")
        elif "replicas" in target["spec"]:
            problems.append(f"{where(hpa)}: {where(target)} sets replicas, which every apply would reset")
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] != "Pods":
                continue
            name, selector = metric["pods"]["metric"]["name"], metric["pods"]["metric"].get("selector", {})
            gauge = gauges.get(name)
            if gauge is None:
                problems.append(f"{where(hpa)}: metric {name} is not defined in services/common/metrics.py")
                continue
            unknown = set(selector.get("matchLabels", {})) - set(gauge._labelnames)
            if unknown:
                problems.append(f"{where(hpa)}: {name} has no label {', '.join(sorted(unknown))}")
    for pdb in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        pods = [m for m in fleet if matches(pdb["spec"]["selector"], m.labels)]
        if not pods:
            problems.append(f"{where(pdb)}: its selector selects no pod")
        for hpa in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
            if pods and hpa["spec"]["scaleTargetRef"]["name"] == pods[0].workload["metadata"]["name"]:
                if hpa["spec"]["minReplicas"] <= pdb["spec"].get("minAvailable", 0):
                    problems.append(f"{where(pdb)}: minAvailable must be below {where(hpa)}'s minReplicas")


def check_monitoring(objects: list[dict], fleet: list[Member], problems: list[str]) -> None:
    for monitor in (o for o in objects if o["kind"] == "PodMonitor"):
        pods = selected(fleet, monitor["spec"]["selector"])
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            scraped = [m for m in pods if m.resolve(endpoint["port"]) is not None]
            if not scraped:
                problems.append(f"{where(monitor)}: no selected pod has a port {endpoint['port']!r}")
            for m in scraped:
                if m.resolve(endpoint["port"]) != m.settings.metrics_port:
                    problems.append(
                        f"{where(monitor)}: port {endpoint['port']} of {m.where} is {m.resolve(endpoint['port'])}, "
                        f"not its metrics port ({m.section}.metrics_port {m.settings.metrics_port})"
                    )
        missed = [m.where for m in fleet if m.settings.metrics_port and m not in pods]
        if missed:
            problems.append(f"{where(monitor)}: does not scrape {', '.join(missed)}")


def check_security(fleet: list[Member], problems: list[str]) -> None:
    """TLS, mTLS and the fleet token (docs/security.md): the same in every gRPC process of the fleet (a router with
    TLS cannot call a plaintext backend, nor the other way round), files from a mounted Secret, no fleet token
    without TLS. The brain (HTTP) has no part in it."""
    grpc_members = [m for m in fleet if m.section != "brain"]
    for m in grpc_members:
        s = m.config.security
        for field in ("tls_cert", "tls_key", "tls_ca"):
            path = getattr(s, field)
            if path and not m.secret_file(path):
                m.problem(f"security.{field} {path} is not a file of a Secret mounted in the container")
        if s.fleet_token and not s.tls_cert:
            m.problem(
                "security.fleet_token is set without TLS: the token travels over loopback only (docs/security.md), "
                "so calls between pods would fail; set security.tls_cert, tls_key, tls_ca too"
            )

    def settings(m: Member) -> str:
        s = m.config.security
        return f"TLS {'on' if s.tls_cert else 'off'}, mtls {s.mtls}, fleet token {'set' if s.fleet_token else 'unset'}"

    kinds = {settings(m) for m in grpc_members}
    if len(kinds) > 1:
        problems.append(
            "security differs between the fleet's gRPC containers (they call each other): "
            + "; ".join(f"{m.where}: {settings(m)}" for m in grpc_members)
        )
    elif len({m.config.security.fleet_token for m in grpc_members}) > 1:
        problems.append("security.fleet_token differs between the fleet's gRPC containers")


# prometheus-operator's objects: the fields used here, each checked by hand (kubernetes-validate has no schema).
CRD_FIELDS = {
    "PodMonitor": {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"},
    "ServiceMonitor": {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels"},
    "PrometheusRule": {"groups"},
}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "honorLabels", "relabelings", "metricRelabelings"}


def crd_problems(obj: dict) -> list[str]:
    """Minimal checks of a monitoring.coreos.com/v1 object (kubernetes-validate has no schema for it)."""
    out: list[str] = []
    kind = obj.get("kind")
    if obj.get("apiVersion") != "monitoring.coreos.com/v1" or kind not in CRD_FIELDS:
        return [f"{kind}: not a monitoring.coreos.com/v1 kind checked here ({', '.join(CRD_FIELDS)})"]
    if set(obj) - {"apiVersion", "kind", "metadata", "spec"} or set(obj["metadata"]) - {"name", "namespace", "labels"}:
        out.append(f"{where(obj)}: unknown top-level or metadata fields")
    spec = obj.get("spec", {})
    if set(spec) - CRD_FIELDS[kind]:
        out.append(f"{where(obj)}: unknown spec fields {sorted(set(spec) - CRD_FIELDS[kind])}")
    if kind in ("PodMonitor", "ServiceMonitor"):
        endpoints = spec.get("podMetricsEndpoints" if kind == "PodMonitor" else "endpoints") or []
        if not spec.get("selector", {}).get("matchLabels") or not endpoints:
            out.append(f"{where(obj)}: needs selector.matchLabels and at least one endpoint")
        for e in endpoints:
            if set(e) - ENDPOINT_FIELDS or not isinstance(e.get("port"), str):
                out.append(f"{where(obj)}: endpoint {e}: known fields only, and a named port")
            if "interval" in e and not re.fullmatch(r"\d+[smh]", e["interval"]):
                out.append(f"{where(obj)}: interval {e['interval']!r} is not a duration")
    if kind == "PrometheusRule":
        names = []
        for group in spec.get("groups", []):
            if set(group) - {"name", "interval", "rules"} or not group.get("rules"):
                out.append(f"{where(obj)}: group {group.get('name')}: name and rules only")
            names.append(group.get("name"))
            for rule in group.get("rules", []):
                if ("record" in rule) == ("alert" in rule) or not isinstance(rule.get("expr"), str):
                    out.append(f"{where(obj)}: rule {rule}: one of record/alert, and an expr")
                if set(rule) - {"record", "alert", "expr", "for", "labels", "annotations"}:
                    out.append(f"{where(obj)}: rule {rule.get('record') or rule.get('alert')}: unknown fields")
        if len(names) != len(set(names)):
            out.append(f"{where(obj)}: group names repeat")
    return out


# --- the tests ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_validates_against_the_kubernetes_schemas(kustomization):
    objects = render(kustomization)
    assert objects, f"deploy/k8s/{kustomization} rendered nothing"
    problems = []
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            problems += crd_problems(obj)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
                problems.append(f"Kubernetes {version}: {where(obj)}: {str(e).splitlines()[0]}")
        if obj["kind"] != "Namespace" and obj["metadata"].get("namespace") != NAMESPACE:
            problems.append(f"{where(obj)}: not in namespace {NAMESPACE}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("fleet", list(fleet_renders()))
def test_manifests_agree_with_the_services_config(fleet):
    problems = fleet_problems(render(*fleet_renders()[fleet]))
    assert not problems, "\n".join(problems)


def test_the_fleets_hold_what_the_overlays_promise():
    kinds = {k: {(o["kind"], o["metadata"]["name"]) for o in render(k)} for k in KUSTOMIZATIONS}
    workloads = {
        ("Deployment", n) for n in ("router", "cosyvoice-tts", "qwen-tts", "asr", "moss-sts", "brain", "gateway")
    }
    assert workloads <= kinds["base"]
    assert {("Service", "gateway"), ("Ingress", "gateway")} <= kinds["base"]
    headless = {("Service", f"{n}-headless") for n in ("cosyvoice-tts", "qwen-tts", "asr", "moss-sts")}
    assert headless | {("Service", "router"), ("Service", "brain"), ("Secret", "voicefleet-security")} <= kinds["base"]
    assert {("DaemonSet", "lease-authority"), ("PersistentVolumeClaim", MODELS_CLAIM)} <= kinds["overlays/gpu"]
    assert {("HorizontalPodAutoscaler", "router"), ("PodDisruptionBudget", "router")} == kinds["overlays/scale"]
    assert {"PodMonitor", "PrometheusRule", "ConfigMap"} == {kind for kind, _ in kinds["overlays/monitoring"]}
    assert (
        kinds["overlays/production"] == kinds["overlays/gpu"] | kinds["overlays/scale"] | kinds["overlays/monitoring"]
    )
    assert kinds["overlays/tls"] == kinds["base"]  # the same fleet, its settings changed
    # Every object of every render carries the part-of label the PodMonitor and NetworkPolicies select on.
    for k in KUSTOMIZATIONS:
        for obj in render(k):
            assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "voicefleet", (k, where(obj))
    scale = {o["kind"]: o for o in render("overlays/scale")}
    assert scale["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 3
    assert scale["PodDisruptionBudget"]["spec"]["minAvailable"] == 2


def test_gpu_overlay_runs_every_model_on_its_gpu_engine_with_the_compose_memory_plan():
    problems: list[str] = []
    fleet = {m.section: m for m in members(render("overlays/gpu"), problems)}
    assert not problems, "\n".join(problems)
    plan = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())["x-plan"]
    authority = fleet["lease_authority"].settings.port
    assert fleet["lease_authority"].workload["kind"] == "DaemonSet"
    for name in MODEL_SERVICES:
        m = fleet[name]
        assert m.settings.engine == "gpu", name
        assert m.container["image"].endswith(":gpu"), name
        assert {k: v for k, v in m.env_vars.items() if k in plan} == {k: str(v) for k, v in plan.items()}, name
        assert m.config.residency.lease_authority == f"lease-authority:{authority}"  # the node-local Service
    assert fleet["router"].config.router.leases.authorities == [f"lease-authority-headless:{authority}"]
    base = {m.section: m for m in members(render("base"), problems)}
    assert all(base[name].settings.engine == "cpu" for name in MODEL_SERVICES)
    assert not base["router"].config.router.leases.authorities and "lease_authority" not in base


def test_tls_is_on_in_tls_and_production_and_probes_ask_the_plaintext_health_port():
    """overlays/tls (CPU) and overlays/production (GPU) switch TLS, mTLS and the fleet token on in every gRPC container
    with the Secret's files and key (the gateway too: it serves HTTPS and calls the router with them); base and
    overlays/gpu leave them off. Everywhere the gRPC probes ask health_port."""
    files = {"tls_cert": f"{TLS_DIR}/tls.crt", "tls_key": f"{TLS_DIR}/tls.key", "tls_ca": f"{TLS_DIR}/ca.crt"}
    for kustomization in FLEETS:
        problems: list[str] = []
        objects = render(kustomization)
        fleet = [m for m in members(objects, problems) if m.section != "brain"]
        assert not problems, "\n".join(problems)
        secret = next(o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == "voicefleet-security")
        on = kustomization in ("overlays/tls", "overlays/production")
        for m in fleet:
            s = m.config.security
            if on:
                assert {f: getattr(s, f) for f in files} == files, (kustomization, m.where)
                assert s.mtls and s.fleet_token == secret["stringData"]["fleet-token"], (kustomization, m.where)
            else:
                assert not (s.tls_cert or s.tls_ca or s.mtls or s.fleet_token), (kustomization, m.where)
            if m.section == "gateway":  # HTTP: no grpc.health port; its probes are the health probe and TCP
                continue
            assert m.health_port and m.health_port == m.settings.port + 10, (kustomization, m.where)  # the scheme
            probes = [m.container[k]["grpc"]["port"] for k in ("startupProbe", "readinessProbe", "livenessProbe")]
            assert probes == [m.health_port] * 3, (kustomization, m.where)
        assert {m.section for m in fleet} >= {"router", *MODEL_SERVICES}, kustomization
    # production's copy of the tls patches: the same Deployments, and the lease authorities with the same env.
    tls = list(yaml.safe_load_all((K8S / "overlays/tls/security.yaml").read_text()))
    production = list(yaml.safe_load_all((K8S / "overlays/production/security.yaml").read_text()))
    assert [d for d in production if d["kind"] == "Deployment"] == tls
    envs = [d["spec"]["template"]["spec"]["containers"][0]["env"] for d in production]
    assert all(env == envs[0] for env in envs) and len(production) == len(tls) + 1


def test_monitoring_copies_match_their_sources():
    """kustomize reads nothing above a kustomization: the dashboard and the rules are copies (deploy/k8s/sync.py)."""
    spec = importlib.util.spec_from_file_location("k8s_sync", K8S / "sync.py")
    sync = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync)
    stale = [str(p.relative_to(ROOT)) for p in sync.stale()]
    assert not stale, f"{', '.join(stale)} differ from their sources: run python deploy/k8s/sync.py"
    objects = {o["kind"]: o for o in render("overlays/monitoring")}
    dashboard = objects["ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["voicefleet.json"] == (DEPLOY / "grafana/dashboards/voicefleet.json").read_text()
    rules = yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())
    assert objects["PrometheusRule"]["spec"]["groups"] == rules["groups"]


# How the checker names what is wrong: a rendered object is changed in memory, the check must fail naming it.
def _deployment(objects, name):
    return next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)


def _container(objects, name):
    return _deployment(objects, name)["spec"]["template"]["spec"]["containers"][0]


def _service(objects, name):
    return next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == name)


def _set_config(objects, old, new):
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("voicefleet-config"))
    assert old in cm["data"]["voicefleet.yaml"]
    cm["data"]["voicefleet.yaml"] = cm["data"]["voicefleet.yaml"].replace(old, new)


def _pod(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)["spec"]["template"]["spec"]


def _port(container, name):
    return next(p for p in container["ports"] if p["name"] == name)


def _policy(objects, name):
    return next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == name)["spec"]


MUTATIONS = {
    "containerPort": (lambda o: _container(o, "asr")["ports"][0].update(containerPort=50099), "containerPort 50099"),
    "probe port": (lambda o: _container(o, "qwen-tts")["readinessProbe"]["grpc"].update(port=50052), "port 50052"),
    "liveness name": (
        lambda o: _container(o, "router")["livenessProbe"]["grpc"].update(service="voice.v1.Fleet"),
        "'voice.v1.Fleet'",
    ),
    "Service targetPort": (
        lambda o: _service(o, "cosyvoice-tts-headless")["spec"]["ports"][0].update(targetPort=50053),
        "targets 50053",
    ),
    "backend port in the config": (
        lambda o: _set_config(o, "asr-headless:50054", "asr-headless:50064"),
        "port 50064",
    ),
    "backend Service name": (
        lambda o: _set_config(o, "dns:///moss-sts-headless", "dns:///moss-sts"),
        "no Service 'moss-sts'",
    ),
    "config port": (lambda o: _set_config(o, "  port: 50055", "  port: 50075"), "50075"),
    "image": (lambda o: _container(o, "brain").update(image="voicefleet/llm:latest"), "voicefleet/llm"),
    "grace": (
        lambda o: _deployment(o, "moss-sts")["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=11),
        "terminationGracePeriodSeconds 11",
    ),
    "unknown env override": (
        lambda o: _container(o, "asr")["env"].append({"name": "VOICEFLEET_ASR__PORTT", "value": "1"}),
        "asr.portt",
    ),
    "network policy port": (
        lambda o: _policy(o, "brain-ingress")["ingress"][0]["ports"][0].update(port=8093),
        "port 8092",
    ),
    "metrics port": (
        lambda o: _port(_container(o, "router"), "metrics").update(containerPort=9399),
        "containerPort 9399",
    ),
    "probe on the gRPC port": (
        lambda o: _container(o, "asr")["livenessProbe"]["grpc"].update(port=50054),
        "livenessProbe grpc port 50054 is not its health port (asr.health_port 50064)",
    ),
    "health port not declared": (
        lambda o: _container(o, "moss-sts")["ports"].remove(_port(_container(o, "moss-sts"), "health")),
        "moss_sts.health_port 50065 is not among its containerPorts",
    ),
    "no health_port in the config": (
        lambda o: _set_config(o, "  health_port: 50063", "  # health_port: 50063"),
        "qwen_tts.health_port is not set",
    ),
    "Service forwarding the health port": (
        lambda o: _service(o, "router")["spec"]["ports"][0].update(port=50061, targetPort=50061),
        "health_port",
    ),
    "NetworkPolicy opening the health port": (
        lambda o: _policy(o, "asr-ingress")["ingress"][0]["ports"][0].update(port=50064),
        "port 50064 is Deployment/asr container asr's health_port",
    ),
    "fleet token without TLS": (
        lambda o: _container(o, "router")["env"].append(
            {
                "name": "VOICEFLEET_SECURITY__FLEET_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "voicefleet-security", "key": "fleet-token"}},
            }
        ),
        "security.fleet_token is set without TLS",
    ),
}


def _env(objects, kind, name, var, value):
    env = _pod(objects, kind, name)["containers"][0]["env"]
    next(e for e in env if e["name"] == var)["value"] = value


GPU_MUTATIONS = {
    "lease authority Service not node-local": (
        lambda o: _service(o, "lease-authority")["spec"].pop("internalTrafficPolicy"),
        "internalTrafficPolicy: Local",
    ),
    "no GPU": (
        lambda o: _container(o, "asr")["resources"]["limits"].pop("nvidia.com/gpu"),
        "no nvidia.com/gpu limit",
    ),
    "authorities through the node-local Service": (
        lambda o: _env(o, "Deployment", "router", "VOICEFLEET_ROUTER__LEASES__AUTHORITIES", "lease-authority:50056"),
        "must be headless",
    ),
    "authority port": (
        lambda o: _env(o, "Deployment", "moss-sts", "VOICEFLEET_RESIDENCY__LEASE_AUTHORITY", "lease-authority:50057"),
        "no port 50057",
    ),
    "authority on other nodes": (
        lambda o: _pod(o, "DaemonSet", "lease-authority")["nodeSelector"].update({"example.com/pool": "other"}),
        "may not run",
    ),
    "weights not mounted": (
        lambda o: _container(o, "cosyvoice-tts").update(
            volumeMounts=[v for v in _container(o, "cosyvoice-tts")["volumeMounts"] if v["name"] != "models"]
        ),
        "/models/Fun-CosyVoice3-0.5B is not on the PersistentVolumeClaim voicefleet-models",
    ),
    "lease authority metrics port": (
        lambda o: _port(_pod(o, "DaemonSet", "lease-authority")["containers"][0], "metrics").update(containerPort=9307),
        "containerPort 9307",
    ),
    "lease authority probed on its gRPC port": (
        lambda o: _pod(o, "DaemonSet", "lease-authority")["containers"][0]["startupProbe"]["grpc"].update(port=50056),
        "startupProbe grpc port 50056 is not its health port (lease_authority.health_port 50066)",
    ),
    "model services open to every pod": (
        lambda o: _policy(o, "asr-ingress")["ingress"][0].pop("from"),
        "another pod of the namespace may reach Deployment/asr",
    ),
}


def _drop_env(objects, name, prefix):
    container = _container(objects, name)
    container["env"] = [e for e in container["env"] if not e["name"].startswith(prefix)]


TLS_MUTATIONS = {
    "probe on the TLS port": (
        lambda o: _container(o, "qwen-tts")["readinessProbe"]["grpc"].update(port=50053),
        "readinessProbe grpc port 50053 is qwen_tts.port, which speaks TLS (security.tls_cert is set): the kubelet's "
        "gRPC probes speak plaintext only and would always fail; probe qwen_tts.health_port 50063",
    ),
    "router probed on its TLS port": (
        lambda o: _container(o, "router")["livenessProbe"]["grpc"].update(port=50051),
        "livenessProbe grpc port 50051 is router.port, which speaks TLS",
    ),
    "one service without TLS": (
        lambda o: _drop_env(o, "asr", "VOICEFLEET_SECURITY__"),
        "Deployment/asr container asr: TLS off, mtls False, fleet token unset",
    ),
    "fleet token alone": (
        lambda o: [_drop_env(o, "cosyvoice-tts", f"VOICEFLEET_SECURITY__{v}") for v in ("TLS", "MTLS")],
        "security.fleet_token is set without TLS",
    ),
    "certificate not from the Secret": (
        lambda o: _env(o, "Deployment", "moss-sts", "VOICEFLEET_SECURITY__TLS_CA", f"{TLS_DIR}/ca.pem"),
        f"security.tls_ca {TLS_DIR}/ca.pem is not a file of a Secret mounted in the container",
    ),
}


# Each kustomization's mutations: a change to a rendered object the checker must catch, and words its problem names.
MUTATED = {"base": MUTATIONS, "overlays/gpu": GPU_MUTATIONS, "overlays/tls": TLS_MUTATIONS}


@pytest.mark.parametrize("kustomization,mutation", [(k, m) for k, mutations in MUTATED.items() for m in mutations])
def test_checker_catches(kustomization, mutation):
    change, named = MUTATED[kustomization][mutation]
    objects = render(kustomization)
    assert not fleet_problems(objects)
    change(objects)
    problems = fleet_problems(objects)
    assert problems, f"changing the {mutation} went unnoticed"
    assert any(named in p for p in problems), f"no problem names {named!r}:\n" + "\n".join(problems)


def test_checker_catches_a_wrong_podmonitor_port_and_a_monitoring_crd_typo():
    objects = render("base", "overlays/monitoring")
    monitor = next(o for o in objects if o["kind"] == "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = "grpc"
    assert any("not its metrics port" in p for p in fleet_problems(objects))
    monitor["spec"]["podMetricEndpoints"] = monitor["spec"].pop("podMetricsEndpoints")
    assert any("unknown spec fields ['podMetricEndpoints']" in p for p in crd_problems(monitor))


def _normalized(objects: list[dict]) -> dict:
    """By kind/name, generator hash suffixes dropped (each kustomize hashes differently), volumes by name (a set)."""
    text = json.dumps(objects)
    for generated in re.findall(r'"name": "(voicefleet-[a-z-]+-[a-z0-9]{10})"', text):
        text = text.replace(generated, generated[:-11])
    out = {}
    for obj in json.loads(text):
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        if "volumes" in pod:
            pod["volumes"].sort(key=lambda v: v["name"])
        out[where(obj)] = obj
    return out


def test_kustomize_v2_renders_the_same_objects():
    """kubectl 1.20 (Debian bookworm's kubernetes-client) embeds kustomize v2.0.3: a CI machine that installs it
    must get the same manifests. scripts/k8s-check.sh fetches it into build/ and sets KUBECTL_OLD."""
    fetched = ROOT / "build/k8s/kubectl-1.20/usr/bin/kubectl"  # where scripts/k8s-check.sh puts it
    old = os.environ.get("KUBECTL_OLD") or (str(fetched) if fetched.exists() else "")
    if not old:
        pytest.skip("no kubectl 1.20 (KUBECTL_OLD): `make k8s-check` fetches Debian's and compares the renders")
    version = subprocess.run([old, "version", "--client"], capture_output=True, text=True, check=False).stdout
    assert 'Minor:"20"' in version or "v1.20" in version, f"KUBECTL_OLD is not kubectl 1.20: {version}"
    for k in KUSTOMIZATIONS:
        new, legacy = _normalized(render(k)), _normalized(render(k, binary=old))
        assert new.keys() == legacy.keys(), k
        for name in new:
            assert new[name] == legacy[name], f"{k}: {name} renders differently with kustomize v2.0.3"
