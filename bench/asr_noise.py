"""ASR beyond clean speech: WER in white and babble noise at SNR 20/10/0 dB and on the phone band (8 kHz, 300-3400 Hz).

Speech: the 24 evaluation sentences (bench/evaluation.py) said by piper joe and espeak-ng en-US, each padded
with 0.5 s before and after, then degraded (``Speakers.degraded``): white noise, or babble (four other sentences
by the same two voices, summed at equal power), at a speech-to-noise ratio; or cut to what a phone line carries.
The noise runs through the silence too, so the VAD has to find the speech in it. Recognizer: the asr CPU engine in
process (Silero VAD -> whisper finals, the service's defaults: tiny.en, beam 5; interim results off), the same code
a caller of the service meets; WER is over the words of all finals of a sentence, corpus-wide per voice.

Human recordings: no package on the registries this project uses ships English speech by people with transcripts
under a licence that fits (docs/asr.md#noise-and-the-phone-band says what was checked), so the table is synthetic
speech only. ``python -m bench.asr_noise`` runs it alone.
"""

from __future__ import annotations

import asyncio
import sys
import time

from bench import evaluation as ev
from bench.harness import Row


async def wer_by_condition(speakers: ev.Speakers, engine, voices, texts, conditions) -> dict:
    """{condition: {voice: (corpus WER, per-sentence WERs, seconds per decode)}}."""
    out: dict = {}
    for condition in conditions:
        for voice in voices:
            hyps, per_sentence, seconds = [], [], []
            for text in texts:
                pcm, rate = speakers.degraded(voice, text, condition)
                t0 = time.perf_counter()
                heard = await ev.recognize(engine, pcm, rate)
                seconds.append(time.perf_counter() - t0)
                hyps.append(heard)
                per_sentence.append(ev.wer([text], [heard]))
            out.setdefault(condition, {})[voice] = (ev.wer(list(texts), hyps), per_sentence, seconds)
            print(f"  {condition:32} {voice:6} WER {out[condition][voice][0]:.3f}", flush=True)
    return out


async def _run():
    speakers = ev.Speakers()
    await speakers.start()
    await speakers.say_all()
    engine = await ev.cpu_engine()
    try:
        conditions = [c[0] for c in ev.CONDITIONS]
        return await wer_by_condition(speakers, engine, ev.VOICES, ev.SENTENCES, conditions)
    finally:
        await engine.close()
        await speakers.close()


def run():
    results = asyncio.run(_run())
    rows = []
    table: dict = {}
    for condition, by_voice in results.items():
        for voice, (corpus, per_sentence, _) in by_voice.items():
            table.setdefault(condition, {})[voice] = f"{corpus:.1%}"
            rows.append(
                Row(f"WER per sentence, {voice}, {condition}", "ratio", per_sentence, note=f"corpus WER {corpus:.1%}")
            )
    seconds = [s for by_voice in results.values() for (_, _, secs) in by_voice.values() for s in secs]
    rows.append(Row("recognition time per padded sentence (VAD + whisper tiny.en)", "s", seconds))
    extra = {
        "corpus_wer_table": table,
        "recognizer": "asr CPU engine in process: Silero VAD + whisper tiny.en beam 5, interim results off",
        "speech": "24 evaluation sentences x piper joe / espeak-ng en-US, 0.5 s padding, noise over the whole buffer",
    }
    return rows, extra


if __name__ == "__main__":
    from bench.harness import machine, markdown, write

    started = machine()
    rows, extra = run()
    print(markdown([write("asr_noise", rows, extra, started)]))
    sys.exit(0)
