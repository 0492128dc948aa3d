"""Function calling on the in-box brain (services/brain/tool_calls.py; docs/conversation.md#tools), judged by the
official ``openai`` client against the real server: the tool it picks for a request, arguments that fit the tool's
schema and name what was asked for, ``tool_choice``, and a reply to a function's output that says it.

The requests here are held out from the probe the choice was tried on (bench/results/tools-2026-11-29/)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from services.cli.fleet import LocalFleet

pytestmark = [pytest.mark.timeout(300), pytest.mark.background]  # CPU work with no clock in it

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIMER = {
    "type": "function",
    "function": {
        "name": "set_timer",
        "description": "Start a kitchen timer for a number of minutes.",
        "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]},
    },
}
SYSTEM = {"role": "system", "content": "You are a helpful voice assistant."}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from openai import OpenAI

    fleet = LocalFleet.on_free_ports(tmp_path_factory.mktemp("brain-tools"), ("brain",))
    try:
        yield OpenAI(base_url=fleet.config.brain.url, api_key="none", timeout=120), fleet.config.brain.model
    finally:
        fleet.stop()


def ask(client, words: str, **kw):
    openai, model = client
    return openai.chat.completions.create(
        model=model, messages=[SYSTEM, {"role": "user", "content": words}], max_tokens=32, **kw
    )


@pytest.mark.parametrize(
    "words, name, argument, value",
    [
        ("Will it snow in Berlin tomorrow?", "get_weather", "city", "berlin"),
        ("Please start a timer for fifteen minutes.", "set_timer", "minutes", 15),
    ],
)
def test_a_request_that_needs_a_tool_calls_it_with_arguments_that_fit(client, words, name, argument, value):
    reply = ask(client, words, tools=[WEATHER, TIMER])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice.message
    call = choice.message.tool_calls[0]
    assert call.function.name == name
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, (WEATHER if name == "get_weather" else TIMER)["function"]["parameters"])
    got = arguments[argument]
    assert (got.lower() if isinstance(got, str) else got) == value, arguments


@pytest.mark.parametrize(
    "words",
    [
        "Who painted the Mona Lisa?",
        # small talk and a story: the talk frames added 2026-11-30 (bench/results/tools-choice-2026-11-30/); with the
        # first two alone the greeting called get_weather
        "Hi, it's lovely to talk to you again.",
        "Tell me a bedtime story about a rabbit.",
    ],
)
def test_a_request_that_needs_no_tool_is_answered_in_words(client, words):
    reply = ask(client, words, tools=[WEATHER, TIMER])
    assert not reply.choices[0].message.tool_calls and reply.choices[0].message.content.strip()


def test_tool_choice_none_never_calls_and_a_named_function_is_called(client):
    words = "What is the weather like in Rome?"
    reply = ask(client, words, tools=[WEATHER, TIMER], tool_choice="none")
    assert not reply.choices[0].message.tool_calls and reply.choices[0].message.content.strip()
    reply = ask(
        client, words, tools=[WEATHER, TIMER], tool_choice={"type": "function", "function": {"name": "set_timer"}}
    )
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "set_timer"
    jsonschema.validate(json.loads(call.function.arguments), TIMER["function"]["parameters"])


def test_a_streamed_call_comes_as_tool_call_deltas(client):
    stream = ask(client, "Is it sunny in Lisbon right now?", tools=[WEATHER, TIMER], stream=True)
    name, arguments, finish = "", "", None
    for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for call in choice.delta.tool_calls or []:
            name += call.function.name or ""
            arguments += call.function.arguments or ""
    assert (name, finish) == ("get_weather", "tool_calls")
    assert json.loads(arguments)["city"].lower() == "lisbon"


def test_the_reply_to_a_functions_output_says_it(client):
    openai, model = client
    messages = [
        SYSTEM,
        {"role": "user", "content": "What's the weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temperature_c": -3, "sky": "snow"})},
    ]
    reply = openai.chat.completions.create(model=model, messages=messages, tools=[WEATHER], max_tokens=32)
    said = reply.choices[0].message.content
    assert said.startswith("Here it is: ") and "-3" in said and "snow" in said, said


def test_a_functions_output_is_said_as_words_and_its_grammar_parses():
    from llama_cpp import LlamaGrammar

    from services.brain.tool_calls import plain_messages, result_grammar, spoken

    assert spoken('{"temperature_c": 31, "sky": "clear", "open": true}') == "temperature c 31, sky clear, open yes"
    assert spoken("18 degrees and sunny.") == "18 degrees and sunny"
    LlamaGrammar.from_string(result_grammar('{"a": "say \\"hi\\""}'), verbose=False)  # quotes survive the grammar
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    plain, output = plain_messages(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    assert output == "sunny" and [m["role"] for m in plain] == ["user", "assistant", "system"]
    assert plain[2]["content"] == "get_weather returned: sunny."


def test_a_tool_set_prepared_ahead_is_held_and_its_first_request_weighs_only_the_words(client):
    """``POST /v1/tools/prepare`` (what a conversation with tools asks when it opens): the frames of a tool set not
        seen before are evaluated (tokens > 0); asked again they are held (0); and a request with them then picks as any
        other. One conversation's requests go to the worker that served it last (services/brain/front.py), so they carry
    its id."""
    import httpx

    from services.brain.tool_calls import CHAT_FRAMES

    openai, model = client
    base = str(openai.base_url).rstrip("/")
    lookup = {
        "type": "function",
        "function": {
            "name": "find_recipe",
            "description": "Find a recipe for a dish.",
            "parameters": {"type": "object", "properties": {"dish": {"type": "string"}}, "required": ["dish"]},
        },
    }
    tools = [lookup, TIMER]
    same = {"X-Voicefleet-Request-Id": "prepare-test"}
    first = httpx.post(f"{base}/tools/prepare", json={"model": model, "tools": tools}, headers=same, timeout=120)
    frames = 2 + len(CHAT_FRAMES)  # two tools and the talk frames
    assert first.status_code == 200 and first.json()["frames"] == frames, first.text
    assert first.json()["evaluated_tokens"] > 0, first.json()
    again = httpx.post(f"{base}/tools/prepare", json={"model": model, "tools": tools}, headers=same, timeout=120)
    assert again.json() == {"frames": frames, "evaluated_tokens": 0}, again.text
    reply = ask(client, "Please start a timer for ten minutes.", tools=tools, extra_headers=same)
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "set_timer" and json.loads(call.function.arguments)["minutes"] == 10
    none = httpx.post(f"{base}/tools/prepare", json={"model": model, "tools": tools, "tool_choice": "none"}, timeout=60)
    assert none.json() == {"frames": 0, "evaluated_tokens": 0}, none.text
    bad = httpx.post(f"{base}/tools/prepare", json={"model": model, "tools": "get_weather"}, timeout=60)
    assert bad.status_code == 400 and "tools" in bad.json()["error"]["message"], bad.text
