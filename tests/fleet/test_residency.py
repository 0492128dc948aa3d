"""Two models that do not fit on the card together take turns, and both are served (real processes, loopback).

The CPU engines account their declared sizes on the router's virtual card: cosyvoice_tts 8 GiB + qwen_tts 6 GiB on
a 10 GiB card. ModelControl shows where each model is; the router's lease table never grants more than the card.
"""

from __future__ import annotations

import pytest

from tests.conftest import start_fleet
from tests.speech import INTELLIGIBLE, intelligible
from voice.v1 import gpu_pb2, gpu_pb2_grpc, routing_pb2, synthesizer_pb2, synthesizer_pb2_grpc

GB = 1 << 30
SENTENCE = "the children are playing in the garden"  # both CPU voices say it clearly (tests/speech.py)


@pytest.fixture(scope="module")
def shared_card(tmp_path_factory):
    fleet = start_fleet(
        tmp_path_factory.mktemp("card"),
        services=("cosyvoice_tts", "qwen_tts", "router"),
        router={
            "leases": {"capacity_gb": 10, "min_residency_seconds": 1, "ttl_seconds": 3, "renew_deadline_seconds": 2},
            "routes": {"default": ["cosyvoice_tts", "qwen_tts"]},
            # Members hold GpuLeases streams open until the router ends them: a SIGTERMed router drains its whole
            # grace (5 s) at teardown. No test here stops the router while a call is in flight.
            "grace_seconds": 1,
        },
        residency={
            "enabled": True,
            "services": {
                "cosyvoice_tts": {"declared_gb": 8, "priority": "INTERACTIVE", "swap_in_ms": 1000},
                "qwen_tts": {"declared_gb": 6, "priority": "INTERACTIVE", "swap_in_ms": 500},
            },
        },
    )
    yield fleet
    fleet.fleet.stop()


def status(fleet, name):
    with fleet.channel(name) as channel:
        return gpu_pb2_grpc.ModelControlStub(channel).GetModelStatus(gpu_pb2.GetModelStatusRequest(), timeout=10).status


def leases(fleet):
    with fleet.channel("router") as channel:
        return gpu_pb2_grpc.GpuLeasesStub(channel).ListLeases(gpu_pb2.ListLeasesRequest(), timeout=10)


def speak(fleet, engine):
    with fleet.channel("router") as channel:
        stub = synthesizer_pb2_grpc.SynthesizerStub(channel)
        request = synthesizer_pb2.SynthesizeRequest(
            text=SENTENCE + ".", config=synthesizer_pb2.SynthesisConfig(routing=routing_pb2.Routing(engine=engine))
        )
        replies = list(stub.Synthesize(request, timeout=60))
    rate = replies[0].audio.format.sample_rate_hz
    return b"".join(r.audio.data for r in replies), rate, replies[0].served_by


def test_both_models_are_served_by_taking_turns(shared_card):
    for engine in ("cosyvoice_tts", "qwen_tts", "cosyvoice_tts", "qwen_tts"):
        pcm, rate, served_by = speak(shared_card, engine)
        assert served_by.startswith(engine)
        error, heard = intelligible(SENTENCE, pcm, rate)
        assert error <= INTELLIGIBLE, (engine, heard)
        # The one that just spoke is resident and holds the lease; the card is never over-granted.
        assert status(shared_card, engine).residency == gpu_pb2.RESIDENCY_RESIDENT
        table = leases(shared_card)
        assert table.granted_bytes <= table.capacity_bytes == 10 * GB
        assert [lease.holder for lease in table.leases] == [engine]
    other = status(shared_card, "cosyvoice_tts")
    assert other.residency == gpu_pb2.RESIDENCY_COLD and other.lease_epoch == 0
    assert other.declared_bytes == 8 * GB
    # Each took the card twice and gave it up at least once: the swaps are measured, not the configured guesses.
    assert other.swap_ins >= 2 and other.swap_in_ms > 0 and other.swap_out_ms > 0, other
    assert status(shared_card, "qwen_tts").swap_ins >= 2


