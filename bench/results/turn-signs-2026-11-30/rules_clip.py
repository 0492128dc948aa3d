import gzip
import json
import math

from services.common.turn_text import NON_FINAL_WORDS, TextCheck

tune = json.load(gzip.open("signs_tuning.json.gz"))
judge = json.load(gzip.open("signs_judge.json.gz"))
for p in tune + judge:
    p["lp"] = p["lp"] if p["lp"] is not None else -30
tc = TextCheck(NON_FINAL_WORDS)


def logit(x, clip):
    x = min(max(x, 1e-3), 1 - 1e-3)
    v = math.log(x / (1 - x))
    return max(-clip, min(clip, v))


def cut_with(a, b, t, clip):
    def cut(p):
        if p["lp"] + a * logit(p["p"], clip) + b * (p["conf"] - 0.8) < t:
            return False
        if p["p"] >= 0.5:
            return not tc.veto_beam(p["text"], ())
        return tc.finished(p["text"])

    return cut


def n(d, src, kind, c):
    return sum(c(p) for p in d if p["src"] == src and p["kind"] == kind)


res = []
for clip in (1.0, 1.5, 2.0, 3.0, 7.0):
    for a in (0.25, 0.5, 0.75, 1.0):
        for b in (2, 4, 6, 8):
            for t in [x / 4 for x in range(-12, 2)]:
                c = cut_with(a, b, t, clip)
                res.append(
                    (
                        clip,
                        a,
                        b,
                        t,
                        n(tune, "human", "frag", c),
                        n(tune, "piper", "frag", c),
                        n(tune, "piper", "whole", c),
                        n(tune, "human", "whole", c),
                        n(judge, "librivox", "frag", c),
                        n(judge, "librivox", "whole", c),
                    )
                )
ok = [r for r in res if r[6] >= 23]
ok.sort(key=lambda r: (r[4] + r[5], -r[7]))
for clip in (1.0, 1.5, 2.0, 3.0, 7.0):
    best = [r for r in ok if r[0] == clip][:3]
    for r in best:
        print(r)
