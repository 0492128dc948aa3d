"""The assert lint (tests/assert_lint.py, run by `make lint`) rejects asserts that cannot fail, and the tests and
benchmarks have none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.assert_lint import check_paths, check_source

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "line",
    [
        "assert heard == text or True",
        "assert (a or 1) and b",
        "assert 1",
        "assert not None",
        "assert 2 > 1",
        "assert x == x",
        "assert len(pcm) >= 0",
        "assert len(pcm) > -1",
        "assert a < b <= b",
    ],
)
def test_rejects_asserts_that_cannot_fail(line):
    (found,) = check_source(line)
    assert found.startswith("<source>:1: assert that cannot fail: ")


@pytest.mark.parametrize(
    "line",
    [
        "assert heard == text",
        "assert a or b",
        "assert len(pcm) > 0",
        "assert x == y",
        "assert x or None",
        "assert f(1)",
    ],
)
def test_accepts_asserts_that_can_fail(line):
    assert check_source(line) == []


@pytest.mark.parametrize(
    "source",
    [
        "wait_until(lambda: done())",
        "wait_until(lambda: done(), timeout=10)",
        "helpers.wait_until(ready)",
        "def f():\n    wait_until(ready)",
    ],
)
def test_rejects_a_discarded_wait_until(source):
    (found,) = check_source(source)
    assert "a discarded wait_until(...) result" in found


@pytest.mark.parametrize(
    "source",
    [
        "assert wait_until(ready)",
        "assert wait_until(ready), log.read_text()",
        "ok = wait_until(ready)",
        "if not wait_until(ready):\n    raise AssertionError()",
        "talk.wait(ready)",  # another helper: not this rule's business
    ],
)
def test_accepts_a_wait_until_whose_result_is_used(source):
    assert check_source(source) == []


@pytest.mark.parametrize(
    "line",
    [
        "assert s.residency in (gpu_pb2.RESIDENCY_RESIDENT, gpu_pb2.RESIDENCY_COLD)",
        "assert err.code() in {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}",
        'assert state in ("A", "B")',
        'assert code in ["OK", "CANCELLED"]',
        "assert x == 1 and state in (RESIDENT, COLD)",
    ],
)
def test_rejects_an_assert_that_accepts_any_of_several_states(line):
    (found,) = check_source(line)
    assert found.startswith("<source>:1: assert that may not fail: it accepts any of several states")


@pytest.mark.parametrize(
    "source",
    [
        "assert s.residency == gpu_pb2.RESIDENCY_RESIDENT",
        "assert state in (RESIDENT,)",  # one state: an equality in disguise
        'assert word in ("hello", "hallo")',  # words, not states
        "assert n in (1, 2)",
        "assert engine in (a, b)",
        "assert RESIDENT in states",  # membership in a computed collection
        "assert err.code() in (\n    grpc.StatusCode.DEADLINE_EXCEEDED,\n    grpc.StatusCode.UNAVAILABLE,\n)  # any-of: a race",
        "assert code in (OK, CANCELLED)  # any-of: the cancel may land after the last reply, both are right",
    ],
)
def test_accepts_one_state_other_memberships_and_the_documented_allowance(source):
    assert check_source(source) == []


def test_tests_and_benchmarks_have_no_assert_that_cannot_fail():
    assert check_paths([str(ROOT / "tests"), str(ROOT / "bench")]) == []
