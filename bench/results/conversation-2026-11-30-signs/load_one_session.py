"""One session at a time of the conversation-load caller (5 lines each, the session's history kept), three times,
with moss_sts's log kept: ``python load_one_session.py ['{"brain_turn_...": ...}' [LOG]]`` (moss_sts overrides)."""

import json
import shutil
import sys

from bench import conversation_load as cl
from bench import turn_taking
from bench.turn_set import build
from services.common.config import load_config

ts = build(23)
over = {
    "moss_sts": {
        "default_max_tokens": load_config().moss_sts.default_max_tokens,
        **json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"),
    }
}
with turn_taking.conversation_fleet_and_channel(over) as (fleet, channel):
    for seed in (1, 2, 3):
        out = {}
        cl._caller(channel, ts, 0, seed, out)
        print(seed, [round(x * 1000) for x in out[0]["latencies"]], flush=True)
    shutil.copy(fleet.log_dir / "moss_sts.log", sys.argv[2] if len(sys.argv) > 2 else "/tmp/probe/moss_sts_load1.log")
