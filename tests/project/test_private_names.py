"""No module reaches into another's private names: not into another module of this project, not
into the Pulumi SDK, not into a client library. A private name can change in any release without
notice; where one is unavoidable it lives in one module, ``library_internals``, with the reason
(STYLE "What to avoid")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("components", "infra", "provider", "policy", "trainer", "benchmarks")
THE_DOCUMENTED_PLACE = REPO / "components" / "tpu_training_components" / "library_internals.py"
"""The one module allowed to use private names of the SDK and the client libraries."""

_ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_local_names(tree: ast.Module) -> set[str]:
    """Classes and functions defined at the top of the module: their private members are its own."""
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _own(base: ast.expr, local: set[str]) -> bool:
    """Whether ``base._x`` reads a private member of this module's own code."""
    if isinstance(base, ast.Name):
        return base.id in ("self", "cls") or base.id in local
    # super()._x: the class's own base, which this module defines or which is the project's.
    return isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every private name ``source`` takes from elsewhere."""
    tree = ast.parse(source)
    local = _module_local_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if any(_private(part) for part in (node.module or "").split(".")):
                found.append((node.lineno, f"from {module} import ... (a private module)"))
            found.extend(
                (node.lineno, f"from {module} import {alias.name}")
                for alias in node.names
                if _private(alias.name)
            )
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, f"import {alias.name} (a private module)")
                for alias in node.names
                if any(_private(part) for part in alias.name.split("."))
            )
        elif isinstance(node, ast.Attribute) and _private(node.attr) and not _own(node.value, local):
            found.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_FUNCTIONS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and not _own(node.args[0], local)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _modules() -> list[Path]:
    return sorted(
        path for folder in FOLDERS for path in (REPO / folder).rglob("*.py") if "venv" not in path.parts
    )


def test_no_module_takes_a_private_name_from_elsewhere():
    uses = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in _modules()
        if path != THE_DOCUMENTED_PLACE
        for line, what in private_uses(path.read_text())
    ]
    assert not uses, "private names taken from other modules (use a public API, or library_internals):\n" + (
        "\n".join(uses)
    )


def test_the_documented_place_says_why_for_each_private_name():
    """Each function there that touches a private name says why in its docstring, with the test
    that fails without it (or the benchmark that measured what it saves)."""
    tree = ast.parse(THE_DOCUMENTED_PLACE.read_text())
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    touching = [f for f in functions if private_uses(ast.unparse(f))]
    assert touching, "library_internals holds no private name any more: remove it and this test"
    for function in touching:
        docstring = ast.get_docstring(function) or ""
        assert "tests/" in docstring or "benchmarks/" in docstring, (
            f"{function.name}: say why, and which test fails (or which figure worsens) without it"
        )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from pulumi.runtime.sync_await import _sync_await",
            ["from pulumi.runtime.sync_await import _sync_await"],
        ),
        ("from .loading import _KEYS", ["from .loading import _KEYS"]),
        (
            "from pulumi.runtime._context import x",
            ["from pulumi.runtime._context import ... (a private module)"],
        ),
        ("import google._internal", ["import google._internal (a private module)"]),
        ("rpc._special_sig_key", ["rpc._special_sig_key"]),
        ("client.transport._session.hooks", ["client.transport._session"]),
        ("os._exit(0)", ["os._exit"]),
        ("getattr(value, '_data', None)", ["getattr(value, '_data', None)"]),
        ("setattr(module, '_get_stack_trace', f)", ["setattr(module, '_get_stack_trace', f)"]),
    ],
)
def test_the_check_finds_a_private_name_taken_from_elsewhere(source, expected):
    assert [what for _, what in private_uses(source)] == expected


@pytest.mark.parametrize(
    "source",
    [
        "self._cache",
        "cls._registry",
        "super()._check()",
        "class _Rule:\n    _all = []\n_Rule._all",
        "def _helper(): pass\n_helper.__name__",
        "from .domain import recovery as _recovery",
        "import google.rpc.status_pb2 as _status",
        "from __future__ import annotations",
        "value.__class__",
    ],
)
def test_the_check_leaves_a_modules_own_private_names_alone(source):
    assert private_uses(source) == []
