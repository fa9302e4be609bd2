"""The components' docstrings are their documentation and, read by the SDK's analyzer, the
descriptions of the provider's schema (tests/components/test_provider.py): none carries the seams of a bulk
rewrite, a string literal split into two (``... and "`` / ``"arithmetic.``) inside the text."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.harness.program import REPO

PACKAGE = REPO / "components" / "tpu_training_components"
# What a rewrite that wrapped a long line as two string literals leaves inside one docstring: a
# quote closing a line after a space, and a quote opening the next.
SPLIT_LITERAL = re.compile(r' "\n[ \t]*"')


def docstrings(path: Path) -> list[tuple[int, str]]:
    """Every string statement of a module: its docstring, its classes' and functions', and the
    docstrings under fields and constants."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                found.append((statement.lineno, statement.value.value))
    return found


def split_literals(path: Path) -> list[int]:
    """The lines of the docstrings in ``path`` that hold a split literal."""
    return [line for line, text in docstrings(path) if SPLIT_LITERAL.search(text)]


def test_no_docstring_holds_a_split_string_literal():
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in split_literals(path)
    ]
    assert found == []


def test_the_check_sees_a_split_literal(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""Rules as data and "\n"arithmetic."""\n\nclass A:\n    x: int\n    """Fine."""\n')
    assert split_literals(module) == [1]
