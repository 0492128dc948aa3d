"""The reply steps after the final on an idle CPU, for the floor of speech end -> first audio: the brain (the in-box
SmolLM2 with brain.reply_examples, on 127.0.0.1:8092: python -m services.brain) to its first token and first 3 words, each
question once with only the system prompt + examples cached, then again fully cached. Output: reply_floor_brain.log."""

import json
import time

import httpx

SYS = "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."
EX = [
    {"role": "user", "content": "Hi, can you hear me?"},
    {"role": "assistant", "content": "Yes, I can hear you. How can I help?"},
    {"role": "user", "content": "What is the capital of Canada?"},
    {"role": "assistant", "content": "The capital of Canada is Ottawa."},
]
QS = [
    "Could you tell me which train goes to the airport early on Sunday morning?",
    "What is the capital of France?",
    "I would like to book a table for two people tonight at eight.",
    "Tell me everything you know about how bicycles were invented.",
    "Can you tell me how long it takes to drive from Boston to New York in the evening?",
]


def run(msgs):
    t0 = time.monotonic()
    first = None
    words = None
    text = ""
    with httpx.stream(
        "POST",
        "http://127.0.0.1:8092/v1/chat/completions",
        json={
            "model": "m",
            "messages": msgs,
            "stream": True,
            "temperature": 0.5,
            "top_p": 0.8,
            "max_tokens": 40,
            "seed": 1234,
        },
        timeout=60,
    ) as r:
        for line in r.iter_lines():
            if not line.startswith("data:") or "[DONE]" in line:
                continue
            d = json.loads(line[5:])
            c = (d["choices"][0].get("delta") or {}).get("content") or ""
            if c:
                text += c
                if first is None:
                    first = time.monotonic() - t0
                if words is None and len(text.split()) >= 3:
                    words = time.monotonic() - t0
    return first, words


for q in QS:
    m = [{"role": "system", "content": SYS}] + EX + [{"role": "user", "content": q}]
    a = run(m)  # cold for this question (prefix cached from previous)
    b = run(m)  # whole prompt cached
    print(
        f"{q[:40]:42s} first token {a[0] * 1000:.0f} ms, 2 whole words {a[1] * 1000:.0f} ms | cached: {b[0] * 1000:.0f} / {b[1] * 1000:.0f}"
    )
