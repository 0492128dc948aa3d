"""Probe (issue 49): N concurrent streamed chat replies straight on a brain's OpenAI API; first token and end per
reply, from the client. Run against the fleet's brain (llama-cpp-python, one model lock) and against llama.cpp's own
llama-server (--parallel N, continuous batching) built from the same vendored source with the same x86-64-v3 flags.

    python probe.py URL MODEL N [MAX_TOKENS]
"""

import asyncio
import json
import sys
import time

import httpx

QUESTIONS = [
    "What is the tallest mountain in the world?",
    "Can you recommend a good book about space?",
    "How do I make a cup of green tea?",
    "Why is the sky blue?",
    "What should I cook for dinner tonight?",
    "Tell me something interesting about octopuses.",
    "How far away is the moon?",
    "What is a good name for a cat?",
]
SYSTEM = "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."


async def one(client, url, model, question, max_tokens, t0):
    body = {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 1234,
    }
    first, pieces = None, 0
    async with client.stream("POST", url + "/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                chunk = json.loads(line[5:])
                if (chunk.get("choices") or [{}])[0].get("delta", {}).get("content"):
                    pieces += 1
                    if first is None:
                        first = time.monotonic() - t0
    return first, time.monotonic() - t0, pieces


async def main(url, model, n, max_tokens):
    async with httpx.AsyncClient(timeout=300) as client:
        await one(client, url, model, "Hi.", 4, time.monotonic())  # warm
        for rnd in range(3):
            t0 = time.monotonic()
            results = await asyncio.gather(
                *(one(client, url, model, QUESTIONS[(i + rnd) % len(QUESTIONS)], max_tokens, t0) for i in range(n))
            )
            firsts = sorted(r[0] * 1000 for r in results)
            ends = sorted(r[1] * 1000 for r in results)
            toks = [r[2] for r in results]
            print(
                f"round {rnd}: first token ms {[round(x) for x in firsts]}  end ms {[round(x) for x in ends]}  pieces {toks}"
            )


if __name__ == "__main__":
    url, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run(main(url, model, n, int(sys.argv[4]) if len(sys.argv) > 4 else 60))
