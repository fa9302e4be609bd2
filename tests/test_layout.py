"""The folder layout is the architecture: the pure domain modules import nothing from Pulumi or
any cloud client, so they can be read, tested and reused on their own (README "Layout")."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

PURE = (
    "catalogue",
    "tpu_availability",
    "scaling",
    "naming",
    "recovery",
    "network_plan",
    "node_pool_plan",
    "maintenance_window",
    "job_manifests",
    "job_recovery",
    "recovery_rounds",
    "goodput",
)
COMPONENTS = REPO / "components"
FORBIDDEN = ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "kubernetes", "grpc")


def imported_sdks(module: str) -> list[str]:
    """The SDK and client modules that importing ``tpu_training_components.<module>`` loads, in a
    fresh interpreter. The package's ``__init__`` imports the components (and so Pulumi): the
    package is made by hand here, so that only the module itself and what it imports load."""
    probe = f"""
import importlib, sys, types
package = types.ModuleType("tpu_training_components")
package.__path__ = [{str(COMPONENTS)!r}]
sys.modules["tpu_training_components"] = package
importlib.import_module("tpu_training_components.{module}")
sdks = [n for n in sys.modules if n.split(".")[0] in {FORBIDDEN!r} or n.startswith("google.cloud")]
print(",".join(sorted(sdks)))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [name for name in done.stdout.strip().split(",") if name]


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_sdk(module):
    assert imported_sdks(module) == []


def test_the_probe_sees_an_sdk_import():
    # reconcile wires the pure decisions to Pulumi: the probe must notice.
    assert "pulumi" in imported_sdks("reconcile")
