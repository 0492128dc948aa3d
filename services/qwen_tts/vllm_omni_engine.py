"""GPU engine of qwen_tts (streaming): Qwen3-TTS CustomVoice served by a vLLM-Omni sidecar on loopback.

Why a sidecar and not vLLM-Omni in process: vllm-omni 0.30 needs vllm and transformers 5.x and runs its own
multi-stage engine (talker -> code2wav over shared memory, its own processes and CUDA graphs); qwen-tts pins
transformers 4.57.3. One process cannot hold both, and the sidecar's OpenAI-compatible server is vLLM-Omni's
supported, documented surface (``vllm-omni serve MODEL --omni``). The price is one loopback HTTP hop (well under
a millisecond per chunk) and a second process to supervise, which this engine does itself when
``qwen_tts.gpu.launch_sidecar`` is true.

Wire format (vllm-omni 0.30, ``POST /v1/audio/speech``): JSON ``{input, voice, language, task_type:
"CustomVoice", response_format: "pcm", stream: true, stream_format: "sse", initial_codec_chunk_frames, seed}``;
the answer is Server-Sent Events: ``speech.audio.delta`` (``audio``: base64 s16le mono PCM at 24 kHz),
then ``speech.audio.done``, or ``speech.audio.error``. ``GET /v1/audio/voices`` lists the speakers, ``GET
/health`` says when the server is up.

Older sidecars: the SSE parser takes the event type from the ``event:`` line or, where a server sends only
``data:`` lines, from the JSON's ``type`` (OpenAI's own speech stream format), and accepts a ``[DONE]`` sentinel.
A vLLM-Omni that predates streaming speech (it answers ``stream_format: sse`` with HTTP 400 "not a supported
stream_format") is served whole-utterance: the engine asks it for plain PCM per request group and logs once that
first audio comes later (docs/tts.md).

Memory: vLLM-Omni's deploy config gives each stage a ``gpu_memory_utilization`` (a share of the whole card). The
engine writes a copy of it whose stage shares add up to the lease's bytes (docs/leases.md, memory plan).

Residency (docs/leases.md): when this engine launches the sidecar with vLLM-Omni's own deploy config, its copy
sets ``enable_sleep_mode: true`` on every stage and the sidecar runs with ``VLLM_SERVER_DEV_MODE=1``. Then
``offload()`` is vLLM-Omni 0.30's sleep: ``POST /v1/omni/sleep {"stage_ids": [...], "level": 1}`` (each stage's
weights to CPU RAM through vLLM's CuMem allocator, its KV cache dropped; level 2 has no wake-up in 0.30), and
``reload()`` is ``POST /v1/omni/wakeup`` followed by vLLM's ``POST /resume`` (after waking an autoregressive stage
vLLM-Omni keeps admission closed until ``resume_generation``; ``/resume`` is one of vLLM's development endpoints,
served on loopback only). Read from vllm_omni/entrypoints/openai/api_server.py and async_omni.py of vllm-omni
0.30.0. The slow path, where sleep is not possible (the operator passed a deploy config of their own, or the sleep
call fails): offload stops the sidecar and reload starts it again (minutes: weights, CUDA graphs). A sidecar this
engine does not run (``launch_sidecar: false``) is not put to sleep: nothing is freed, and the log says so.

Chunking: ``initial_codec_chunk_frames`` (default 2 frames = 160 ms of audio at 12.5 Hz) makes the first chunk
small; later chunks are the sidecar deploy config's ``codec_chunk_frames`` (25 in vllm-omni's qwen3_tts.yaml).
Text longer than ``max_request_chars`` is sent as several requests, cut at sentence ends, streamed in order.

Cancellation: when our caller stops iterating, the HTTP response is closed; vLLM-Omni's streaming response closes
its generator on disconnect and aborts the request. One engine step here is one SSE audio delta (one codec chunk).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from services.common import metrics
from services.common.config.base import ChunkingConfig, SchedulingConfig
from services.common.config.qwen_tts import QwenGpuConfig
from services.common.engines import AudioPiece, Offloadable, SynthesisOptions, TtsEngine, VoiceInfo
from services.common.errors import FailedPrecondition, InvalidArgument, Unavailable, VoiceError
from services.common.scheduler import Playback, SegmentScheduler
from services.common.text import sentence_spans
from services.common.voices import unknown_voice
from services.engines import qwen_presets as presets

log = logging.getLogger("voicefleet.qwen_tts.vllm_omni")

SAMPLE_RATE = 24000


def qwen_voice_info(service: str, engine: str, speaker: str, description_suffix: str) -> VoiceInfo:
    """A VoiceInfo for a Qwen speaker id as the model/server names it (case-insensitive)."""
    p = presets.preset(speaker)
    if p is None:  # a speaker the checkpoint has that we do not know: all languages, no description
        langs = presets.LANGUAGES
        return VoiceInfo(
            id=speaker,
            display_name=speaker,
            languages=tuple(t for lang in langs for t in lang.tags),
            native_sample_rate_hz=SAMPLE_RATE,
            service=service,
            engine=engine,
            description=f"Qwen3-TTS speaker {speaker!r}{description_suffix}",
        )
    return VoiceInfo(
        id=p.id,
        display_name=f"{p.id} (Qwen3-TTS, {p.native})",
        languages=tuple(t for lang in presets.languages_for(p) for t in lang.tags),
        native_sample_rate_hz=SAMPLE_RATE,
        service=service,
        engine=engine,
        description=f"Qwen3-TTS preset speaker: {p.description}; native {p.native}{description_suffix}",
    )


def qwen_language_name(info: VoiceInfo, language: str) -> str:
    """The Qwen language name ("English") for a request's BCP-47 tag, checked against the voice."""
    tag = language or info.languages[0]
    if not info.speaks(tag) or presets.qwen_language(tag) is None:
        raise InvalidArgument(
            "config.language", f"voice {info.id!r} does not speak {tag!r}; it speaks {', '.join(info.languages)}"
        )
    return presets.qwen_language(tag).name


