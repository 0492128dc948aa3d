"""Asserts that cannot fail (or cannot pass): ``python -m tests.assert_lint [paths]`` lists them and exits 1.

Run by ``make lint`` on tests/ and bench/, and by tests/project/test_assert_lint.py. ruff covers ``assert False`` (B011),
asserts on tuples (F631) and string literals (PLW0129); this adds what ruff does not catch:

- an assert whose condition is built from constants only (``assert 1``, ``assert not None``, ``assert 2 > 1``);
- an ``or`` with a constant operand that is true (``assert heard == text or True``): the assert always passes;
- a comparison of an expression with itself (``assert x == x``, ``x <= x``);
- ``len(...) >= 0`` and ``len(...) > -1``: a length always is;
- a discarded ``wait_until(...)`` result (the call as a bare statement): it returns the predicate's last value, so
  a wait that timed out passes silently; assert it (``assert wait_until(...)``) or use its value;
- an assert that a value is one of several states: ``x in (A, B)`` / ``{A, B}`` / ``[A, B]`` where every member is
  an enum-like constant (a name or attribute in UPPER_CASE, ``gpu_pb2.RESIDENCY_COLD``, ``grpc.StatusCode.OK``) or an
  UPPER_CASE string (``"CANCELLED"``). Listing the outcomes usually lists every settled one, so the assert cannot
  fail; decide which state is right and assert that. Where two outcomes really are both right (a race the test cannot
  order, each correct), say why on the assert's line with ``# any-of: <why>`` and the lint accepts it.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

_NOT_CONSTANT = (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Await, ast.NamedExpr, ast.Lambda)
_REFLEXIVE = (ast.Eq, ast.LtE, ast.GtE, ast.Is)


def _constant(node: ast.AST) -> bool:
    return not any(isinstance(n, _NOT_CONSTANT) for n in ast.walk(node))


_UNKNOWN = object()


def _value(node: ast.AST):
    """The value of a constant-only expression (``-1``, ``2 * 3``); _UNKNOWN for anything else."""
    if not _constant(node):
        return _UNKNOWN
    try:
        return eval(compile(ast.Expression(node), "<assert>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:  # noqa: BLE001 - not evaluable without names: not a plain constant
        return _UNKNOWN


def _truthy_constant(node: ast.AST) -> bool:
    value = _value(node)
    return value is not _UNKNOWN and bool(value)


def _is_len(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def problem(test: ast.expr) -> str | None:
    """Why an assert with condition ``test`` cannot fail (or cannot pass); None when it can do both."""
    if _constant(test):
        return "its condition is a constant"
    for node in ast.walk(test):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(map(_truthy_constant, node.values)):
            return "an `or` with a true constant is always true"
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, _REFLEXIVE) and ast.dump(left) == ast.dump(right):
                    return "it compares an expression with itself"
                bound = _value(right) if _is_len(left) else _UNKNOWN
                if isinstance(bound, int) and (
                    (isinstance(op, ast.GtE) and bound <= 0) or (isinstance(op, ast.Gt) and bound < 0)
                ):
                    return "a length is never negative"
                left = right
    return None


_STATE_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
ALLOW_ANY_OF = "# any-of:"


def _state_like(node: ast.AST) -> bool:
    """An enum-like constant: ``RESIDENT``, ``gpu_pb2.RESIDENCY_COLD``, ``grpc.StatusCode.OK``, ``"CANCELLED"``."""
    if isinstance(node, ast.Name):
        return bool(_STATE_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_STATE_NAME.match(node.attr))
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_STATE_NAME.match(node.value))


def any_of_states(test: ast.expr) -> bool:
    """``x in (A, B, ...)`` over two or more enum-like constants (see the module docstring)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=True):
                if (
                    isinstance(op, ast.In)
                    and isinstance(right, (ast.Tuple, ast.Set, ast.List))
                    and len(right.elts) >= 2
                    and all(map(_state_like, right.elts))
                ):
                    return True
    return False


def _discarded_wait_until(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return (isinstance(func, ast.Name) and func.id == "wait_until") or (
        isinstance(func, ast.Attribute) and func.attr == "wait_until"
    )


def check_source(source: str, filename: str = "<source>") -> list[str]:
    found = []
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Assert) and (why := problem(node.test)):
            found.append(f"{filename}:{node.lineno}: assert that cannot fail: {why}")
        elif isinstance(node, ast.Assert) and any_of_states(node.test):
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if ALLOW_ANY_OF not in text:
                found.append(
                    f"{filename}:{node.lineno}: assert that may not fail: it accepts any of several states; assert"
                    f" the right one, or say why each is right with `{ALLOW_ANY_OF} <why>` on its line"
                )
        elif _discarded_wait_until(node):
            found.append(
                f"{filename}:{node.lineno}: a discarded wait_until(...) result: a wait that timed out passes; assert it"
            )
    return found


def check_paths(paths: list[str]) -> list[str]:
    files = [f for p in map(Path, paths) for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    return [line for f in files for line in check_source(f.read_text(), str(f))]


def main(argv: list[str]) -> int:
    found = check_paths(argv or ["tests", "bench"])
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
