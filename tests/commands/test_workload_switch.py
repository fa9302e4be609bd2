"""A run that changes kind (issue 26 item 5): `slices` 1 -> 2 turns a Job into a JobSet and 2 -> 1
back, and a pool's slices grow or shrink under it. The offline plan before and after, compared as
the engine compares them (URNs, then aliases: pulumi/pulumi v3.259.0, commit
0ac56e876614aedf12771d73ef7e80959b8a6fd4, pkg/resource/deploy/step_generator.go
getOldResource, generateAliases, inheritedChildAlias), must never create a Kubernetes object or
IAM member while deleting the same one: pulumi-kubernetes refuses to create an object that exists
("The resource already exists in the cluster", provider/pkg/await/await.go Creation at 94977969),
or, upserting, the later delete removes it; a deleted IAM member revokes what the new one grants."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.harness.program import dev_config, run_stack
from tpu_training_components.domain.change_impact import ResourceChange

from tpu_training import plan_compare, plan_output

JOB, JOBSET = "kubernetes:batch/v1:Job", "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def stack(pool_slices: int, job_slices: int) -> dict[str, Any]:
    config = copy.deepcopy(dev_config())
    config["tpu-training:nodePools"][0]["slices"] = pool_slices
    config["tpu-training:jobs"][0]["slices"] = job_slices
    return plan_output.plan_document(run_stack(config))


def identity(resource: dict[str, Any]) -> tuple[Any, ...]:
    """What the cloud or cluster knows an object by: a Kubernetes object's kind, namespace and
    name; an IAM member's resource, role and member; anything else its type and name."""
    inputs = resource["inputs"]
    if resource["type"].startswith("kubernetes:") and "metadata" in inputs:
        metadata = inputs["metadata"]
        return (inputs.get("kind"), metadata.get("namespace", "default"), metadata.get("name"))
    if "IAMMember" in resource["type"]:
        target = inputs.get("serviceAccountId") or inputs.get("bucket") or inputs.get("project")
        return ("iam", target, inputs.get("role"), inputs.get("member"))
    return (resource["type"], inputs.get("name", resource["name"]))


def collisions(base: dict[str, Any], new: dict[str, Any], changes: list[ResourceChange]) -> set[Any]:
    by_urn = {r["urn"]: r for r in [*base["resources"], *new["resources"]]}
    created = {identity(by_urn[c.urn]) for c in changes if c.action == "create"}
    deleted = {identity(by_urn[c.urn]) for c in changes if c.action == "delete"}
    return created & deleted


PLANS: dict[tuple[int, int], dict[str, Any]] = {}


def planned(pool_slices: int, job_slices: int) -> dict[str, Any]:
    key = (pool_slices, job_slices)
    if key not in PLANS:
        PLANS[key] = stack(pool_slices, job_slices)
    return PLANS[key]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((2, 1), (2, 2)),  # the Job becomes a JobSet on the same pool
        ((2, 2), (2, 1)),  # and back
        ((1, 1), (2, 2)),  # pool and run grow together
        ((2, 2), (1, 1)),  # and shrink
        ((1, 1), (2, 1)),  # the pool grows under a running Job
        ((2, 1), (1, 1)),  # and shrinks
    ],
)
def test_no_object_is_created_and_deleted_in_one_update(before, after):
    base, new = planned(*before), planned(*after)
    changes = plan_compare.compare(base, new)
    assert collisions(base, new, changes) == set()


def _by_name(changes: list[ResourceChange]) -> dict[str, ResourceChange]:
    return {c.name: c for c in changes}


@pytest.mark.parametrize(("before", "after", "old", "new"), [(1, 2, JOB, JOBSET), (2, 1, JOBSET, JOB)])
def test_the_run_keeps_its_identity_and_replaces_its_workload_old_one_first(before, after, old, new):
    changes = _by_name(plan_compare.compare(planned(2, before), planned(2, after)))
    # Found at their deployed URNs under the other kind of component: diffed, not re-created.
    for name in (
        "train-v6e-workload-identity",
        "train-v6e-ksa",
        "train-v6e-run-parameters",
        "train-v6e-hosts",
    ):
        assert changes[name].previous_urn, name
        assert changes[name].action in ("same", "update"), (name, changes[name])
    assert changes["train-v6e-workload-identity"].action == "same"
    # The Service keeps its name; its selector follows the kind, in place.
    assert changes["train-v6e-hosts"].action == "update"
    workload = changes["train-v6e-jobset" if new == JOBSET else "train-v6e-job"]
    assert (workload.type, workload.action, workload.delete_first) == (new, "replace", True)
    assert workload.previous_urn.endswith(f"{old}::train-v6e-{'job' if old == JOB else 'jobset'}")
    assert workload.restarts_training
    assert not [c for c in changes.values() if c.action in ("create", "delete") and c.type in (JOB, JOBSET)]


def test_without_the_aliases_the_same_switch_would_collide():
    # The comparison is what finds the collision: with every alias taken out of the new plan, the
    # run's objects are created under the new component and deleted under the old one.
    base, new = planned(2, 1), copy.deepcopy(planned(2, 2))
    for resource in new["resources"]:
        resource["options"]["aliases"] = []
    assert {("ServiceAccount", "default", "train-v6e"), ("iam",)} & {
        c[:3] if c[0] != "iam" else ("iam",) for c in collisions(base, new, plan_compare.compare(base, new))
    }
