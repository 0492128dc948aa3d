"""The router's health rules (services/router/backends.py) on an injected clock: outlier ejection, growing and
capped ejection times, recovery only through probes in a row (hysteresis), and the routing config's validation.
The same rules run against real processes in tests/fleet/test_faults_router.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common import metrics
from services.common.config import ConfigError, load_config
from services.common.config.router import RouterHealthConfig, RoutesConfig
from services.common.engines import Routing
from services.remote.base import fault
from services.remote.tts import RemoteTtsEngine
from services.router.backends import EJECTED, NOT_SERVING, SERVING, UNREACHABLE, Backend, ServiceReadiness
from services.router.policy import RouterTtsResolver
from voice.v1 import routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def backend(**health) -> tuple[Backend, Clock]:
    clock = Clock()
    config = RouterHealthConfig(
        **{
            "eject_after_failures": 3,
            "ejection_seconds": 2.0,
            "max_ejection_seconds": 10.0,
            "forget_ejections_seconds": 100.0,
            "recovery_probes": 3,
            **health,
        }
    )
    return Backend("moss_sts", "127.0.0.1:1", config, clock=clock, connect=False), clock


def recover(b: Backend, clock: Clock) -> None:
    clock.now = max(clock.now, b.ejected_until)
    for _ in range(b.config.recovery_probes):
        assert b.probe_due(clock.now) == "recovery"
        b.probe_result(True)


def test_first_serving_is_routable_at_once():
    b, _ = backend()
    assert not b.routable()
    b.set_watch(SERVING)
    assert b.routable() and b.health == SERVING


def test_failures_while_down_or_warming_up_are_no_outliers():
    """Calls that reach a backend before it says SERVING (UNAVAILABLE: not listening yet; a ListVoices answered
    FAILED_PRECONDITION while it loads) do not eject it: it becomes routable at its first SERVING."""
    b, _ = backend()
    for health in (UNREACHABLE, NOT_SERVING):
        b.set_watch(health)
        for _ in range(5):
            b.record_failure()
    b.set_watch(SERVING)
    assert b.routable() and b.total_ejections == 0 and b.consecutive_failures == 0


def test_consecutive_failures_eject_and_a_success_resets_the_count():
    b, clock = backend()
    b.set_watch(SERVING)
    b.record_failure()
    b.record_failure()
    b.record_success()
    b.record_failure()
    b.record_failure()
    assert b.routable(), "failures were not consecutive"
    b.record_failure()
    assert not b.routable() and b.health == EJECTED
    assert b.ejected_for() == pytest.approx(2.0)
    assert b.to_proto().ejected_for_ms == 2000 and b.to_proto().health == EJECTED


def test_ejection_time_doubles_and_is_capped():
    b, clock = backend()
    b.set_watch(SERVING)
    seen = []
    for _ in range(5):
        b.eject("failures")
        seen.append(b.ejected_for())
        clock.now = b.ejected_until
        b.probe_result(False)  # the recovery probe fails: ejected again, for longer
        seen.append(b.ejected_for())
        recover(b, clock)
        assert b.routable()
    assert seen[:4] == [2.0, 4.0, 8.0, 10.0] and max(seen) == 10.0


def test_a_long_healthy_spell_forgets_earlier_ejections():
    b, clock = backend()
    b.set_watch(SERVING)
    b.eject("failures")
    recover(b, clock)
    b.eject("failures")
    assert b.ejected_for() == 4.0
    recover(b, clock)
    clock.now += 101  # healthy longer than forget_ejections_seconds
    b.eject("failures")
    assert b.ejected_for() == 2.0


def test_recovery_needs_probes_in_a_row_and_no_probe_while_ejected():
    b, clock = backend()
    b.set_watch(SERVING)
    b.eject("failures")
    assert b.probe_due(clock.now) is None, "no probe before the ejection is over"
    clock.now = b.ejected_until
    b.probe_result(True)
    b.probe_result(True)
    assert not b.routable() and "RECOVERING (2 of 3" in b.state_detail()
    b.probe_result(True)
    assert b.routable()


def test_flapping_watch_never_makes_it_routable_until_probes_pass():
    b, clock = backend()
    b.set_watch(SERVING)
    for _ in range(20):  # SERVING / NOT_SERVING flapping, a probe passing in each good moment
        b.set_watch(NOT_SERVING)
        assert not b.routable()
        b.set_watch(SERVING)
        b.probe_result(True)
        b.probe_result(True)
        assert not b.routable(), "the route must not come back on a flapping backend"
        clock.now += 0.5
    b.probe_result(True)  # a third good probe in a row once it stops flapping
    assert b.routable()


def test_unreachable_is_not_usable_but_ejected_serving_is_a_last_resort():
    b, _ = backend()
    b.set_watch(SERVING)
    b.eject("failures")
    assert not b.routable() and b.usable()
    b.set_watch(UNREACHABLE)
    assert not b.usable() and not b.routable()


def test_deep_probe_due_only_while_routable():
    b, clock = backend(deep_probe_interval_seconds=5.0)
    assert b.deep
    b.set_watch(SERVING)
    clock.now += 5
    assert b.probe_due(clock.now) == "deep"
    b.eject("deep_probe")
    assert b.probe_due(clock.now) is None
    other = Backend("cosyvoice_tts", "127.0.0.1:1", RouterHealthConfig(), clock=clock, connect=False)
    other.set_watch(SERVING)
    clock.now += 100
    assert not other.deep and other.probe_due(clock.now) is None


@pytest.mark.parametrize(
    "env,field",
    [
        ({"VOICEFLEET_ROUTER__ROUTES__REALTIME": "[moss_sts, piper]"}, "router.routes.realtime[1]"),
        ({"VOICEFLEET_ROUTER__ROUTES__BROADCAST": "[cosyvoice_tts, cosyvoice_tts]"}, "router.routes.broadcast"),
        ({"VOICEFLEET_ROUTER__ROUTES__REALTIME": "[]"}, "router.routes.realtime"),
        ({"VOICEFLEET_ROUTER__ROUTES__FIRST_AUDIO_TIMEOUT_MS": "0"}, "router.routes.first_audio_timeout_ms"),
        ({"VOICEFLEET_ROUTER__ROUTES__PRIORITY": "[moss_sts]"}, "router.routes.priority"),
        ({"VOICEFLEET_ROUTER__HEALTH__RECOVERY_PROBES": "0"}, "router.health.recovery_probes"),
        ({"VOICEFLEET_ROUTER__HEALTH__MAX_EJECTION_SECONDS": "1"}, "router.health.max_ejection_seconds"),
        ({"VOICEFLEET_ROUTER__HEALTH__DEEP_PROBE": "[asr]"}, "router.health.deep_probe[0]"),
        ({"VOICEFLEET_ROUTER__DEFAULT_TTS_BACKEND": "asr"}, "router.default_tts_backend"),
    ],
)
def test_bad_routing_config_fails_naming_the_field(env, field):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert str(err.value).startswith(field), err.value


def test_default_routes():
    routes = load_config(env={}).router.routes
    assert routes.realtime == ["moss_sts", "cosyvoice_tts"] and routes.broadcast == ["cosyvoice_tts"]
    assert routes.voice_owners[0] == "qwen_tts"


def test_readiness_per_service_name_follows_the_backends():
    """The router's health names: a name is SERVING while one route for it is routable (Conversation: moss_sts, or
    the fallback cascade asr + cosyvoice_tts), and every change of a backend is announced (so Watch follows)."""
    clock = Clock()
    backends = {
        name: Backend(name, "127.0.0.1:1", RouterHealthConfig(), clock=clock, connect=False)
        for name in ("cosyvoice_tts", "qwen_tts", "asr", "moss_sts")
    }
    cosy, qwen, asr, moss = backends.values()
    readiness = ServiceReadiness(backends, {"voice.v1.Conversation": [[asr, cosy]]})
    changes = []
    readiness.on_change(lambda: changes.append(1))

    def ready() -> dict[str, bool]:
        return {name.removeprefix("voice.v1."): readiness.ready(name) for name in readiness.names}

    assert ready() == {"Synthesizer": False, "Recognizer": False, "Conversation": False}
    assert "cosyvoice_tts" in readiness.why_not("voice.v1.Synthesizer")
    for b in backends.values():
        b.set_watch(SERVING)
    assert ready() == {"Synthesizer": True, "Recognizer": True, "Conversation": True}
    assert len(changes) == 4

    moss.set_watch(UNREACHABLE)  # the cascade still answers conversations
    assert ready() == {"Synthesizer": True, "Recognizer": True, "Conversation": True}
    asr.set_watch(NOT_SERVING)
    assert ready() == {"Synthesizer": True, "Recognizer": False, "Conversation": False}
    assert "asr" in readiness.why_not("voice.v1.Recognizer")
    cosy.eject("failures")
    qwen.set_watch(NOT_SERVING)
    assert ready() == {"Synthesizer": False, "Recognizer": False, "Conversation": False}
    assert len(changes) == 8

    qwen.set_watch(SERVING)  # back from an outage: routable only after its recovery probes
    assert not readiness.ready("voice.v1.Synthesizer")
    recover(qwen, clock)
    assert readiness.ready("voice.v1.Synthesizer")


def test_a_name_no_backend_serves_is_not_ready_and_says_why():
    readiness = ServiceReadiness({})
    assert not readiness.ready("voice.v1.Recognizer")
    assert "no backend serves it" in readiness.why_not("voice.v1.Recognizer")


# --- a hung backend seen by the route's voice lookup (real gRPC servers on loopback) ------------------------------
class _Backend(synthesizer_pb2_grpc.SynthesizerServicer):
    """A TTS backend's ListVoices: answering one voice, or hung (a SIGSTOPped process is up but answers nothing)."""

    def __init__(self, hung: bool):
        self.hung = hung

    async def ListVoices(self, request, context):
        if self.hung:
            await asyncio.sleep(30)
        return synthesizer_pb2.ListVoicesResponse(
            voices=[synthesizer_pb2.Voice(id="joe", languages=["en-US"], native_sample_rate_hz=22050)]
        )


