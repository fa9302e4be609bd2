"""What importing one module of the package loads, in a fresh interpreter: the check that keeps
the pure domain modules free of Pulumi and every cloud client."""

from __future__ import annotations

import subprocess
import sys

from support.harness.program import REPO

PACKAGE = REPO / "components" / "tpu_training_components"
FORBIDDEN = ("pulumi", "pulumi_gcp", "pulumi_kubernetes", "kubernetes", "grpc")
"""Top-level modules a pure module must not load (and ``google.cloud.*``)."""


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
