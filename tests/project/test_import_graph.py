"""The layers of docs/architecture.md, checked on the imports themselves (parsed with ast, lazy imports included).

contracts (voice.*) -> runtime (services.common) -> residency (services.residency), remote engines
(services.remote), orchestration (services.conversation) and local engines (services.engines) -> model services
and the brain, side by side (none imports another) -> router, gateway, CLI. A layer imports only layers below it
(MAY_IMPORT).
Each Dockerfile stage also has to copy every module its entry point imports (so an image never imports what it
does not carry, and the router's image carries no model service's code).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_SERVICES = ("asr", "cosyvoice_tts", "qwen_tts", "moss_sts")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / "services").rglob("*.py"))}


MODULES = _modules()

# Config sections: one module each in services/common/config/, composed by its __init__ (the loader), at the bottom
# with the shared runtime: services import their section, a section imports only the config package's base.
CONFIG_PACKAGE = "services.common.config"
SECTIONS = {m for m in MODULES if m.startswith(f"{CONFIG_PACKAGE}.") and m != f"{CONFIG_PACKAGE}.base"}


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (the longest prefix that is one), or None for third-party code."""
    if not name.startswith("services"):
        return None
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> set[str]:
    """Project modules that ``module`` imports, at the top or inside functions."""
    tree = ast.parse(MODULES[module].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {r for t in targets if (r := _resolve(t)) is not None and r != module}
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "services"


def _violations(allowed) -> list[str]:
    return [f"{m} imports {dep}" for m, deps in sorted(GRAPH.items()) for dep in sorted(deps) if not allowed(m, dep)]


def test_the_graph_is_read():
    # The checks below mean something only if the parser sees the imports the code has.
    assert "services.conversation.cascade" in GRAPH["services.router.service"]
    assert "services.conversation.dialogue" in GRAPH["services.moss_sts.moss_engine"]
    assert "services.common.config.base" in GRAPH["services.common.config.asr"]
    assert "services.common.config.asr" in GRAPH["services.engines.asr.cpu_engine"]
    assert "services.remote.base" in GRAPH["services.remote.asr"]


# The layers (docs/architecture.md), bottom up: what each may import besides itself and the root package. Model
# services sit side by side: none imports another, nor the router, the gateway or the CLI.
SHARED = ("common",)
BELOW_SERVICES = ("common", "residency", "remote", "conversation", "engines")
MAY_IMPORT = {
    "common": SHARED,  # the shared runtime, config sections included
    "residency": SHARED,  # leases, holders, model residency, the per-card lease authority
    "remote": SHARED,  # gRPC clients that are engines
    "conversation": SHARED,  # turn-taking over engine interfaces only (local or remote)
    "engines": SHARED,  # local engines more than one deployable runs in process
    **{name: BELOW_SERVICES for name in MODEL_SERVICES},
    "brain": SHARED,
    "router": ("common", "residency", "remote", "conversation"),
    "gateway": SHARED,  # a client of the router, like the CLI
    "cli": ("common", "residency"),  # residency: the lease tables in `status`
}
DEPLOYABLES = (*MODEL_SERVICES, "brain", "router", "gateway")


def test_every_package_has_a_layer():
    # A new folder under services/ must be placed in MAY_IMPORT (and in docs/architecture.md) before it lands.
    assert {_layer(m) for m in MODULES} - {"services"} == set(MAY_IMPORT)


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_each_layer_imports_only_the_layers_below_it(layer):
    def allowed(m: str, dep: str) -> bool:
        return _layer(m) != layer or _layer(dep) in (layer, "services", *MAY_IMPORT[layer])

    assert _violations(allowed) == []


def test_a_model_service_importing_another_would_be_found():
    GRAPH["services.moss_sts.service"].add("services.asr.service")
    try:
        assert "services.moss_sts.service imports services.asr.service" in _violations(
            lambda m, dep: _layer(m) != "moss_sts" or _layer(dep) in ("moss_sts", "services", *MAY_IMPORT["moss_sts"])
        )
    finally:
        GRAPH["services.moss_sts.service"].discard("services.asr.service")


def test_config_sections_import_only_the_config_base():
    base = ("services", "services.common", CONFIG_PACKAGE, f"{CONFIG_PACKAGE}.base")

    def allowed(m: str, dep: str) -> bool:
        return m not in SECTIONS or dep in base

    assert _violations(allowed) == []


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles() == []


def test_a_cycle_would_be_found():
    GRAPH["services.common.errors"].add("services.common.rpc")  # rpc imports errors: a loop
    try:
        assert _cycles() == [["services.common.errors", "services.common.rpc"]]
    finally:
        GRAPH["services.common.errors"].discard("services.common.rpc")


# --- images ----------------------------------------------------------------------------------------------------
def _stages(dockerfile: Path) -> list[tuple[str, list[str], str]]:
    """(stage name, COPY sources under services/, entry module) for each stage that runs a service module."""
    stages, current = [], None
    for line in dockerfile.read_text().splitlines():
        if line.startswith("FROM "):
            current = {"name": line.split(" AS ")[-1] if " AS " in line else "", "copies": [], "cmd": ""}
            stages.append(current)
        elif line.startswith("COPY ") and current is not None:
            current["copies"] += [s.rstrip("/") for s in line.split()[1:-1] if s.startswith("services")]
        elif line.startswith("CMD ") and current is not None:
            m = re.search(r'"-m", "([\w.]+)"', line)
            current["cmd"] = m.group(1) if m else ""
    return [(s["name"], s["copies"], s["cmd"]) for s in stages if s["cmd"].startswith("services")]


def _closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += GRAPH[m]
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # packages run their __init__ first
    return seen


IMAGES = [
    pytest.param(dockerfile, name, copies, cmd, id=f"{dockerfile.parent.name}:{name or 'image'}")
    for dockerfile in sorted((ROOT / "services").glob("*/Dockerfile"))
    for name, copies, cmd in _stages(dockerfile)
]


@pytest.mark.parametrize(("dockerfile", "stage", "copies", "entry"), IMAGES)
def test_each_image_copies_what_its_entry_point_imports(dockerfile, stage, copies, entry):
    entry_module = f"{entry}.__main__" if f"{entry}.__main__" in MODULES else entry
    missing = []
    for m in sorted(_closure(entry_module)):
        path = MODULES[m].relative_to(ROOT).as_posix()
        if not any(path == c or path.startswith(c + "/") for c in copies):
            missing.append(path)
    assert missing == [], f"{dockerfile.relative_to(ROOT)} ({stage or 'the image'}) does not copy {missing}"


@pytest.mark.parametrize(("dockerfile", "stage", "copies", "entry"), IMAGES)
def test_no_image_copies_another_deployables_code(dockerfile, stage, copies, entry):
    own = dockerfile.parent.name
    others = tuple(f"services/{name}" for name in DEPLOYABLES if name != own)
    carried = [c for c in copies if c == "services" or c.startswith(others)]
    assert carried == [], f"{dockerfile.relative_to(ROOT)} ({stage or 'the image'}) copies {carried}"