async def _serve(hung: bool) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    synthesizer_pb2_grpc.add_SynthesizerServicer_to_server(_Backend(hung), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("time_remaining", "ejected"),
    [(None, True), (0.4, False)],
    ids=["lookup-bounded-by-the-route", "lookup-bounded-by-the-callers-deadline"],
)
async def test_a_hung_voice_lookup_counts_against_the_backend_only_when_the_route_bounded_it(time_remaining, ejected):
    """moss_sts hangs (its ListVoices never answers): the REALTIME request goes to cosyvoice_tts. When the lookup ran
    out the route's first-audio timeout, moss_sts is ejected like a synthesis that sent no audio, so the next
    request does not walk into the hang again (the route would flap with every hang). When the caller's own short
    deadline cut it (half its time is under the timeout), that is no evidence against moss_sts."""
    servers = [await _serve(hung=True), await _serve(hung=False)]
    health = RouterHealthConfig(eject_after_failures=1)
    moss, cosy = (Backend(n, a, health) for n, (_, a) in zip(("moss_sts", "cosyvoice_tts"), servers, strict=True))
    for b in (moss, cosy):
        b.set_watch(SERVING)
    resolver = RouterTtsResolver(
        {b.name: RemoteTtsEngine(b, 0.05, voices_cache_s=5.0) for b in (moss, cosy)},
        "cosyvoice_tts",
        RoutesConfig(first_audio_timeout_ms=300),
    )
    try:
        routed, voice = await resolver.resolve("", "", Routing(mode=routing_pb2.ROUTE_MODE_REALTIME), time_remaining)
        assert [c.name for c in routed.candidates] == ["cosyvoice_tts"], "the hung backend is no candidate"
        assert voice.id == "joe"
        assert moss.routable() is not ejected, moss.state_detail()
        assert cosy.routable()
        if ejected:
            assert moss.ejected() and metrics.BACKEND_EJECTIONS.labels("moss_sts", "no_audio")._value.get() >= 1
    finally:
        for b in (moss, cosy):
            await b.channel.close()
        for server, _ in servers:
            await server.stop(None)


@pytest.mark.parametrize(
    ("code", "route_deadline", "reason"),
    [
        (grpc.StatusCode.UNAVAILABLE, False, "failures"),
        (grpc.StatusCode.INTERNAL, False, "failures"),
        (grpc.StatusCode.UNKNOWN, False, "failures"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, True, "no_audio"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, False, None),
        (grpc.StatusCode.CANCELLED, False, None),
        (grpc.StatusCode.FAILED_PRECONDITION, False, None),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, False, None),
        (grpc.StatusCode.INVALID_ARGUMENT, False, None),
    ],
)
def test_only_the_backends_own_failures_count_against_it(code, route_deadline, reason):
    """One rule for every remote engine: a broken or unreachable backend counts, and so does a deadline the route
    set to find a hung backend; the caller's own deadline or cancel, a backend still loading or full, or the
    caller's bad request do not."""
    assert fault(code, route_deadline) == reason
