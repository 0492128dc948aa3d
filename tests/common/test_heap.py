"""services/common/heap.py: what a finished session freed goes back to the system. Checked as a user of `voicefleet
status` would see it: the process's resident memory (VmRSS), in a fresh interpreter of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = r"""
import sys
from services.common import heap

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

# 200 MB in 2 KB blocks (malloc's heap, not mmap), then free all but every 50th: the heap keeps its pages
blocks = [bytes(2048) for _ in range(100_000)]
kept = blocks[::50]
del blocks
before = rss_mb()
released = heap.release_freed_memory()
after = rss_mb()
print(released, round(before), round(after))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS is read from /proc (Linux)")
def test_release_gives_freed_heap_pages_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    released, before, after = out[0] == "True", int(out[1]), int(out[2])
    assert released, out
    assert before - after >= 100, f"resident {before} MB before the release, {after} MB after"
