"""Which words judgements of a moss_sts log the floor changed: each reading with the turn model below p 0.12 is
scored again without the floor (the log's confidence, the shipped weights)."""

import gzip
import math
import re
import sys

pat = re.compile(
    r"words '(.*)': log P\(end of turn\) (-?[\d.]+), turn model ([\d.]+|None), confidence ([\d.]+|None), score (-?[\d.]+) -> (\w+)"
)
for path in sys.argv[1:]:
    n = flips = 0
    for line in gzip.open(path, "rt"):
        m = pat.search(line)
        if not m or m.group(3) == "None" or float(m.group(3)) >= 0.12:
            continue
        text, lp, p, conf, score, verdict = m.groups()
        p, lp = float(p), float(lp)
        unbounded = (
            lp + 0.25 * math.log(max(p, 1e-3) / (1 - max(p, 1e-3))) + (4 * (float(conf) - 0.8) if conf != "None" else 0)
        )
        was = "unfinished" if lp < -3.0 else "doubtful" if unbounded < -0.5 else "finished"
        n += 1
        if was != verdict:
            flips += 1
            print(f"  {verdict} (without the floor {was}, {unbounded:.2f}): {text[:90]}")
    print(f"{path}: {n} readings below p 0.12, {flips} changed by the floor")
