"""Offline turn features per piece: Smart Turn p (160 ms into the pause), whisper tiny.en final text + confidence,
brain log P(end of turn) of the text. Pieces: human (sonnet) and piper (turn set) fragments cut at word gaps, and
their whole lines."""

import json
import sys

import numpy as np

from bench import human_speech
from bench.turn_set import LONG, MEDIUM, RATE, SHORT, Voice, paused_line
from bench.turn_words import with_brain
from services.common.config import load_config
from services.engines.asr.cpu_engine import WhisperFinals
from services.engines.asr.turn_model import TurnModel, turn_model_path

cfg = load_config().asr
wf = WhisperFinals(cfg)
wf.load()
tm = TurnModel("probe", turn_model_path())
PAD = np.zeros(int(0.5 * RATE), dtype=np.int16)


def feats(x):
    a = np.concatenate([x, np.zeros(int(0.15 * RATE), np.int16)]).astype(np.float32) / 32768.0
    f = wf.recognize(a, "en", ())
    t = np.concatenate([PAD, x, np.zeros(int(0.16 * RATE), np.int16)]).astype(np.float32) / 32768.0
    return dict(text=f.text, conf=f.confidence, p=round(tm.probability(t), 4))


pieces = []
for line in human_speech.lines():
    x = np.frombuffer(line.pcm, dtype=np.int16)
    pieces.append(dict(src="human", kind="whole", ref=line.text, **feats(x)))
    for i, g in enumerate(line.gaps):
        if g and line.text.split()[i][-1] not in ",;:":
            pieces.append(dict(src="human", kind="frag", ref=" ".join(line.text.split()[: i + 1]), **feats(x[: g[0]])))
voice = Voice()
for s in SHORT + MEDIUM + LONG:
    words = s.replace("|", " ").split()
    for i in range(2, len(words)):
        marked = " ".join(words[:i]) + " | " + " ".join(words[i:])
        try:
            ln = paused_line(marked, 500, voice=voice)
        except ValueError:
            continue
        x = np.frombuffer(ln.pcm, dtype=np.int16)
        cut = ln.pause_at_ms * 16
        if words[i - 1][-1] not in ",;:":
            pieces.append(dict(src="piper", kind="frag", ref=" ".join(words[:i]), **feats(x[:cut])))
    pieces.append(
        dict(src="piper", kind="whole", ref=" ".join(words), **feats(np.concatenate([x[:cut], x[cut + 8000 :]])))
    )
print(len(pieces), file=sys.stderr)


async def score(brain, sp):
    for p in pieces:
        m = [{"role": "system", "content": sp}, {"role": "user", "content": p["text"] or "..."}]
        p["lp"] = await brain.end_of_turn_logprob(m)


with_brain(score)
json.dump(pieces, open("signs_tuning.json", "w"), indent=0)