def test_swap_times_are_measured_moving_averages_and_the_lease_asks_with_them():
    import asyncio

    from services.residency.model_residency import SWAP_AVERAGE_WEIGHT, ModelResidency, ResidencyHooks

    # An injected clock: each load takes the next of these seconds, each offload 20 ms, exactly.
    now = [0.0]
    load_s = [0.05, 0.25, 0.25]

    async def load():
        now[0] += load_s.pop(0)

    async def offload():
        now[0] += 0.02

    hooks = ResidencyHooks(load, load, offload, lambda: 0, "test", "test-model", lambda: "cpu")
    residency = ModelResidency(
        "svc", hooks, lease_enabled=False, swap_in_ms=9000, swap_out_ms=7000, clock=lambda: now[0]
    )
    # Before any swap, a lease asks with the configured guesses.
    assert (residency.lease_swap_in_ms(), residency.lease_swap_out_ms()) == (9000, 7000)

    async def cycle():
        await residency.load()
        first = residency.status().swap_in_ms
        assert residency.lease_swap_in_ms() == first  # measured replaces the configured guess after one load
        await residency.offload("test")
        await residency.load()
        await residency.offload("test")
        await residency.load()
        return first, residency.status()

    first, final = asyncio.run(cycle())
    assert first == 50
    # Two 250 ms reloads pull the average towards 250 ms without jumping to it (the documented moving average).
    w = SWAP_AVERAGE_WEIGHT
    assert final.swap_in_ms == round((1 - w) * ((1 - w) * 50 + w * 250) + w * 250) and final.swap_ins == 3
    assert 50 < final.swap_in_ms < 250
    assert final.swap_out_ms == 20 and residency.swap_outs == 2
    # What a lease asks with is what was measured.
    assert (residency.lease_swap_in_ms(), residency.lease_swap_out_ms()) == (final.swap_in_ms, final.swap_out_ms)


def test_model_control_load_streams_progress_and_offload_frees_the_card(shared_card):
    with shared_card.channel("cosyvoice_tts") as channel:
        control = gpu_pb2_grpc.ModelControlStub(channel)
        stages = [r.stage for r in control.Load(gpu_pb2.LoadRequest(request_id="prefetch"), timeout=60)]
        assert stages[-1] == "ready"
        assert status(shared_card, "cosyvoice_tts").residency == gpu_pb2.RESIDENCY_RESIDENT
        off = control.Offload(gpu_pb2.OffloadRequest(reason="test"), timeout=30)
    assert off.status.residency == gpu_pb2.RESIDENCY_COLD
    assert all(lease.holder != "cosyvoice_tts" for lease in leases(shared_card).leases)


def test_status_cli_shows_the_lease_table(shared_card):
    import subprocess
    import sys

    speak(shared_card, "qwen_tts")  # qwen_tts resident and holding the card
    result = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "--config", str(shared_card.config_path), "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "GPU card: 10.0 GiB, 6.0 GiB granted" in result.stdout, result.stdout + result.stderr
    holder_line = next(
        line
        for line in result.stdout.splitlines()
        if line.strip().startswith("qwen_tts ") and "GiB" not in line and "espeak" in line
    )
    assert "6.0" in holder_line
    # Each model as its service measures it: qwen_tts on its device, cosyvoice_tts offloaded.
    models = {
        line.split()[0]: line.split()[1:]
        for line in result.stdout.splitlines()
        if line.startswith("  ") and ":" in line.split()[0]
    }
    assert models["qwen_tts:"][2] == "RESIDENT" and models["qwen_tts:"][4] == "6.00", result.stdout
    assert models["cosyvoice_tts:"][2] == "COLD" and models["cosyvoice_tts:"][4] == "8.00", result.stdout


def test_cold_preferred_model_yields_to_a_warm_fallback_and_is_prefetched(shared_card):
    import time

    from voice.v1 import fleet_pb2, fleet_pb2_grpc

    speak(shared_card, "qwen_tts")  # qwen_tts warm, cosyvoice_tts cold (its swap-in: 1000 ms)
    assert status(shared_card, "cosyvoice_tts").residency == gpu_pb2.RESIDENCY_COLD

    def unpinned(budget_ms):
        with shared_card.channel("router") as channel:
            request = synthesizer_pb2.SynthesizeRequest(
                text=SENTENCE + ".",
                config=synthesizer_pb2.SynthesisConfig(routing=routing_pb2.Routing(latency_budget_ms=budget_ms)),
            )
            replies = list(synthesizer_pb2_grpc.SynthesizerStub(channel).Synthesize(request, timeout=60))
        return replies[0].served_by, b"".join(r.audio.data for r in replies)

    # The route prefers cosyvoice_tts, but its swap-in would miss a 200 ms budget: the warm qwen_tts serves.
    served_by, pcm = unpinned(200)
    assert served_by.startswith("qwen_tts") and pcm
    with shared_card.channel("router") as channel:
        fleet = fleet_pb2_grpc.FleetStub(channel).GetFleetStatus(fleet_pb2.GetFleetStatusRequest(), timeout=10)
    assert any(
        f.from_backend == "cosyvoice_tts" and f.to_backend == "qwen_tts" and f.reason == "cold"
        for f in fleet.recent_failovers
    )
    # ...and the router prefetched cosyvoice_tts: it becomes resident without a request of its own.
    deadline = time.monotonic() + 30
    while status(shared_card, "cosyvoice_tts").residency != gpu_pb2.RESIDENCY_RESIDENT and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status(shared_card, "cosyvoice_tts").residency == gpu_pb2.RESIDENCY_RESIDENT
    served_by, _ = unpinned(200)
    assert served_by.startswith("cosyvoice_tts")


