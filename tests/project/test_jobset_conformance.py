"""The JobSet we declare, checked against references nobody on this project wrote: JobSet's own
CRD schema at v0.12.0 (tests/fixtures/jobset-v0.12.0, how it was taken: the README there), and
what xpk 1.16.0 applies for the same shapes (tests/fixtures/xpk-1.16.0), field by field, every
difference either gone or listed below with its reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.harness.crds import schema_errors
from support.harness.workloads import declared_jobset
from support.harness.xpk import xpk_jobset

SHAPES = {
    "v6e 4x4, 2 slices": dict(machine_type="ct6e-standard-4t", topology="4x4", pool_slices=2, slices=2),
    "v5p 2x2x4, 4 slices": dict(machine_type="ct5p-hightpu-4t", topology="2x2x4", pool_slices=4, slices=4),
    "v5e 4x4 spot, 2 slices": dict(
        machine_type="ct5lp-hightpu-4t",
        topology="4x4",
        pool_slices=2,
        slices=2,
        pool={"flex_start": False, "spot": True},
    ),
    "v6e 2x4, 1 slice": dict(machine_type="ct6e-standard-4t", topology="2x4", pool_slices=1, slices=1),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_jobset_is_valid_against_jobsets_own_crd_schema(shape):
    assert schema_errors(declared_jobset(**SHAPES[shape])) == []


def test_jobset_with_every_option_is_valid_against_the_crd_schema():
    jobset = declared_jobset(max_restarts=0, queue_name="tpu-queue", privileged=True, labels={"team": "a"})
    assert schema_errors(jobset) == []


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda js: js["spec"].update(replicatedJob=js["spec"].pop("replicatedJobs")), "replicatedJob"),
        (lambda js: js["spec"]["failurePolicy"]["rules"][0].update(action="Restart"), "Restart"),
        (lambda js: js["spec"]["failurePolicy"]["rules"][0].pop("name"), "name"),
        (lambda js: js["spec"]["failurePolicy"].update(maxRestarts="3"), "3"),
        (lambda js: js["spec"]["replicatedJobs"][0].update(replicas=None), "None"),
    ],
)
def test_the_schema_check_refuses_what_the_api_server_would(mutate, complaint):
    """The validator is not a rubber stamp: one mutation of a valid JobSet, one error."""
    jobset = copy.deepcopy(declared_jobset())
    mutate(jobset)
    errors = schema_errors(jobset)
    assert errors and complaint in " ".join(errors)


# --- xpk 1.16.0, field by field -------------------------------------------------------------------

CHILD = "/spec/replicatedJobs/0/template/spec"
POD = f"{CHILD}/template/spec"
CONTAINER = f"{POD}/containers/0"
OURS_ONLY_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/part-of", "recovery-generation")

DIFFERENCES = {
    # --- names and the workload itself
    "/metadata/name": "the job's own name (xpk: --workload=demo)",
    "/metadata/namespace": "we name the namespace; xpk applies to kubectl's current one",
    f"{CONTAINER}/name": "our container is 'trainer' in Jobs and JobSets alike",
    f"{CONTAINER}/image": "the job's own image (xpk: --docker-image=python:3.11)",
    f"{CONTAINER}/command": "the job's own command; xpk wraps --command in a bash script that logs "
    "start and end and forwards SIGTERM; ours runs as given, and must resume from CHECKPOINT_DIR",
    # --- labels and annotations
    **{
        f"{where}/labels/{label}": "our own labels: the run's name, recovery's list selector and the "
        "recovery generation (README 'Recovery')"
        for where in ("/metadata", f"{CHILD}/template/metadata")
        for label in OURS_ONLY_LABELS
    },
    "/metadata/labels/xpk.google.com/workload": "xpk's own label; we label by app.kubernetes.io/name",
    f"{CHILD}/template/metadata/labels/xpk.google.com/workload": "as above",
    f"{CHILD}/template/metadata/annotations": "xpk prints an empty annotations block (null)",
    "/metadata/annotations/pulumi.com/skipAwait": "`pulumi up` returns once the JobSet is accepted",
    "/metadata/labels/kueue.x-k8s.io/queue-name": "xpk always queues through Kueue; we only with "
    "a queue (queued provisioning), and otherwise run JobSets without Kueue",
    # --- failure policy
    "/spec/failurePolicy/maxRestarts": "xpk: 0 by default (--max-restarts); ours 3 (maxRestarts), "
    "so a real failure is retried in the cluster before `pulumi up` replaces the JobSet",
    "/spec/failurePolicy/rules/0/action": "xpk fails the JobSet on a PodFailurePolicy failure (an "
    "application exit code); ours makes that reason mean a disruption, restarted without counting",
    "/spec/failurePolicy/rules/0/name": "JobSet v0.12.0 requires a rule name (its CRD); xpk's "
    "rule has none and is defaulted by JobSet's webhook",
    f"{CHILD}/podFailurePolicy/rules/0/onExitCodes/containerName": "xpk's FailJob rule matches exit "
    "codes (NotIn 42 and 127-255: an application error); ours matches the DisruptionTarget "
    "condition, and every real failure fails through backoffLimit 0",
    f"{CHILD}/podFailurePolicy/rules/0/onExitCodes/operator": "as above",
    f"{CHILD}/podFailurePolicy/rules/0/onExitCodes/values": "as above",
    f"{CHILD}/podFailurePolicy/rules/0/onPodConditions": "as above (xpk: empty)",
    f"{CHILD}/podFailurePolicy/rules/0/onPodConditions/0/type": "as above",
    f"{CHILD}/podFailurePolicy/rules/0/onPodConditions/0/status": "as above",
    "/spec/ttlSecondsAfterFinished": "left out on purpose: a finished JobSet deleted after 12 h "
    "would read as gone to recovery, which would run the finished training again",
    # --- the child Job and its Pods
    "/spec/network/enableDNSHostnames": "JobSet's default (true, its webhook), written out",
    f"{CHILD}/completionMode": "Indexed, as seed 002's multi-host Job: each Pod knows its worker "
    "index, and JobSet's webhook validates Pod names for Indexed Jobs",
    f"{CONTAINER}/env": "xpk prints an empty env (null); GKE injects TPU_WORKER_ID, "
    "TPU_WORKER_HOSTNAMES and the MEGASCALE_* variables (module docstring of jobset_manifests)",
    f"{CONTAINER}/env/0/name": "CHECKPOINT_DIR: names the run, in the template as in Jobs",
    f"{CONTAINER}/env/0/value": "as above",
    f"{CONTAINER}/envFrom/0/configMapRef/name": "the run parameters, read at container start, so "
    "tuning never replaces a running JobSet",
    f"{CONTAINER}/ports": "the TPU ports a Job's multi-host Pods declare (8471, 8431)",
    f"{CONTAINER}/resources/requests/google.com/tpu": "requests written out (Kubernetes defaults "
    "them to the limits)",
    f"{CONTAINER}/securityContext/privileged": "privileged only on request (tpu-training/privileged "
    "opt-in): the TPU device plugin exposes the chips without it",
    f"{CONTAINER}/volumeMounts/0/mountPath": "xpk mounts a memory /dev/shm; not needed by the trainer "
    "contract here (a trainer that needs it brings it in its image's settings); left out",
    f"{CONTAINER}/volumeMounts/0/name": "as above",
    f"{POD}/volumes/0/emptyDir/medium": "as above",
    f"{POD}/volumes/0/name": "as above",
    f"{POD}/hostNetwork": "Pod networking as for Jobs (ports declared, Services work); xpk and GKE's "
    "multislice example use the host network for DCN throughput: not offered yet",
    f"{POD}/dnsPolicy": "follows hostNetwork (ClusterFirstWithHostNet is for host-network Pods)",
    f"{POD}/imagePullSecrets/0/name": "xpk prints a secret named None when none is given",
    f"{POD}/priorityClassName": "xpk's own PriorityClass 'medium', which its cluster create installs",
    f"{POD}/schedulerName": "the default scheduler, written out by xpk",
    f"{POD}/serviceAccountName": "our Workload Identity service account (xpk: none given)",
    f"{POD}/terminationGracePeriodSeconds": "Kubernetes' default (30 s), written out by xpk",
    f"{POD}/tolerations/0/key": "GKE adds the google.com/tpu toleration itself to Pods that request "
    "TPUs (our Jobs declare none either)",
    f"{POD}/tolerations/0/operator": "as above",
    f"{POD}/nodeSelector/tpu-training/node-pool": "our pool's own node label: only this stack's pool",
}
FLEX_SELECTOR = {
    f"{POD}/nodeSelector/cloud.google.com/gke-flex-start": "xpk selects no capacity label without "
    "node auto-provisioning; ours selects the pool's (see test_conformance)"
}


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf paths; a one-item list of objects (the replicated job, the container, a rule) is
    followed as its item, any other list compared whole."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{path}/{key}"))
        return out or {path: {}}
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        return _flat(value[0], f"{path}/0")
    return {path: value}


XPK_SHAPES = {
    "workload-create-v6e-16-flex-2slices.txt": ("v6e 4x4, 2 slices", {}, FLEX_SELECTOR),
    "workload-create-v5p-32-flex-4slices.txt": ("v5p 2x2x4, 4 slices", {}, FLEX_SELECTOR),
    "workload-create-v6e-16-spot-2slices-NAPsim.txt": (
        "v6e 4x4, 2 slices",
        {"pool": {"flex_start": False, "spot": True}},
        {},
    ),
}


@pytest.mark.parametrize("fixture", XPK_SHAPES)
def test_jobset_matches_xpks_field_by_field_or_the_difference_has_a_reason(fixture):
    shape, extra, more = XPK_SHAPES[fixture]
    theirs, ours = _flat(xpk_jobset(fixture)), _flat(declared_jobset(**{**SHAPES[shape], **extra}))
    differing = {path for path in theirs.keys() | ours.keys() if theirs.get(path, "-") != ours.get(path, "-")}
    listed = {**DIFFERENCES, **more}
    assert sorted(differing - listed.keys()) == [], "a difference with no reason"
    assert sorted(listed.keys() - differing) == [], "a listed difference that is gone"


@pytest.mark.parametrize("fixture", XPK_SHAPES)
def test_xpks_jobsets_meet_the_same_crd_schema_but_for_its_empty_blocks_and_the_rule_name(fixture):
    """The validator judges xpk's JobSets as it judges ours, and finds exactly what xpk prints
    that JobSet v0.12.0's schema does not take as written: the rule name it requires (JobSet's
    webhook defaults it) and the blocks xpk prints empty, which YAML reads as null."""
    assert schema_errors(xpk_jobset(fixture)) == [
        "spec/failurePolicy/rules/0: 'name' is a required property",
        "spec/replicatedJobs/0/template/spec/template/metadata/annotations: None is not of type 'object'",
        "spec/replicatedJobs/0/template/spec/template/spec/containers/0/env: None is not of type 'array'",
        "spec/replicatedJobs/0/template/spec/template/spec/serviceAccountName: None is not of type 'string'",
    ]
