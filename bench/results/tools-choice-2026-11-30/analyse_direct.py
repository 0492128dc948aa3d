"""Tuning-set accuracy of the direct direction (direct.json.gz, gather_direct.py): the option likeliest as the
assistant's answer after the user's words, each option's log P less its log P after content-free words."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

DATA = json.loads(gzip.decompress(Path(__file__).with_name("direct.json.gz").read_bytes()))


def run(system, tool_opt, talk_opts, free, reduce="sum", alpha=1.0, margin=0.0):
    out = {}
    for name, groups in DATA["sets"].items():
        right, total, wrong = 0, 0, []
        for g in groups:

            def s(req_lp, key):
                x = np.array(req_lp[f"{system}|{key}"])
                return x.sum() if reduce == "sum" else x.mean()

            def score(r, key, g=g):
                base = np.mean([s(g["free"][f], key) for f in free]) if free else 0.0
                return s(r["lp"], key) - alpha * base

            for r in g["requests"]:
                tools = {t: score(r, f"{t}|{tool_opt}") for t in g["tools"]}
                best = max(tools, key=tools.get)
                talk = max(score(r, f"talk|{k}") for k in talk_opts) + margin
                pick = best if tools[best] > talk else ""
                right += pick == r["needs"]
                total += 1
                if pick != r["needs"]:
                    wrong.append(f"{r['words']} -> {pick or 'talk'}")
        out[name] = (right, total, wrong)
    a, b = out["A"], out["B"]
    label = f"{system}, tool '{tool_opt}', talk {'+'.join(talk_opts)}, free {'+'.join(free) or '-'}, {reduce}"
    if alpha != 1.0 or margin:
        label += f", alpha {alpha}, margin {margin}"
    print(f"{label}: A {a[0]}/{a[1]}, B {b[0]}/{b[1]}, A+B {a[0] + b[0]}/{a[1] + b[1]}")
    if "-v" in sys.argv:
        for w in a[2] + b[2]:
            print("      ", w)


def main() -> None:
    print("## direct: the options as the assistant's answer after the words; minus the same after content-free words")
    for system in ("plain", "listed"):
        for tool_opt in ("will", "call"):
            for talk in (("answer",), ("tell",), ("chat",), ("answer", "tell", "chat")):
                for free in ((), ("N/A",), ("N/A", "[MASK]", "Hmm.")):
                    for reduce in ("sum", "mean"):
                        run(system, tool_opt, talk, free, reduce)


if __name__ == "__main__":
    main()