def test_a_gpu_engine_that_cannot_free_its_memory_must_be_pinned():
    """No silent no-op: a GPU engine without offload/reload is refused as a time-sharing holder, by name, with the
    fix; pinned, it is accepted and refuses to be offloaded."""
    import asyncio

    from services.common.config import Config
    from services.common.config.base import ConfigError
    from services.common.errors import FailedPrecondition
    from services.residency.from_config import residency_for
    from services.residency.model_residency import engine_hooks

    class StaysOnTheCard:  # an engine class as a third party might write one: it can load, not unload
        name, device = "stays-on-card", "cuda"

        async def start(self):
            return None

        def resident_bytes(self):
            return 0

    with pytest.raises(ConfigError, match=r"residency.services.qwen_tts.*stays-on-card.*pinned: true"):
        engine_hooks(StaysOnTheCard(), "m", "qwen_tts", gpu_engine=True)
    engine_hooks(StaysOnTheCard(), "m", "qwen_tts", gpu_engine=False)  # CPU engines only account: accepted

    config = Config(residency={"services": {"qwen_tts": {"declared_gb": 3, "pinned": True}}})
    residency = residency_for(config, "qwen_tts", StaysOnTheCard(), "m", gpu_engine=True)
    assert residency.pinned and residency.lease_enabled

    with pytest.raises(FailedPrecondition, match="pinned"):
        asyncio.run(residency.offload("ModelControl.Offload"))


def test_the_lease_follows_the_bytes_the_engine_was_measured_to_hold():
    """After a load, an engine that holds more than it declared asks for what it holds at its next swap-in; one that
    holds less keeps asking for its declared size (its allocator may grow to it). CPU engines only account."""
    import asyncio

    from services.residency.model_residency import ModelResidency, ResidencyHooks

    async def nothing():
        return None

    def residency(held: int, moves: bool) -> ModelResidency:
        hooks = ResidencyHooks(nothing, nothing, nothing, lambda: held, "t", "m", lambda: "cuda", moves_weights=moves)
        return ModelResidency("svc", hooks, lease_enabled=False, declared_bytes=4 * GB)

    for held, moves, asks in ((6 * GB, True, 6 * GB), (3 * GB, True, 4 * GB), (6 * GB, False, 4 * GB)):
        r = residency(held, moves)
        assert r.lease_bytes() == 4 * GB
        asyncio.run(r.load())
        assert r.lease_bytes() == asks, (held, moves)


def test_every_gpu_engine_declares_that_it_can_offload():
    """GPU engines take turns on the card because they are Offloadable (declared, not guessed from their methods):
    their residency moves the weights with their own offload and reload."""
    from services.common.engines import Offloadable
    from services.cosyvoice_tts.cosyvoice_engine import CosyVoice3Engine
    from services.engines.asr.gpu_engine import GpuAsrEngine
    from services.moss_sts.moss_engine import MossSpeechEngine
    from services.qwen_tts.qwen_engine import QwenTtsEngine
    from services.qwen_tts.vllm_omni_engine import VllmOmniTtsEngine
    from services.residency.model_residency import engine_hooks

    gpu_engines = (GpuAsrEngine, CosyVoice3Engine, MossSpeechEngine, QwenTtsEngine, VllmOmniTtsEngine)
    assert [c.__name__ for c in gpu_engines if not issubclass(c, Offloadable)] == []

    class Swaps(Offloadable):  # the smallest engine that declares it
        name, device = "swaps", "cuda"

        async def start(self):
            return None

        async def offload(self):
            return None

        async def reload(self):
            return None

        def resident_bytes(self):
            return 0

    engine = Swaps()
    hooks = engine_hooks(engine, "m", "qwen_tts", gpu_engine=True)
    assert hooks.moves_weights and hooks.offload == engine.offload and hooks.reload == engine.reload
