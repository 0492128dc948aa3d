"""Asserts that cannot fail (or cannot pass): ``python -m tests.assert_lint [paths]`` lists them and exits 1.

Run by ``make lint`` on tests/ and bench/, and by tests/project/test_assert_lint.py. ruff covers ``assert False`` (B011),
asserts on tuples (F631) and string literals (PLW0129); this adds what ruff does not catch:

- an assert whose condition is built from constants only (``assert 1``, ``assert not None``, ``assert 2 > 1``);
- an ``or`` with a constant operand that is true (``assert heard == text or True``): the assert always passes;
- a comparison of an expression with itself (``assert x == x``, ``x <= x``);
- ``len(...) >= 0`` and ``len(...) > -1``: a length always is.
"""

from __future__ import annotations

import ast
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


def check_source(source: str, filename: str = "<source>") -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Assert) and (why := problem(node.test)):
            found.append(f"{filename}:{node.lineno}: assert that cannot fail: {why}")
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
