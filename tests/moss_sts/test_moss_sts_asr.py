"""moss_sts listens through the asr service by default (moss_sts.asr remote), in process only when configured."""

from __future__ import annotations

import pytest

from services.common.config import ConfigError, load_config
from services.moss_sts.service import asr_address, make_asr


def config(tmp_path, text: str, env=None):
    path = tmp_path / "voicefleet.yaml"
    path.write_text(text)
    return load_config(path, env=env or {})


async def test_the_dialogue_listens_through_the_asr_service_the_router_uses(tmp_path):
    c = config(tmp_path, "router:\n  backends:\n    asr: asr-host:50054\n")
    engine = make_asr(c)
    assert engine.served_by == "asr/remote"
    assert engine.backend.address == "asr-host:50054" == asr_address(c)


async def test_an_address_of_its_own_wins(tmp_path):
    c = config(tmp_path, "moss_sts:\n  asr_address: other:1234\n")
    assert make_asr(c).backend.address == "other:1234"


def test_without_a_router_backend_it_is_the_asr_sections_address(tmp_path):
    c = config(tmp_path, "fleet:\n  services: [moss_sts]\nasr:\n  port: 50999\n")
    assert asr_address(c) == "127.0.0.1:50999"


def test_local_and_remote_are_the_only_choices(tmp_path):
    with pytest.raises(ConfigError, match="moss_sts.asr: must be 'remote' or 'local', got 'elsewhere'"):
        config(tmp_path, "moss_sts:\n  asr: elsewhere\n")
    c = config(tmp_path, "", env={"VOICEFLEET_MOSS_STS__ASR": "local"})
    assert c.moss_sts.asr == "local"
