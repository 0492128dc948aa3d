"""pytest plugin: CPU seconds of the whole process tree per test (setup+call+teardown), to /tmp/mt/cpu-<lane>.tsv."""

import os
import resource
import time

import pytest

TICK = os.sysconf("SC_CLK_TCK")
ME = os.getpid()


def _procs():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                rest = s[s.rindex(")") + 2 :].split()
                out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK)  # ppid, utime+stime
            except (OSError, ValueError):
                pass
    return out


def _tree_cpu():
    procs = _procs()
    kids = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    total, stack = 0.0, [ME]
    while stack:
        p = stack.pop()
        total += procs.get(p, (0, 0.0))[1]
        stack.extend(kids.get(p, []))
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + r.ru_utime + r.ru_stime


_out = open(f"/tmp/mt/cpu-{os.environ.get('TEST_LANE', 'all')}.tsv", "a")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _tree_cpu(), time.time()
    yield
    _out.write(f"{item.nodeid}\t{_tree_cpu() - c0:.2f}\t{time.time() - t0:.2f}\n")
    _out.flush()
