"""Semantic endpointing offline: the turn-taking set's lines (bench/turn_set.py) through the asr engine in process,
with the text check on and off (docs/asr.md#the-text-check). Not part of `make bench` (no fleet, no dialogue):
``python -m bench.turn_endpointing [--pace]``.

Every line goes into its own stream with moss_sts's endpointing defaults (semantic, min_silence 160 ms, max_silence
1500 ms), 0.5 s of silence before it and 2 s after, as fast as the engine takes it (``--pace``: at real time). The
endpointer counts stream samples, not wall time, so the decisions are those of a caller at real time; what the pace
changes is only the wall time per line. Per line:

* complete lines: how many utterances (1 expected) and the silence after the end of speech at which the last one
  ended (160-220 ms when the first judgement says complete; ~1500 ms when the turn waited for max_silence: a **slow
  commit**, which the conversation bench sees as a reply more than 1 s after speech end);
* paused lines: a **cut-off** when an utterance ended inside the pause (the dialogue would commit and answer half a
  sentence when its final comes before the speech resumes; a 500 ms pause may still escape there, so this is the
  asr's side of the figure, an upper bound of the conversation bench's);
* every judgement: the model's probability, complete, and the word that vetoed it.

``--cuts`` also prints what tiny.en writes for each marked sentence cut at its mark (the text the check sees), and
for extra sentences cut after content words (not the set's: for the reverse question, may the text end a turn the
model calls unfinished).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from bench.harness import machine
from bench.turn_set import LONG, MEDIUM, RATE, Counts, Voice, _paused, build
from services.common.asr_servicer import endpointing_defaults
from services.common.config.asr import AsrServiceConfig
from services.common.config.moss_sts import StsEndpointingConfig
from services.common.engines import RESULT, TEXT_CHECK_OFF, TEXT_CHECK_ON, TURN_ESTIMATE, RecognitionOptions

LEAD_S, TAIL_S = 0.5, 2.0
CHUNK = RATE * 2 // 50  # 20 ms of s16le
# Sentences cut after a content word (an adjective, a noun, a verb): not in the turn set, whose marks mostly follow
# function words; they show what the text says where the closed-class list has nothing to say.
CONTENT_CUTS = (
    "I would like to order a large | pepperoni pizza with extra cheese for dinner.",
    "Could you send the quarterly | report to everyone on the team before noon?",
    "We should probably leave | before the traffic on the bridge gets really bad.",
    "My brother finally bought a new | car after saving up for almost three years.",
    "She told me that the meeting | starts at ten tomorrow in the small room.",
    "I think we really need more | time to finish the project properly.",
    "Please remind me to call | my mother when I get home this evening.",
    "The kids were playing | in the garden with the neighbours all afternoon.",
)


async def run_line(engine, pcm: bytes, text_check: str, pace: bool) -> dict:
    endpointing = dataclasses.replace(endpointing_defaults(StsEndpointingConfig()), text_check=text_check)
    options = RecognitionOptions(language="en-US", endpointing=endpointing)
    stream = await engine.open_stream(options)
    events = []

    async def consume():
        async for event in stream.events():
            events.append(event)

    reader = asyncio.create_task(consume())
    samples = bytes(int(LEAD_S * RATE) * 2) + pcm + bytes(int(TAIL_S * RATE) * 2)
    t0 = time.monotonic()
    for i in range(0, len(samples), CHUNK):
        await stream.feed(samples[i : i + CHUNK])
        if pace:
            await asyncio.sleep(max(0.0, t0 + (i + CHUNK) / 2 / RATE - time.monotonic()))
    await stream.finish()
    await reader
    await stream.close()
    lead_ms = int(LEAD_S * 1000)
    finals = [e.result for e in events if e.kind == RESULT and e.result.is_final]
    return {
        "finals": [
            {
                "text": f.transcript,
                "end_ms": f.utterance_end_ms - lead_ms,
                "ended_at_ms": f.audio_processed_ms - lead_ms,
            }
            for f in finals
        ],
        "turns": [
            {
                "p": e.turn.probability,
                "complete": e.turn.complete,
                "silence_ms": e.turn.silence_ms,
                "at_ms": e.turn.offset_ms - lead_ms,
                "vetoed_by": e.turn.vetoed_by_word,
                "sentence_end": e.turn.sentence_end,
            }
            for e in events
            if e.kind == TURN_ESTIMATE
        ],
    }


def judge(line, record: dict) -> dict:
    finals = record["finals"]
    if line.kind == "complete":
        last = finals[-1] if finals else None
        commit = last["ended_at_ms"] - line.speech_end_ms if last else None
        return {"utterances": len(finals), "commit_ms": commit, "slow": commit is None or commit > 1000}
    pause_end = line.pause_at_ms + line.pause_ms
    cut = any(f["ended_at_ms"] <= pause_end for f in finals)
    return {"utterances": len(finals), "cut_off": cut}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pace", action="store_true", help="feed at real time (default: as fast as it goes)")
    parser.add_argument("--cuts", action="store_true", help="also print tiny.en's text of sentences cut at a mark")
    parser.add_argument("--json", default="", help="write every line's record here")
    args = parser.parse_args()
    from services.engines.asr.cpu_engine import CpuAsrEngine

    started = machine()
    turn_set = build(23, Counts(6, 4, 6, 6, 3))  # the lines of the committed conversation bench run (cached)
    engine = CpuAsrEngine("bench", AsrServiceConfig(port=1))
    await engine.start()
    out: dict = {"machine": started, "modes": {}}
    try:
        for mode in (TEXT_CHECK_OFF, TEXT_CHECK_ON):
            rows = []
            t_mode = time.monotonic()
            for line_id in turn_set.complete + turn_set.paused:
                line = turn_set.line(line_id)
                record = await run_line(engine, line.pcm, mode, args.pace)
                record |= {"line": line_id, "kind": line.kind, "pause_ms": line.pause_ms, "text": line.text}
                record |= judge(line, record)
                rows.append(record)
                turns = " ".join(
                    f"{t['p']:.2f}{'C' if t['complete'] else 'v:' + t['vetoed_by'] if t['vetoed_by'] else 'i'}"
                    f"@{t['silence_ms']}"
                    for t in record["turns"]
                )
                verdict = (
                    f"commit {record['commit_ms']} ms{' SLOW' if record['slow'] else ''}"
                    if line.kind == "complete"
                    else ("CUT OFF" if record["cut_off"] else "one turn")
                )
                print(
                    f"[{mode:3}] {line_id:13} {verdict:22} {turns:40} | {' / '.join(f['text'] for f in record['finals'])}"
                )
            out["modes"][mode] = rows
            complete = [r for r in rows if r["kind"] == "complete"]
            slow = sum(r["slow"] for r in complete)
            commits = sorted(r["commit_ms"] for r in complete if r["commit_ms"] is not None)
            cuts = {
                p: (sum(r["cut_off"] for r in rows if r["pause_ms"] == p), sum(r["pause_ms"] == p for r in rows))
                for p in sorted({r["pause_ms"] for r in rows if r["kind"] == "paused"})
            }
            vetoes = sum(bool(t["vetoed_by"]) for r in rows for t in r["turns"])
            print(
                f"text check {mode}: slow commits {slow}/{len(complete)}; commit (silence after speech) p50"
                f" {np.percentile(commits, 50):.0f} ms, p95 {np.percentile(commits, 95):.0f} ms; cut-offs "
                + ", ".join(f"{p} ms {c}/{n}" for p, (c, n) in cuts.items())
                + f"; vetoes {vetoes}; {time.monotonic() - t_mode:.0f} s wall"
            )
        if args.cuts:
            voice = Voice()
            lines: dict = {}
            print("\ntiny.en's text of each marked sentence cut at its mark (+2 s of silence; text check off):")
            for i, marked in enumerate([*MEDIUM, *LONG, *CONTENT_CUTS]):
                line = _paused(voice, 23, f"cut-{i}", marked, "", 0, lines)
                half = line.pcm[: line.pause_at_ms * RATE // 1000 * 2]
                record = await run_line(engine, half, TEXT_CHECK_OFF, False)
                p = " ".join(f"{t['p']:.2f}" for t in record["turns"])
                source = "extra" if marked in CONTENT_CUTS else "set"
                print(f"  [{source}] p {p:12} | {' / '.join(f['text'] for f in record['finals'])}")
            # The same sentences said whole with an 800 ms pause at the mark, the text check on (the default): the
            # pause ends the turn (a cut-off) when the model calls it complete on an unlisted word, or when it calls
            # it unfinished but the words read as a sentence and the pause outlasts sentence_end_silence_ms (600).
            print("\nthe same sentences with an 800 ms pause at the mark (text check on):")
            cut_offs = {"set": [0, 0], "extra": [0, 0]}
            for i, marked in enumerate([*MEDIUM, *LONG, *CONTENT_CUTS]):
                line = _paused(voice, 23, f"pause-{i}", marked, "", 800, lines)
                record = await run_line(engine, line.pcm, TEXT_CHECK_ON, False)
                cut = judge(line, record)["cut_off"]
                source = "extra" if marked in CONTENT_CUTS else "set"
                cut_offs[source][0] += cut
                cut_offs[source][1] += 1
                turns = " ".join(
                    f"{t['p']:.2f}{'C' if t['complete'] else 'S' if t['sentence_end'] else 'i'}@{t['silence_ms']}"
                    for t in record["turns"]
                )
                verdict = "CUT OFF" if cut else "one turn"
                print(f"  [{source}] {verdict:8} {turns:44} | {' / '.join(f['text'] for f in record['finals'])}")
            print("  cut-offs at 800 ms: " + ", ".join(f"{k} {c}/{n}" for k, (c, n) in cut_offs.items()))
    finally:
        await engine.close()
    out["machine_after"] = machine()
    print(f"machine {started}; load after {out['machine_after']['load_average_1min']}")
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
