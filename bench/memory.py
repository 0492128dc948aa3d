"""Memory: the CPU fleet's proportional set size (PSS) per member, after one conversation turn and one transcription.

The whole CPU fleet is started the way a user starts it (`voicefleet up`, every member of the default
fleet.services). Once every backend is routable, the CLI speaks a sentence through the router, transcribes that WAV
(Recognizer) and sends it as one conversation turn (Conversation, moss_sts), so each model has loaded and run.
Then the supervisor's /members gives each member's PSS (its process and children, /proc/<pid>/smaps_rollup: a page
shared by N processes counts 1/N in each, so the members add up to what the fleet takes) — what `voicefleet status`
prints. One sample per member; the unit is MB (2^20 bytes).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import Row
from services.common.config import Config
from tests.supervised import UpProcess

SENTENCE = "please call me back when you get home"
MB = 1 << 20


def cli(up: UpProcess, *args: str) -> str:
    command = [sys.executable, "-m", "services.cli.main", "--config", str(up.config_path), "--wait", "60", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"voicefleet {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def run():
    services = Config().fleet.services  # what `voicefleet up` starts by default
    with tempfile.TemporaryDirectory() as tmp:
        up = UpProcess(Path(tmp), services)
        try:
            up.wait_up(600)
            up.wait_all_routable(300)
            wav, reply = Path(tmp) / "said.wav", Path(tmp) / "reply.wav"
            cli(up, "speak", SENTENCE, "-o", str(wav))
            transcript = cli(up, "transcribe", str(wav), "--fast")
            conversation = cli(up, "converse", str(wav), "-o", str(reply), "--fast")
            members = up.members()
        finally:
            up.stop()
    rows = [
        Row(f"{name} PSS", "MB", [m["pss_bytes"] / MB], f"pid tree of {name}")
        for name, m in members.items()
        if m.get("pss_bytes") is not None
    ]
    total = sum(m.get("pss_bytes") or 0 for m in members.values()) / MB
    rows.append(Row("the fleet PSS (sum of members)", "MB", [total], "goal: under 2048"))
    extra = {
        "fleet": list(services),
        "work before measuring": "1 Synthesize, 1 StreamingRecognize, 1 conversation turn, through the router",
        "transcribe output": transcript.strip().splitlines()[-3:],
        "converse output": conversation.strip().splitlines()[-3:],
    }
    return rows, extra
