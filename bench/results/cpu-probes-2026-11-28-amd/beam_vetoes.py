"""Finished sentences the text check would hold open if it read the beam's other texts: the asr CPU engine's final
decode (in process) of bench.evaluation's 24 sentences and 12 of the conversation tests' lines, said by piper joe
and espeak-ng, cut 96 and 160 ms after the speech (144 decodes). Counted: the best text's own vetoes (a sentence that
does end on such a word: "Where should I go to?"), the extra vetoes if any other text of the beam were read, and if
only those with as many words as the best text are (TextCheck.veto_beam, the rule kept)."""

import asyncio

import numpy as np

from bench.evaluation import SENTENCES, Speakers, cpu_engine, truth_bounds
from services.common import audio
from services.common.turn_text import _CASED_TOKEN, TextCheck

LINES = [
    "What is two plus two?",
    "What color is the sky?",
    "Hello, my name is Alice.",
    "What is my name?",
    "Thank you very much.",
    "My name is Bob.",
    "What is my favorite color?",
    "I need a taxi to the airport.",
    "Can you tell me how to get to the station?",
    "I would like a table for two.",
    "Where should I go to?",
    "Please tell me a long story about a brave little dragon who wanted to fly.",
]


async def main() -> None:
    engine = await cpu_engine()
    speakers = Speakers()
    await speakers.start()
    check = TextCheck()
    decodes = own = any_other = same_count = 0
    for voice in ("joe", "espeak"):
        for text in [*SENTENCES, *LINES]:
            pcm, rate = await speakers.say(voice, text)
            pcm = audio.resample(pcm, rate, 16000) if rate != 16000 else pcm
            start, end = truth_bounds(pcm)
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            for tail_ms in (96, 160):
                final = engine.final.recognize(samples[max(0, start - 3200) : end + tail_ms * 16], "en", ())
                decodes += 1
                best = check.veto(final.text)
                others = [t for t in final.alternatives if check.veto(t)]
                kept = check.veto_beam(final.text, final.alternatives)
                own += bool(best)
                any_other += bool(others) and not best
                same_count += bool(kept) and not best
                if best or others:
                    counted = len(_CASED_TOKEN.findall(final.text))
                    print(
                        f"{voice} +{tail_ms} ms {final.text!r}: own veto {best!r}, others that veto {others}"
                        f" ({counted} words; kept rule: {kept!r})"
                    )
    print(
        f"{decodes} decodes of finished sentences: {own} vetoed by their best text; {any_other} more if any other text"
        f" of the beam were read; {same_count} more with the kept rule (as many words)"
    )
    await speakers.close()
    await engine.close()


asyncio.run(main())
