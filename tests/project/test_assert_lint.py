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


def test_tests_and_benchmarks_have_no_assert_that_cannot_fail():
    assert check_paths([str(ROOT / "tests"), str(ROOT / "bench")]) == []
