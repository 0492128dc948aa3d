"""Memory: the CPU fleet's proportional set size (PSS) per member, fresh (after one conversation turn and one
transcription) and again after AFTER_TURNS more conversation turns (SESSIONS sessions of QUESTIONS turns each).

The whole CPU fleet is started the way a user starts it (`voicefleet up`, every member of the default
fleet.services). Once every backend is routable, the CLI speaks a sentence through the router, transcribes that WAV
(Recognizer) and sends it as one conversation turn (Conversation, moss_sts), so each model has loaded and run.
Then the supervisor's /members gives each member's PSS (its process and children, /proc/<pid>/smaps_rollup: a page
shared by N processes counts 1/N in each, so the members add up to what the fleet takes) — what `voicefleet status`
prints. One sample per member; the unit is MB (2^20 bytes). Then the CLI holds SESSIONS conversations of one
turn per question in QUESTIONS (`voicefleet converse --turns ... --fast`: each turn's audio sent at once, the reply
waited for), so every cache the turns fill (the brain's prompt caches, the voice's segment cache, the recognizer's
buffers) has filled, and the members are measured again: the fleet's goal is under 2 GB both times (issue 45).
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
QUESTIONS = (
    "What time does the library open tomorrow?",
    "Can you tell me a short joke?",
    "How far is the airport from the station?",
    "What should I cook for dinner tonight?",
    "Is it going to rain this afternoon?",
    "How do I reset my password?",
    "Where is the nearest coffee shop?",
    "What is a good name for a cat?",
    "How long does it take to boil an egg?",
    "Can you remind me to call my sister?",
)
SESSIONS = 10
AFTER_TURNS = SESSIONS * len(QUESTIONS)


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
            questions = []
            for i, question in enumerate(QUESTIONS):
                questions.append(str(Path(tmp) / f"question-{i}.wav"))
                cli(up, "speak", question, "-o", questions[-1])
            for _ in range(SESSIONS):
                cli(up, "converse", "--turns", *questions, "-o", str(reply), "--fast")
            after = up.members()
        finally:
            up.stop()
    rows = []
    for label, sample in (("fresh", members), (f"after {AFTER_TURNS} turns", after)):
        rows += [
            Row(f"{name} PSS, {label}", "MB", [m["pss_bytes"] / MB], f"pid tree of {name}")
            for name, m in sample.items()
            if m.get("pss_bytes") is not None
        ]
        total = sum(m.get("pss_bytes") or 0 for m in sample.values()) / MB
        rows.append(Row(f"the fleet PSS (sum of members), {label}", "MB", [total], "goal: under 2048"))
    extra = {
        "fleet": list(services),
        "work before measuring": "1 Synthesize, 1 StreamingRecognize, 1 conversation turn, through the router;"
        f" then {SESSIONS} conversations of {len(QUESTIONS)} turns (CLI --turns --fast) before the second sample",
        "transcribe output": transcript.strip().splitlines()[-3:],
        "converse output": conversation.strip().splitlines()[-3:],
    }
    return rows, extra
