"""The folder layout is the architecture: the pure domain modules import nothing from Pulumi or
any cloud client, so they can be read, tested and reused on their own (README "Layout")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

PACKAGE = REPO / "components" / "tpu_training_components"
DOMAIN = sorted(path.stem for path in (PACKAGE / "domain").glob("*.py") if path.stem != "__init__")
FORBIDDEN = ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "kubernetes", "grpc")


def imported_sdks(module: str) -> list[str]:
    """The SDK and client modules that importing ``tpu_training_components.<module>`` loads, in a
    fresh interpreter. The package's ``__init__`` imports the components (and so Pulumi): the
    package is made by hand here, so that only the module itself and what it imports load."""
    probe = f"""
import importlib, sys, types
package = types.ModuleType("tpu_training_components")
package.__path__ = [{str(PACKAGE)!r}]
sys.modules["tpu_training_components"] = package
importlib.import_module("tpu_training_components.{module}")
sdks = [n for n in sys.modules if n.split(".")[0] in {FORBIDDEN!r} or n.startswith("google.cloud")]
print(",".join(sorted(sdks)))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [name for name in done.stdout.strip().split(",") if name]


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
