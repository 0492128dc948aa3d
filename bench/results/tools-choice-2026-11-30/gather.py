"""Raw scores for the choice probe (choice_probe.py): for every tuning request (sets.py), the log P of each of its
tokens under every frame variant of its tool set and under the talk frames, the same for content-free texts under
every frame (calibration), and the yes/no answer to "does the request need <tool>?". Written to scores.json.gz.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/tools-choice-2026-11-30/gather.py
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).parent))
from sets import SETS  # noqa: E402

from services.brain.llama_server import chat_formatter  # noqa: E402
from services.brain.server import smollm2_path  # noqa: E402
from services.brain.tool_calls import FRAME_PREFIX, Scorer  # noqa: E402

TALK = {
    "T1": "answer a question, tell something or just chat.",
    "T2": "answer a general knowledge question about people, places, things or words.",
    "T3": "talk with them: answer, explain, tell a story, give an opinion or just chat.",
    # second round (after C's misses were read; D written before these were measured)
    "T4": "chat with you: greet you, thank you, or tell you how they feel.",
    "T5": "tell a joke, a story, a riddle, a poem or a song.",
    "T6": "explain how or why something is, or what a word means.",
    "T7": "have a friendly conversation.",
    "T8": 'answer in words, as for "How are you?", "Who painted this?" or "Tell me a story."',
}
NEUTRAL = ["N/A", "[MASK]", "Okay.", "Hello.", "Yes.", "Hmm."]
YES, NO = ("Yes", "yes", " yes", " Yes"), ("No", "no", " no", " No")


def lower(s: str) -> str:
    return s[0].lower() + s[1:]


def signature(name: str, params: dict, described: bool) -> str:
    parts = []
    for k, v in params.items():
        d = v.get("description") if described else None
        parts.append(f"{k}: {d}" if d else k)
    return f"{name}({', '.join(parts)})"


def variants(tool) -> dict[str, str]:
    name, desc, params = tool
    return {
        "desc": FRAME_PREFIX + lower(desc),
        "sig": f"{FRAME_PREFIX}call {signature(name, params, False)}: {lower(desc)}",
        "sigdesc": f"{FRAME_PREFIX}call {signature(name, params, True)}: {lower(desc)}",
        "named": f"{FRAME_PREFIX}{name.replace('_', ' ')}. {desc}",
        "alt": f"You are a helpful voice assistant with one function: {desc} The user's request needs it.",
    }


def yes_no_frame(tool) -> str:
    name, desc, params = tool
    return (
        f"You are a helpful voice assistant. You have one function, {signature(name, params, True)}: {desc}"
        " Does the user's request need this function? Answer yes or no."
    )


def rounded(x):
    """Log P to 4 decimals: the record stays small and no decision moves."""
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, list):
        return [rounded(v) for v in x]
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    return x


class RowScorer(Scorer):
    def rows(self, systems: list[str], tail: list[int], extra: list[int]) -> list[tuple[list[float], list[float]]]:
        """Per frame: log P of each tail token, and log P of each ``extra`` token after the whole tail."""
        unique = list(dict.fromkeys(systems))
        if len(unique) < len(systems):
            of = dict(zip(unique, self.rows(unique, tail, extra), strict=True))
            return [of[s] for s in systems]
        self._cache(systems, self.formatter, len(tail) + 1)
        per_batch = max(1, 512 // (len(tail) + 1))
        out = []
        for start in range(0, len(systems), per_batch):
            group = systems[start : start + per_batch]
            items = []
            for system in group:
                seq, prompt = self.cached[system]
                fed = [prompt[-1], *tail]
                items += [(t, len(prompt) - 1 + i, seq, True) for i, t in enumerate(fed)]
            self._decode(items)
            n = len(tail) + 1
            for k in range(len(group)):
                lps = []
                for i in range(n):
                    row = np.ctypeslib.as_array(self.context.get_logits_ith(k * n + i), shape=(self.n_vocab,))
                    row = row - row.max()
                    row = row - np.log(np.exp(row).sum())
                    if i < len(tail):
                        lps.append(float(row[tail[i]]))
                    else:
                        last = [float(row[t]) for t in extra]
                out.append((lps, last))
            for system in group:
                seq, prompt = self.cached[system]
                self._llama_cpp.llama_memory_seq_rm(self.context.memory, seq, len(prompt) - 1, -1)
        return out


def main() -> None:
    llm = Llama(model_path=str(smollm2_path()), n_ctx=512, n_threads=2, verbose=False)
    formatter = chat_formatter(llm)
    scorer = RowScorer(llm)
    scorer.formatter = formatter
    rendered = formatter(messages=[{"role": "system", "content": "x"}, {"role": "user", "content": "\u2063"}]).prompt
    after = llm.tokenize(rendered.partition("\u2063")[2].encode(), add_bos=False, special=True)
    extra = [llm.tokenize(w.encode(), add_bos=False)[0] for w in (*YES, *NO)]
    tok = lambda s: llm.tokenize(s.encode(), add_bos=False, special=False)  # noqa: E731
    out: dict = {"talk": TALK, "neutral": NEUTRAL, "sets": {}}
    started = time.perf_counter()
    for set_name, groups in SETS.items():
        out["sets"][set_name] = []
        for tools, requests in groups:
            frames = {f"{t[0]}|{v}": s for t in tools for v, s in variants(t).items()}
            frames |= {f"talk|{k}": FRAME_PREFIX + v for k, v in TALK.items()}
            keys = list(frames)
            systems = [frames[k] for k in keys]
            yn_keys = [t[0] for t in tools]
            yn_systems = [yes_no_frame(t) for t in tools]
            neutral = {}
            for text in NEUTRAL:
                rows = scorer.rows(systems, tok(text), [])
                neutral[text] = {k: r[0] for k, r in zip(keys, rows, strict=True)}
            group = {"tools": [t[0] for t in tools], "frames": frames, "neutral": neutral, "requests": []}
            for words, needs in requests:
                rows = scorer.rows(systems, tok(words), [])
                yn = scorer.rows(yn_systems, [*tok(words), *after], extra)
                group["requests"].append(
                    {
                        "words": words,
                        "needs": needs,
                        "lp": {k: r[0] for k, r in zip(keys, rows, strict=True)},
                        "yesno": {k: r[1] for k, r in zip(yn_keys, yn, strict=True)},
                    }
                )
            out["sets"][set_name].append(group)
            print(f"{set_name}: {len(requests)} requests, {time.perf_counter() - started:.0f} s", flush=True)
    Path(__file__).with_name("scores.json.gz").write_bytes(
        gzip.compress(json.dumps(rounded(out), separators=(",", ":")).encode())
    )


if __name__ == "__main__":
    main()
