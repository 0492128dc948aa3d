"""`voicefleet status` memory per member: the PSS of a member's whole process tree (services/cli/memory.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from services.cli.memory import member_pss, pss_bytes

MB = 1 << 20
# A member whose child holds 64 MB it has written to (as asr's interim process holds its model).
CHILD = "b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); input()"
PARENT = (
    "import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.PIPE); c.wait()"
)


def test_a_members_memory_includes_its_children():
    member = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert member.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while (total := member_pss({"asr": member.pid, "stopped": None})["asr"]) < 64 * MB:
            assert time.monotonic() < deadline, f"{total / MB:.0f} MB"
            time.sleep(0.1)
        assert pss_bytes(member.pid) < 64 * MB  # the parent alone does not hold the child's memory
        assert member_pss({"stopped": None}) == {"stopped": None}
    finally:
        member.kill()
        member.wait()
