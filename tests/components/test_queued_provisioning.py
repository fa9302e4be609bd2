"""Issue 20 item 4: flex-start with queued provisioning, through Kueue, as an option of a pool.

Checked against references nobody on this project wrote:

- every Kueue object against Kueue v0.19.2's own CRD schemas (tests/fixtures/kueue-v0.19.2, how
  they were taken: the README there), unknown fields refused, with one mutation per kind that the
  validator must refuse, and every CEL rule of those schemas either checked here or listed with
  the reason it cannot apply;
- the queued node pool flag by flag against GKE's TPU tutorial's ``gcloud`` command, and its
  Kueue objects against the tutorial's (tests/support/harness/gke_queued_tpu.py);
- what Kueue does to a workload it admits (kubernetes-sigs/kueue v0.19.2
  pkg/podset/podset.go ``Merge``/``FromAssignment``, pkg/controller/admissionchecks/provisioning/
  controller.go ``podSetUpdates``), played on our manifests and read back the way
  pulumi-kubernetes reads live objects (provider/pkg/provider/util.go ``pruneMap``/``pruneSlice``
  and provider.go ``Diff``/``Read``, at 94977969d64112b04e19945818a7d5d5f38f631d): the next
  `pulumi up` sees no change, so it never replaces an admitted Job or JobSet.
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
from typing import Any, Callable, Mapping, Union

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from support.harness import gke_queued_tpu
from support.harness.crds import (
    JOBSET_TYPE,
    KUBERNETES_VERSION,
    KUEUE,
    KUEUE_CRD_FILES,
    RELEASE,
    kueue_objects,
    schema_errors,
    served_schema,
)
from support.harness.program import REPO, changed_registrations, run_components
from tpu_training_components import (
    FlexStartTpuNodePool,
    InvalidArgument,
    QueuedProvisioning,
    TpuTrainingJob,
    TpuTrainingJobSet,
    WorkloadEngines,
)
from tpu_training_components.domain import provider_rules
from tpu_training_components.domain.gke_cluster_plan import gke_version_problem
from tpu_training_components.domain.job_manifests import KUEUE_QUEUE_LABEL
from tpu_training_components.domain.kueue_manifests import (
    MAX_RUN_DURATION_PARAMETER,
    PROVISIONING_REQUEST_CONTROLLER,
    QUEUED_PROVISIONING_CLASS,
)
from tpu_training_components.domain.node_pool_plan import (
    QUEUED_PROVISIONING_MIN_GKE_VERSION,
    QUEUED_PROVISIONING_TAINT,
    plan_tpu_node_pool,
)
from tpu_training_components.resources.engines import KUEUE_CHART, KUEUE_NAMESPACE, KUEUE_VERSION

POOL = "gcp:container/nodePool:NodePool"
JOB = "kubernetes:batch/v1:Job"
PROJECT = "tpu-training-dev"
REGION, ZONE = "us-east5", "us-east5-b"  # the tutorial's zone, where v6e flex-start is offered
POOL_NAME = "v6e-queued"


def pool_args(**changes: Any) -> dict[str, Any]:
    """A queued pool of the tutorial's shape: ct6e-standard-4t 4x4, 4 VMs, one zone."""
    return {
        "cluster": "tpu-dev",
        "cluster_region": REGION,
        "machine_type": "ct6e-standard-4t",
        "topology": "4x4",
        "node_locations": [ZONE],
        "service_account_email": f"nodes@{PROJECT}.iam.gserviceaccount.com",
        "queued_provisioning": True,
        "max_run_duration": "72h",
        **changes,
    }


def workload_args(provider: k8s.Provider, selection: Any, **changes: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "node_pool": selection,
        "image": "trainer:1",
        "command": ["python3", "train.py"],
        "checkpoint_dir": "gs://bucket/checkpoints/train",
        "environment": {"LEARNING_RATE": "0.001"},
        "google_service_account": f"trainer@{PROJECT}.iam.gserviceaccount.com",
        "google_service_account_id": f"projects/{PROJECT}/serviceAccounts/trainer",
        "workload_pool": f"{PROJECT}.svc.id.goog",
        **changes,
    }


