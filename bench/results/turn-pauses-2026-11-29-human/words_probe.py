"""The brain's reading of the words (ChatBrain.end_of_turn_logprob, the words judgement's signal) for the three verses
cut at 800 and 1200 ms in human.json, as the recognizer wrote them before the pause, beside whole verse lines and a
few requests (words_probe.txt, 2026-11-29 17:2x UTC, the 2-core Zen 1 EPYC VM). Run from the repository root with
PYTHONPATH=.:gen/python."""

from bench.turn_words import with_brain

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


async def read(brain, system_prompt):
    for t in texts:
        lp = await brain.end_of_turn_logprob(
            [{"role": "system", "content": system_prompt}, {"role": "user", "content": t}]
        )
        print(f"{lp:7.2f}  {t}")


with_brain(read)
