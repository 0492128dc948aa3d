"""The in-box brain answers in English, the only language its voice reads (docs/conversation.md#languages).

SmolLM2-135M-Instruct, asked about a country, often answered in that country's language ("What is the capital of
France?" -> "Le Grand Paris, le Grand France."), and piper's English voice read it. The brain client now puts
brain.reply_examples (two English exchanges, the in-box model's default) after the system prompt. Without them the
same questions and seeds gave 8 non-English replies of 21 (2026-11-28, 2-core AMD EPYC); with them none."""

from __future__ import annotations

import asyncio

import pytest

from services.cli.fleet import LocalFleet
from services.common.config import load_config
from services.common.config.brain import IN_BOX_REPLY_EXAMPLES, BrainConfig
from services.common.engines import Sampling
from services.conversation.brain import ChatBrain
from tests.text_language import language_of

pytestmark = [pytest.mark.timeout(300)]

COUNTRY_QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of Germany?",
    "What is the capital of Spain?",
    "What is the capital of Italy?",
    "Where is Paris?",
    "What is the biggest city in Mexico?",
    "What language do they speak in Portugal?",
]
SEEDS = (1, 2, 3)


def test_the_in_box_model_is_shown_english_examples_and_a_model_of_your_own_none():
    assert BrainConfig().example_turns == IN_BOX_REPLY_EXAMPLES
    assert BrainConfig(base_url="http://10.0.0.7:8000/v1").example_turns == ()
    assert BrainConfig(model_path="/models/other.gguf").example_turns == ()
    assert BrainConfig(reply_examples=[]).example_turns == ()
    assert BrainConfig(base_url="http://x/v1", reply_examples=[["Hi.", "Hello."]]).example_turns == (("Hi.", "Hello."),)


def test_the_cascades_client_sends_the_examples_and_only_moss_sts_checks_languages():
    in_box = ChatBrain.from_config(BrainConfig(), "test")
    assert in_box.languages == ("en",) and len(in_box.examples) == 2 * len(IN_BOX_REPLY_EXAMPLES)
    assert ChatBrain.from_config(BrainConfig(), "test", check_languages=False).languages == ()
    assert ChatBrain.from_config(BrainConfig(base_url="http://10.0.0.7:8000/v1"), "test").examples == []


def test_examples_come_after_the_system_prompt_and_before_the_turns():
    brain = ChatBrain("http://127.0.0.1:1/v1", "m", "test", examples=(("Hi.", "Hello."),))
    turns = [{"role": "user", "content": "What is two plus two?"}]
    system = [{"role": "system", "content": "Be brief."}]
    shown = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    assert brain.prompt(system + turns) == system + shown + turns
    assert brain.prompt(turns) == shown + turns
    assert ChatBrain("http://127.0.0.1:1/v1", "m", "test").prompt(system + turns) == system + turns


@pytest.mark.background  # CPU work with no clock in it: `make test`'s background lane (scripts/test-lanes.sh)
def test_questions_about_countries_are_answered_in_english(tmp_path):
    fleet = LocalFleet.on_free_ports(tmp_path, ("brain",))
    system_prompt = load_config().moss_sts.default_system_prompt
    try:
        b = fleet.config.brain
        brain = ChatBrain(b.url, b.model, "test", read_timeout_s=120.0, examples=b.example_turns)

        async def ask_all() -> list[tuple[str, int, str]]:
            replies = []
            try:
                for question in COUNTRY_QUESTIONS:
                    for seed in SEEDS:
                        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]
                        sampling = Sampling(seed=seed)  # the conversation's defaults
                        text = "".join([d async for d in brain.stream_chat(messages, sampling, max_tokens=40)])
                        replies.append((question, seed, text.strip()))
            finally:
                await brain.close()
            return replies

        replies = asyncio.run(ask_all())
    finally:
        fleet.stop()
    judged = [(q, seed, text, language_of(text)) for q, seed, text in replies]
    empty = [(q, seed) for q, seed, text, _ in judged if len(text.split()) < 2]
    assert not empty, f"replies of fewer than two words: {empty}"
    foreign = [(q, seed, text, lang) for q, seed, text, lang in judged if lang != "en"]
    assert not foreign, f"{len(foreign)} of {len(judged)} replies not in English: {foreign}"
