import gzip
import json
import math

from services.common.turn_text import NON_FINAL_WORDS, TextCheck

tune = json.load(gzip.open("signs_tuning.json.gz"))
judge = json.load(gzip.open("signs_judge.json.gz"))
for p in tune + judge:
    p["lp"] = p["lp"] if p["lp"] is not None else -30


def logit(x):
    x = min(max(x, 1e-3), 1 - 1e-3)
    return math.log(x / (1 - x))


def counts(d, r):
    out = {}
    for p in d:
        k = p["src"] + "-" + p["kind"]
        h, n = out.get(k, (0, 0))
        out[k] = (h + r(p), n + 1)
    return {k: f"{h}/{n}" for k, (h, n) in out.items()}


def mk(a, b, th):
    return lambda p: p["lp"] + a * logit(p["p"]) + b * (p["conf"] - 0.8) < th


print("current-ish lp<-1.5", counts(tune, lambda p: p["lp"] < -1.5), counts(judge, lambda p: p["lp"] < -1.5))
for a, b, th in [
    (0.5, 8, -0.75),
    (0.5, 6, -1.0),
    (0.25, 4, -0.5),
    (0, 8, -3.25),
    (0.5, 2, -1.5),
    (0.25, 0, -1.25),
    (0, 4, -2.0),
    (0.5, 0, -1.0),
    (0, 0, -0.5),
    (0, 0, -0.4),
]:
    r = mk(a, b, th)
    print(a, b, th, counts(tune, r), counts(judge, r))
print()

tc = TextCheck(NON_FINAL_WORDS)


def cut_with(hold):
    def cut(p):
        if hold(p):
            return False
        if p["p"] >= 0.5:
            return not tc.veto_beam(p["text"], ()) if hasattr(tc, "veto_beam") else True
        return tc.finished(p["text"])

    return cut


def show(name, hold):
    c = cut_with(hold)
    print(name, "cut/fast", counts(tune, c), counts(judge, c))


show("current", lambda p: p["lp"] < -1.5)
for a, b, th in [
    (0.5, 8, -0.75),
    (0.5, 6, -1.0),
    (0.25, 4, -0.5),
    (0.5, 2, -1.5),
    (0, 4, -2.0),
    (0.25, 4, -1.0),
    (0.5, 4, -1.0),
    (0.5, 4, -1.25),
]:
    show(f"{a},{b},{th}", mk(a, b, th))
print("\n== grid on the tuning sets only")
res = []
for a in (0, 0.25, 0.5, 0.75, 1.0):
    for b in (0, 2, 4, 6, 8):
        for th in [x / 4 for x in range(-16, 2)]:
            c = cut_with(mk(a, b, th))
            hf = sum(c(p) for p in tune if p["src"] == "human" and p["kind"] == "frag")
            pf = sum(c(p) for p in tune if p["src"] == "piper" and p["kind"] == "frag")
            pw = sum(c(p) for p in tune if p["src"] == "piper" and p["kind"] == "whole")
            hw = sum(c(p) for p in tune if p["src"] == "human" and p["kind"] == "whole")
            res.append((a, b, th, hf, pf, pw, hw))
ok = [r for r in res if r[5] >= 23 and (r[3] + r[4]) / (36 + 331) <= 0.05]
ok.sort(key=lambda r: (-r[6], r[3] + r[4]))
for r in ok[:12]:
    print(r)
print("-- pw>=23, sorted by pooled frag cuts")
ok = [r for r in res if r[5] >= 23]
ok.sort(key=lambda r: (r[3] + r[4], -r[6]))
for r in ok[:15]:
    print(r)
print("-- chosen")
r = mk(0.25, 4, -0.5)


def sc(p):
    return p["lp"] + 0.25 * logit(p["p"]) + 4 * (p["conf"] - 0.8)


for p in sorted(tune + judge, key=sc):
    if p["kind"] == "whole":
        print(p["src"], round(sc(p), 2), round(p["lp"], 2), p["p"], p["conf"], p["text"])
