"""`tpu-training plan --compare-to` against what the engine previews, edit by edit: the offline
plan's prediction of what `pulumi up` would do to a deployed stack, and the real engine's preview
of the same edit (with whichever providers the project runs: the doubles, or the real
pulumi-kubernetes). Used by tests/engine/test_engine.py and test_engine_kube_provider.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.harness.engine.engine import EngineProject
from support.harness.engine.stacks import GKE_CONFIG
from support.harness.in_process import run_plan

_JOB = GKE_CONFIG["tpu-training:jobs"][0]
_POOL = GKE_CONFIG["tpu-training:nodePools"][0]
GKE_DOCUMENTED_EDITS: dict[str, tuple[str, Any]] = {
    # The GKE edits of docs/offline-plan.md's table, and a tuning edit that must restart nothing.
    "image": (
        "tpu-training:jobs",
        [dict(_JOB, image="us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:v2")],
    ),
    "command": ("tpu-training:jobs", [dict(_JOB, command=["python3", "/tmp/trainer/train.py", "--v2"])]),
    "env": ("tpu-training:jobs", [dict(_JOB, env={"XLA_FLAGS": "--xla_dump_to=/tmp"})]),
    "maxRunDuration": ("tpu-training:nodePools", [dict(_POOL, maxRunDuration="72h")]),
    # The pool becomes a capacity ladder: a ComputeClass and a pool per rung, the Job selecting the class.
    "provisioning ladder": ("tpu-training:nodePools", [dict(_POOL, provisioning=["spot", "flex-start"])]),
    "labels": ("tpu-training:labels", {"team": "research"}),
    "costSeconds (tuning)": ("tpu-training:checkpointing", {"costSeconds": 120}),
}
_ENGINE_ACTIONS = {
    "update": "update",
    "replace": "replace",
    "create-replacement": "replace",
    "delete-replaced": "replace",
    "create": "create",
    "delete": "delete",
}


def stack_urn(stack: str) -> str:
    return f"urn:pulumi:{stack}::tpu-training::pulumi:pulumi:Stack::tpu-training-{stack}"


def write_base_plan(project: EngineProject, stack: str, base: Path) -> None:
    """The plan of what is deployed now, as the base a later --compare-to compares with."""
    planned = run_plan("--stack", stack, "--json", str(base), cwd=project.root)
    assert planned.returncode in (0, 1), planned.stdout[-3000:] + planned.stderr[-3000:]


def predicted_changes(project: EngineProject, stack: str, base: Path) -> dict[str, str]:
    """What --compare-to says `pulumi up` would do, by URN."""
    # In this process (support.harness.in_process): the prediction is what the test compares.
    done = run_plan("--stack", stack, "--compare-to", str(base), "--json", "-", cwd=project.root)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    changes = json.loads(done.stdout)["changes"]["resources"]
    return {change["urn"]: change["action"] for change in changes if change["urn"] != stack_urn(stack)}


def previewed_changes(project: EngineProject, stack: str) -> dict[str, str]:
    """What the engine's `pulumi preview` says it would do, by URN, for what --compare-to speaks of."""
    steps = project.json("preview", "--stack", stack).get("steps", [])
    found: dict[str, str] = {}
    for step in steps:
        action = _ENGINE_ACTIONS.get(step["op"])
        # What reaches the cloud or the cluster: --compare-to speaks of custom resources only.
        custom = (step.get("newState") or step.get("oldState") or {}).get("custom")
        # A provider updated in a preview only because its inputs are not known yet (the
        # Kubernetes provider's kubeconfig, made from the outputs of a cluster being updated) is
        # not a change --compare-to lists: the update leaves the provider as it was. A provider
        # replacement is compared like any other.
        unknown_inputs_only = step["op"] == "update" and step["urn"].split("::")[2].split("$")[-1].startswith(
            "pulumi:providers:"
        )
        if action is not None and custom and not unknown_inputs_only:
            found[step["urn"]] = action
    return found


def compare_each(
    project: EngineProject, stack: str, edits: dict[str, tuple[str, Any]], base: Path
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """For each edit, applied alone to the deployed stack's file: where --compare-to's prediction
    and the engine's preview disagree, and what the engine previewed for each edit."""
    write_base_plan(project, stack, base)
    stack_file = project.root / f"Pulumi.{stack}.yaml"
    deployed = stack_file.read_text()
    disagreements, previews = {}, {}
    for edit, (key, value) in edits.items():
        project.set_config(stack, key, value)
        predicted, previews[edit] = predicted_changes(project, stack, base), previewed_changes(project, stack)
        assert predicted, f"{edit}: the plan predicts no change"
        if predicted != previews[edit]:
            disagreements[edit] = {"--compare-to": predicted, "engine": previews[edit]}
        stack_file.write_text(deployed)
    return disagreements, previews