def declare(
    pool: Mapping[str, Any] | None = None,
    queue: Mapping[str, Any] | None = None,
    workload: str | None = None,
    **workload_changes: Any,
) -> Any:
    """The pool, its queue (a queued pool only) and one workload (``job`` or ``jobset``), under
    mocks, as the engine would register them."""

    def body() -> None:
        node_pool = FlexStartTpuNodePool(POOL_NAME, pool_args(**(pool or {})))  # type: ignore[arg-type]
        provider = k8s.Provider("cluster", kubeconfig="{}")
        if node_pool.plan.queued_provisioning:
            QueuedProvisioning(
                f"{POOL_NAME}-queue",
                {"provider": provider, "node_pool": node_pool.selection, **(queue or {})},  # type: ignore[typeddict-item]
            )
        args = workload_args(provider, node_pool.selection, **workload_changes)
        if workload == "job":
            TpuTrainingJob("train", args)  # type: ignore[arg-type]
        elif workload == "jobset":
            TpuTrainingJobSet("train", args)  # type: ignore[arg-type]

    return run_components(body)


def kueue_object(run: Any, kind: str) -> dict[str, Any]:
    """The object of ``kind`` (the first LocalQueue, when there are several)."""
    return next(o for o in kueue_objects(run) if o["kind"] == kind)


@functools.cache
def baseline() -> Any:
    return declare(queue={"namespaces": ["default", "research"]})


# --- the Kueue objects against Kueue's own CRD schemas ------------------------------------------

