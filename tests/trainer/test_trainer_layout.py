"""The reference trainer's folder as the stacks ship it: flat modules that the stack uploads as
they are into one folder (``code/`` in the bucket, then ``/opt/trainer/`` or ``/tmp/trainer/``),
where ``python3 train.py`` imports them as top-level modules (docs/trainer.md, "Where it is").
That puts the folder first on ``sys.path``, before the standard library's and the installed
packages' folders, so a module named like one of theirs would shadow it for JAX and Orbax too.
That every module is uploaded is tests/config/test_portable_stack.py's to check."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys

import pytest
from support.harness.sandbox import TRAINER

MODULES = sorted(TRAINER.glob("*.py"))
LONGEST = 400
"""Lines: each module is to be readable alone."""
DISTRIBUTED = importlib.metadata.packages_distributions()
"""Top-level modules of the installed packages; the test environment holds the trainer's pinned
requirements (requirements-dev.txt)."""


def imported(path) -> set[str]:
    """The top-level names of every module ``path`` imports, also inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path.name}: a relative import, which a flat folder cannot have"
            names.add(node.module.partition(".")[0])
    return names


def test_the_folder_is_flat_modules_and_the_requirements():
    assert [path.name for path in TRAINER.iterdir() if path.name != "__pycache__"] and all(
        path.suffix == ".py" or path.name == "requirements.txt"
        for path in TRAINER.iterdir()
        if path.name != "__pycache__"
    ), sorted(path.name for path in TRAINER.iterdir())
    assert not (TRAINER / "__init__.py").exists()  # a script's folder, not a package


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_each_module_is_short_enough_to_read_alone(path):
    lines = len(path.read_text().splitlines())
    assert lines <= LONGEST, f"{path.name} has {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_no_module_is_named_like_one_it_would_shadow(path):
    name = path.stem
    assert name not in sys.stdlib_module_names
    assert name not in DISTRIBUTED
    assert importlib.util.find_spec(name) is None, f"{name} is importable here without trainer/"


def test_the_trainer_imports_only_itself_its_requirements_and_the_standard_library():
    # Uploaded as it is: the project's library, its tests and Pulumi are not there on a VM.
    siblings = {path.stem for path in MODULES}
    for path in MODULES:
        for name in imported(path):
            assert name in siblings or name in sys.stdlib_module_names or name in DISTRIBUTED, (
                f"{path.name} imports {name}"
            )
            assert name not in ("tpu_training_components", "infra", "support", "pulumi"), path.name
    assert {"outcomes", "settings", "hosts", "checkpoints", "model", "progress"} <= imported(
        TRAINER / "train.py"
    )
