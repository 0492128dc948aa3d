"""How SmolLM2-135M (the in-box brain) can choose a tool: the probes behind services/brain/tool_calls.py.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/tools-2026-11-29/choice_probe.py   # choice_probe.txt

1. Asked to answer ``CALL name {...}`` when a request needs a function: the first token's log P of "CALL".
2. The frames: mean log P of the request's tokens under "The user wants you to <description>" per tool and under
   talk frames; the likeliest frame wins (talk: one frame, then two).
"""

from __future__ import annotations

import numpy as np
from llama_cpp import Llama

from services.brain.server import smollm2_path

TOOLS = [
    ("get_weather", "Get the current weather in a city."),
    ("book_table", "Book a table at the restaurant for a number of people at a time."),
    ("set_timer", "Start a kitchen timer for a number of minutes."),
]
NEED = [
    ("What's the weather in Paris?", "get_weather"),
    ("Is it raining in London right now?", "get_weather"),
    ("How hot is it in Madrid today?", "get_weather"),
    ("Can you book a table for four people at eight tonight?", "book_table"),
    ("I'd like a table for two at seven.", "book_table"),
    ("Reserve a table for six people tomorrow at noon.", "book_table"),
    ("Set a timer for ten minutes.", "set_timer"),
    ("Start a five minute timer please.", "set_timer"),
    ("Remind me in twenty minutes with a timer.", "set_timer"),
    ("What is the temperature in Tokyo?", "get_weather"),
]
NONE = [
    "Tell me a joke.",
    "What is the capital of France?",
    "How are you today?",
    "Who wrote Romeo and Juliet?",
    "What's a good name for a cat?",
    "Can you say that again?",
    "Thank you, that's all.",
    "What does photosynthesis mean?",
    "How many legs does a spider have?",
    "Give me a tip for sleeping better.",
    "Who was the first person on the moon?",
    "Who built the Eiffel Tower?",
    "What is the capital of Spain?",
    "Who discovered penicillin?",
    "What language do they speak in Brazil?",
    "Tell me something interesting about octopuses.",
    "Why is the sky blue?",
    "What's your favorite color?",
    "Who invented the telephone?",
    "How tall is Mount Everest?",
]
TALK = {
    "T1": "answer a question, tell something or just chat.",
    "T2": "answer a general knowledge question about people, places, things or words.",
}


def main() -> None:
    llm = Llama(model_path=str(smollm2_path()), n_ctx=1024, n_threads=1, verbose=False, logits_all=True)

    def mean_logprob(prefix: str, text: str) -> float:
        head = llm.tokenize(prefix.encode(), add_bos=False, special=True)
        tail = llm.tokenize(text.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(head + tail)
        scores = np.array(llm.scores[: len(head) + len(tail)])
        total = 0.0
        for i, token in enumerate(tail):
            row = scores[len(head) + i - 1]
            row = row - row.max()
            total += row[token] - np.log(np.exp(row).sum())
        return total / len(tail)

    def frame(words: str) -> str:
        system = f"You are a helpful voice assistant. The user wants you to {words}"
        return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"

    listed = "\n".join(f"- {name}: {description}" for name, description in TOOLS)
    call_prompt = (
        "You are a helpful voice assistant. You can call these functions:\n"
        f"{listed}\nIf the user's request needs a function, reply with only the function call, like: "
        'CALL get_weather {"city": "Rome"}. Otherwise reply to the user in one short sentence.'
    )
    called = 0
    for words, _ in NEED:
        prompt = (
            f"<|im_start|>system\n{call_prompt}<|im_end|>\n<|im_start|>user\n{words}<|im_end|>\n<|im_start|>assistant\n"
        )
        text = llm.create_completion(prompt=prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
        called += text.strip().startswith("CALL")
    print(f"1. asked to write CALL: {called} of {len(NEED)} requests that need a function got a call")

    rows = []
    for words, needs in [*NEED, *((w, None) for w in NONE)]:
        tools = {name: mean_logprob(frame(d[0].lower() + d[1:]), words) for name, d in TOOLS}
        talk = {k: mean_logprob(frame(v), words) for k, v in TALK.items()}
        rows.append((words, needs, tools, talk))
    for frames in (["T1"], ["T1", "T2"]):
        right, wrong = 0, []
        for words, needs, tools, talk in rows:
            best = max(tools, key=tools.get)
            pick = best if tools[best] > max(talk[k] for k in frames) else None
            right += pick == needs
            if pick != needs:
                wrong.append(words)
        print(f"2. talk frames {frames}: {right} of {len(rows)} placed right; wrong: {wrong}")


if __name__ == "__main__":
    main()
