"""Queued provisioning from the stack's config: `nodePools[].queuedProvisioning: true` is the one
key a stack sets; the program installs Kueue, declares the pool's queue and routes the pool's jobs
through it. The components themselves are checked in test_queued_provisioning.py (against Kueue's
CRDs and GKE's tutorial); here, what the stack wires and what its config refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.harness.crds import KUEUE, KUEUE_CRD_FILES, RELEASE, kueue_objects, schema_errors
from support.harness.program import refused, run_stack
from tpu_training_components.domain.job_manifests import KUEUE_QUEUE_LABEL
from tpu_training_components.domain.node_pool_plan import QUEUED_PROVISIONING_TAINT

POOLS = "tpu-training:nodePools"
JOBS = "tpu-training:jobs"
CLUSTER = "tpu-training:cluster"


def queued(config: dict[str, Any], **pool: Any) -> dict[str, Any]:
    """The dev stack with its v6e pool queued (a multi-host flex-start pool, one Job on it)."""
    config = copy.deepcopy(config)
    config[POOLS][0].update({"provisioning": "flex-start-queued", **pool})
    return config


def by_type(run: Any, type_: str) -> list[Any]:
    return [r for r in run.registrations if r.type == type_]


def test_one_key_queues_the_pools_jobs_and_installs_kueue(config):
    run = run_stack(queued(config, maxRunDuration="72h"))
    (pool,) = [r for r in by_type(run, "gcp:container/nodePool:NodePool") if "v6e" in r.name]
    assert pool.inputs["queuedProvisioning"] == {"enabled": True}
    # The nodes live as long as their ProvisioningRequest asks, not by the pool's own limit.
    assert "maxRunDuration" not in pool.inputs["nodeConfig"]
    (release,) = by_type(run, RELEASE)
    assert release.inputs["chart"].endswith("/kueue")
    objects = kueue_objects(run)
    assert sorted(o["kind"] for o in objects) == sorted(KUEUE_CRD_FILES)
    for manifest in objects:
        assert schema_errors(manifest, KUEUE_CRD_FILES[manifest["kind"]]) == [], manifest["kind"]
    config_object = next(o for o in objects if o["kind"] == "ProvisioningRequestConfig")
    assert config_object["spec"]["parameters"]["maxRunDurationSeconds"] == str(72 * 3600)
    (job,) = by_type(run, "kubernetes:batch/v1:Job")
    assert job.inputs["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "v6e-4x4"
    pod = job.inputs["spec"]["template"]["spec"]
    assert any(t["key"] == QUEUED_PROVISIONING_TAINT for t in pod["tolerations"])
    assert "suspend" not in job.inputs["spec"]  # Kueue's webhook suspends it; declared, it would replace


def test_the_job_waits_for_kueue_and_its_queue(config):
    # Kueue's webhook must be up to suspend the Job at creation, and its queue must exist to admit
    # it. (A dependency on a component is recorded as one on each of its resources.)
    run = run_stack(queued(config))
    (release,) = by_type(run, RELEASE)
    kueue_urns = {r.urn for r in run.registrations if r.type.startswith(KUEUE)}
    (job,) = [r for r in run.registrations if r.type == "tpu-training:gke:TpuTrainingJob"]
    assert release.urn in job.options["dependsOn"]
    assert kueue_urns <= set(job.options["dependsOn"])
    (queue,) = [r for r in run.registrations if r.type == "tpu-training:gke:QueuedProvisioning"]
    assert release.urn in queue.options["dependsOn"]


def test_each_namespace_of_the_pools_jobs_gets_a_local_queue(config):
    config = queued(config)
    second = copy.deepcopy(config[JOBS][0])
    second.update({"name": "train-research", "namespace": "research"})
    config[JOBS].append(second)
    run = run_stack(config)
    local = sorted(o["metadata"]["namespace"] for o in kueue_objects(run) if o["kind"] == "LocalQueue")
    assert local == ["default", "research"]
    cluster_queue = next(o for o in kueue_objects(run) if o["kind"] == "ClusterQueue")
    assert cluster_queue["spec"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "default",
        "research",
    ]


def test_a_stack_without_queued_pools_declares_no_kueue(config):
    run = run_stack(config)
    assert [r for r in run.registrations if r.type.startswith(KUEUE)] == []
    assert by_type(run, RELEASE) == []


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (
            lambda c: c[CLUSTER].update({"minVersion": "1.33"}),
            "tpu-training:cluster.minVersion = '1.33': GKE 1.33 is older than 1.34, the first with "
            "TPU queued provisioning, which tpu-training:nodePools[0] (v6e-4x4) uses",
        ),
        (
            lambda c: (c[POOLS][0].update({"slices": 2}), c[JOBS][0].update({"slices": 2})),
            "tpu-training:jobs[0].slices = 2 on node pool 'v6e-4x4', which has provisioning: "
            "flex-start-queued: a queued workload spans one slice (allowed: 1)",
        ),
        (
            lambda c: c[POOLS][0].update({"topology": "2x2"}),
            'tpu-training:nodePools[0].provisioning = "flex-start-queued": queued provisioning is for '
            "multi-host slices",
        ),
        (
            lambda c: c[POOLS][0].update({"queuedProvisioning": True}),
            "tpu-training:nodePools[0].queuedProvisioning = true: replaced by provisioning: write "
            "provisioning: flex-start-queued;",
        ),
    ],
    ids=["old-cluster", "multislice", "single-host", "the-old-key"],
)
def test_what_queued_provisioning_cannot_do_is_refused_by_key(config, edit, says):
    config = queued(config)
    edit(config)
    assert says in refused(config)


def test_a_newer_or_unpinned_cluster_is_accepted(config):
    for version in ("1.34", "1.35.1-gke.100", "latest"):
        config = queued(config)
        config[CLUSTER]["minVersion"] = version
        run_stack(config)
