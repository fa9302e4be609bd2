"""The folder layout is the architecture: the pure domain modules import nothing from Pulumi or
any cloud client, so they can be read, tested and reused on their own (README "Layout"). The
rules are import-linter contracts (pyproject.toml), checked here by `lint-imports`."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.harness.layout import PACKAGE
from support.harness.program import REPO

DOMAIN = sorted(path.stem for path in (PACKAGE / "domain").glob("*.py") if path.stem != "__init__")
# The contracts (pyproject.toml, [tool.importlinter]) cover the library, the stack program and
# its config, and the policy pack: each from the folder it is imported from.
SOURCES = ("components", ".", "policy")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the project at ``root``, with its contracts (pyproject.toml there)."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache", "--no-logo"],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(str(root / s) for s in SOURCES)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_domain_folder_holds_the_planning_and_decisions():
    assert {"catalogue", "recovery", "job_recovery", "recovery_rounds", "node_pool_plan"} <= set(DOMAIN)


def test_the_import_contracts_are_kept():
    """domain/ imports no Pulumi, cloud client, live client or component; live/ no component and
    no Pulumi; the components nothing of the tool (tpu_training/) or the policy pack; the tool's
    layers (cli, commands, recovery, the shared modules, the config) import only downwards,
    commands never import commands, the CLI no command itself; and no package has an import
    cycle among its modules."""
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 7 kept, 0 broken." in done.stdout


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The project's Python sources and contracts, to break one rule in."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for folder in ("components/tpu_training_components", "tpu_training", "policy/tpu_training_policies"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("components/tpu_training_components/domain/catalogue.py", "import pulumi", "domain/ is pure"),
        ("components/tpu_training_components/domain/scaling.py", "from .. import errors", "domain/ is pure"),
        (
            "components/tpu_training_components/domain/recovery.py",
            "from ..resources import reconcile",
            "domain/ is pure",
        ),
        ("components/tpu_training_components/live/tpu_api.py", "import pulumi_gcp", "live/ reads live state"),
        (
            "components/tpu_training_components/resources/tpu_vm.py",
            "from tpu_training.stack_config import derived",
            "The components know nothing",
        ),
        # Under TYPE_CHECKING, as the cycles this contract replaced were.
        (
            "tpu_training/stack_config/gke.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .stack import StackConfig",
            "No import cycles",
        ),
        ("policy/tpu_training_policies/pools.py", "from . import stack", "No import cycles"),
        ("tpu_training/commands/cost.py", "from tpu_training.commands import plan", "Commands never import"),
        (
            "tpu_training/recovery/watch_loop.py",
            "from tpu_training.commands import recover",
            "The tool's layers",
        ),
        ("tpu_training/stack_config/keys.py", "from tpu_training import offline", "The tool's layers"),
        ("tpu_training/cli.py", "from tpu_training.commands import plan", "The CLI imports no command"),
    ],
)
def test_each_contract_sees_the_import_it_forbids(project_copy, module, line, contract):
    path = project_copy / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    done = lint_imports(project_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    # (An import of a component from domain/ is also a cycle: two contracts broken.)
    assert contract in done.stdout.split("Broken contracts")[1]


CONFIG_PACKAGE = REPO / "tpu_training" / "stack_config"


def test_only_the_loader_of_the_config_package_reads_pulumi_config():
    # STYLE: only the stack's config module reads pulumi.Config, into a frozen typed object.
    readers = sorted(p.name for p in CONFIG_PACKAGE.glob("*.py") if "pulumi.Config(" in p.read_text())
    assert readers == ["loading.py"]


def test_infra_holds_the_program_alone_and_nothing_imports_it():
    """infra/ is the Pulumi program (``main: infra/``) and its requirements; the config and the
    commands are the installed ``tpu_training``, imported under that one name. The program is run,
    never imported: no module of the library or the tool names it (it is no package, so no
    import-linter contract can)."""
    assert sorted(p.name for p in (REPO / "infra").iterdir() if p.name != "__pycache__") == [
        ".venv",
        "__main__.py",
        "requirements.txt",
    ]
    # A link to the project's virtualenv, for Python dynamic providers (queued TPU VMs): their
    # plugin resolves Pulumi.yaml's `virtualenv: .venv` against `main` (infra/), not the project
    # root (pulumi/pulumi#7061, open).
    link = REPO / "infra" / ".venv"
    assert link.is_symlink() and os.readlink(link) == "../.venv"
    importers = []
    for folder in ("components", "tpu_training", "policy", "provider", "trainer"):
        for path in (REPO / folder).rglob("*.py"):
            if "venv" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if {"infra", "stack_config"} & set(_imported_modules(tree)):
                importers.append(str(path.relative_to(REPO)))
    assert importers == []


PRODUCT_FOLDERS = ("components", "tpu_training", "infra", "policy", "provider", "trainer")
MOST_LINES = 600


def test_no_product_module_is_over_600_lines():
    long = {}
    for folder in PRODUCT_FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            if "venv" in path.parts:
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MOST_LINES:
                long[str(path.relative_to(REPO))] = lines
    assert long == {}


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


TEST_ROOMS = {
    "domain",
    "live",
    "components",
    "config",
    "commands",
    "recovery",
    "trainer",
    "policy",
    "engine",
    "project",
}
"""The folders of tests, each the code it tests (README "Layout"); support/ holds fakes/ and harness/."""


def test_the_tests_live_in_rooms_that_mirror_the_code():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    rooms = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert rooms == TEST_ROOMS
    assert sorted(p.name for p in (TESTS / "support").glob("*.py")) == ["__init__.py"]


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


def _tree_as_git_sees_it(folder: Path) -> list[str]:
    """Every path under ``folder`` but Python's bytecode cache (``__pycache__``, which Python
    writes beside any module it imports unless told not to, and .gitignore leaves out)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


def test_building_the_library_leaves_the_clone_as_it_was(tmp_path):
    """`pip install ..` builds the wheel in the folder it is given: setuptools' build/ and
    *.egg-info go to a temporary folder instead (components/build_outside.py). Offline: the
    venv's own setuptools (requirements-dev.txt), no build isolation, no index."""
    source = tmp_path / "clone"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "components", source / "components", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    before = _tree_as_git_sees_it(source)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        + ["-w", str(tmp_path / "wheels"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _tree_as_git_sees_it(source) == before
    (wheel,) = (tmp_path / "wheels").glob("tpu_training_components-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tpu_training_components/domain/catalogue.py" in names
    assert not [name for name in names if name.startswith("build_outside")]  # the backend is not shipped
