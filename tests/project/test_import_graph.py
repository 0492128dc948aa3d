"""The layers of docs/architecture.md, checked on the imports themselves (parsed with ast, lazy imports included).

contracts (voice.*) -> runtime (services.common) -> residency (services.residency), remote engines
(services.remote) and orchestration (services.conversation) -> model services -> router, CLI. A layer imports
only layers below it; the exceptions are named here and in docs/architecture.md.
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
# Engines a model service may take from another model service: moss_sts's cascade in a box speaks with them, and
# listens with them when moss_sts.asr is local. Nothing else of a model service is shared, and no other service
# takes any (the asr evaluation, which speaks with both TTS engines, lives in bench/).
SHARED_ENGINES = {
    "moss_sts": {
        "services.asr.cpu_engine",
        "services.asr.gpu_engine",
        "services.cosyvoice_tts.piper_engine",
        "services.qwen_tts.espeak_engine",
    }
}


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
    assert "services.common.config.asr" in GRAPH["services.asr.cpu_engine"]
    assert "services.remote.base" in GRAPH["services.remote.asr"]


def test_router_imports_only_the_runtime_residency_remote_engines_the_conversation_package_and_itself():
    def allowed(m: str, dep: str) -> bool:
        layer = _layer(dep)
        return _layer(m) != "router" or layer in ("router", "common", "residency", "remote", "conversation", "services")

    assert _violations(allowed) == []


def test_runtime_orchestration_and_remote_engines_import_no_service():
    def allowed(m: str, dep: str) -> bool:
        layer, dep_layer = _layer(m), _layer(dep)
        if layer == "common":
            return dep_layer in ("common", "services")
        if layer == "conversation":
            return dep_layer in ("common", "conversation", "services")
        if layer == "remote":
            # gRPC clients of a backend: the contracts and the runtime, never the router or a model service.
            return dep_layer in ("common", "remote", "services")
        return True

    assert _violations(allowed) == []


def test_residency_imports_only_the_runtime():
    # Leases, holders, model residency and the per-card lease authority: a layer of their own above the runtime,
    # below the model services, the router and the CLI (which all may import it).
    def allowed(m: str, dep: str) -> bool:
        return _layer(m) != "residency" or _layer(dep) in ("residency", "common", "services")

    assert _violations(allowed) == []


def test_config_sections_import_only_the_config_base():
    base = ("services", "services.common", CONFIG_PACKAGE, f"{CONFIG_PACKAGE}.base")

    def allowed(m: str, dep: str) -> bool:
        return m not in SECTIONS or dep in base

    assert _violations(allowed) == []


def test_model_services_share_only_the_named_engines():
    def allowed(m: str, dep: str) -> bool:
        layer, dep_layer = _layer(m), _layer(dep)
        if layer not in MODEL_SERVICES or dep_layer == layer:
            return True
        if dep_layer in MODEL_SERVICES:
            return dep in SHARED_ENGINES.get(layer, ())
        return dep_layer in ("common", "residency", "remote", "conversation", "services")

    assert _violations(allowed) == []


def test_cli_talks_to_the_fleet_only_through_the_runtime_and_residency():
    def allowed(m: str, dep: str) -> bool:
        return _layer(m) != "cli" or _layer(dep) in ("cli", "common", "residency", "services")

    assert _violations(allowed) == []


def test_gateway_talks_to_the_fleet_only_through_the_runtime():
    # The gateway is a client of the router (gRPC contracts + the shared runtime), like the CLI.
    def allowed(m: str, dep: str) -> bool:
        return _layer(m) != "gateway" or _layer(dep) in ("gateway", "common", "services")

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


def test_the_router_image_carries_no_model_service_code():
    (router,) = [p for p in IMAGES if p.values[0].parent.name == "router"]
    _, _, copies, _ = router.values
    carried = [c for c in copies if c.startswith(tuple(f"services/{name}" for name in MODEL_SERVICES))]
    assert carried == []
