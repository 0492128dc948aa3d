"""The turn signs' rule with the turn model's log-odds bounded, chosen on the tuning sets with one more set than
../turn-signs-2026-11-30/rules.py: the doubtful judgements of the fleet's whole lines traced live in sessions that
keep their history (../conversation-2026-11-30-signs/load_one_session.txt: there the turn model heard piper's long
lines end at p 0.014-0.03). Two shapes of bound: ``clip`` (the log-odds within +-bound) and ``floor`` (counted from
-bound up: only the "unfinished" tail bounded). Run from this directory: ``python rules_bound.py > rules_bound.txt``.

Columns: shape, bound, a (sound weight), b (confidence weight), t (sure from); tuning fragments cut (human, piper),
piper whole lines sure, human whole lines sure; the live lines sure (of 7); the sonnet's "From fairest creatures we
deserve it." (a cut phrase whisper completed) sure; then, judged only after the choice, the held-out LibriVox
fragments cut (of 55) and whole sentences sure (of 5)."""

import gzip
import json
import math

from services.common.turn_text import NON_FINAL_WORDS, TextCheck

tune = json.load(gzip.open("../turn-signs-2026-11-30/signs_tuning.json.gz"))
judge = json.load(gzip.open("../turn-signs-2026-11-30/signs_judge.json.gz"))
for p in tune + judge:
    p["lp"] = p["lp"] if p["lp"] is not None else -30
text_check = TextCheck(NON_FINAL_WORDS)

# The live judgements that waited the band (load_one_session.txt): log P, the turn model's p, the final's confidence
# (the live one where the trace has it, else the same line's offline final: the commit waits for the final).
LIVE = [
    (-0.15, 0.014, 0.92),  # I was thinking we could meet at the station ...
    (-0.20, 0.027, 0.96),  # Can you tell me how long it takes to drive ...
    (-0.51, 0.3127, 0.96),  # When my grandfather was young ...
    (-0.18, 0.027, 0.92),  # I was thinking ...
    (-0.37, 0.0281, 0.92),  # I was thinking ...
    (-1.78, 0.7722, 0.715),  # Can you turn the music down
    (-1.47, 0.1065, 0.896),  # My sister is flying in from Chicago ...
]
FAIREST = dict(lp=-0.49, p=0.78, conf=0.59)


def log_odds(x, shape, bound):
    x = min(max(x, 1e-3), 1 - 1e-3)
    v = math.log(x / (1 - x))
    return max(-bound, v) if shape == "floor" else max(-bound, min(bound, v))


def sure(p, rule):
    shape, bound, a, b, t = rule
    return p["lp"] + a * log_odds(p["p"], shape, bound) + b * (p["conf"] - 0.8) >= t


def cut(p, rule):
    if not sure(p, rule):
        return False
    if p["p"] >= 0.5:
        return not text_check.veto_beam(p["text"], ())
    return text_check.finished(p["text"])


def count(data, src, kind, fn, rule):
    return sum(fn(p, rule) for p in data if p["src"] == src and p["kind"] == kind)


rows = []
for shape in ("clip", "floor"):
    for bound in (1.0, 1.5, 2.0, 3.0, 7.0):
        for a in (0.25, 0.5, 0.75, 1.0):
            for b in (1, 2, 3, 4, 6, 8):
                for t in [x / 4 for x in range(-12, 2)]:
                    rule = (shape, bound, a, b, t)
                    rows.append(
                        (
                            *rule,
                            count(tune, "human", "frag", cut, rule),
                            count(tune, "piper", "frag", cut, rule),
                            count(tune, "piper", "whole", sure, rule),
                            count(tune, "human", "whole", sure, rule),
                            sum(sure(dict(lp=lp, p=p, conf=c), rule) for lp, p, c in LIVE),
                            sure(FAIREST, rule),
                            count(judge, "librivox", "frag", cut, rule),
                            count(judge, "librivox", "whole", sure, rule),
                        )
                    )
print("shipped at 1761aad (no bound):", next(r for r in rows if r[:5] == ("clip", 7.0, 0.25, 4, -0.5)))
# The choice: at most one whole fleet-voice line of the tuning set doubtful, and the five live lines whose words
# read well (log P -0.51 and up; the other two read low by their words, -1.78 and -1.47) sure; then the fewest
# tuning fragments cut; then the most whole verses sure.
ok = [r for r in rows if r[7] >= 23 and r[9] >= 5]
ok.sort(key=lambda r: (r[5] + r[6], -r[8]))
print("best 12:")
for r in ok[:12]:
    print(r)
