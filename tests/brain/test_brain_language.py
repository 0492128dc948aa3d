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
from services.common.engines import Sampling, SessionOptions, VoiceInfo
from services.conversation.brain import ChatBrain
from services.conversation.cascade import CascadeSession, CascadeStsEngine
from services.conversation.dialogue import DialogueLimits
from services.conversation.dialogue.reply import UserTurn
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
# Words of the examples' answers: a reply about a country that says one its question did not is the example leaking.
EXAMPLE_WORDS = {w.strip(".,?!").lower() for _, answer in IN_BOX_REPLY_EXAMPLES for w in answer.split() if len(w) > 4}


def test_the_examples_share_no_template_with_the_questions_asked_here():
    for question, _ in IN_BOX_REPLY_EXAMPLES:
        opening = question.lower().split()[:3]
        assert all(q.lower().split()[:3] != opening for q in COUNTRY_QUESTIONS), question


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
    """Asked about countries, the in-box brain (with its examples) is read in English by the cascade: what the
    model writes goes through the cascade's language guard (services/conversation/reply_language.py) to a voice
    that records what it was given to read. Every turn is read, and all of it in English."""
    fleet = LocalFleet.on_free_ports(tmp_path, ("brain",))
    system_prompt = load_config().moss_sts.default_system_prompt
    try:
        b = fleet.config.brain
        brain = ChatBrain(b.url, b.model, "test", read_timeout_s=120.0, examples=b.example_turns)
        voice = RecordingVoice()
        engine = CascadeStsEngine("test", None, brain, voice, DialogueLimits(echo_cancellation=False))

        async def ask_all() -> list[tuple[str, int, str]]:
            replies = []
            try:
                for question in COUNTRY_QUESTIONS:
                    for seed in SEEDS:
                        sampling = Sampling(seed=seed, max_tokens=40)  # the conversation's defaults, seed aside
                        options = SessionOptions(
                            language="en", system_prompt=system_prompt, request_id="t", sampling=sampling
                        )
                        session = CascadeSession(engine, options, JOE)
                        voice.read = ""
                        turn = UserTurn(0, question, None, None, 0.0, 0.0)
                        await session.generate_reply(turn, DiscardingSink())
                        replies.append((question, seed, voice.read.strip()))
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
    said = [(q, text) for q, _, text in replies]
    leaked = [
        (q, t)
        for q, t in said
        if EXAMPLE_WORDS & ({w.strip(".,?!").lower() for w in t.split()} - set(q.lower().split()))
    ]
    assert not leaked, f"replies that repeat the examples: {leaked}"


JOE = VoiceInfo("joe", "Joe", ("en-US",), 22050, "test", "piper", "")


class RecordingVoice:
    """Stands in for the TTS engine (not under test here): the text it was given to read."""

    read = ""

    async def synthesize_text_stream(self, events, options, policy):
        async for event in events:
            self.read += event.text
        if False:  # an async generator that speaks nothing
            yield None


class DiscardingSink:
    async def text(self, delta: str) -> None:
        pass

    async def audio(self, piece) -> None:
        pass
