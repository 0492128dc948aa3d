"""moss_sts: Conversation (full-duplex speech to speech with barge-in) and Synthesizer (MOSS as a dialogue TTS).

CPU (default): a cascade in a box: the asr service (Silero VAD + pocketsphinx interims + whisper finals, over gRPC;
in process when moss_sts.asr is local) -> the brain (OpenAI-compatible chat: llama.cpp + SmolLM2 from fleet member ``brain``) -> piper (or espeak); the Synthesizer
speaks with the same TTS engine. GPU: MOSS-Speech answers speech with speech (moss_engine.py). docs/conversation.md.
"""

from __future__ import annotations

from services.common.config import Config
from services.common.engines import SEMANTIC_MODE, AsrEngine, StsEngine, TtsEngine
from services.common.server import ServiceParts, Servicer
from services.common.sts_servicer import ConversationServicer, StsLimits
from services.common.tts_servicer import LocalEngineResolver
from services.common.wiring import model_service, synthesizer
from services.conversation.dialogue import DialogueLimits, check_echo_cancellation
from services.residency.from_config import lease_bytes, resident_sts
from voice.v1 import conversation_pb2_grpc

SERVICE = "moss_sts"


def asr_address(config: Config) -> str:
    """Where the asr service is: moss_sts.asr_address, else where the router finds it, else the asr section's."""
    return config.moss_sts.asr_address or config.router.backends.get("asr") or config.asr.address


def make_asr(config: Config) -> AsrEngine:
    """Turn-taking listens through the AsrEngine interface: the asr service over gRPC (moss_sts.asr remote, the
    default: one model of each kind in memory and on the card), or the asr engines in this process (local; named
    moss_sts in metrics, configured by the asr section)."""
    if config.moss_sts.asr == "remote":
        from services.remote.asr import RemoteAsrEngine
        from services.remote.direct import DirectBackend

        return RemoteAsrEngine(DirectBackend("asr", asr_address(config)), deadline_margin_s=0.0)
    if config.asr.engine == "gpu":
        from services.engines.asr.gpu_engine import GpuAsrEngine

        return GpuAsrEngine(SERVICE, config.asr)
    from services.engines.asr.cpu_engine import CpuAsrEngine

    return CpuAsrEngine(SERVICE, config.asr)


def make_tts(config: Config) -> TtsEngine:
    section = config.moss_sts
    if section.tts_engine == "espeak":
        from services.engines.espeak_engine import EspeakTtsEngine

        return EspeakTtsEngine(SERVICE, section.chunking, section.espeak, section.scheduling.margin_ms)
    from services.engines.piper_engine import PiperTtsEngine

    return PiperTtsEngine(SERVICE, section.chunking, section.scheduling)


def make_engines(config: Config) -> tuple[StsEngine, TtsEngine]:
    section = config.moss_sts
    check_echo_cancellation(SERVICE, section)
    if section.asr == "local" and section.endpointing.mode == SEMANTIC_MODE:  # the default mode needs the turn model
        from services.engines.asr.cpu_engine import check_turn_model

        check_turn_model(config.asr, f"{SERVICE}: cannot start: moss_sts.endpointing.mode is semantic")
    limits = DialogueLimits.from_config(section)
    if section.engine == "gpu":
        from services.moss_sts.moss_engine import MossSpeechEngine

        sts = MossSpeechEngine(
            SERVICE, section.gpu, make_asr(config), limits, section.chunking, lease_bytes(config, SERVICE)
        )
        return sts, sts.tts_engine()
    from services.conversation.brain import ChatBrain
    from services.conversation.cascade import CascadeStsEngine

    brain = ChatBrain.from_config(config.brain, SERVICE)
    tts = make_tts(config)
    return CascadeStsEngine(SERVICE, make_asr(config), brain, tts, limits), tts


def build(config: Config) -> ServiceParts:
    section = config.moss_sts
    gpu = section.engine == "gpu"
    # One model behind Conversation and Synthesizer, one GPU lease: each session and each synthesis holds it resident.
    sts, tts, model_control = resident_sts(
        config, SERVICE, *make_engines(config), model=section.gpu.model_dir if gpu else "cascade (cpu)", gpu_engine=gpu
    )
    conversation = ConversationServicer(SERVICE, sts, StsLimits.from_config(section))
    return model_service(
        sts,
        model_control,
        [
            Servicer(conversation_pb2_grpc.add_ConversationServicer_to_server, conversation, "voice.v1.Conversation"),
            synthesizer(SERVICE, section, LocalEngineResolver(tts)),
        ],
        # Its voice (CPU: the cascade's TTS; GPU: MOSS-Speech itself) says a word; the router adds its own deep probe.
        # Skipped while the model is off the card (ResidentTtsEngine.probe).
        probe=tts.probe,
        engines=[sts, tts],
    )