def check_rate(engine: str, speaking_rate: float) -> None:
    if abs((speaking_rate or 1.0) - 1.0) > 1e-6:
        raise InvalidArgument(
            "config.speaking_rate",
            f"{speaking_rate} is not supported by {engine}: Qwen3-TTS speaks at its natural rate; send 1.0 (or 0)",
        )


def request_groups(text: str, max_chars: int) -> list[tuple[int, int]]:
    """Sentence spans joined into groups of at most ``max_chars`` (a longer sentence stays whole)."""
    groups: list[tuple[int, int]] = []
    for start, end in sentence_spans(text):
        if groups and end - groups[-1][0] <= max_chars:
            groups[-1] = (groups[-1][0], end)
        else:
            groups.append((start, end))
    return groups


class SseError(Exception):
    pass


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs from a text/event-stream (fields per the HTML spec: event, data; blank line ends)."""
    event, data = "message", []
    async for line in lines:
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield event, "\n".join(data)


# Requests in flight at the sidecar when scheduling.workers is 0 (vLLM's max_num_seqs is the real ceiling).
DEFAULT_IN_FLIGHT = 8


class VllmOmniTtsEngine(TtsEngine, Offloadable):
    name = "vllm_omni"

    def __init__(
        self,
        service: str,
        chunking: ChunkingConfig,
        gpu: QwenGpuConfig,
        scheduling: SchedulingConfig | None = None,
        memory_budget_bytes: int = 0,
    ):
        self.service = service
        self.memory_budget_bytes = memory_budget_bytes
        self._sse = True  # False once the sidecar says it cannot stream speech (an older vLLM-Omni)
        self.chunking = chunking
        self.config = gpu
        scheduling = scheduling or SchedulingConfig()
        # Requests in flight at the sidecar, which batches them (continuous batching): the scheduler hands it this many
        # at once and keeps the rest in due order, first segments first (docs/scheduling.md).
        self.scheduler = SegmentScheduler(
            service, self.name, scheduling.workers or DEFAULT_IN_FLIGHT, margin_s=scheduling.margin_ms / 1000
        )
        self.base_url = gpu.base_url.rstrip("/")
        self._client = None
        self._sidecar: subprocess.Popen | None = None
        self._sidecar_cmd: tuple[list[str], dict] | None = None
        # Stages of our deploy config with sleep mode on (None: no sleep; offload stops the sidecar if it is ours).
        self._sleep_stages: list[int] | None = None
        self._off: str = ""  # "" resident, "asleep" (vLLM sleep mode), "stopped" (sidecar stopped), "kept" (not ours)
        self._voices: list[VoiceInfo] = []
        self._unmeasured_logged = False
        self.kv_plans: list[KvPlan] = []  # the autoregressive stages' KV sizing (the deploy copy), for logs and probes
        self._steps = metrics.ENGINE_STEPS.labels(service, self.name)
        self._audio_seconds = metrics.TTS_AUDIO_SECONDS.labels(service, self.name)
        self._cancel_to_stop = metrics.TTS_CANCEL_TO_STOP.labels(service, self.name)

    @property
    def native_sample_rate(self) -> int:
        return SAMPLE_RATE

    @property
    def device(self) -> str:
        return "cuda (vLLM-Omni sidecar)"

    def resident_bytes(self) -> int:
        """What the sidecar holds on the card, measured: its process tree's device memory from NVML (the sidecar
        and vLLM's engine-core/worker processes). Asleep, that is not 0: CUDA graphs, vLLM's allocations outside
        sleep mode's pool and a CUDA context per process stay (the lease table counts them). Where NVML cannot see
        the tree (no driver library, a container's pids): the stages' lease bytes while awake, and while asleep
        ASLEEP_ESTIMATE_BYTES per stage, said once in the log. 0 once stopped, or for a sidecar not ours."""
        if self._client is None or self._off == "stopped":
            return 0
        if self._sidecar is not None and hasattr(self._sidecar, "pid"):
            from services.residency.gpu_host import process_tree_gpu_bytes

            measured = process_tree_gpu_bytes(self._sidecar.pid)
            if measured is not None:
                return measured
            if not self._unmeasured_logged:
                self._unmeasured_logged = True
                log.warning("vLLM-Omni sidecar: NVML cannot see its processes; its GPU bytes are estimated")
        if self._off == "asleep":
            return ASLEEP_ESTIMATE_BYTES * len(self._sleep_stages or ())
        return self.memory_budget_bytes

    # --- life ---------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        import httpx  # lazily: only the GPU image has it

        t0 = time.monotonic()
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(30.0, read=120.0))
        if self.config.launch_sidecar:
            self._launch_sidecar()
        await self._wait_healthy()
        await self._load_voices()
        warm = SynthesisOptions(voice=self._voices[0].id)
        async with contextlib.aclosing(self.synthesize("Warm up.", warm)) as pieces:
            async for _ in pieces:
                pass
        log.info(
            "vLLM-Omni sidecar at %s ready with %d voices in %.1fs",
            self.base_url,
            len(self._voices),
            time.monotonic() - t0,
        )

    def _launch_sidecar(self) -> None:
        model_dir = Path(self.config.model_dir)
        if not (model_dir / "config.json").exists():
            raise FailedPrecondition(
                f"qwen_tts.gpu.model_dir: {model_dir} holds no Qwen3-TTS checkpoint (config.json missing);"
                " mount the weights there (scripts download them on a machine with internet)"
            )
        url = urlparse(self.base_url)
        python = self.config.sidecar_python or sys.executable
        cmd = [
            python,
            "-m",
            "vllm_omni.entrypoints.cli.main",
            "serve",
            str(model_dir),
            "--omni",
            "--host",
            url.hostname or "127.0.0.1",
            "--port",
            str(url.port or 8091),
            "--trust-remote-code",
            *self._deploy_config_args(python),
            *self.config.sidecar_args,
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if self._sleep_stages:
            env["VLLM_SERVER_DEV_MODE"] = "1"  # POST /resume after a wake-up (module doc); loopback only
        self._sidecar_cmd = (cmd, env)
        self._spawn()

    def _spawn(self) -> None:
        cmd, env = self._sidecar_cmd
        log.info("starting vLLM-Omni sidecar: %s", " ".join(cmd))
        self._sidecar = subprocess.Popen(cmd, env=env)

    def _deploy_config_args(self, python: str) -> list[str]:
        """vLLM-Omni's own Qwen3-TTS deploy config (talker -> code2wav streaming), found in the sidecar's env."""
        if any(a.startswith("--deploy-config") for a in self.config.sidecar_args):
            return []
        probe = (
            "import pathlib, torch, vllm_omni; print(torch.version.cuda);"
            " print(pathlib.Path(vllm_omni.__file__).parent / 'deploy' / 'qwen3_tts.yaml')"
        )
        try:
            found = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
        except (OSError, subprocess.SubprocessError) as e:
            raise FailedPrecondition(
                f"qwen_tts.gpu.sidecar_python: vllm-omni is not importable by {python} ({type(e).__name__});"
                " install services/qwen_tts/requirements-vllm-omni.txt there, or run the sidecar yourself"
                " (qwen_tts.gpu.launch_sidecar: false)"
            ) from None
        cuda, deploy = found.stdout.strip().splitlines()[-2:]
        from services.residency.gpu_host import check_cuda_host

        check_cuda_host("qwen_tts vLLM-Omni sidecar", None if cuda == "None" else cuda)
        deploy = Path(deploy)
        if not deploy.exists():
            return []
        return ["--deploy-config", str(self._sized_deploy_config(deploy))]

    def _sized_deploy_config(self, deploy: Path) -> Path:
        """A copy of vLLM-Omni's deploy config: sleep mode on in every stage (offload, module doc), and the stages'
        gpu_memory_utilization scaled to add up to the lease."""
        import yaml

        from services.residency.gpu_host import device_total_bytes, memory_fraction

        tree = yaml.safe_load(deploy.read_text())
        stages = [s for s in (tree.get("stages") or []) if isinstance(s, dict)] if isinstance(tree, dict) else []
        for stage in stages:
            stage["enable_sleep_mode"] = True
        self._sleep_stages = [int(s.get("stage_id", i)) for i, s in enumerate(stages)] or None
        shares = list(_utilizations(tree))
        if self.memory_budget_bytes > 0 and shares:
            total = device_total_bytes(0)
            if total <= 0:
                raise FailedPrecondition("qwen_tts: cannot read the card's memory (libcuda) to size vLLM-Omni's stages")
            scale = memory_fraction(self.memory_budget_bytes, total) / sum(v for v, _, _ in shares)
            for value, parent, key in shares:
                parent[key] = round(value * scale, 4)
            log.info("vLLM-Omni stages sized to the lease: %s", [p[k] for _, p, k in shares])
            for _, parent, key in shares:
                if "max_model_len" in parent or "max_num_seqs" in parent:  # an autoregressive stage: a KV cache
                    self.kv_plans.append(self._size_kv(parent, parent[key] * total))
        sized = Path(os.environ.get("TMPDIR", "/tmp")) / f"voicefleet-{self.service}-{deploy.name}"
        sized.write_text(yaml.safe_dump(tree, sort_keys=False))
        return sized

    def _size_kv(self, args: dict, share_bytes: float) -> KvPlan:
        """``max_model_len`` and ``max_num_seqs`` of an autoregressive stage from the KV room its share leaves
        (vLLM refuses to start when one sequence of ``max_model_len`` does not fit its KV cache: the stock 65536
        tokens need ~7 GiB for the 1.7B talker, more than a 6 GB lease's stage has). Refuses with the numbers."""
        plan = kv_plan(
            share_bytes,
            checkpoint_bytes(Path(self.config.model_dir)),
            kv_bytes_per_token(Path(self.config.model_dir) / "config.json"),
            int(args.get("max_model_len") or STOCK_MAX_MODEL_LEN),
            int(args.get("max_num_seqs") or STOCK_MAX_NUM_SEQS),
        )
        log.info("vLLM-Omni KV plan: %s", plan.line())
        if plan.max_model_len < MIN_MODEL_LEN:
            raise FailedPrecondition(
                f"residency.services.qwen_tts.declared_gb: {plan.line()}; a stage needs >= {MIN_MODEL_LEN} tokens"
                f" of KV room ({MIN_MODEL_LEN * plan.kv_per_token / 2**30:.2f} GiB): raise the lease by"
                f" >= {(MIN_MODEL_LEN - plan.tokens) * plan.kv_per_token / 2**30:.2f} GiB (docs/leases.md)"
            )
        args["max_model_len"], args["max_num_seqs"] = plan.max_model_len, plan.max_num_seqs
        return plan

    # --- residency ----------------------------------------------------------------------------------------------
    async def offload(self) -> None:
        """The residency's revoke: vLLM-Omni's sleep (level 1) when the sidecar runs in sleep mode, else the slow
        path: stop the sidecar this engine runs. The residency has waited for in-flight requests."""
        t0 = time.monotonic()
        if self._off:
            return
        if self._sleep_stages and self._sidecar is not None:
            body = {"stage_ids": self._sleep_stages, "level": 1}
            if await self._control("/v1/omni/sleep", body):
                self._off = "asleep"
                log.info("vLLM-Omni sidecar asleep (stages %s) in %.2fs", self._sleep_stages, time.monotonic() - t0)
                return
        if self._sidecar is not None:
            await self._stop_sidecar()
            self._off = "stopped"
            log.info("vLLM-Omni sidecar stopped (slow path) in %.2fs", time.monotonic() - t0)
            return
        self._off = "kept"
        log.warning(
            "vLLM-Omni sidecar at %s is not run by this service (qwen_tts.gpu.launch_sidecar: false): it cannot be"
            " put to sleep from here, so its GPU memory stays allocated",
            self.base_url,
        )

    async def reload(self) -> None:
        t0 = time.monotonic()
        off, self._off = self._off, ""
        if off == "asleep":
            if not await self._control("/v1/omni/wakeup", {"stage_ids": self._sleep_stages}):
                raise Unavailable(f"vLLM-Omni sidecar at {self.base_url} did not wake up (POST /v1/omni/wakeup)")
            if not await self._control("/resume", None):
                raise Unavailable(
                    f"vLLM-Omni sidecar at {self.base_url} woke up but did not resume generation (POST /resume;"
                    " the sidecar needs VLLM_SERVER_DEV_MODE=1)"
                )
        elif off == "stopped":
            self._spawn()
            await self._wait_healthy()
        log.info("vLLM-Omni sidecar back (%s) in %.2fs", off or "was resident", time.monotonic() - t0)

    async def _control(self, path: str, body: dict | None) -> bool:
        """POST a control endpoint of the sidecar; False (logged) when it is missing or fails."""
        import httpx

        try:
            reply = await self._client.post(path, json=body, timeout=httpx.Timeout(30.0, read=300.0))
        except httpx.HTTPError as e:
            log.warning("vLLM-Omni %s%s failed: %s: %s", self.base_url, path, type(e).__name__, e)
            return False
        if reply.status_code != 200:
            log.warning("vLLM-Omni %s%s answered HTTP %d: %s", self.base_url, path, reply.status_code, reply.text[:200])
            return False
        return True

    async def _stop_sidecar(self) -> None:
        if self._sidecar is None or self._sidecar.poll() is not None:
            return
        self._sidecar.terminate()
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._sidecar.wait, 30)
        except subprocess.TimeoutExpired:
            self._sidecar.kill()
            await asyncio.get_running_loop().run_in_executor(None, self._sidecar.wait)

    async def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + self.config.sidecar_start_timeout_seconds
        last = ""
        while time.monotonic() < deadline:
            if self._sidecar is not None and self._sidecar.poll() is not None:
                raise FailedPrecondition(
                    f"vLLM-Omni sidecar exited with code {self._sidecar.returncode} while starting"
                )
            try:
                reply = await self._client.get("/health", timeout=2.0)
                if reply.status_code == 200:
                    return
                last = f"HTTP {reply.status_code}"
            except httpx.HTTPError as e:
                last = type(e).__name__
            await asyncio.sleep(0.5)
        raise Unavailable(
            f"vLLM-Omni sidecar at {self.base_url} not healthy after {self.config.sidecar_start_timeout_seconds:.0f}s"
            f" ({last}); see qwen_tts.gpu.sidecar_start_timeout_seconds"
        )

    async def _load_voices(self) -> None:
        reply = await self._client.get("/v1/audio/voices")
        if reply.status_code != 200:
            raise Unavailable(f"vLLM-Omni {self.base_url}/v1/audio/voices answered HTTP {reply.status_code}")
        listing = reply.json()
        # "voices" also names voices uploaded for cloning (task Base); this engine speaks CustomVoice presets only.
        uploaded = {str(u.get("name", "")).lower() for u in listing.get("uploaded_voices", []) if isinstance(u, dict)}
        names = [v if isinstance(v, str) else v.get("name", "") for v in listing.get("voices", [])]
        names = [n for n in names if n.lower() not in uploaded]
        infos = [qwen_voice_info(self.service, self.name, n, " (served by vLLM-Omni)") for n in names if n]
        if not infos:
            raise FailedPrecondition(f"vLLM-Omni at {self.base_url} lists no voices; is it a CustomVoice checkpoint?")
        # Preset order as Qwen lists them, then anything else the server has.
        order = {p.id: i for i, p in enumerate(presets.PRESETS)}
        self._voices = sorted(infos, key=lambda v: order.get(v.id, len(order)))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        await self._stop_sidecar()

    async def voices(self) -> list[VoiceInfo]:
        if not self._voices:
            raise FailedPrecondition("vLLM-Omni engine is still starting; retry when the service reports SERVING")
        return list(self._voices)

    # --- synthesis ----------------------------------------------------------------------------------------------
    def _voice(self, voice: str) -> VoiceInfo:
        info = next((v for v in self._voices if v.id.lower() == (voice or self._voices[0].id).lower()), None)
        if info is None:
            raise unknown_voice(voice, (v.id for v in self._voices), self.served_by, service=self.service)
        return info

    def synthesize(self, text: str, options: SynthesisOptions) -> AsyncIterator[AudioPiece]:
        return self._speak(text, options, self.scheduler.playback())

    def _text_stream_speaker(self):
        return functools.partial(self._speak, playback=self.scheduler.playback())

    async def _speak(self, text: str, options: SynthesisOptions, playback: Playback) -> AsyncIterator[AudioPiece]:
        import httpx

        info = self._voice(options.voice)
        language = qwen_language_name(info, options.language)
        check_rate(self.served_by, options.speaking_rate)
        seed = options.seed or self.config.default_seed
        for start, end in request_groups(text, self.config.max_request_chars):
            if not self._sse:
                async for piece in self._whole_utterance(text, start, end, info, language, seed, playback):
                    yield piece
                continue
            body = {
                "input": text[start:end],
                "voice": info.id.lower(),
                "language": language,
                "task_type": "CustomVoice",
                "response_format": "pcm",
                "stream": True,
                "stream_format": "sse",
                "initial_codec_chunk_frames": self.config.initial_codec_chunk_frames,
                "seed": seed,
            }
            carry = b""
            cancelled_at = None
            turn = await playback.acquire()  # a slot at the sidecar, when this request is due
            sent = False
            try:
                async with self._client.stream("POST", "/v1/audio/speech", json=body) as response:
                    try:
                        if response.status_code != 200:
                            message = (await response.aread()).decode("utf-8", "replace")
                            if response.status_code in (400, 422) and "stream_format" in message and not sent:
                                log.warning(
                                    "vLLM-Omni at %s cannot stream speech (%s): serving whole utterances; pin"
                                    " services/qwen_tts/requirements-vllm-omni.txt for streaming",
                                    self.base_url,
                                    message[:200],
                                )
                                self._sse = False
                            else:
                                raise _http_error(response.status_code, message)
                        done = not self._sse  # an older sidecar answered 400: nothing to read here
                        events = sse_events(response.aiter_lines()) if self._sse else _no_events()
                        async for event, data in events:
                            if data.strip() == "[DONE]":
                                done = True
                                break
                            payload = json.loads(data)
                            kind = payload.get("type", event) if event == "message" else event
                            if kind == "speech.audio.delta":
                                pcm = carry + base64.b64decode(payload["audio"])
                                pcm, carry = (pcm[:-1], pcm[-1:]) if len(pcm) % 2 else (pcm, b"")
                                self._steps.inc()
                                self._audio_seconds.inc(len(pcm) / 2 / SAMPLE_RATE)
                                if pcm:
                                    playback.produced(len(pcm) / 2 / SAMPLE_RATE)
                                    sent = True
                                    yield AudioPiece(pcm, SAMPLE_RATE, start, end, self.served_by)
                            elif kind == "speech.audio.done":
                                done = True
                                break
                            elif kind in ("speech.audio.error", "error"):
                                error = payload.get("error", {})
                                message = error.get("message", data) if isinstance(error, dict) else error
                                raise VoiceError(f"vLLM-Omni failed mid-stream: {message}")
                        if not done:
                            raise Unavailable(
                                f"vLLM-Omni at {self.base_url} ended the stream without speech.audio.done"
                            )
                    except (GeneratorExit, asyncio.CancelledError):
                        cancelled_at = time.monotonic()
                        raise
            except httpx.HTTPError as e:
                raise Unavailable(
                    f"vLLM-Omni sidecar at {self.base_url} is unavailable: {type(e).__name__}: {e}"
                ) from None
            finally:
                turn.release()
                if cancelled_at is not None:
                    # Leaving `async with` closed the connection: the sidecar sees the disconnect and aborts.
                    self._cancel_to_stop.observe(time.monotonic() - cancelled_at)
            if not self._sse:  # the sidecar just said it cannot stream: this group whole, and so on
                async for piece in self._whole_utterance(text, start, end, info, language, seed, playback):
                    yield piece

    async def _whole_utterance(self, text, start, end, info, language, seed, playback) -> AsyncIterator[AudioPiece]:
        """An older vLLM-Omni (no streaming speech): one request group as one PCM answer."""
        import httpx

        body = {"input": text[start:end], "voice": info.id.lower(), "language": language}
        body.update(task_type="CustomVoice", response_format="pcm", seed=seed)
        turn = await playback.acquire()
        try:
            reply = await self._client.post("/v1/audio/speech", json=body)
        except httpx.HTTPError as e:
            raise Unavailable(f"vLLM-Omni sidecar at {self.base_url} is unavailable: {type(e).__name__}: {e}") from None
        finally:
            turn.release()
        if reply.status_code != 200:
            raise _http_error(reply.status_code, reply.text)
        pcm = reply.content[: len(reply.content) // 2 * 2]
        self._steps.inc()
        self._audio_seconds.inc(len(pcm) / 2 / SAMPLE_RATE)
        if pcm:
            playback.produced(len(pcm) / 2 / SAMPLE_RATE)
            yield AudioPiece(pcm, SAMPLE_RATE, start, end, self.served_by)


# What one asleep stage keeps on the card where NVML cannot measure it: a CUDA context (~0.5 GiB) and CUDA graphs
# with vLLM's allocations outside sleep mode's pool (~0.5 GiB). An estimate, not a measurement (make gpu-smoke).
ASLEEP_ESTIMATE_BYTES = 1 << 30

# KV sizing of an autoregressive stage (``_size_kv``). The stock values are vllm-omni's qwen3_tts.yaml's.
STOCK_MAX_MODEL_LEN = 65536
STOCK_MAX_NUM_SEQS = 64
# Under this many tokens of KV room a stage cannot hold one long utterance (talker + text + voice prompt).
MIN_MODEL_LEN = 4096
# A typical request's tokens, to size max_num_seqs: a sentence group of ~20 s at 12.5 codec frames/s, plus prompt.
TYPICAL_SEQ_TOKENS = 512
# What vLLM takes of a stage's share besides weights and KV: activations at profiling, sampler, CUDA graphs.
STAGE_OVERHEAD_BYTES = 1 << 30


@dataclass(frozen=True)
class KvPlan:
    share_bytes: int
    weights_bytes: int
    overhead_bytes: int
    kv_per_token: int
    tokens: int  # KV room, in tokens
    max_model_len: int
    max_num_seqs: int

    def line(self) -> str:
        room = self.share_bytes - self.weights_bytes - self.overhead_bytes
        return (
            f"stage share {self.share_bytes / 2**30:.2f} GiB - weights {self.weights_bytes / 2**30:.2f} GiB"
            f" - overhead {self.overhead_bytes / 2**30:.2f} GiB = KV room {room / 2**30:.2f} GiB"
            f" = {self.tokens} tokens at {self.kv_per_token / 1024:.0f} KiB/token"
            f" -> max_model_len {self.max_model_len}, max_num_seqs {self.max_num_seqs}"
        )


def kv_plan(share: float, weights: int, per_token: int, stock_len: int, stock_seqs: int) -> KvPlan:
    """The largest max_model_len (a multiple of 256, at most the stock one) whose KV fits the room, and as many
    sequences as the room holds at TYPICAL_SEQ_TOKENS each (at least 1, at most the stock max_num_seqs)."""
    tokens = max(0, int(share) - weights - STAGE_OVERHEAD_BYTES) // max(per_token, 1)
    max_len = min(stock_len, tokens // 256 * 256)
    seqs = max(1, min(stock_seqs, tokens // TYPICAL_SEQ_TOKENS))
    return KvPlan(int(share), weights, STAGE_OVERHEAD_BYTES, per_token, tokens, max_len, seqs)


def checkpoint_bytes(model_dir: Path) -> int:
    """The checkpoint's weights (its *.safetensors / *.bin files): what a stage loads at most."""
    files = [*model_dir.glob("*.safetensors"), *model_dir.glob("*.bin")]
    return sum(f.stat().st_size for f in files if f.is_file())


def kv_bytes_per_token(config_json: Path) -> int:
    """K and V of every layer for one token, bf16, from the talker's config (``talker_config`` when the checkpoint
    nests it, else the top level): 2 x layers x kv_heads x head_dim x 2 bytes."""
    try:
        config = json.loads(config_json.read_text())
    except (OSError, ValueError) as e:
        raise FailedPrecondition(f"qwen_tts.gpu.model_dir: cannot read {config_json} ({e})") from None
    c = config.get("talker_config") or config
    try:
        layers, heads = int(c["num_hidden_layers"]), int(c.get("num_key_value_heads") or c["num_attention_heads"])
        head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // int(c["num_attention_heads"]))
    except (KeyError, TypeError, ValueError) as e:
        raise FailedPrecondition(
            f"qwen_tts.gpu.model_dir: {config_json} lacks the talker's attention shape ({e}); is it Qwen3-TTS?"
        ) from None
    return 2 * layers * heads * head_dim * 2


async def _no_events():
    return
    yield


def _utilizations(node):
    """(value, parent, key) of every gpu_memory_utilization in a deploy config tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "gpu_memory_utilization" and isinstance(value, int | float):
                yield float(value), node, key
            else:
                yield from _utilizations(value)
    elif isinstance(node, list):
        for item in node:
            yield from _utilizations(item)


def _http_error(status: int, body: str) -> VoiceError:
    try:
        message = json.loads(body).get("error", {}).get("message") or body
    except (ValueError, AttributeError):
        message = body
    if status >= 500:
        return Unavailable(f"vLLM-Omni answered HTTP {status}: {message}")
    return VoiceError(f"vLLM-Omni rejected the request (HTTP {status}): {message}")
