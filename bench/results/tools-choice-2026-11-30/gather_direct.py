"""The direct direction, for the choice probe: the user's words first, then the log P of each option as the
assistant's answer ("I will <description>", or talk), against the same under content-free words (contextual
calibration, which a direct score needs: an option's own words are likelier or not whatever was asked). Written to
direct.json.gz.

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/tools-choice-2026-11-30/gather_direct.py
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).parent))
from gather import RowScorer, lower, rounded  # noqa: E402
from sets import SETS  # noqa: E402

from services.brain.llama_server import chat_formatter  # noqa: E402
from services.brain.server import smollm2_path  # noqa: E402

CONTENT_FREE = ["N/A", "[MASK]", "Hmm."]
TALK = {
    "answer": "I will answer you in words.",
    "tell": "I will answer your question myself.",
    "chat": "I will answer, explain or just chat with you.",
}


def options(tool) -> dict[str, str]:
    name, desc, _ = tool
    return {"will": f"I will {lower(desc)}", "call": f"I will call {name}: {lower(desc)}"}


def systems(tools) -> dict[str, str]:
    listed = "\n".join(f"- {name}: {desc}" for name, desc, _ in tools)
    return {
        "plain": "You are a helpful voice assistant.",
        "listed": f"You are a helpful voice assistant. You can call these functions:\n{listed}",
    }


class PrefixScorer(RowScorer):
    def _prompt(self, system, formatter):
        return self.llama.tokenize(system.encode(), add_bos=False, special=True)


def main() -> None:
    llm = Llama(model_path=str(smollm2_path()), n_ctx=512, n_threads=2, verbose=False)
    formatter = chat_formatter(llm)
    scorer = PrefixScorer(llm)
    scorer.formatter = formatter
    tok = lambda s: llm.tokenize(s.encode(), add_bos=False, special=False)  # noqa: E731

    def prefix(system: str, words: str) -> str:
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": words}]
        return formatter(messages=msgs).prompt  # ends with the assistant's header

    out: dict = {"talk": TALK, "sets": {}}
    started = time.perf_counter()
    for set_name, groups in SETS.items():
        if set_name not in ("A", "B"):  # the direct direction was measured on the tuning sets only
            continue
        out["sets"][set_name] = []
        for tools, requests in groups:
            opts = {f"{t[0]}|{k}": v for t in tools for k, v in options(t).items()}
            opts |= {f"talk|{k}": v for k, v in TALK.items()}
            group = {"tools": [t[0] for t in tools], "options": opts, "free": {}, "requests": []}
            sys_of = systems(tools)

            def lps(words: str, sys_of=sys_of, opts=opts) -> dict:
                got = {}
                for s_name, system in sys_of.items():
                    p = prefix(system, words)
                    for key, text in opts.items():
                        got[f"{s_name}|{key}"] = scorer.rows([p], tok(text), [])[0][0]
                return got

            for free in CONTENT_FREE:
                group["free"][free] = lps(free)
            for words, needs in requests:
                group["requests"].append({"words": words, "needs": needs, "lp": lps(words)})
            out["sets"][set_name].append(group)
            print(f"{set_name}: {len(requests)} requests, {time.perf_counter() - started:.0f} s", flush=True)
    Path(__file__).with_name("direct.json.gz").write_bytes(
        gzip.compress(json.dumps(rounded(out), separators=(",", ":")).encode())
    )


if __name__ == "__main__":
    main()
