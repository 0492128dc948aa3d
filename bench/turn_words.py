"""The words judgement's tuning set (docs/conversation.md#the-words-judgement): where to put
``moss_sts.brain_turn_logprob``.

The in-box brain (services/brain, SmolLM2-135M-Instruct) reads whole requests and the same requests cut after
every word but the last (a speaker's mid-phrase pause) as the dialogue has it read them
(``ChatBrain.end_of_turn_logprob``: log P(end-of-message or a closing mark next), the recognizer's own closing mark
left off). The sentences here are for tuning only: none of them is a line of the turn-taking set
(bench/turn_set.py) or a phrase of the tests, which judge the result.

``python -m bench.turn_words [--out FILE.json]`` starts a brain on free ports, prints each threshold's share of
cut phrases that would read finished (the turn model and the text check then decide alone) and of whole requests
that would wait (slow turns), and writes every score to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from bench.harness import machine
from services.cli.fleet import LocalFleet
from services.common.config import load_config
from services.conversation.brain import ChatBrain

T = TypeVar("T")

TUNING_REQUESTS = [
    "Can you find me a cheap hotel near the station?",
    "I want to change my flight to Tuesday morning.",
    "How many ounces are there in a pound?",
    "Add milk and eggs to my shopping list.",
    "Tell me something interesting about octopuses.",
    "My package was supposed to arrive yesterday but it never came.",
    "Which bus goes to the city hospital from here?",
    "I was wondering if you could help me write a birthday message for my sister.",
    "Turn off the lights in the kitchen.",
    "What time does the pharmacy on Main Street close?",
    "Send a text to Maria saying I will be ten minutes late.",
    "Why is the sky blue during the day?",
    "I think I left my wallet at the restaurant last night.",
    "Could you explain how a mortgage works in simple terms?",
    "Play some relaxing piano music.",
    "How long should I boil an egg for a soft yolk?",
    "We are planning a trip to the mountains with our two kids next month.",
    "Cancel my appointment with the dentist on Thursday.",
    "What is a good name for a small grey cat?",
    "The heating in my apartment has stopped working again.",
    "Remind me to call my mother when I get home from work.",
    "Is it going to snow this weekend in Denver?",
    "I would love a recipe for a quick vegetable soup.",
    "Give me three ideas for a rainy afternoon.",
    "Do you know any good jokes about penguins?",
    "Set a timer for twenty minutes.",
    "I'm looking for a gift for my dad who likes fishing.",
    "What's the difference between a crocodile and an alligator?",
    "Book me a taxi to the airport at five in the morning.",
    "Can you read me the latest news about the election?",
    "I need help choosing a laptop for college.",
    "How do you say thank you in Japanese?",
    "Our team meeting has been moved to the small conference room.",
    "Where can I recycle old batteries in this town?",
    "Please lower the thermostat by two degrees.",
    "I keep waking up at three in the morning and can't fall back asleep.",
    "Is there a vegetarian option on the lunch menu today?",
    "Tell me how to get a red wine stain out of a carpet.",
    "Who wrote the novel about the white whale?",
    "My car makes a strange noise when I brake.",
    "Can you suggest a workout I can do without any equipment?",
    "Find a dentist that is open on Saturdays.",
    "What should I pack for a week in Iceland?",
    "I'd like to return the shoes I bought online last week.",
    "How much water should I drink every day?",
    "Let me know when my package is out for delivery.",
    "Could you spell the word necessary for me?",
    "We ran out of coffee again.",
]


def cut_phrases(request: str) -> list[str]:
    """``request`` cut after each word but the last."""
    words = request.rstrip(".?!").split()
    return [re.sub(r"[,;:]$", "", " ".join(words[:n])) for n in range(1, len(words))]


async def score_all(brain: ChatBrain, system_prompt: str) -> dict[str, list[tuple[str, float]]]:
    async def score(text: str) -> float:
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}]
        logprob = await brain.end_of_turn_logprob(messages)
        assert logprob is not None, "the brain has no /end_of_turn route"
        return logprob

    whole = [(r, await score(r)) for r in TUNING_REQUESTS]
    cut = [(c, await score(c)) for r in TUNING_REQUESTS for c in cut_phrases(r)]
    return {"whole": whole, "cut": cut}


def report(scores: dict[str, list[tuple[str, float]]]) -> str:
    lines = ["| log P threshold | whole requests that wait | cut phrases that read finished |", "|---|---|---|"]
    whole, cut = scores["whole"], scores["cut"]
    for threshold in (-0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -4.0):
        wait = sum(lp < threshold for _, lp in whole)
        done = sum(lp >= threshold for _, lp in cut)
        lines.append(f"| {threshold} | {wait}/{len(whole)} | {done}/{len(cut)} ({100 * done / len(cut):.1f} %) |")
    lines.append("")
    lines.append(
        "cut phrases that read most finished: "
        + "; ".join(f"{c!r} {lp:.1f}" for c, lp in sorted(cut, key=lambda x: -x[1])[:16])
    )
    lines.append(
        "whole requests that read least finished: "
        + "; ".join(f"{c!r} {lp:.1f}" for c, lp in sorted(whole, key=lambda x: x[1])[:6])
    )
    return "\n".join(lines)


def with_brain(read: Callable[[ChatBrain, str], Awaitable[T]]) -> T:
    """``read(brain, system_prompt)`` against the in-box brain alone (a fleet of one, started and stopped here), with
    the conversation's default system prompt; the brain's client is closed after it."""
    system_prompt = load_config().moss_sts.default_system_prompt
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(Path(tmp), ("brain",))
        try:
            b = fleet.config.brain
            brain = ChatBrain(b.url, b.model, "bench", read_timeout_s=120.0, examples=b.example_turns)

            async def run() -> T:
                try:
                    return await read(brain, system_prompt)
                finally:
                    await brain.close()

            return asyncio.run(run())
        finally:
            fleet.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.turn_words", description=__doc__)
    parser.add_argument("--out", type=Path, help="write every score here (JSON)")
    args = parser.parse_args()

    async def timed(brain: ChatBrain, system_prompt: str):
        started = time.monotonic()
        scores = await score_all(brain, system_prompt)
        return scores, time.monotonic() - started

    scores, seconds = with_brain(timed)
    print(report(scores))
    count = sum(len(v) for v in scores.values())
    print(f"\n{count} readings in {seconds:.1f} s ({1000 * seconds / count:.0f} ms each, one at a time, cold cache)")
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "scores": scores,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