SHAPES = {
    "v6e 4x4, 1 slice, 72h": dict(pool={}, queue={}),
    "v6e 4x4, 2 slices, 2 namespaces, labels": dict(
        pool={"slices": 2}, queue={"namespaces": ["default", "research"], "labels": {"team": "ml"}}
    ),
    "v5p 2x2x4, 3 slices, no max run duration": dict(
        pool={
            "machine_type": "ct5p-hightpu-4t",
            "topology": "2x2x4",
            "slices": 3,
            "node_locations": ["us-east5-a"],
            "max_run_duration": None,
        },
        queue={},
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_kueue_object_is_valid_against_kueues_own_crd_schema(shape):
    objects = kueue_objects(declare(**SHAPES[shape]))
    assert {o["kind"] for o in objects} == set(KUEUE_CRD_FILES)
    for manifest in objects:
        assert schema_errors(manifest, KUEUE_CRD_FILES[manifest["kind"]]) == [], manifest["kind"]


def test_every_object_is_in_kueues_storage_version_and_named_after_the_pool():
    objects = kueue_objects(baseline())
    assert {o["apiVersion"] for o in objects} == {"kueue.x-k8s.io/v1beta2"}
    assert {o["metadata"]["name"] for o in objects} == {POOL_NAME}
    local_queues = [o for o in objects if o["kind"] == "LocalQueue"]
    assert sorted(q["metadata"]["namespace"] for q in local_queues) == ["default", "research"]
    # Cluster-scoped kinds carry no namespace (the CRDs' `scope: Cluster`).
    assert all("namespace" not in o["metadata"] for o in objects if o["kind"] != "LocalQueue")


MUTATIONS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], str]] = {
    # v1beta1's list of check names, which Cluster Toolkit's TPU queue (tpu-dws-queues.yaml.tftpl
    # at 1047080375) still writes under v1beta2: v1beta2 has only admissionChecksStrategy, and
    # without strict validation the API server would drop the field, and with it the check.
    "ClusterQueue: v1beta1's admissionChecks": (
        "ClusterQueue",
        lambda o: o["spec"].update(admissionChecks=[POOL_NAME]),
        "admissionChecks",
    ),
    "ClusterQueue: a quota that is no quantity": (
        "ClusterQueue",
        lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="lots"),
        "lots",
    ),
    "ClusterQueue: no covered resource": (
        "ClusterQueue",
        lambda o: o["spec"]["resourceGroups"][0].update(coveredResources=[]),
        "coveredResources",
    ),
    "ProvisioningRequestConfig: a class that is no DNS name": (
        "ProvisioningRequestConfig",
        lambda o: o["spec"].update(provisioningClassName="Queued_Provisioning"),
        "Queued_Provisioning",
    ),
    "ProvisioningRequestConfig: a parameter that is no string": (
        "ProvisioningRequestConfig",
        lambda o: o["spec"]["parameters"].update({MAX_RUN_DURATION_PARAMETER: 259200}),
        "259200",
    ),
    "ProvisioningRequestConfig: no class": (
        "ProvisioningRequestConfig",
        lambda o: o["spec"].pop("provisioningClassName"),
        "provisioningClassName",
    ),
    "AdmissionCheck: no controller": (
        "AdmissionCheck",
        lambda o: o["spec"].pop("controllerName"),
        "controllerName",
    ),
    "AdmissionCheck: parameters without a name": (
        "AdmissionCheck",
        lambda o: o["spec"]["parameters"].pop("name"),
        "name",
    ),
    "ResourceFlavor: a misspelt field": (
        "ResourceFlavor",
        lambda o: o["spec"].update(nodeLabel=o["spec"].pop("nodeLabels")),
        "nodeLabel",
    ),
    "ResourceFlavor: more than 8 node labels": (
        "ResourceFlavor",
        lambda o: o["spec"]["nodeLabels"].update({f"extra-{i}": "x" for i in range(5)}),
        "nodeLabels",
    ),
    "LocalQueue: a ClusterQueue name that is no DNS name": (
        "LocalQueue",
        lambda o: o["spec"].update(clusterQueue="Cluster_Queue"),
        "Cluster_Queue",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_the_schema_check_refuses_what_the_api_server_would(mutation):
    """The validator is not a rubber stamp: one mutation of a valid object, one error."""
    kind, mutate, complaint = MUTATIONS[mutation]
    manifest = copy.deepcopy(kueue_object(baseline(), kind))
    mutate(manifest)
    errors = schema_errors(manifest, KUEUE_CRD_FILES[kind])
    assert errors and complaint in " ".join(errors)


# The CEL rules (`x-kubernetes-validations`) of the v1beta2 schemas, which JSON Schema does not
# evaluate: each is checked on our objects here, or says why it cannot apply to them.
Check = Callable[[dict[str, Any]], bool]
_EFFECTS = "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"
_TRANSITION = "a rule on updates (oldSelf); see test_every_immutable_field_changes_only_with_the_name"


def _no_borrowing(queue: dict[str, Any]) -> bool:
    spec = queue["spec"]
    return "cohortName" in spec or all(
        "borrowingLimit" not in resource
        for group in spec.get("resourceGroups", [])
        for flavor in group["flavors"]
        for resource in flavor["resources"]
    )


CEL_RULES: dict[tuple[str, str, str], Union[Check, str]] = {
    ("AdmissionCheck", ".spec.controllerName", "field is immutable"): _TRANSITION,
    ("ClusterQueue", ".spec", "borrowingLimit must be nil when cohort is empty"): _no_borrowing,
    (
        "ClusterQueue",
        ".spec.flavorFungibility",
        "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
    ): "we set no flavorFungibility: Kueue's defaults",
    (
        "ClusterQueue",
        ".spec.preemption",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    ): "we set no preemption: Kueue's defaults",
    (
        "ClusterQueue",
        ".spec.resourceGroups[]",
        "flavors must have the same number of resources as the coveredResources",
    ): lambda o: all(
        len(flavor["resources"]) == len(group["coveredResources"])
        for group in o["spec"]["resourceGroups"]
        for flavor in group["flavors"]
    ),
    ("LocalQueue", ".spec.clusterQueue", "field is immutable"): _TRANSITION,
    ("ResourceFlavor", ".spec", "at least one nodeLabel is required when topology is set"): (
        "we set no topologyName (no topology-aware scheduling)"
    ),
    ("ResourceFlavor", ".spec", "nodeLabels are immutable when topologyName is set"): "no topologyName",
    ("ResourceFlavor", ".spec", "tolerations are immutable when topologyName is set"): "no topologyName",
    ("ResourceFlavor", ".spec", "topologyName is immutable when topologyName is set"): "no topologyName",
    **{
        ("ResourceFlavor", field, message): "we set no taints or tolerations on the flavor (kueue_manifests)"
        for field, message in (
            (".spec.nodeTaints", _EFFECTS),
            (".spec.tolerations", "operator must be Exists when 'key' is empty, which means 'match all "
             "values and all keys'"),
            (".spec.tolerations", "effect must be 'NoExecute' when 'tolerationSeconds' is set"),
            (".spec.tolerations", "supported toleration values: 'Equal'(default), 'Exists'"),
            (".spec.tolerations", "a value must be empty when 'operator' is 'Exists'"),
            (".spec.tolerations", _EFFECTS),
        )
    },
}  # fmt: skip


def _cel_rules(kind: str) -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()

    def walk(schema: Any, path: str) -> None:
        if not isinstance(schema, dict):
            return
        for rule in schema.get("x-kubernetes-validations", []):
            found.add((kind, path, rule["message"]))
        for name, sub in schema.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        walk(schema.get("items"), f"{path}[]")

    walk(served_schema(KUEUE_CRD_FILES[kind], "v1beta2"), "")
    return found


def test_every_cel_rule_of_the_schemas_is_checked_or_explained():
    in_schemas = set().union(*(_cel_rules(kind) for kind in KUEUE_CRD_FILES))
    assert sorted(in_schemas - CEL_RULES.keys()) == [], "a CEL rule with neither a check nor a reason"
    assert sorted(CEL_RULES.keys() - in_schemas) == [], "a listed CEL rule the schemas no longer have"


@pytest.mark.parametrize("shape", SHAPES)
def test_our_objects_meet_every_cel_rule_that_applies(shape):
    objects = kueue_objects(declare(**SHAPES[shape]))
    for (kind, _path, message), check in CEL_RULES.items():
        if callable(check):
            for manifest in (o for o in objects if o["kind"] == kind):
                assert check(manifest), message


def test_the_borrowing_rule_check_is_not_a_rubber_stamp():
    queue = copy.deepcopy(kueue_object(baseline(), "ClusterQueue"))
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
    assert not _no_borrowing(queue)


# --- the Kueue objects against GKE's tutorial ---------------------------------------------------


def _theirs(kind: str) -> dict[str, Any]:
    (found,) = [o for o in yaml.safe_load_all(gke_queued_tpu.DWS_QUEUE_OBJECTS) if o["kind"] == kind]
    return found


def test_the_provisioning_request_config_is_gkes_but_for_the_run_duration():
    ours = kueue_object(baseline(), "ProvisioningRequestConfig")["spec"]
    theirs = _theirs("ProvisioningRequestConfig")["spec"]
    # The pool's 72h, as the ProvisioningRequests' parameter; the tutorial leaves GKE's 7 days.
    assert ours.pop("parameters") == {MAX_RUN_DURATION_PARAMETER: str(72 * 3600)}
    assert ours == theirs
    assert theirs["provisioningClassName"] == QUEUED_PROVISIONING_CLASS


def test_the_admission_check_is_gkes_but_for_the_config_name():
    ours = kueue_object(baseline(), "AdmissionCheck")["spec"]
    theirs = _theirs("AdmissionCheck")["spec"]
    assert theirs["controllerName"] == PROVISIONING_REQUEST_CONTROLLER
    assert ours["parameters"].pop("name") == POOL_NAME and theirs["parameters"].pop("name") == "dws-config"
    assert ours == theirs


def test_without_a_run_duration_the_provisioning_requests_take_gkes_default():
    run = declare(pool={"max_run_duration": None})
    assert "parameters" not in kueue_object(run, "ProvisioningRequestConfig")["spec"]


def test_the_queue_admits_every_slice_of_the_pool_and_only_its_namespaces():
    run = declare(
        pool={
            "machine_type": "ct5p-hightpu-4t",
            "topology": "2x2x4",
            "slices": 3,
            "node_locations": ["us-east5-a"],
        },
        queue={"namespaces": ["research"]},
    )
    spec = kueue_object(run, "ClusterQueue")["spec"]
    # 2x2x4 is 16 chips; 3 slices: 48. A fourth slice's workload waits in the queue.
    assert spec["resourceGroups"] == [
        {
            "coveredResources": ["google.com/tpu"],
            "flavors": [{"name": POOL_NAME, "resources": [{"name": "google.com/tpu", "nominalQuota": 48}]}],
        }
    ]
    assert spec["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research"]}]
    }
    assert spec["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": POOL_NAME, "onFlavors": [POOL_NAME]}]
    }


