"""Lint: no function or method in the given trees is longer than the limit (80 lines).

Usage: ``python tools/function_length.py python [--limit 80]``. Prints each offender as
``path:line name (N lines)`` and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def long_functions(root: Path, limit: int) -> list[str]:
    """``path:line name (N lines)`` for every function under ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path}:{node.lineno} {node.name} ({length} lines)")
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the trees; 1 if a function is too long."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=80)
    args = parser.parse_args(argv)
    found = [line for root in args.roots for line in long_functions(root, args.limit)]
    for line in found:
        print(f"function longer than {args.limit} lines (split it by purpose): {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
