"""to_probe.py's line ("... it takes to | drive ...", 800 ms pause) into the asr CPU engine in process, traced window
by window around the pause: the VAD's probability, the level, where the level went quiet, the VAD's silence, every
judgement (what the turn model heard), and each pause decode (when it started, its audio's end, its best text and
the beam's others). env LEADS: seconds of silence before the line, comma-separated (default 0.0,0.3,0.5)."""

import asyncio
import os

import services.engines.asr.pipeline as pipeline
import services.engines.asr.vad as vad
from bench.evaluation import cpu_engine, stream_through
from bench.turn_set import paused_line
from services.common.engines import SEMANTIC_MODE, Endpointing, RecognitionOptions

LINE = "Can you tell me how long it takes to | drive from Boston to New York in the evening?"
LOG: list[str] = []
TRACE_FROM_MS, TRACE_TO_MS = 1000, 2600  # the windows around the pause (and its lead) that are logged


def ms(samples) -> str:
    return "-" if samples is None else f"{samples / 16:.0f}"


def traced_push(push):
    def push_and_log(self, p, window_start, level=0.0):
        out = push(self, p, window_start, level)
        if TRACE_FROM_MS * 16 <= window_start <= TRACE_TO_MS * 16 or out:
            LOG.append(
                f"  window {ms(window_start)} ms: p {p:.2f}, level {level:.1f} dBFS, quiet since {ms(self.quiet_since)},"
                f" VAD silence since {ms(self.silence_start)}, peak {self._peak:.1f}"
                f" {[(t.kind, ms(t.offset)) for t in out] or ''}"
            )
        return out

    return push_and_log


def traced_speculation(start):
    def start_and_log(self, silence):
        LOG.append(f"  pause decode started: quiet since {ms(silence)} ms, audio to {ms(self._pos)} ms")
        start(self, silence)

        def done(future):
            if future.cancelled():
                LOG.append(f"  pause decode (quiet since {ms(silence)}) dropped")
                return
            final = future.result()[0]
            LOG.append(
                f"  pause decode (quiet since {ms(silence)}): {final.text!r}, the beam's others {final.alternatives}"
            )

        self._spec[1].add_done_callback(done)

    return start_and_log


def traced_judge(judge):
    def judge_and_log(self, heard_end, speech_end):
        p = judge(self, heard_end, speech_end)
        LOG.append(f"  judged: end of speech {ms(speech_end)} ms, heard to {ms(heard_end)} ms, p {p:.3f}")
        return p

    return judge_and_log


vad.Endpointer.push = traced_push(vad.Endpointer.push)
pipeline.TwoPassStream._start_speculation = traced_speculation(pipeline.TwoPassStream._start_speculation)
pipeline.TwoPassStream._judge = traced_judge(pipeline.TwoPassStream._judge)


async def run(engine, pcm: bytes, lead: float) -> None:
    pcm = bytes(2 * int(16000 * lead)) + pcm + bytes(2 * 16000 * 2)

    def log_event(event) -> None:
        if event.turn is not None:
            LOG.append(f"END OF TURN at {event.offset_ms} ms: {event.turn}")
        elif event.result is not None and event.result.is_final:
            LOG.append(f"FINAL {event.result.transcript!r}")

    options = RecognitionOptions(language="en-US", endpointing=Endpointing(mode=SEMANTIC_MODE))
    await stream_through(engine, options, pcm, log_event, 0.1)


async def main() -> None:
    engine = await cpu_engine()
    line = paused_line(LINE, 800)
    for lead in [float(x) for x in os.environ.get("LEADS", "0.0,0.3,0.5").split(",")]:
        LOG.clear()
        await run(engine, line.pcm, lead)
        print(f"=== {lead} s of silence before the line")
        print("\n".join(LOG))
    await engine.close()


asyncio.run(main())