# --- the node pool, against GKE's tutorial's command ----------------------------------------------


def _flags(command: str) -> dict[str, Any]:
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:4] == ["gcloud", "container", "node-pools", "create"]
    flags: dict[str, Any] = {"NAME": words[4]}
    for word in words[5:]:
        key, has_value, value = word.partition("=")
        flags[key] = value if has_value else True
    return flags


def _declared_flag(flag: str, inputs: dict[str, Any]) -> Any:
    node = inputs["nodeConfig"]
    readers: dict[str, Callable[[], Any]] = {
        "NAME": lambda: inputs["name"],
        "--cluster": lambda: inputs["cluster"],
        # The tutorial's cluster is zonal, so its --location is the nodes' zone; ours is regional
        # (location = the region) and puts the nodes in the zone by node locations.
        "--location": lambda: ",".join(inputs["nodeLocations"]),
        "--machine-type": lambda: node["machineType"],
        "--tpu-topology": lambda: inputs["placementPolicy"]["tpuTopology"],
        "--reservation-affinity": lambda: {"NO_RESERVATION": "none"}[
            node["reservationAffinity"]["consumeReservationType"]
        ],
        "--enable-autoscaling": lambda: "autoscaling" in inputs,
        "--enable-queued-provisioning": lambda: inputs.get("queuedProvisioning", {}).get("enabled", False),
        "--flex-start": lambda: node.get("flexStart", False),
        "--num-nodes": lambda: str(inputs["initialNodeCount"]),
        "--min-nodes": lambda: str(inputs["autoscaling"]["minNodeCount"]),
        "--max-nodes": lambda: str(inputs["autoscaling"]["maxNodeCount"]),
    }
    return readers[flag]()


