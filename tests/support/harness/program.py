"""Run components or the whole stack program under recording mocks, and the commands in a
subprocess as a user runs them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from tpu_training import offline, project_files

REPO = project_files.REPO_ROOT
INFRA = REPO / "infra"


def run_components(body: Callable[[], Any], stack: str = "test") -> offline.ProgramRun:
    """Run a few component constructors under mocks and return what they registered."""
    return offline.run(body, project="tpu-training", stack=stack)


def dev_config() -> dict[str, Any]:
    """The dev stack's config as Python values (what Pulumi.yaml + Pulumi.dev.yaml give)."""
    values, _, _ = project_files.stack_config(project_files.load_project(REPO), "dev")
    decoded: dict[str, Any] = {}
    for key, text in values.items():
        try:
            decoded[key] = json.loads(text)
        except json.JSONDecodeError:
            decoded[key] = text
    return decoded


def multislice(config: dict[str, Any], **job: Any) -> dict[str, Any]:
    """The dev config with its pool at two slices and its Job spanning them."""
    config = copy.deepcopy(config)
    pool = config["tpu-training:nodePools"][0]
    pool["slices"] = 2
    config["tpu-training:jobs"][0].update({"slices": 2, **job})
    return config


def run_stack(
    config: dict[str, Any], stack: str = "dev", previous_outputs: dict[str, Any] | None = None
) -> offline.ProgramRun:
    """Run the real infra/__main__.py with this config (Python values, encoded as the CLI does)."""
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    if str(INFRA) not in sys.path:
        sys.path.insert(0, str(INFRA))
    return offline.run(
        offline.program_body(INFRA),
        project="tpu-training",
        stack=stack,
        config=encoded,
        previous_outputs=previous_outputs,
    )


def changed_registrations(before: offline.ProgramRun, after: offline.ProgramRun) -> list[str]:
    """Names of the resources whose inputs or options differ between two runs of one stack."""
    return [
        a.name
        for a, b in zip(before.registrations, after.registrations, strict=True)
        if (a.inputs, a.options) != (b.inputs, b.options)
    ]


def refused(config: dict[str, Any]) -> str:
    """The message of the error the stack program stops with for this config."""
    import pulumi

    with pytest.raises(pulumi.RunError) as err:
        run_stack(config)
    return str(err.value)


TPU_TRAINING = str(Path(sys.executable).parent / "tpu-training")
"""The `tpu-training` command README command 1 installs beside this interpreter."""


def run_plan(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, command: str = "plan"
) -> subprocess.CompletedProcess[str]:
    """`tpu-training plan ARGS` (or another ``command``) in a subprocess, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(
        [TPU_TRAINING, command, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
