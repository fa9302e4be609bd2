"""The folder layout is the architecture: the pure domain modules import nothing from Pulumi or
any cloud client, so they can be read, tested and reused on their own (README "Layout"). The
rules are import-linter contracts (pyproject.toml), checked here by `lint-imports`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "components" / "tpu_training_components"
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
    no Pulumi; the components nothing of infra/ or the policy pack; and no package has an import
    cycle among its modules."""
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The project's Python sources and contracts, to break one rule in."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for folder in ("components/tpu_training_components", "infra", "policy/tpu_training_policies"):
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
            "from infra.stack_config import derived",
            "The components know nothing",
        ),
        # Under TYPE_CHECKING, as the cycles this contract replaced were.
        (
            "infra/stack_config/gke.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .stack import StackConfig",
            "No import cycles",
        ),
        ("policy/tpu_training_policies/pools.py", "from . import stack", "No import cycles"),
    ],
)
def test_each_contract_sees_the_import_it_forbids(project_copy, module, line, contract):
    path = project_copy / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    done = lint_imports(project_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    # (An import of a component from domain/ is also a cycle: two contracts broken.)
    assert contract in done.stdout.split("Broken contracts")[1]


def test_old_module_paths_are_the_moved_modules():
    from tpu_training_components import recovery
    from tpu_training_components.domain import recovery as moved
    from tpu_training_components.reconcile import GENERATIONS_OUTPUT

    assert recovery is moved and GENERATIONS_OUTPUT == "recoveryGenerations"


CONFIG_PACKAGE = REPO / "infra" / "stack_config"


def test_only_the_loader_of_the_config_package_reads_pulumi_config():
    # STYLE: only the stack's config module reads pulumi.Config, into a frozen typed object.
    readers = sorted(p.name for p in CONFIG_PACKAGE.glob("*.py") if "pulumi.Config(" in p.read_text())
    assert readers == ["loading.py"]