def test_the_queued_pool_matches_gkes_tutorial_flag_by_flag():
    inputs = declare().one(POOL, f"{POOL_NAME}-pool").inputs
    substitutions = {"${DWS_NODEPOOL}": POOL_NAME, "${CLUSTER_NAME}": "tpu-dev", "${ZONE}": ZONE}
    command = gke_queued_tpu.DWS_NODE_POOL
    for variable, value in substitutions.items():
        command = command.replace(variable, value)
    flags = _flags(command)
    assert "--enable-queued-provisioning" in flags and "--flex-start" in flags
    mismatches = {
        flag: (theirs, _declared_flag(flag, inputs))
        for flag, theirs in flags.items()
        if _declared_flag(flag, inputs) != theirs
    }
    assert mismatches == {}


def test_what_the_queued_pool_sets_beyond_the_tutorial_has_its_reason():
    inputs = declare().one(POOL, f"{POOL_NAME}-pool").inputs
    # Every flex-start and every multi-host pool here: a repair re-creates a slice (docs/gke.md).
    assert inputs["management"] == {"autoRepair": False, "autoUpgrade": True}
    assert inputs["autoscaling"]["locationPolicy"] == "ANY"
    assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    # The nodes' lifetime is the ProvisioningRequests' (maxRunDurationSeconds), not the pool's.
    assert "maxRunDuration" not in inputs["nodeConfig"]
    plain = declare(pool={"queued_provisioning": False}).one(POOL, f"{POOL_NAME}-pool").inputs
    assert plain["nodeConfig"]["maxRunDuration"] == f"{72 * 3600}s"
    assert "queuedProvisioning" not in plain


def test_turning_queued_provisioning_on_replaces_the_pool_as_the_provider_does():
    """terraform-provider-google: `queued_provisioning` is ForceNew (change_impact's table)."""
    assert "queuedProvisioning" in provider_rules.NODE_POOL.replace


def test_queued_provisioning_needs_a_gke_version_of_googles_tutorial():
    assert gke_version_problem("1.34", QUEUED_PROVISIONING_MIN_GKE_VERSION, "queued provisioning") is None
    problem = gke_version_problem(
        "1.33.5-gke.100", QUEUED_PROVISIONING_MIN_GKE_VERSION, "queued provisioning"
    )
    assert problem == "GKE 1.33.5-gke.100 is older than 1.34, the first with queued provisioning"


# --- refused, naming the key, the value and what is allowed -------------------------------------


def _refused(**kwargs: Any) -> str:
    with pytest.raises(InvalidArgument) as err:
        declare(**kwargs)
    return str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        (dict(pool={"flex_start": False}), ["queuedProvisioning needs flexStart: true"]),
        (
            dict(pool={"flex_start": False, "spot": True}),
            ["queuedProvisioning needs flexStart: true", "Spot"],
        ),
        (
            dict(pool={"topology": "2x2"}),
            ["queuedProvisioning is for multi-host slices", "2x2", "queuedProvisioning: false"],
        ),
        (dict(queue={"namespaces": []}), ["namespaces is empty"]),
        (dict(queue={"namespaces": ["default", "default"]}), ["namespaces ['default', 'default'] repeats"]),
        (dict(queue={"namespaces": ["kube-system"]}), ["'kube-system'", "Kubernetes' own"]),
        (
            dict(pool={"slices": 2}, workload="jobset", slices=2),
            ["slices = 2", "queued provisioning", "allowed: 1"],
        ),
        (
            dict(workload="jobset", queue_name="team-queue"),
            ["queue_name = 'team-queue'", f"its own Kueue queue '{POOL_NAME}'"],
        ),
    ],
    ids=[
        "on-demand",
        "spot",
        "single-host",
        "no namespace",
        "a namespace twice",
        "a system namespace",
        "a multislice JobSet",
        "another queue",
    ],
)
def test_invalid_combinations_are_refused_with_the_reason(kwargs, says):
    message = _refused(**kwargs)
    for fragment in says:
        assert fragment in message


def test_a_queue_for_a_pool_without_queued_provisioning_is_refused():
    def body() -> None:
        pool = FlexStartTpuNodePool(POOL_NAME, pool_args(queued_provisioning=False))  # type: ignore[arg-type]
        QueuedProvisioning(
            "queue", {"provider": k8s.Provider("c", kubeconfig="{}"), "node_pool": pool.selection}
        )

    with pytest.raises(InvalidArgument, match="has neither queued_provisioning nor kueue_queue"):
        run_components(body)


