"""Speech end -> first reply audio at the client over the paused lines not cut (a cut line answers before the speech
end), and how many waited the doubtful band (>= 1300 ms): ``python line_ends.py RUN.json[.gz] ...``."""

import gzip
import json
import statistics
import sys


def load(path):
    return json.load(gzip.open(path) if path.endswith(".gz") else open(path))


for path in sys.argv[1:]:
    ends = sorted(
        r["speech_end_to_first_audio_s"] * 1000
        for r in load(path)["records"]
        if r.get("kind") == "paused" and (r.get("speech_end_to_first_audio_s") or -1) >= 0
    )
    p95 = ends[int(round(0.95 * (len(ends) - 1)))]
    waited = sum(x >= 1300 for x in ends)
    print(f"{path}: {len(ends)} lines, median {statistics.median(ends):.0f} ms, p95 {p95:.0f} ms, waited {waited}")
