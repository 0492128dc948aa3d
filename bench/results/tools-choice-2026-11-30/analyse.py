"""Tuning-set accuracy of each way to choose, read from scores.json.gz (gather.py); its output is analyse.txt.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/tools-choice-2026-11-30/analyse.py [-v]   # -v: the misses

A and B (sets.py) are the tuning sets every way was measured on; C is the check set, written after the way and its
setting were picked on A and B, and printed for the picked way only."""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from pathlib import Path

import numpy as np


def frame_scores(logprobs: np.ndarray) -> np.ndarray:
    """Each frame's score from the log P of the words' tokens under every frame weighed (one row per frame, one
    column per token): a token's gain under a frame is its log P there less its mean over the frames, and a frame
    scores the mean of its largest third of gains (at least one token)."""
    frames, tokens = logprobs.shape
    if tokens == 0:
        return np.zeros(frames)
    gains = logprobs - logprobs.mean(axis=0)
    best = -(-tokens // 3)  # a third, rounded up
    return np.sort(gains, axis=1)[:, -best:].mean(axis=1)


DATA = json.loads(gzip.decompress(Path(__file__).with_name("scores.json.gz").read_bytes()))
YES_N = 4  # scores.json.gz yes/no list: 4 spellings of yes, then 4 of no


def mean(x):
    return float(np.mean(x))


def decide(req, group, tool_score, talk_score):
    tools = {t: tool_score(req, group, t) for t in group["tools"]}
    best = max(tools, key=tools.get)
    talk = talk_score(req, group)
    return best if talk is None or tools[best] > talk else ""


def accuracy(tool_score, talk_score):
    out = {}
    for name, groups in DATA["sets"].items():
        right = total = 0
        wrong = []
        for g in groups:
            for r in g["requests"]:
                pick = decide(r, g, tool_score, talk_score)
                right += pick == r["needs"]
                total += 1
                if pick != r["needs"]:
                    wrong.append(f"{r['words']} -> {pick or 'talk'}")
        out[name] = (right, total, wrong)
    return out


def cal(group, key, neutral):
    return mean([mean(group["neutral"][n][key]) for n in neutral])


def frame_score(variants, alpha=0.0, neutral=("N/A",)):
    def score(req, group, tool):
        return mean([mean(req["lp"][f"{tool}|{v}"]) - alpha * cal(group, f"{tool}|{v}", neutral) for v in variants])

    return score


def talk_frames(keys, alpha=0.0, neutral=("N/A",), margin=0.0):
    def score(req, group):
        return margin + max(mean(req["lp"][f"talk|{k}"]) - alpha * cal(group, f"talk|{k}", neutral) for k in keys)

    return score


def gains(variants=("desc",), talk=("T1", "T2"), top=None, positive=False):
    """(tool score, talk score): each frame's per-token gains (log P less the mean over the frames weighed); a frame
    scores the mean of its ``top`` largest gains (``top(n)`` of n tokens), or the sum of its positive gains."""

    def per(req, group):
        keys = [f"{t}|{v}" for t in group["tools"] for v in variants] + [f"talk|{k}" for k in talk]
        logprobs = np.array([req["lp"][k] for k in keys])
        if top is None and not positive:
            s = frame_scores(logprobs)  # the top third
        else:
            g = logprobs - logprobs.mean(axis=0)
            s = np.clip(g, 0, None).sum(1) if positive else np.sort(g, 1)[:, -top(g.shape[1]) :].mean(1)
        return dict(zip(keys, s, strict=True))

    return (
        lambda r, g, t: max(per(r, g)[f"{t}|{v}"] for v in variants),
        lambda r, g: max(per(r, g)[f"talk|{k}"] for k in talk),
    )


def yes_no(req, group, tool):
    y = np.array(req["yesno"][tool])
    return float(np.logaddexp.reduce(y[:YES_N]) - np.logaddexp.reduce(y[YES_N:]))


def show(label, result, tuning=("A", "B"), check=()):
    """One line: right/total per tuning set and in all, then per check set."""
    parts = [f"{k} {result[k][0]}/{result[k][1]}" for k in tuning]
    parts.append(f"{'+'.join(tuning)} {sum(result[k][0] for k in tuning)}/{sum(result[k][1] for k in tuning)}")
    line = f"{label}: {', '.join(parts)}"
    if check:
        line += "; check " + ", ".join(f"{k} {result[k][0]}/{result[k][1]}" for k in check)
    print(line)
    if "-v" in sys.argv:
        for k in (*tuning, *check):
            for w in result[k][2]:
                print(f"       {k}: {w}")


def main() -> None:
    T12 = ("T1", "T2")
    print("# tools: desc = 'The user wants you to <description>' (shipped); talk T1+T2 (shipped)\n")
    print("## frames (no calibration)")
    show("shipped: desc, talk T1+T2", accuracy(frame_score(["desc"]), talk_frames(T12)), check=("C",))
    for v in ("sig", "sigdesc", "named", "alt"):
        show(f"{v}, talk T1+T2", accuracy(frame_score([v]), talk_frames(T12)))
    for vs in (["desc", "sig"], ["desc", "alt"], ["desc", "sig", "alt"], ["desc", "sigdesc", "named", "alt"]):
        show(f"mean of {'+'.join(vs)}, talk T1+T2", accuracy(frame_score(vs), talk_frames(T12)))
    for keys in (("T1",), ("T1", "T2", "T3"), ("T3",), ("T2", "T3")):
        show(f"desc, talk {'+'.join(keys)}", accuracy(frame_score(["desc"]), talk_frames(keys)))

    print("\n## margin for talk (added to the talk score; per token)")
    for m in (-0.2, -0.1, 0.1, 0.2):
        show(f"desc, T1+T2, margin {m:+.1f}", accuracy(frame_score(["desc"]), talk_frames(T12, margin=m)))

    print("\n## contextual calibration: minus alpha x mean log P(content-free text | frame), per token")
    neutrals = [("N/A",), ("[MASK]",), ("Okay.",), ("Hello.",), ("N/A", "[MASK]"), tuple(DATA["neutral"])]
    for neutral, alpha in itertools.product(neutrals, (0.5, 1.0)):
        show(
            f"desc, T1+T2, {'+'.join(neutral)} alpha {alpha}",
            accuracy(frame_score(["desc"], alpha, neutral), talk_frames(T12, alpha, neutral)),
        )
    for v in ("sig", "sigdesc"):
        for neutral in (("N/A",), ("N/A", "[MASK]")):
            show(
                f"{v}, T1+T2, {'+'.join(neutral)} alpha 1.0",
                accuracy(frame_score([v], 1.0, neutral), talk_frames(T12, 1.0, neutral)),
            )

    print("\n## the model's own yes/no: 'Does the user's request need this function?' (log P yes - log P no)")
    for threshold in (-1.0, 0.0, 1.0):
        show(f"yes/no alone, call when best > {threshold}", accuracy(yes_no, lambda r, g, t=threshold: t))
    for w in (0.05, 0.1, 0.2):
        show(
            f"desc + {w} x yes/no, T1+T2",
            accuracy(lambda r, g, t, w=w: frame_score(["desc"])(r, g, t) + w * yes_no(r, g, t), talk_frames(T12)),
        )

    print("\n## per-token gains: log P under a frame less its mean over the frames; a frame's largest gains count")
    for k in (1, 2, 3, 4, 5):
        show(f"desc, T1+T2, mean of the top {k} gains", accuracy(*gains(top=lambda n, k=k: min(k, n))))
    for frac in (0.25, 0.5):
        show(
            f"desc, T1+T2, mean of the top {frac:.0%} of gains",
            accuracy(*gains(top=lambda n, f=frac: max(1, int(np.ceil(f * n))))),
        )
    show("desc, T1+T2, sum of positive gains", accuracy(*gains(positive=True)))
    show(
        "desc+sig (the better of the two), T1+T2, sum of positive gains",
        accuracy(*gains(("desc", "sig"), positive=True)),
    )
    show("desc, T1+T2+T3, top third", accuracy(*gains(talk=("T1", "T2", "T3"))))
    show("picked in round 1: desc, T1+T2, top third of gains (frame_scores)", accuracy(*gains()), check=("C",))

    print("\n## round 2: more talk frames (C's misses read first, so C tunes too; D is the check)")
    abc = ("A", "B", "C")
    for talk in (
        T12,
        ("T1", "T2", "T4"),
        ("T1", "T2", "T5"),
        ("T1", "T2", "T6"),
        ("T1", "T2", "T7"),
        ("T1", "T2", "T8"),
        ("T1", "T2", "T4", "T5"),
        ("T1", "T2", "T4", "T5", "T6"),
        ("T2", "T8"),
        ("T2", "T4"),
        ("T1", "T2", "T3", "T4", "T5"),
    ):
        show(f"desc, talk {'+'.join(talk)}, mean log P", accuracy(frame_score(["desc"]), talk_frames(talk)), abc)
        show(f"desc, talk {'+'.join(talk)}, top third of gains", accuracy(*gains(talk=talk)), abc)
    print("\n## the check set D, for what was shipped and what was picked")
    show("shipped: desc, talk T1+T2, mean log P", accuracy(frame_score(["desc"]), talk_frames(T12)), abc, ("D",))
    show("round 1: desc, talk T1+T2, top third of gains", accuracy(*gains()), abc, ("D",))
    show("picked: desc, talk T1+T2+T4, top third of gains", accuracy(*gains(talk=("T1", "T2", "T4"))), abc, ("D",))
    print("\n## read after D had judged the picked way (so D is no longer blind for these)")
    for talk in (("T1", "T2", "T4"), ("T1", "T2", "T4", "T5"), ("T1", "T2", "T5")):
        show(
            f"desc, talk {'+'.join(talk)}, mean log P", accuracy(frame_score(["desc"]), talk_frames(talk)), abc, ("D",)
        )


if __name__ == "__main__":
    main()