def test_the_domain_refuses_as_the_component_does():
    with pytest.raises(ValueError, match="multi-host"):
        plan_tpu_node_pool(
            name="p",
            machine_type="ct6e-standard-4t",
            topology="2x2",
            node_locations=[ZONE],
            cluster_region=REGION,
            queued_provisioning=True,
        )


# --- the workloads ------------------------------------------------------------------------------


def _workload(run: Any, kind: str) -> dict[str, Any]:
    registration = run.one(
        JOB if kind == "job" else JOBSET_TYPE, "train-job" if kind == "job" else "train-jobset"
    )
    return {key: registration.inputs[key] for key in ("metadata", "spec")}


def _pod_template(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    if kind == "job":
        return workload["spec"]["template"]
    return workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_a_queued_workload_names_the_pools_queue_and_tolerates_its_nodes(kind):
    workload = _workload(declare(workload=kind), kind)
    assert workload["metadata"]["labels"][KUEUE_QUEUE_LABEL] == POOL_NAME
    template = _pod_template(workload, kind)
    # The queue label is the Job's (JobSet's) own: a labelled Pod is one Kueue's pod integration
    # would try to admit by itself.
    assert KUEUE_QUEUE_LABEL not in template["metadata"]["labels"]
    assert template["spec"]["tolerations"] == [
        {"key": QUEUED_PROVISIONING_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    ]
    # Never `suspend`: Kueue's webhook suspends it and Kueue resumes it (see the admission test).
    assert "suspend" not in workload["spec"]


def test_queued_workloads_are_valid_against_their_own_schemas():
    """The queued JobSet against JobSet v0.12.0's CRD (test_jobset_conformance), the queued Job
    against Kubernetes' OpenAPI schema of the oldest version with TPU flex-start (as
    test_gke_components checks every Job), unknown fields refused in both."""
    jobset = declare(workload="jobset").one(JOBSET_TYPE, "train-jobset").inputs
    assert schema_errors({key: jobset[key] for key in ("apiVersion", "kind", "metadata", "spec")}) == []
    job = declare(workload="job").one(JOB, "train-job").inputs
    kubernetes_validate.validate(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": job["metadata"], "spec": job["spec"]},
        KUBERNETES_VERSION,
        strict=True,
    )


def test_the_toleration_is_the_one_of_gkes_tutorial():
    theirs = yaml.safe_load(gke_queued_tpu.DWS_WORKER_TOLERATIONS)
    ours = _pod_template(_workload(declare(workload="jobset"), "jobset"), "jobset")["spec"]["tolerations"]
    # The google.com/tpu one GKE adds to TPU Pods itself (docs/multislice.md, test_jobset_conformance).
    assert ours == [t for t in theirs if t["key"] == QUEUED_PROVISIONING_TAINT]


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_on_a_pool_without_queued_provisioning_the_workload_is_as_before(kind):
    queued = _workload(declare(workload=kind), kind)
    plain = _workload(declare(pool={"queued_provisioning": False}, workload=kind), kind)
    assert KUEUE_QUEUE_LABEL not in plain["metadata"]["labels"]
    assert "tolerations" not in _pod_template(plain, kind)["spec"]
    # The queue label and the toleration are all a queued pool changes.
    del queued["metadata"]["labels"][KUEUE_QUEUE_LABEL]
    del _pod_template(queued, kind)["spec"]["tolerations"]
    assert queued == plain


def test_a_jobset_may_name_the_pools_own_queue():
    workload = _workload(declare(workload="jobset", queue_name=POOL_NAME), "jobset")
    assert workload["metadata"]["labels"][KUEUE_QUEUE_LABEL] == POOL_NAME


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_the_flavor_labels_are_exactly_what_the_pods_select(kind):
    """Kueue writes a flavor's nodeLabels into the Pod template it admits and refuses a value
    that differs (pkg/podset/podset.go ``Merge``: ``HaveConflict``); equal, they change nothing."""
    run = declare(workload=kind)
    flavor = kueue_object(run, "ResourceFlavor")["spec"]
    assert flavor == {"nodeLabels": _pod_template(_workload(run, kind), kind)["spec"]["nodeSelector"]}


# --- what Kueue does to an admitted workload, and what pulumi-kubernetes then sees ---------------

PROVISIONING_ANNOTATIONS = {
    # cluster-autoscaler's ProvisioningRequestPodAnnotationKey and ProvisioningClassPodAnnotationKey,
    # which Kueue's provisioning check puts on the admitted Pod sets (controller.go podSetUpdates).
    "autoscaling.x-k8s.io/consume-provisioning-request": "train-abcde-v6e-queued-1",
    "autoscaling.x-k8s.io/provisioning-class-name": QUEUED_PROVISIONING_CLASS,
}


def admitted(workload: dict[str, Any], kind: str, flavor: dict[str, Any]) -> dict[str, Any]:
    """The workload as the API server holds it after Kueue's webhook suspended it and Kueue
    admitted it: the flavor's node labels and tolerations merged into the Pod template (a label
    already there with another value is a conflict Kueue refuses), the provisioning check's
    annotations added, and the suspension lifted."""
    live = copy.deepcopy(workload)
    template = _pod_template(live, kind)
    selector = template["spec"].setdefault("nodeSelector", {})
    for key, value in flavor.get("nodeLabels", {}).items():
        if selector.get(key, value) != value:
            raise ValueError(f"Kueue refuses the admission: nodeSelector {key} conflicts")
        selector[key] = value
    for toleration in flavor.get("tolerations", []):
        if toleration not in template["spec"].setdefault("tolerations", []):
            template["spec"]["tolerations"].append(toleration)
    template["metadata"].setdefault("annotations", {}).update(PROVISIONING_ANNOTATIONS)
    live["spec"]["suspend"] = False
    return live


def pruned(live: Any, inputs: Any) -> Any:
    """pulumi-kubernetes' ``pruneMap``/``pruneSlice``: the live object cut to the shape of the
    inputs (keys the inputs have; list items up to the inputs' length), which its Diff compares
    with the new inputs, and its Read (`pulumi refresh`) stores as the inputs."""
    if isinstance(live, dict) and isinstance(inputs, dict):
        return {key: pruned(value, inputs[key]) for key, value in live.items() if key in inputs}
    if isinstance(live, list) and isinstance(inputs, list):
        # Items beyond the inputs' length are dropped: zip stops at the shorter list.
        return [pruned(value, wanted) for value, wanted in zip(live, inputs, strict=False)]
    return live


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_after_kueue_admits_a_workload_the_next_up_sees_no_change(kind):
    run = declare(workload=kind)
    ours = _workload(run, kind)
    live = admitted(ours, kind, kueue_object(run, "ResourceFlavor")["spec"])
    assert live != ours  # Kueue did change the object ...
    assert pruned(live, ours) == ours  # ... but nowhere pulumi-kubernetes looks: no diff, no replacement


def test_a_declared_suspend_would_be_a_change_after_admission():
    """Why the workloads leave ``suspend`` to Kueue's webhook: declared, the admitted JobSet's
    lifted suspension would read as a change of its spec, which replaces a JobSet, and an
    in-place update of a Job would suspend it again."""
    run = declare(workload="jobset")
    ours = _workload(run, "jobset")
    ours["spec"]["suspend"] = True
    live = admitted(ours, "jobset", kueue_object(run, "ResourceFlavor")["spec"])
    assert pruned(live, ours)["spec"] != ours["spec"]


def test_a_flavor_label_that_differed_from_the_pods_would_keep_the_workload_out():
    run = declare(workload="job")
    flavor = copy.deepcopy(kueue_object(run, "ResourceFlavor")["spec"])
    flavor["nodeLabels"]["cloud.google.com/gke-tpu-topology"] = "8x8"
    with pytest.raises(ValueError, match="conflicts"):
        admitted(_workload(run, "job"), "job", flavor)


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_tuning_a_queued_workload_changes_only_its_parameters(kind):
    before = declare(workload=kind)
    after = declare(workload=kind, environment={"LEARNING_RATE": "0.0005"})
    assert changed_registrations(before, after) == ["train-run-parameters"]


# --- the component: children, order, immutable fields ------------------------------------------

ROLES = {
    "flavor": "ResourceFlavor",
    "provisioning": "ProvisioningRequestConfig",
    "check": "AdmissionCheck",
    "cluster-queue": "ClusterQueue",
    "queue-default": "LocalQueue",
    "queue-research": "LocalQueue",
}


def _children(run: Any) -> dict[str, Any]:
    component = run.one("tpu-training:gke:QueuedProvisioning", f"{POOL_NAME}-queue")
    return {
        r.name.removeprefix(f"{POOL_NAME}-queue-"): r for r in run.registrations if r.parent == component.urn
    }


def test_children_are_named_by_role_under_the_component():
    children = _children(baseline())
    assert {role: r.type.removeprefix(KUEUE) for role, r in children.items()} == ROLES


def test_each_object_waits_for_what_it_names():
    children = _children(baseline())
    urn = {role: r.urn for role, r in children.items()}
    needs = {
        "check": {urn["provisioning"]},
        "cluster-queue": {urn["flavor"], urn["check"]},
        "queue-default": {urn["cluster-queue"]},
        "queue-research": {urn["cluster-queue"]},
    }
    for role, registration in children.items():
        assert set(registration.options.get("dependsOn", [])) == needs.get(role, set()), role


def test_the_queue_comes_after_the_kueue_it_installs_into():
    def body() -> None:
        provider = k8s.Provider("cluster", kubeconfig="{}")
        engines = WorkloadEngines("engines", {"provider": provider, "jobset": True, "kueue": True})
        pool = FlexStartTpuNodePool(POOL_NAME, pool_args())  # type: ignore[arg-type]
        QueuedProvisioning(
            f"{POOL_NAME}-queue",
            {"provider": provider, "node_pool": pool.selection},
            opts=pulumi.ResourceOptions(depends_on=[engines]),
        )

    run = run_components(body)
    queue = run.one("tpu-training:gke:QueuedProvisioning", f"{POOL_NAME}-queue")
    (kueue,) = [r for r in run.by_type(RELEASE) if r.name == "engines-kueue"]
    # depends_on a component waits for its children: the Releases, ready (Helm's await).
    assert kueue.urn in queue.options["dependsOn"]
    assert (kueue.inputs["chart"], kueue.inputs["version"], kueue.inputs["namespace"]) == (
        KUEUE_CHART,
        KUEUE_VERSION,
        KUEUE_NAMESPACE,
    )


def test_kueue_installs_without_jobset_for_a_stack_of_jobs():
    """Kueue v0.19.2 sets an integration whose CRD is missing up once it appears
    (pkg/controller/jobframework/setup.go ``WaitForAPI``): JobSet is not required."""
    run = run_components(
        lambda: WorkloadEngines(
            "engines", {"provider": k8s.Provider("c", kubeconfig="{}"), "jobset": False, "kueue": True}
        )
    )
    assert [r.name for r in run.by_type(RELEASE)] == ["engines-kueue"]


IMMUTABLE = {
    # The CEL transition rules `self == oldSelf` of the v1beta2 schemas (CEL_RULES above).
    "AdmissionCheck": ("spec", "controllerName"),
    "LocalQueue": ("spec", "clusterQueue"),
}


def test_every_immutable_field_changes_only_with_the_name():
    """An immutable field updated in place would fail the `pulumi up`. Ours are a constant and
    the pool's name, which is every object's ``metadata.name`` too: whenever one changes, so does
    the name, which pulumi-kubernetes replaces an object for (diff.go
    ``metadataForceNewProperties``) rather than update it."""
    assert "metadata.name" in provider_rules.KUBERNETES_METADATA
    first = {o["kind"]: o for o in kueue_objects(declare())}
    second = {o["kind"]: o for o in kueue_objects(declare(pool={"node_pool_name": "v6e-other"}))}
    for kind, (section, field) in IMMUTABLE.items():
        if first[kind][section][field] != second[kind][section][field]:
            assert first[kind]["metadata"]["name"] != second[kind]["metadata"]["name"], kind
    assert (
        first["AdmissionCheck"]["spec"]["controllerName"]
        == second["AdmissionCheck"]["spec"]["controllerName"]
    )
    assert first["LocalQueue"]["spec"]["clusterQueue"] != second["LocalQueue"]["spec"]["clusterQueue"]


# --- the documentation's example ----------------------------------------------------------------

DOCS_PAGE = "docs/gke.md"


def test_the_docs_example_declares_what_the_docs_say():
    blocks = re.findall(r"```python\n(.*?)```", (REPO / DOCS_PAGE).read_text(), flags=re.S)
    (example,) = [block for block in blocks if block.startswith("# queued example")]
    program = compile(example, DOCS_PAGE, "exec")
    run = run_components(lambda: exec(program, {}))
    assert run.one(POOL, "v6e-queued-pool").inputs["queuedProvisioning"] == {"enabled": True}
    assert {r.name for r in run.by_type(RELEASE)} == {"engines-jobset", "engines-kueue"}
    assert sorted(o["kind"] for o in kueue_objects(run)) == sorted(set(KUEUE_CRD_FILES))
    (jobset,) = run.by_type(JOBSET_TYPE)
    assert jobset.inputs["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "v6e-queued"
    # The JobSet waits for its queue (depends_on a component: on every child of it).
    queue = run.one("tpu-training:gke:QueuedProvisioning", "v6e-queued-queue")
    local_queue = next(
        r for r in run.registrations if r.parent == queue.urn and r.type.endswith(":LocalQueue")
    )
    assert local_queue.urn in run.one("tpu-training:gke:TpuTrainingJobSet", "train").options["dependsOn"]
