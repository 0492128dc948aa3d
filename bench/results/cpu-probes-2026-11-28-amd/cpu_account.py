"""A pytest plugin: the machine's CPU (every process, from /proc/stat) busy during each test's setup, call and
teardown, beside its wall time; written as JSON rows (nodeid, phase, wall s, busy CPU s) at the session's end.
Where `make test`'s time goes on a 2-core machine, and how much of it a second core could take:

    PYTHONPATH=bench/results/cpu-probes-2026-11-28-amd CPU_ACCOUNT_OUT=/tmp/cpu.json .venv/bin/python -m pytest -p cpu_account
"""

import json
import os
from time import perf_counter  # bound now: some tests monkeypatch time.monotonic

import pytest

HZ = os.sysconf("SC_CLK_TCK")
rows = []


def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v) - idle) / HZ


def _wrap(phase):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item, *a, **k):
        b0, t0 = busy(), perf_counter()
        yield
        rows.append((item.nodeid, phase, perf_counter() - t0, busy() - b0))

    return hook


pytest_runtest_setup = _wrap("setup")
pytest_runtest_call = _wrap("call")
pytest_runtest_teardown = _wrap("teardown")


def pytest_sessionfinish(session):
    with open(os.environ.get("CPU_ACCOUNT_OUT", "/tmp/cpu_account.json"), "w") as f:
        json.dump(rows, f)
