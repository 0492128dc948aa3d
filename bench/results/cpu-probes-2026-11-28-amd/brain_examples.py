"""Which example exchanges keep SmolLM2-135M-Instruct (the in-box brain) writing English: 16 questions x seeds 0-2
straight to the brain HTTP API (temperature 0.5, top_p 0.95, 50 tokens), each reply judged by py3langid among
en/fr/de/es/it/pt/nl. Needs a brain on 127.0.0.1:8092 (python -m services.brain). Usage: brain_examples.py SET...
where SET is none, A, A2, A3 (the default, brain.reply_examples) or B. Output: brain_examples.log."""

import sys

import httpx
import py3langid

py3langid.set_languages(["en", "fr", "de", "es", "it", "pt", "nl"])
ident = py3langid
SYS = "You are a friendly voice assistant. Answer in one or two short sentences. Do not use lists or emojis."
SETS = {
    "none": [],
    "A": [
        ("Hi, can you hear me?", "Yes, I can hear you. How can I help?"),
        ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
    ],
    "A2": [
        ("Hi, can you hear me?", "Yes, I can hear you. How can I help?"),
        ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
        ("How many legs does a spider have?", "A spider has eight legs."),
    ],
    "A3": [
        ("Hi, can you hear me?", "Yes, I can hear you. How can I help?"),
        ("What is the capital of Canada?", "The capital of Canada is Ottawa."),
    ],
    "B": [
        ("Hi, can you hear me?", "Yes, I can hear you. How can I help?"),
        ("What is the capital of Japan?", "The capital of Japan is Tokyo."),
        ("What do people eat in Brazil?", "People in Brazil eat rice, beans and grilled meat."),
    ],
}
QS = [
    "What is the capital of France?",
    "What is the capital of Germany?",
    "What is the capital of Spain?",
    "What is the capital of Italy?",
    "Tell me about Spain.",
    "What do people eat in Italy?",
    "Where is Paris?",
    "What is the biggest city in Mexico?",
    "What language do they speak in Portugal?",
    "Hello, how are you today?",
    "What is two plus two?",
    "Can you recommend a good book?",
    "How far away is the moon?",
    "What's the weather like in Berlin?",
    "Hello, my name is Alice.",
    "Tell me a story about a dragon.",
]


def ask(q, seed, shots):
    msgs = [{"role": "system", "content": SYS}]
    for u, a in shots:
        msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    msgs.append({"role": "user", "content": q})
    r = httpx.post(
        "http://127.0.0.1:8092/v1/chat/completions",
        json={
            "model": "smollm2-135m-instruct",
            "messages": msgs,
            "temperature": 0.5,
            "top_p": 0.95,
            "max_tokens": 50,
            "seed": seed,
        },
        timeout=60,
    )
    return r.json()["choices"][0]["message"]["content"].strip().replace("\n", " ")


for name in sys.argv[1:]:
    bad = 0
    n = 0
    for q in QS:
        for seed in (0, 1, 2):
            a = ask(q, seed, SETS[name])
            lang, p = ident.classify(a)
            n += 1
            flag = lang != "en"
            bad += flag
            print(name, "|", q, "|", seed, "|", lang, round(p, 2), "|", a[:110], flush=True)
    print("SUMMARY", name, "non-English (langid)", bad, "of", n, flush=True)
