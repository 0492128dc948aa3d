"""router: the one front door. Its engines are remote engines (gRPC clients of the model services)."""

from __future__ import annotations

import asyncio

from services.common.asr_servicer import AsrLimits, RecognizerServicer
from services.common.config import Config
from services.common.rpc import request_id
from services.common.server import ServiceParts, Servicer
from services.common.tts_servicer import SynthesizerServicer
from services.remote.asr import RemoteAsrEngine
from services.remote.sts import RemoteStsEngine
from services.remote.tts import RemoteTtsEngine
from services.residency.lease_servicer import LeasesElsewhereServicer, card_leases
from services.router.backends import Backend, ServiceReadiness
from services.router.failover import FailoverLog
from services.router.failover_sts import FailoverStsEngine
from services.router.placement import LocalLeaseTables, PlacementView, RemoteLeaseTables
from services.router.policy import RouterTtsResolver
from voice.v1 import fleet_pb2, fleet_pb2_grpc, gpu_pb2_grpc, recognizer_pb2_grpc, synthesizer_pb2_grpc

SERVICE = "router"


class FleetServicer(fleet_pb2_grpc.FleetServicer):
    def __init__(self, backends: dict[str, Backend], failovers: FailoverLog | None = None):
        self.backends = backends
        self.failovers = failovers or FailoverLog()

    async def GetFleetStatus(self, request, context):
        return fleet_pb2.GetFleetStatusResponse(
            request_id=request_id(),
            backends=[b.to_proto() for b in self.backends.values()],
            recent_failovers=list(self.failovers.records),
        )


def conversation_fallback(config: Config, asr_backend: Backend | None, tts: dict[str, RemoteTtsEngine]):
    """The router's cascade for Conversation failover: remote asr -> brain -> the first configured backend of
    router.routes.conversation_fallback_tts, and the backends it needs; (None, []) when switched off or a part is
    not configured."""
    routes = config.router.routes
    tts_name = next((n for n in routes.conversation_fallback_tts if n in tts), None)
    if not routes.conversation_fallback or asr_backend is None or tts_name is None:
        return None, []
    from services.conversation.brain import ChatBrain
    from services.conversation.cascade import CascadeStsEngine
    from services.conversation.dialogue import DialogueLimits, check_echo_cancellation

    margin = config.router.deadline_margin_ms / 1000
    # Any session language: moss_sts decides it (GPU MOSS-Speech speaks Chinese), not its fallback.
    brain = ChatBrain.from_config(config.brain, SERVICE, check_languages=False)
    check_echo_cancellation(SERVICE, config.moss_sts)
    limits = DialogueLimits.from_config(config.moss_sts)
    cascade = CascadeStsEngine(SERVICE, RemoteAsrEngine(asr_backend, margin), brain, tts[tts_name], limits)
    return cascade, [asr_backend, tts[tts_name].backend]


def build(config: Config) -> ServiceParts:
    rc = config.router
    backends = {name: Backend(name, address, rc.health) for name, address in rc.backends.items()}
    failovers = FailoverLog()
    tts = {
        name: RemoteTtsEngine(b, rc.deadline_margin_ms / 1000, rc.voices_cache_seconds)
        for name, b in backends.items()
        if "voice.v1.Synthesizer" in b.serves
    }
    tts_resolver = RouterTtsResolver(tts, rc.default_tts_backend, rc.routes, failovers, rc.deadline_margin_ms / 1000)
    synthesizer = SynthesizerServicer(
        SERVICE, tts_resolver, max_text_chars=rc.max_text_chars, default_deadline_s=rc.default_deadline_seconds
    )

    # Recognizer: passed through to the asr backend (limits as the asr section says, checked here first).
    asr_backend = next((b for b in backends.values() if "voice.v1.Recognizer" in b.serves), None)
    recognizer = RecognizerServicer(
        SERVICE,
        RemoteAsrEngine(asr_backend, rc.deadline_margin_ms / 1000),
        AsrLimits.from_config(config.asr, in_front=True),
        default_deadline_s=rc.default_deadline_seconds,
    )

    # Conversation: passed through to moss_sts (config and messages checked here first, with moss_sts's limits).
    from services.common.sts_servicer import ConversationServicer, StsLimits
    from voice.v1 import conversation_pb2_grpc

    sts_backend = next((b for b in backends.values() if "voice.v1.Conversation" in b.serves), None)
    cascade, cascade_needs = conversation_fallback(config, asr_backend, tts)
    sts_engine = FailoverStsEngine(
        RemoteStsEngine(sts_backend, rc.deadline_margin_ms / 1000),
        cascade,
        failovers,
        max_user_turn_s=config.moss_sts.max_user_turn_seconds,
        default_system_prompt=config.moss_sts.default_system_prompt,
        max_system_prompt_chars=config.moss_sts.max_system_prompt_chars,
        tools_to_cascade=rc.routes.conversation_tools == "cascade",
    )
    conversation = ConversationServicer(SERVICE, sts_engine, StsLimits.from_config(config.moss_sts))

    # One card: this router grants its leases. Several (router.leases.authorities): each card's lease authority
    # grants, and the router only reads their tables (docs/scale.md).
    if rc.leases.authorities:
        leases = LeasesElsewhereServicer(rc.leases.authorities)
        tables = RemoteLeaseTables(rc.leases.authorities, rc.leases.authorities_poll_seconds)
        start_leases, stop_leases = tables.start, tables.stop
    else:
        leases = card_leases(config)
        tables = LocalLeaseTables(leases.manager)
        start_leases, stop_leases = leases.start, leases.stop

    # One view of where the time-shared models are, for TTS routes and conversation sessions alike.
    tts_resolver.placement = sts_engine.placement = PlacementView(
        tables, config.residency, backends, rc.routes.default_latency_budget_ms
    )

    async def start() -> None:
        await sts_engine.start()
        await start_leases()
        for b in backends.values():
            b.start()
        # Route with real health from the first request on (a backend that never answers stays UNKNOWN).
        await asyncio.gather(*(b.first_answer(wait_s=2.0) for b in backends.values()))

    async def stop() -> None:
        await sts_engine.close()
        await stop_leases()
        await asyncio.gather(*(b.close() for b in backends.values()))

    return ServiceParts(
        servicers=[
            Servicer(synthesizer_pb2_grpc.add_SynthesizerServicer_to_server, synthesizer, "voice.v1.Synthesizer"),
            Servicer(fleet_pb2_grpc.add_FleetServicer_to_server, FleetServicer(backends, failovers), "voice.v1.Fleet"),
            Servicer(recognizer_pb2_grpc.add_RecognizerServicer_to_server, recognizer, "voice.v1.Recognizer"),
            Servicer(gpu_pb2_grpc.add_GpuLeasesServicer_to_server, leases, "voice.v1.GpuLeases"),
            Servicer(conversation_pb2_grpc.add_ConversationServicer_to_server, conversation, "voice.v1.Conversation"),
        ],
        start=start,
        stop=stop,
        # Conversation is also served while moss_sts is down, by the cascade (the brain is not a backend we watch).
        readiness=ServiceReadiness(backends, {"voice.v1.Conversation": [cascade_needs] if cascade_needs else []}),
    )
