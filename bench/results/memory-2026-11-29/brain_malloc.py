"""The brain alone (`python -m services.brain`, port 8092), 10 sessions of 10 chat turns, its process tree's PSS after
each session; an optional glibc malloc setting in its environment (brain_malloc.txt):

    PYTHONPATH=.:gen/python .venv/bin/python bench/results/memory-2026-11-29/brain_malloc.py -
    PYTHONPATH=.:gen/python .venv/bin/python bench/results/memory-2026-11-29/brain_malloc.py MALLOC_ARENA_MAX=1
    PYTHONPATH=.:gen/python .venv/bin/python bench/results/memory-2026-11-29/brain_malloc.py MALLOC_MMAP_THRESHOLD_=1048576
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import urllib.request

from bench.memory import QUESTIONS  # the memory bench's conversation turns


def tree(pid: int) -> list[int]:
    out = [pid]
    for children in glob.glob(f"/proc/{pid}/task/*/children"):
        for child in open(children).read().split():
            out += tree(int(child))
    return out


def pss_mb(pid: int) -> int:
    total = 0
    for p in tree(pid):
        try:
            total += next(int(x.split()[1]) for x in open(f"/proc/{p}/smaps_rollup") if x.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total // 1024


def post(body: dict) -> dict:
    request = urllib.request.Request(
        "http://127.0.0.1:8092/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    return json.loads(urllib.request.urlopen(request, timeout=60).read())


def main(setting: str) -> None:
    env = dict(os.environ)
    if setting != "-":
        key, value = setting.split("=", 1)
        env[key] = value
    brain = subprocess.Popen([sys.executable, "-m", "services.brain"], env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen("http://127.0.0.1:8092/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(1)
        print("fresh", pss_mb(brain.pid), flush=True)
        for session in range(10):
            system = f"You are a helpful voice assistant. Session {session}. Answer in one short sentence."
            messages = [{"role": "system", "content": system}]
            for question in QUESTIONS:
                messages.append({"role": "user", "content": question})
                reply = post({"model": "smollm2-135m-instruct", "messages": messages, "max_tokens": 60})
                messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
            print("after session", session, pss_mb(brain.pid), flush=True)
    finally:
        brain.terminate()
        brain.wait()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "-")
