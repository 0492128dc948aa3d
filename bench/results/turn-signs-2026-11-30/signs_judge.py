import glob
import json
import re
import sys

import numpy as np

from bench.human_speech import _quietest_gap
from bench.turn_set import RATE, window_levels_dbfs
from bench.turn_words import with_brain
from services.common import audio
from services.common.config import load_config
from services.engines.asr.cpu_engine import WhisperFinals
from services.engines.asr.turn_model import TurnModel, turn_model_path

D = "/tmp/probe/ps/pocketsphinx-5.1.1/test/data/librivox/"
wf = WhisperFinals(load_config().asr)
wf.load()
tm = TurnModel("probe", turn_model_path())
PAD = np.zeros(int(0.5 * RATE), dtype=np.int16)


def feats(x):
    a = np.concatenate([x, np.zeros(int(0.15 * RATE), np.int16)]).astype(np.float32) / 32768.0
    f = wf.recognize(a, "en", ())
    t = np.concatenate([PAD, x, np.zeros(int(0.16 * RATE), np.int16)]).astype(np.float32) / 32768.0
    return dict(text=f.text, conf=f.confidence, p=round(tm.probability(t), 4))


pieces = []
for f in sorted(glob.glob(D + "*.json")):
    if "phone" in f or "state" in f or "test-" in f:
        continue
    al = json.load(open(f))
    pcm, rate = audio.read_wav(f[:-5] + ".wav")
    x = np.frombuffer(pcm, np.int16)
    ws = [w for w in al["w"] if w["t"] != "<sil>"]
    peak = float(window_levels_dbfs(x.tobytes()).max())
    text = [re.sub(r"\(\d\)", "", w["t"]) for w in ws]
    pieces.append(dict(src="librivox", kind="whole", ref=" ".join(text), **feats(x)))
    for i in range(1, len(ws) - 1):
        a_end = int((ws[i]["b"] + ws[i]["d"]) * RATE)
        b = int(ws[i + 1]["b"] * RATE)
        cut = _quietest_gap(x, a_end - 960, b + 960, peak)
        if cut is None:
            continue
        pieces.append(dict(src="librivox", kind="frag", ref=" ".join(text[: i + 1]), **feats(x[:cut])))
print(len(pieces), file=sys.stderr)


async def score(brain, sp):
    for p in pieces:
        m = [{"role": "system", "content": sp}, {"role": "user", "content": p["text"] or "..."}]
        p["lp"] = await brain.end_of_turn_logprob(m)


with_brain(score)
json.dump(pieces, open("signs_judge.json", "w"), indent=0)
for p in pieces:
    print(p["kind"], round(p["lp"], 2), p["p"], p["conf"], p["ref"], "->", p["text"])
