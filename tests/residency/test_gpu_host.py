"""services/residency/gpu_host.py: the driver check every GPU engine runs at start, and the memory-plan arithmetic."""

from __future__ import annotations

import pytest

from services.common.errors import FailedPrecondition
from services.residency import gpu_host
from services.residency.gpu_host import check_cuda_host, memory_fraction


def test_a_cuda_13_build_on_a_cuda_12_8_driver_says_which_driver_to_install():
    with pytest.raises(FailedPrecondition, match=r"built for CUDA 13\.0.*only CUDA 12\.8.*>= 580\.65\.06"):
        check_cuda_host("qwen_tts", "13.0", driver=(12, 8))


def test_a_driver_of_the_same_cuda_major_or_newer_passes():
    check_cuda_host("moss_sts", "12.8", driver=(12, 2))  # minor version compatibility: a 535 driver runs cu128
    check_cuda_host("moss_sts", "12.8", driver=(13, 0))


def test_a_cpu_torch_or_no_driver_is_named(monkeypatch):
    with pytest.raises(FailedPrecondition, match="no CUDA build"):
        check_cuda_host("cosyvoice_tts", None, driver=(13, 0))
    monkeypatch.setattr(gpu_host, "driver_cuda_version", lambda: None)  # a host without libcuda
    with pytest.raises(FailedPrecondition, match=r"no NVIDIA driver is visible.*>= 525\.60\.13"):
        check_cuda_host("cosyvoice_tts", "12.8")


def test_memory_fraction_is_the_lease_over_the_card():
    assert memory_fraction(6 << 30, 24 << 30) == 0.25
    with pytest.raises(FailedPrecondition, match="declared_gb"):
        memory_fraction(30 << 30, 24 << 30)
    with pytest.raises(FailedPrecondition):
        memory_fraction(0, 24 << 30)


class StandInTorch:
    """Test double for torch's CUDA calls (no card here): records what cap_torch_process asks of torch.cuda."""

    def __init__(self, cards: int = 2, total: int = 24 << 30):
        self.calls: list[tuple] = []
        # torch.device("cuda:1").index == 1, torch.device("cuda").index is None
        self.device = lambda name: type("Device", (), {"index": int(name[5:]) if ":" in name else None})()
        self.version = type("Version", (), {"cuda": "12.8"})()
        outer = self

        class Cuda:
            def is_available(self):
                return True

            def set_device(self, index):
                outer.calls.append(("set_device", index))

            def get_device_properties(self, index):
                assert index < cards
                return type("Props", (), {"total_memory": total})()

            def set_per_process_memory_fraction(self, fraction, index):
                outer.calls.append(("fraction", round(fraction, 3), index))

        self.cuda = Cuda()


def test_the_cap_makes_the_leased_card_current_so_cuda_means_that_card(monkeypatch):
    """Libraries that put their weights on "cuda" (CosyVoice) land on the leased card, not card 0."""
    monkeypatch.setattr(gpu_host, "driver_cuda_version", lambda: (12, 8))
    torch = StandInTorch()
    gpu_host.cap_torch_process(torch, "cosyvoice_tts", "cuda:1", 6 << 30)
    assert torch.calls == [("set_device", 1), ("fraction", 0.25, 1)]
