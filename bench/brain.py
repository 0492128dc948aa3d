"""Brain (llama.cpp + SmolLM2-135M on CPU): generation tokens/s and time to first token of the installed build.

The brain is started as the fleet starts it (services/brain/, brain.n_threads threads) on a free
port, and asked the same chat question RUNS times (temperature 0, max_tokens 96, streamed). Measured: time to the
first streamed token, and completion tokens / generation time (first token to last). The JSON says which
llama_cpp package ran, so the portable x86-64-v3 build (scripts/build-brain-wheel.sh) can be compared with another
build by putting it first on PYTHONPATH (docs/conversation.md#the-brain).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.harness import Row
from services.cli.fleet import LocalFleet

RUNS = 20
QUESTION = "Explain in a few sentences why the sky is blue."


def _ask(address: str) -> tuple[float, float, int]:
    """(seconds to first token, seconds first -> last token, completion tokens)."""
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": QUESTION}],
            "max_tokens": 96,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    request = urllib.request.Request(
        f"http://{address}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    first = last = None
    pieces = 0
    usage_tokens = 0
    with urllib.request.urlopen(request, timeout=120) as reply:
        for raw in reply:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("usage"):
                usage_tokens = event["usage"].get("completion_tokens", 0)
            if any(c.get("delta", {}).get("content") for c in event.get("choices", [])):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                pieces += 1
    return (first - t0), (last - first), (usage_tokens or pieces)


def run():
    import llama_cpp

    ttft = Row("time to first token", "s")
    speed = Row("generation tokens/s", "tok/s")
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(Path(tmp), ("brain",))
        try:
            address = fleet.config.brain.address
            _ask(address)  # warm-up
            for _ in range(RUNS):
                first, generating, tokens = _ask(address)
                ttft.samples.append(first)
                if generating > 0 and tokens > 1:
                    speed.samples.append((tokens - 1) / generating)
        finally:
            fleet.stop()
    return [ttft, speed], {
        "llama_cpp": f"{llama_cpp.__version__} from {Path(llama_cpp.__file__).parent}",
        "threads": fleet.config.brain.n_threads,
    }
