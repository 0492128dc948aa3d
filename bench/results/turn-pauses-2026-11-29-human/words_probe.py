"""The brain's reading of the words (ChatBrain.end_of_turn_logprob, the words judgement's signal) for the three verses
cut at 800 and 1200 ms in human.json, as the recognizer wrote them before the pause, beside whole verse lines and a
few requests (words_probe.txt, 2026-11-29 17:2x UTC, the 2-core Zen 1 EPYC VM). Run from the repository root with
PYTHONPATH=.:gen/python."""

import asyncio
import tempfile
from pathlib import Path

from services.cli.fleet import LocalFleet
from services.common.config import load_config
from services.conversation.brain import ChatBrain

texts = [
    "and tender chural makes way",
    "Thou that art now the world's fresher",
    "to eat the world's do. by the grave",
    "to eat the world's doom. by the grave",
    "And tender churl makes waste in niggarding",
    "Thou that art now the world's fresh ornament",
    "To eat the world's due, by the grave and thee",
    "From fairest creatures we desire increase",
    "Thou that art now",
    "To eat the world's due, by",
    "I need to book a table",
    "What is the capital of France",
    "Tell me a joke",
]
sp = load_config().moss_sts.default_system_prompt
with tempfile.TemporaryDirectory() as tmp:
    fleet = LocalFleet.on_free_ports(Path(tmp), ("brain",))
    try:
        b = fleet.config.brain
        brain = ChatBrain(b.url, b.model, "bench", read_timeout_s=120.0, examples=b.example_turns)

        async def run():
            for t in texts:
                lp = await brain.end_of_turn_logprob(
                    [{"role": "system", "content": sp}, {"role": "user", "content": t}]
                )
                print(f"{lp:7.2f}  {t}")
            await brain.close()

        asyncio.run(run())
    finally:
        fleet.stop()
