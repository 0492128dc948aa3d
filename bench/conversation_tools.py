"""Tools in a conversation (issue 47; docs/conversation.md#tools): does the in-box brain pick the right tool, or none,
for a spoken request, and what does offering tools cost the reply?

20 spoken requests (piper joe through the fleet's Synthesizer, said at the pace of real time by the tests' live
caller), 10 that need one of three declared tools and 10 that need none, none of them in the set the choice was tried
on (bench/results/tools-2026-11-29/) or in the tests. Each request is said twice, in sessions of its own: with the tools
(tool_choice auto) and without them, so the cost is per request. A call is answered with a fixed output and the
reply to it is timed too.

    python -m bench.conversation_tools [OUT_DIR]   # alone, on a fleet of its own; `make bench conversation` runs it too

Rows: picked right (a call of the right tool with arguments that fit its schema, or an answer in words when none was
needed), last frame of the request sent -> first reply audio or function call (caller, with and without tools), output
sent -> first reply audio.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from tests.fleet.test_conversation_fleet import RATE, Talk, close
from voice.v1 import audio_pb2, conversation_pb2

SCHEMAS = {
    "get_weather": (
        "Get the current weather in a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    "set_timer": (
        "Start a kitchen timer for a number of minutes.",
        {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]},
    ),
    "book_table": (
        "Book a table at the restaurant for a number of people at a time.",
        {
            "type": "object",
            "properties": {"people": {"type": "integer"}, "time": {"type": "string"}},
            "required": ["people", "time"],
        },
    ),
}
TOOLS = [
    conversation_pb2.ToolDeclaration(name=name, description=description, parameters_json=json.dumps(schema))
    for name, (description, schema) in SCHEMAS.items()
]
# (words, the tool they need or "" for none)
REQUESTS = [
    ("Is it cold in Chicago this morning?", "get_weather"),
    ("Tell me the weather forecast for Sydney.", "get_weather"),
    ("Will I need an umbrella in Dublin today?", "get_weather"),
    ("Put a timer on for eight minutes.", "set_timer"),
    ("Can you time three minutes for my tea?", "set_timer"),
    ("Set an alarm timer for forty five minutes.", "set_timer"),
    ("Get us a table for three at half past seven.", "book_table"),
    ("We need a dinner reservation for five people at nine.", "book_table"),
    ("Could you book a table for two tomorrow evening?", "book_table"),
    ("How windy is it in Boston right now?", "get_weather"),
    ("What is the biggest ocean on Earth?", ""),
    ("Who wrote the Odyssey?", ""),
    ("Can you tell me a fun fact about elephants?", ""),
    ("What does the word serendipity mean?", ""),
    ("How do I make a paper airplane?", ""),
    ("Good morning, how is your day going?", ""),
    ("What year did the Second World War end?", ""),
    ("Recommend a movie for a rainy evening.", ""),
    ("Why do cats purr?", ""),
    ("Thanks a lot, that was helpful.", ""),
]
OUTPUT = "done, it worked"


def _config(with_tools: bool) -> conversation_pb2.ConversationConfig:
    return conversation_pb2.ConversationConfig(
        input_format=audio_pb2.AudioFormat(encoding=1, sample_rate_hz=RATE, channels=1),
        system_prompt="You are a friendly voice assistant. Answer in one short sentence.",
        language="en-US",
        sampling=conversation_pb2.SamplingConfig(max_tokens=24),
        tools=TOOLS if with_tools else [],
    )


def _one(channel, pcm: bytes, with_tools: bool) -> dict:
    talk = Talk(channel, config=_config(with_tools))
    try:
        talk.send(pcm, paced=True, label="request")
        # A call is its done event (its arguments piece comes just before it).
        talk.wait(lambda: bool(talk.of("reply_audio", 0)) or talk.call_done(0) is not None or talk.ended(0), 60)
        said_at = talk.sent[0][2] if talk.sent else None
        call = talk.call_done(0)
        record = {"heard": talk.finals(0), "call": None, "first_ms": None, "output_to_audio_ms": None}
        if call is not None:
            record["call"] = {"name": call.name, "arguments": call.arguments}
            at = min(t for t, e in talk.of("function_call", 0))
            answered = time.monotonic()
            talk.answer(call.call_id, OUTPUT)
            talk.wait(lambda: bool(talk.of("reply_audio", 0)) or talk.ended(0), timeout=60)
            audio = talk.of("reply_audio", 0)
            if audio:
                record["output_to_audio_ms"] = round((audio[0][0] - answered) * 1000)
        else:
            audio = talk.of("reply_audio", 0)
            at = audio[0][0] if audio else None
        if at is not None and said_at is not None:
            record["first_ms"] = round((at - said_at) * 1000)
        talk.wait(lambda: talk.ended(0), timeout=60)
        record["reply"] = talk.reply_text(0)
        return record
    finally:
        close(talk)


def _fits(name: str, arguments: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name][1])
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def measure(channel, say) -> dict:
    records = []
    for words, needs in REQUESTS:
        pcm = say(words)
        with_tools = _one(channel, pcm, True)
        without = _one(channel, pcm, False)
        call = with_tools["call"]
        right = (call is None and not needs) or (
            call is not None and call["name"] == needs and _fits(call["name"], call["arguments"])
        )
        records.append(
            {"words": words, "needs": needs or None, "right": right, "tools": with_tools, "no_tools": without}
        )
        print(f"  {'ok ' if right else 'BAD'} {words!r}: {call or 'words'} ({with_tools['first_ms']} ms)", flush=True)
    return {"records": records}


def summary(result: dict) -> dict:
    records = result["records"]

    def ms(values):
        values = sorted(v for v in values if v is not None)
        if not values:
            return None
        return {
            "n": len(values),
            "median": statistics.median(values),
            "p95": values[min(len(values) - 1, int(0.95 * len(values)))],
        }

    need = [r for r in records if r["needs"]]
    talk = [r for r in records if not r["needs"]]
    return {
        "picked right": f"{sum(r['right'] for r in records)}/{len(records)}",
        "needing a tool, called it right": f"{sum(r['right'] for r in need)}/{len(need)}",
        "needing none, answered in words": f"{sum(r['right'] for r in talk)}/{len(talk)}",
        "request sent -> first reply audio or call, with tools (ms)": ms(r["tools"]["first_ms"] for r in records),
        "request sent -> first reply audio, without tools (ms)": ms(r["no_tools"]["first_ms"] for r in records),
        "requests needing none: first reply audio with / without tools (ms)": (
            ms(r["tools"]["first_ms"] for r in talk),
            ms(r["no_tools"]["first_ms"] for r in talk),
        ),
        "output sent -> first reply audio (ms)": ms(r["tools"]["output_to_audio_ms"] for r in records),
    }


def rows(result: dict) -> list:
    """`make bench conversation`'s rows (bench/conversation.py); the choice's score is in its extra "tools"."""
    from bench.harness import Row

    records = result["records"]

    def seconds(values):
        return [v / 1000 for v in values if v is not None]

    right = sum(r["right"] for r in records)
    return [
        Row(
            "tools: request sent -> first reply audio or call, with tools (caller)",
            "s",
            seconds(r["tools"]["first_ms"] for r in records),
            f"{right}/{len(records)} picked right",
        ),
        Row(
            "tools: the same requests without tools (caller)",
            "s",
            seconds(r["no_tools"]["first_ms"] for r in records),
        ),
        Row(
            "tools: output sent -> first reply audio (caller)",
            "s",
            seconds(r["tools"]["output_to_audio_ms"] for r in records),
        ),
    ]


def main(out: Path) -> None:
    from bench.conversation import _speaker, cpu_fleet
    from bench.harness import machine

    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with cpu_fleet() as (channel, _fleet):
        say = _speaker(channel)
        for words, _ in REQUESTS:
            say(words)
        result = measure(channel, say)
    result["summary"] = summary(result)
    result["machine"] = {**machine(), "started": started}
    (out / "tools.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest/raw/tools"))
