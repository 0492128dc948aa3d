"""Realtime vs Converse, one line each alternating: client-side event times and the server's TurnTimings."""

import asyncio
import base64
import json
import sys
import tempfile
import time
from pathlib import Path

import grpc
import openai

from bench import turn_taking
from bench.gateway import REALTIME_SYSTEM, _pcm24
from bench.turn_set import build
from bench.turn_taking import FRAME_MS as MIC_MS
from services.cli.fleet import LocalFleet

N = int(sys.argv[1]) if len(sys.argv) > 1 else 6
SAME_SYSTEM = len(sys.argv) > 2 and sys.argv[2] == "same"


async def rt_line(url, line):
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    pcm = _pcm24(line.pcm)
    step = 48 * MIC_MS
    sent = []
    seen = {}
    async with client.realtime.connect(model="gpt-realtime") as c:
        sess = {
            "type": "realtime",
            "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "auto"}}},
        }
        sess["instructions"] = turn_taking.SYSTEM if SAME_SYSTEM else REALTIME_SYSTEM
        await c.session.update(session=sess)

        async def mic():
            start = time.monotonic()
            for k in range(60_000 // MIC_MS):
                await asyncio.sleep(max(0.0, start + k * MIC_MS / 1000 - time.monotonic()))
                chunk = pcm[k * step : (k + 1) * step] or bytes(step)
                await c.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
                sent.append(time.monotonic())

        m = asyncio.create_task(mic())
        try:
            async with asyncio.timeout(60):
                async for ev in c:
                    seen.setdefault(ev.type, time.monotonic())
                    if ev.type == "response.done":
                        break
        finally:
            m.cancel()
            await asyncio.gather(m, return_exceptions=True)
    sample = line.speech_end_ms * 24
    k = min(sample // (step // 2), len(sent) - 1)
    spoken = sent[k] - (step // 2 - (sample - k * step // 2)) / 24_000
    return {
        t: round((v - spoken) * 1000)
        for t, v in seen.items()
        if t.startswith(
            (
                "input_audio",
                "conversation.item.input",
                "response.created",
                "response.output_audio.delta",
                "response.output_audio_transcript",
            )
        )
    }


with tempfile.TemporaryDirectory() as tmp:
    fleet = LocalFleet.on_free_ports(
        tmp, services=("asr", "brain", "moss_sts", "router", "gateway"), moss_sts={"default_max_tokens": 32}
    )
    try:
        url = f"http://{fleet.config.gateway.address}"
        ts = build(23)
        lines = [ts.line(i) for i in ts.complete[:N]]
        with grpc.insecure_channel(fleet.config.router.address) as ch:
            for n, line in enumerate(lines):
                rt = asyncio.run(rt_line(url, line))
                rec, caller = turn_taking.one_line(ch, line, f"c{n}")
                tc = (
                    [e for _, e in caller.of("turn_complete", caller.events[0][1].turn_index if False else 0)]
                    if False
                    else None
                )
                timings = [
                    e.turn_complete.timings for _, e in caller.events if e.WhichOneof("event") == "turn_complete"
                ]
                tmg = timings[0] if timings else None
                print(f"line {n} {line.text[:40]!r}")
                print("  realtime client:", json.dumps(rt))
                print(
                    "  converse client: first audio {} ms, commit {} ms".format(
                        round(1000 * rec["speech_end_to_first_audio_s"])
                        if rec.get("speech_end_to_first_audio_s")
                        else None,
                        round(1000 * rec["speech_end_to_commit_s"]) if rec.get("speech_end_to_commit_s") else None,
                    )
                )
                if tmg:
                    print(
                        f"  converse server: commit {tmg.speech_end_to_commit_ms} transcript {tmg.speech_end_to_transcript_ms} t->text {tmg.transcript_to_first_text_ms} first audio {tmg.speech_end_to_first_audio_ms} pre {tmg.preemptive}"
                    )
                sys.stdout.flush()
        for f in (Path(tmp) / "logs").iterdir():
            for text in f.read_text(errors="replace").splitlines():
                if "realtime turn" in text:
                    print(f.name, text[-200:])
    finally:
        fleet.stop()
