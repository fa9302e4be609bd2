"""The folder layout is the architecture: the pure domain modules import nothing from Pulumi or
any cloud client, so they can be read, tested and reused on their own (README "Layout")."""

from __future__ import annotations

import ast

import pytest
from support.layout import PACKAGE, imported_sdks
from support.program import REPO

DOMAIN = sorted(path.stem for path in (PACKAGE / "domain").glob("*.py") if path.stem != "__init__")


def test_the_domain_folder_holds_the_planning_and_decisions():
    assert {"catalogue", "recovery", "job_recovery", "recovery_rounds", "node_pool_plan"} <= set(DOMAIN)


@pytest.mark.parametrize("module", DOMAIN)
def test_every_domain_module_imports_no_sdk(module):
    assert imported_sdks(f"domain.{module}") == []


def test_the_probe_sees_an_sdk_import():
    # reconcile wires the pure decisions to Pulumi: the probe must notice.
    assert "pulumi" in imported_sdks("resources.reconcile")


def test_the_live_clients_are_apart_from_the_components():
    # The API clients load no Pulumi: a watcher or a script can read live state without it.
    for module in ("live.tpu_api", "live.kube_api"):
        assert not [m for m in imported_sdks(module) if m.split(".")[0].startswith("pulumi")], module


CONFIG_PACKAGE = REPO / "infra" / "stack_config"


def test_only_the_loader_of_the_config_package_reads_pulumi_config():
    # STYLE: only the stack's config module reads pulumi.Config, into a frozen typed object.
    readers = sorted(p.name for p in CONFIG_PACKAGE.glob("*.py") if "pulumi.Config(" in p.read_text())
    assert readers == ["loading.py"]


# --- the tests themselves: helpers in tests/support/, fixtures and hooks in conftest.py ---------

TESTS = REPO / "tests"


def _imported_modules(tree: ast.Module) -> list[str]:
    """The top-level name of every module ``tree`` imports, anywhere in it (in a function too)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    return names


def test_no_test_module_is_imported_as_a_helper():
    # A test module is what pytest collects; what tests share is in support/, so a test module
    # can change, or go, without breaking another one.
    offenders = sorted(
        f"{path.relative_to(TESTS)} imports {name}"
        for path in TESTS.rglob("*.py")
        for name in _imported_modules(ast.parse(path.read_text(), str(path)))
        if name == "conftest" or name.startswith("test_")
    )
    assert offenders == []


def _is_fixture(decorator: ast.expr) -> bool:
    """``@pytest.fixture`` or ``@pytest.fixture(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def conftest_helpers(source: str) -> list[str]:
    """What a conftest.py defines at its top level beside fixtures and pytest's hooks: helper
    functions, classes, named constants."""
    helpers = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not (node.name.startswith("pytest_") or any(map(_is_fixture, node.decorator_list))):
                helpers.append(node.name)
        elif isinstance(node, ast.ClassDef):
            helpers.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            # A name it binds; not a store into something else (``os.environ[...] = ...``).
            for target in targets:
                bound = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                helpers += [name.id for name in bound if isinstance(name, ast.Name)]
    return helpers


def test_conftest_holds_fixtures_and_hooks_only():
    assert conftest_helpers((TESTS / "conftest.py").read_text()) == []


def test_the_conftest_check_sees_a_helper():
    source = """
import os, pytest
os.environ["A"] = "1"
X = 1
@pytest.fixture(scope="session")
def f(): ...
def pytest_configure(config): ...
def run(): ...
class Fake: ...
"""
    assert conftest_helpers(source) == ["X", "run", "Fake"]
