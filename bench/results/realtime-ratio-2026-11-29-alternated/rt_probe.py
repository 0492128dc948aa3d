"""Realtime vs Converse, one line each alternating: client-side event times and the server's TurnTimings.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/realtime-ratio-2026-11-29-alternated/rt_probe.py [N] [same]

The Realtime side is bench.gateway.realtime_line_events (until response.done); ``same``: the Realtime session gets
bench.turn_taking's system prompt instead of bench.gateway's. Each route says every other line first (the second
finds the brain's and the voice's caches warm); the gateway's log gives the Realtime turns' server timings.
"""

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import grpc

from bench import turn_taking
from bench.gateway import REALTIME_SYSTEM, realtime_line_events
from bench.turn_set import build
from services.cli.fleet import LocalFleet

N = int(sys.argv[1]) if len(sys.argv) > 1 else 6
SAME_SYSTEM = len(sys.argv) > 2 and sys.argv[2] == "same"
SHOWN = ("input_audio", "conversation.item.input", "response.created", "response.output_audio")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fleet = LocalFleet.on_free_ports(
            tmp, services=("asr", "brain", "moss_sts", "router", "gateway"), moss_sts={"default_max_tokens": 32}
        )
        try:
            url = f"http://{fleet.config.gateway.address}"
            turn_set = build(23)
            instructions = turn_taking.SYSTEM if SAME_SYSTEM else REALTIME_SYSTEM
            with grpc.insecure_channel(fleet.config.router.address) as channel:
                for n, line_id in enumerate(turn_set.complete[:N]):
                    line = turn_set.line(line_id)
                    if n % 2:  # Converse first
                        record, caller = turn_taking.one_line(channel, line, f"c{n}")
                    events = asyncio.run(realtime_line_events(url, line, instructions, until="response.done"))
                    if not n % 2:
                        record, caller = turn_taking.one_line(channel, line, f"c{n}")
                    timings = [
                        e.turn_complete.timings for _, e in caller.events if e.WhichOneof("event") == "turn_complete"
                    ]
                    print(f"line {n} {line.text[:40]!r} ({'Converse' if n % 2 else 'Realtime'} first)")
                    shown = {k: round(v * 1000) for k, v in events.items() if k.startswith(SHOWN)}
                    print("  realtime client:", json.dumps(shown))
                    first, commit = record.get("speech_end_to_first_audio_s"), record.get("speech_end_to_commit_s")
                    print(
                        f"  converse client: first audio {round(1000 * first) if first else None} ms,"
                        f" commit {round(1000 * commit) if commit else None} ms"
                    )
                    if timings:
                        t = timings[0]
                        print(
                            f"  converse server: commit {t.speech_end_to_commit_ms} transcript"
                            f" {t.speech_end_to_transcript_ms} t->text {t.transcript_to_first_text_ms} first audio"
                            f" {t.speech_end_to_first_audio_ms} pre {t.preemptive}"
                        )
                    sys.stdout.flush()
            for log in (Path(tmp) / "logs").iterdir():
                for text in log.read_text(errors="replace").splitlines():
                    if "realtime turn" in text:
                        print(log.name, text[-200:])
        finally:
            fleet.stop()


main()
