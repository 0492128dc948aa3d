"""Why BAC009S0764W0122 reads 一二线尝试孙然 alone in a stream and right in the test's file: the window pass 2 decodes.

1. The asr CPU engine in process (its defaults), fed W0122 alone (0.5 s before, 1.2 s after) and in the test's file
   (after W0121), fast and at the pace of real time: where each final's decoded audio starts and ends, in the clip's
   time, and what it said.
2. Whisper base (WhisperFinals, the fitted window) on W0122 cut at starts 0.20/0.32/0.40 s and ends 3.70-4.20 s.
3. The same cut as the stream's alone, with whisper's own 30 s window (WhisperFinals._full_window).

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/mandarin-clips-2026-11-29/cut_probe.py
"""

from __future__ import annotations

import asyncio

import numpy as np

from bench import evaluation as ev
from bench import mandarin
from services.common import audio
from services.common.engines import RecognitionOptions
from services.engines.asr import cpu_engine as ce
from services.engines.asr import stream_audio

W0121, W0122 = mandarin.HUMAN[0], mandarin.HUMAN[1]
starts: dict[int, int] = {}  # id of an utterance's audio -> its stream offset
decoded: list[tuple[int, int, str]] = []  # (stream offset, samples, text) of each pass-2 decode
_recognize = ce.WhisperFinals.recognize
_utterance = stream_audio.StreamAudio.utterance


def utterance(self, utt_start, end):
    x, start = _utterance(self, utt_start, end)
    starts[id(x)] = start
    return x, start


def recognize(self, x, language, hints):
    result = _recognize(self, x, language, hints)
    decoded.append((starts.get(id(x), -1), len(x), result.text))
    return result


async def streams() -> None:
    stream_audio.StreamAudio.utterance = utterance
    ce.WhisperFinals.recognize = recognize
    engine = await ev.cpu_engine()
    pcm = {
        c.name: audio.read_wav(str(p))[0]
        for c, p in zip(mandarin.HUMAN[:2], mandarin.fetch(mandarin.HUMAN[:2]), strict=True)
    }
    pause = bytes(2 * 19200)
    layouts = {
        "alone": (bytes(16000) + pcm[W0122.name] + pause, 8000),
        "the test's file": (
            bytes(16000) + pcm[W0121.name] + pause + pcm[W0122.name] + pause,
            8000 + len(pcm[W0121.name]) // 2 + 19200,
        ),
    }
    for layout, (stream, at) in layouts.items():
        for pace in (0.0, 0.1):
            finals = []
            decoded.clear()

            def keep(event, finals=finals):
                if event.result is not None and event.result.is_final:
                    finals.append(event.result)

            options = RecognitionOptions(language="zh-CN", interim_results=False)
            await ev.stream_through(engine, options, stream, keep, pace)
            text = finals[-1].transcript  # W0122's: the last utterance
            s, n = next(((s, n) for s, n, said in reversed(decoded) if said == text), decoded[-1][:2])
            print(
                f"{layout}, {'real time' if pace else 'fast'}: W0122's final decoded clip {(s - at) / 16000:.3f}-"
                f"{(s + n - at) / 16000:.3f} s -> {text} (CER {mandarin.cer(W0122.text, text):.3f})",
                flush=True,
            )
    await engine.close()


def cuts() -> None:
    from services.common.config.asr import AsrServiceConfig

    whisper = ce.WhisperFinals(AsrServiceConfig(port=1))
    whisper.load()
    pcm, _ = audio.read_wav(str(mandarin.fetch([W0122])[0]))
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    for start in (0.20, 0.32, 0.40):
        row = []
        for end in np.arange(3.70, 4.25, 0.05):
            text = _recognize(whisper, x[int(start * 16000) : int(end * 16000)], "zh", ()).text
            row.append(f"{end:.2f}:{mandarin.cer(W0122.text, text):.3f}")
        print(f"fitted window, start {start:.2f} s, CER by end: {' '.join(row)}", flush=True)
    segment = x[int(0.324 * 16000) : int(3.820 * 16000)]
    for name, decode in (
        ("fitted", lambda: _recognize(whisper, segment, "zh", ())),
        ("30 s", lambda: whisper._full_window(segment, "zh", ())),
    ):
        text = decode().text
        print(
            f"{name} window on the stream's alone cut 0.324-3.820 s: {text} (CER {mandarin.cer(W0122.text, text):.3f})"
        )


if __name__ == "__main__":
    asyncio.run(streams())
    cuts()
