"""Thinking pauses mid-phrase at the shipped defaults (docs/conversation.md#the-words-judgement): a caller who stops
for 800 ms after a determiner, a possessive or a noun, streamed at the pace of real time through the router, keeps
the turn; a finished request is answered.

The fleet is the gateway tests' (tests/conftest.py ``gateway_fleet``): moss_sts at its turn-taking defaults
(turn_commit_ms 250, semantic end of turn, the words judgement on). The lines are the turn-taking set's sentences
(bench/turn_set.py, piper joe, seed 23), cut at points of their own; the caller is the bench's (bench/turn_taking.py),
which sends 20 ms frames on the wall clock and plays the reply. On a 2-core AMD EPYC the turn model alone calls most
such pauses complete (bench/results/cpu-probes-2026-11-28-amd/cuts.log); the brain's reading of the words keeps them
open."""

from __future__ import annotations

import pytest

from bench.evaluation import words
from bench.turn_set import paused_line, spoken_line
from bench.turn_taking import one_line
from voice.v1 import recognizer_pb2

pytestmark = [pytest.mark.timeout(300)]

SEMANTIC = recognizer_pb2.EndpointingConfig.MODE_SEMANTIC
# 800 ms pauses where people stop to think: after a possessive, a determiner, a noun before its verb.
PAUSED = [
    "My neighbour asked me to look after her | two cats while she is away next week.",
    "I would like to find a | quiet coffee shop where I can sit and read for an hour.",
    "The train to the coast | was delayed again this morning because of the storm.",
]


def say(channel, line) -> dict:
    record, caller = one_line(channel, line, line.id, SEMANTIC)
    assert caller.error is None or "CANCELLED" in str(caller.error), caller.error
    return record


def test_a_thinking_pause_mid_phrase_keeps_the_turn_at_the_shipped_defaults(gateway_fleet):
    records = []
    with gateway_fleet.channel("router") as channel:
        for marked in PAUSED:
            line = paused_line(marked, 800)
            line.id = marked.split("|")[0].split()[-1]
            records.append(say(channel, line))
    cut = [(r["text"], [t.get("user_text") for t in r["turns"]]) for r in records if r["false_cut_off"]]
    assert not cut, f"taken as the end of the turn in the pause: {cut}"
    lost = [(r["text"], [t.get("user_text") for t in r["turns"]]) for r in records if r["after_words_missing"]]
    assert not lost, f"the words after the pause are not in the turn: {lost}"
    unanswered = [r["text"] for r in records if r["speech_end_to_first_audio_s"] is None]
    assert not unanswered, f"no reply after the whole sentence: {unanswered}"


def test_a_finished_request_is_one_turn_and_answered(gateway_fleet):
    line = spoken_line("park", "complete", "Where did I park my car?")
    with gateway_fleet.channel("router") as channel:
        record = say(channel, line)
    assert [words(t["user_text"]) for t in record["turns"]] == [words(line.text)], record["turns"]
    assert record["speech_end_to_first_audio_s"] is not None, record
