"""JobSet workloads (issue 20): the JobSet's shape and failure policy, what is refused and why, the
stack program's wiring (the controller installed only when used, pinned), tuning edits that leave a
running JobSet alone, and recovery: the JobSet rows of the decision table, read through the real
`kubernetes` client from a loopback API."""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from support.fakes.fake_kube_api import FakeJobSetApi, job, jobset
from support.harness.crds import JOBSET_TYPE, KUEUE_CRD_FILES, RELEASE, schema_errors
from support.harness.program import changed_registrations, multislice, refused, run_components, run_stack
from support.harness.workloads import PROJECT, declared_jobset, tpu_pool, workload_args
from tpu_training_components import FlexStartTpuNodePool, InvalidArgument, TpuTrainingJobSet
from tpu_training_components.domain.job_manifests import TrainingJobSpec, job_manifest
from tpu_training_components.domain.job_recovery import JobCondition, LiveJobSet, decide_jobset
from tpu_training_components.domain.jobset_manifests import (
    DEFAULT_MAX_RESTARTS,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    TrainingJobSetSpec,
    jobset_manifest,
)
from tpu_training_components.domain.node_pool_plan import NODE_POOL_LABEL, POOL_NODE_LABEL
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.resources import reconcile
from tpu_training_components.resources.engines import JOBSET_CHART, JOBSET_VERSION, WorkloadEngines

from tpu_training import offline

CLUSTER = ClusterRef(PROJECT, "europe-west4", "tpu-dev")

# --- the JobSet -----------------------------------------------------------------------------------


def test_one_replicated_job_of_one_indexed_job_per_slice_of_one_pod_per_vm():
    jobset = declared_jobset(machine_type="ct5p-hightpu-4t", topology="2x2x4", pool_slices=4, slices=4)
    (replicated,) = jobset["spec"]["replicatedJobs"]
    child = replicated["template"]["spec"]
    assert replicated["replicas"] == 4
    # 2x2x4 is 16 chips, 4 per VM: 4 Pods per slice, all needed at once.
    assert (child["completions"], child["parallelism"], child["completionMode"]) == (4, 4, "Indexed")
    assert child["backoffLimit"] == 0
    assert child["template"]["spec"]["containers"][0]["resources"]["limits"] == {"google.com/tpu": 4}


def test_one_slice_per_gke_node_pool_by_jobsets_exclusive_topology():
    jobset = declared_jobset()
    assert jobset["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == NODE_POOL_LABEL
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    # JobSet's own placement replaces the Job's one-pool affinity; its Service, the subdomain.
    assert "affinity" not in pod and "subdomain" not in pod
    assert pod["nodeSelector"][POOL_NODE_LABEL] == "tpu-dev-np"


def _job_spec(**changes: Any) -> TrainingJobSpec:
    values: dict[str, Any] = dict(
        name="train",
        namespace="default",
        image="trainer:1",
        command=("python3", "train.py"),
        node_selector={"cloud.google.com/gke-tpu-topology": "4x4"},
        node_pool="pool",
        chips_per_vm=4,
        vms=4,
        service_account="train",
        env={"CHECKPOINT_DIR": "gs://b/c/train"},
        run_parameters={"LEARNING_RATE": "0.1"},
    )
    values.update(changes)
    return TrainingJobSpec(**values)


def test_pods_are_the_jobs_pods_selectors_tpus_ports_identity_and_checkpoints_alike():
    spec = _job_spec()
    theirs = job_manifest(spec)["spec"]["template"]
    ours = jobset_manifest(TrainingJobSetSpec(spec, slices=2))["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]
    expected = copy.deepcopy(theirs)
    del expected["spec"]["affinity"], expected["spec"]["subdomain"]
    assert ours == expected
    container = ours["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": "train-run-parameters"}}]
    assert {p["containerPort"] for p in container["ports"]} == {8471, 8431}
    assert ours["spec"]["serviceAccountName"] == "train"


def test_disruptions_restart_the_whole_jobset_without_counting_real_failures_count():
    jobset = declared_jobset(max_restarts=5)
    policy = jobset["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 5
    # A disruption fails the child Job with reason PodFailurePolicy ...
    child = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert child["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    # ... which JobSet restarts without counting; any other failure matches no rule, and JobSet
    # then applies RestartJobSet, which counts (jobset_types.go: "If no matching rule is found,
    # the RestartJobSet action is applied").
    assert policy["rules"] == [
        {
            "name": "disruption",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
        }
    ]


def test_max_restarts_has_a_default():
    assert declared_jobset()["spec"]["failurePolicy"]["maxRestarts"] == DEFAULT_MAX_RESTARTS


def test_the_queue_label_only_when_a_queue_is_given():
    assert KUEUE_QUEUE_LABEL not in declared_jobset()["metadata"]["labels"]
    assert declared_jobset(queue_name="tpu")["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "tpu"


def test_a_new_generation_or_a_changed_spec_re_creates_the_jobset_with_its_fixed_name(monkeypatch):
    # The recording monitor keeps no replaceOnChanges (the golden plan has none): read the request.
    replace_on_changes: dict[str, list[str]] = {}
    register = offline.RecordingMonitor.RegisterResource

    def recording(self: Any, request: Any) -> Any:
        replace_on_changes[request.name] = list(request.replaceOnChanges)
        return register(self, request)

    monkeypatch.setattr(offline.RecordingMonitor, "RegisterResource", recording)

    def body() -> None:
        pool = tpu_pool()
        TpuTrainingJobSet("train", _component_args(pool.selection, recovery_generation=7))

    options = run_components(body).one(JOBSET_TYPE, "train-jobset").options
    assert replace_on_changes["train-jobset"] == ["spec"]
    assert options["deleteBeforeReplace"] is True
    assert options.get("replacementTrigger") == 7


_component_args = workload_args


# --- refused, with the reason --------------------------------------------------------------------


def _refusal(
    topology: str = "4x4", machine_type: str = "ct6e-standard-4t", pool_slices: int = 2, **extra
) -> str:
    def body() -> None:
        pool = FlexStartTpuNodePool(
            "np",
            {
                "cluster": "c",
                "cluster_region": "europe-west4",
                "machine_type": machine_type,
                "topology": topology,
                "node_locations": ["europe-west4-a"],
                "slices": pool_slices,
                "service_account_email": "n@p.iam.gserviceaccount.com",
            },
        )
        TpuTrainingJobSet("train", _component_args(pool.selection, **extra))

    with pytest.raises(InvalidArgument) as err:
        run_components(body)
    return str(err.value)


def test_component_refuses_single_host_slices_with_the_reason():
    message = _refusal(topology="2x2", slices=2)
    assert "single-host" in message and "Multislice" in message and "TpuTrainingJob" in message


def test_component_refuses_more_slices_than_the_pool_holds():
    message = _refusal(slices=3)
    assert "slices = 3" in message and "holds 2" in message


@pytest.mark.parametrize(("key", "value"), [("max_restarts", -1), ("max_restarts", 1001), ("slices", 0)])
def test_component_refuses_bad_counts(key, value):
    assert key in _refusal(**{key: value})


def test_component_refuses_a_name_whose_pods_jobset_could_not_name():
    message = _refusal(job_name="a" * 50, slices=2)
    assert "DNS label of at most 63" in message


def test_the_manifest_itself_refuses_single_host():
    with pytest.raises(ValueError, match="multi-host"):
        TrainingJobSetSpec(_job_spec(vms=1), slices=2)


# --- the stack program ---------------------------------------------------------------------------


def _job(config: dict[str, Any]) -> dict[str, Any]:
    return config["tpu-training:jobs"][0]


def test_dev_stack_declares_no_jobset_and_no_engine(config):
    run = run_stack(config)
    assert run.by_type(JOBSET_TYPE) == [] and run.by_type(RELEASE) == []


def test_a_multislice_job_is_a_jobset_after_its_pinned_controller(config):
    run = run_stack(multislice(config))
    (jobset,) = run.by_type(JOBSET_TYPE)
    (release,) = run.by_type(RELEASE)
    assert run.by_type("kubernetes:batch/v1:Job") == []
    assert (release.inputs["chart"], release.inputs["version"]) == (JOBSET_CHART, JOBSET_VERSION)
    assert jobset.inputs["spec"]["replicatedJobs"][0]["replicas"] == 2
    # depends_on a component waits for its children: the Release, ready (Helm's await).
    component = next(r for r in run.registrations if r.type == "tpu-training:gke:TpuTrainingJobSet")
    assert release.urn in component.options["dependsOn"]


@pytest.mark.parametrize(
    ("install", "releases"),
    [
        ({}, {"engines-jobset", "engines-kueue"}),
        ({"installJobSet": False}, {"engines-kueue"}),
        ({"installKueue": False}, {"engines-jobset"}),
        ({"installJobSet": False, "installKueue": False}, set()),
    ],
)
def test_a_cluster_that_runs_jobset_or_kueue_already_gets_no_release_of_it(config, install, releases):
    config = multislice(config)
    config["tpu-training:nodePools"][0]["kueueQueue"] = True
    config["tpu-training:cluster"] = {**config["tpu-training:cluster"], **install}
    run = run_stack(config)
    assert {r.name for r in run.by_type(RELEASE)} == releases
    # The workloads and the queue are declared all the same, after whatever release there is.
    (jobset,) = run.by_type(JOBSET_TYPE)
    assert {
        r.type.rsplit(":", 1)[-1] for r in run.registrations if r.type.startswith("kubernetes:kueue")
    } == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    }
    component = next(r for r in run.registrations if r.type == "tpu-training:gke:TpuTrainingJobSet")
    installed = {r.urn for r in run.by_type(RELEASE)}
    assert installed <= set(component.options.get("dependsOn", [])), "a release there is comes first"


@pytest.mark.parametrize("key", ["installJobSet", "installKueue"])
def test_install_keys_take_only_booleans(config, key):
    config = copy.deepcopy(config)
    config["tpu-training:cluster"] = {**config["tpu-training:cluster"], key: "no"}
    assert f"tpu-training:cluster.{key}" in refused(config)


def test_one_multi_host_slice_as_a_jobset_on_request(config):
    config = copy.deepcopy(config)
    _job(config)["workload"] = "jobset"
    (jobset,) = run_stack(config).by_type(JOBSET_TYPE)
    assert jobset.inputs["spec"]["replicatedJobs"][0]["replicas"] == 1


def test_the_global_batch_spans_every_slice(config):
    one = run_stack(config).outputs["jobs"]
    two = run_stack(multislice(config)).outputs["jobs"]
    name = _job(config)["name"]
    # The dev stack has a training config, so both environments carry a global batch.
    assert int(two[name]["environment"]["GLOBAL_BATCH_SIZE"]) == 2 * int(
        one[name]["environment"]["GLOBAL_BATCH_SIZE"]
    )


def test_tuning_a_running_jobset_changes_only_its_parameters(config):
    before = multislice(config)
    after = copy.deepcopy(before)
    _job(after).setdefault("env", {})["LEARNING_RATE_NOTE"] = "tuned"
    changed = changed_registrations(run_stack(before), run_stack(after))
    assert changed == [f"{_job(config)['name']}-run-parameters"]


def test_a_new_image_changes_the_jobsets_spec_which_re_creates_it(config):
    before = multislice(config)
    after = copy.deepcopy(before)
    _job(after)["image"] = _job(after)["image"] + "-new"
    changed = changed_registrations(run_stack(before), run_stack(after))
    assert changed == [f"{_job(config)['name']}-jobset"]


@pytest.mark.parametrize(
    ("pool", "job", "says"),
    [
        ({"topology": "2x2", "slices": 2}, {"slices": 2}, "single-host"),
        ({"slices": 2}, {"slices": 3}, "holds 2 slice"),
        ({"slices": 2}, {"slices": 2, "workload": "job"}, "a plain Job runs on one slice"),
        ({}, {"maxRestarts": 2}, "only a JobSet restarts itself"),
        ({}, {"workload": "jobset", "maxRestarts": -1}, "maxRestarts"),
        ({}, {"workload": "deployment"}, "workload"),
    ],
)
def test_stack_refuses_what_cannot_run_naming_the_key(config, pool, job, says):
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0].update(pool)
    _job(config).update(job)
    message = refused(config)
    assert "tpu-training:jobs[0]" in message and says in message


# --- recovery: the decision table ------------------------------------------------------------------


def live(*conditions: tuple[str, str], ready=0, slices=2, restarts=0, counted=0, labels=None) -> LiveJobSet:
    return LiveJobSet(
        "train",
        "default",
        {"recovery-generation": "4", **(labels or {})},
        tuple(JobCondition(kind, "True", reason, "details") for kind, reason in conditions),
        restarts=restarts,
        restarts_counted=counted,
        slices=slices,
        ready=ready,
    )


@pytest.mark.parametrize(
    ("state", "action", "warn"),
    [
        (None, "create", False),
        (live(), "keep", False),  # no slice ready yet: starting, flex-start provisioning
        (live(ready=1), "keep", False),
        (live(ready=2), "keep", False),
        (live(ready=2, restarts=5, counted=1), "keep", False),  # JobSet recovered by itself
        (live(("Completed", "AllJobsCompleted")), "keep", False),
        (live(("Failed", "ReachedMaxRestarts"), restarts=3, counted=3), "replace", False),
        (live(("Failed", "FailedJobs")), "replace", False),
        (live(("Suspended", "SuspendedJobs")), "keep", True),
        (live(("Suspended", "SuspendedJobs"), labels={KUEUE_QUEUE_LABEL: "q"}), "keep", False),
    ],
)
def test_jobset_decision_table(state, action, warn):
    decision = decide_jobset("train", state)
    assert (decision.action, decision.warn) == (action, warn)
    if state is not None:
        # Kept at its own generation; replaced at the next one.
        assert decision.generation == (5 if action == "replace" else 4)


def test_a_failed_jobset_says_its_own_restarts_are_spent():
    message = decide_jobset("train", live(("Failed", "ReachedMaxRestarts"), restarts=7, counted=3)).message
    assert "ReachedMaxRestarts" in message and "7 time(s), 3 counted" in message


def test_completed_stays_completed_even_if_failed_after():
    assert decide_jobset("train", live(("Completed", ""), ("Failed", ""))).action == "keep"


# --- recovery: the live JobSets, through the real client --------------------------------------------


@pytest.fixture
def kube():
    with FakeJobSetApi() as api:
        yield api


def test_one_list_call_per_namespace_and_kind(kube, tmp_path):
    for index in range(10):
        kube.add_jobset("default", jobset(f"run-{index}", ready=2))
    kube.add_jobset("research", jobset("big", conditions=(("Failed", "ReachedMaxRestarts"),), generation=3))
    kube.add_jobset("research", jobset("theirs", ours=False))
    kube.add("default", job("single", active=1, ready=1))
    result = list_live_jobs(
        CLUSTER,
        ["default"],
        jobset_namespaces=["default", "research"],
        kubeconfig=str(kube.kubeconfig(tmp_path)),
    )
    assert result.calls == 3 and len(kube.calls) == 3
    assert len(result.jobsets) == 11 and ("research", "theirs") not in result.jobsets
    big = result.jobsets[("research", "big")]
    assert (big.generation, big.slices, big.condition("Failed").reason) == (3, 2, "ReachedMaxRestarts")
    assert ("default", "single") in result.jobs


def test_reconcile_replaces_a_failed_jobset_and_keeps_the_rest(kube, tmp_path, decided_at):
    kube.add_jobset("default", jobset("failed", conditions=(("Failed", "ReachedMaxRestarts"),), generation=3))
    kube.add_jobset("default", jobset("done", conditions=(("Completed", "AllJobsCompleted"),), generation=2))
    kube.add_jobset("default", jobset("running", ready=2, restarts=4, generation=1))
    kube.add("default", job("failed", generation=9))  # a Job of the same name is not the JobSet
    path = str(kube.kubeconfig(tmp_path))
    decisions = reconcile.reconcile_jobs(
        CLUSTER,
        [("failed", "default", "JobSet"), ("done", "default", "JobSet"), ("running", "default", "JobSet"),
         ("gone", "default", "JobSet")],
        read=lambda cluster, namespaces, **kw: list_live_jobs(cluster, namespaces, kubeconfig=path, **kw),
    )  # fmt: skip
    actions = {d.name: (d.action, d.generation) for d in decisions}
    assert actions == {
        "failed": ("replace", 4),
        "done": ("keep", 2),
        "running": ("keep", 1),
        "gone": ("create", None),
    }
    assert len(kube.calls) == 1  # no Job-kind entry: no Job list call


def test_jobsets_are_never_replaced_on_unknown(kube, tmp_path):
    """No JobSet CRD (404), or any failure: unknown, kept at the last deployed generation."""
    kube.crd_installed = False
    path = str(kube.kubeconfig(tmp_path))
    (decision,) = reconcile.reconcile_jobs(
        CLUSTER,
        [("train", "default", "JobSet")],
        read=lambda cluster, namespaces, **kw: list_live_jobs(cluster, namespaces, kubeconfig=path, **kw),
    )
    assert decision.action == "keep" and decision.generation is None and decision.warn


def test_a_malformed_jobset_answer_is_unknown_not_gone(kube, tmp_path):
    kube.add_jobset("default", jobset("a"))
    kube.add_jobset("default", jobset("a"))
    result = list_live_jobs(
        CLUSTER, [], jobset_namespaces=["default"], kubeconfig=str(kube.kubeconfig(tmp_path))
    )
    assert "twice" in result.jobset_failures["default"] and not result.jobsets


def test_a_reader_of_jobs_alone_still_works_without_jobsets():
    """Readers written before JobSets (tests, recover's seams) take (cluster, namespaces) only."""
    from tpu_training_components.live.kube_api import LiveJobs

    decisions = reconcile.reconcile_jobs(CLUSTER, [("train", "default")], read=lambda c, n: LiveJobs())
    assert [d.action for d in decisions] == ["create"]


# --- TrainingRecovery takes JobSets -------------------------------------------------------------------


def test_training_recovery_refuses_an_unknown_kind():
    from tpu_training_components import TrainingRecovery

    def body() -> None:
        TrainingRecovery(
            "recovery",
            {
                "project": "p",
                "jobs": [{"name": "train", "kind": "Deployment"}],
                "cluster": {"project": "p", "location": "europe-west4", "name": "c"},
                "read_live_state": False,
            },
        )

    with pytest.raises(pulumi.RunError, match="Deployment.*allowed: Job, JobSet"):
        run_components(body)


def test_the_stack_hands_recovery_its_jobsets_by_kind(config, monkeypatch):
    seen: list[Any] = []
    original = reconcile.reconcile_jobs

    def spy(cluster, jobs, **kwargs):
        seen.extend(jobs)
        return original(cluster, jobs, **kwargs)

    monkeypatch.setattr(reconcile, "reconcile_jobs", spy)
    run_stack(multislice(config))
    assert seen == [(_job(config)["name"], _job(config).get("namespace", "default"), "JobSet")]


def test_engines_refuse_a_version_range():
    def body() -> None:
        WorkloadEngines(
            "engines", {"provider": k8s.Provider("c", kubeconfig="{}"), "jobset_version": "^0.12"}
        )

    with pytest.raises(InvalidArgument, match="pinned version"):
        run_components(body)


# --- a pool without a queue is not oversubscribed (issue 26 item 6) -------------------------------


def _two_runs(
    config: dict[str, Any], *, pool_slices: int, slices: tuple[int, int], **pool: Any
) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0].update({"slices": pool_slices, **pool})
    first = _job(config)
    first["slices"] = slices[0]
    config["tpu-training:jobs"].append(dict(first, name="train-second", slices=slices[1]))
    return config


def test_two_multislice_jobsets_on_a_pool_that_holds_one_are_refused(config):
    says = refused(_two_runs(config, pool_slices=2, slices=(2, 2)))
    assert "nodePools[0] (v6e-4x4): its jobs ask for 4 slices together" in says
    assert "train-v6e (2), train-second (2)" in says and "holds 2" in says
    assert "kueueQueue: true" in says


def test_two_jobs_on_one_slice_are_refused_too(config):
    assert "ask for 2 slices together" in refused(_two_runs(config, pool_slices=1, slices=(1, 1)))


def test_runs_that_fit_the_pool_together_are_accepted(config):
    run = run_stack(_two_runs(config, pool_slices=3, slices=(2, 1)))
    assert len(run.by_type(JOBSET_TYPE)) == 1 and len(run.by_type("kubernetes:batch/v1:Job")) == 1


def test_a_queued_pool_takes_more_runs_than_slices_they_wait_in_its_queue(config):
    run = run_stack(_two_runs(config, pool_slices=1, slices=(1, 1), provisioning="flex-start-queued"))
    assert len(run.by_type("kubernetes:batch/v1:Job")) == 2


def test_a_pool_with_a_kueue_queue_admits_multislice_jobsets_whole_in_turn(config):
    # Two 2-slice JobSets on a 2-slice pool: refused without a queue (above); with kueueQueue each
    # waits in the pool's queue until its whole quota (both slices' chips) is free.
    run = run_stack(_two_runs(config, pool_slices=2, slices=(2, 2), kueueQueue=True))
    jobsets = run.by_type(JOBSET_TYPE)
    assert [j.inputs["metadata"]["labels"][KUEUE_QUEUE_LABEL] for j in jobsets] == ["v6e-4x4"] * 2
    kinds = {r.type.rsplit(":", 1)[-1]: r for r in run.registrations if r.type.startswith("kubernetes:kueue")}
    # Quota alone: no ProvisioningRequestConfig, no AdmissionCheck; the nodes come from the autoscaler.
    assert set(kinds) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    quota = kinds["ClusterQueue"].inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert quota["nominalQuota"] == 2 * 16  # two 4x4 slices
    assert "admissionChecksStrategy" not in kinds["ClusterQueue"].inputs["spec"]
    for registration in kinds.values():
        manifest = {k: registration.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        assert schema_errors(manifest, KUEUE_CRD_FILES[manifest["kind"]]) == [], manifest["kind"]
    (pool,) = [r for r in run.by_type("gcp:container/nodePool:NodePool") if r.name == "v6e-4x4-pool"]
    assert "queuedProvisioning" not in pool.inputs  # the pool itself is as without a queue
    pods = [j.inputs["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] for j in jobsets]
    assert all("tolerations" not in pod for pod in pods)  # no queued-provisioning taint to tolerate


def test_recovery_reads_the_kueue_workloads_of_a_pool_with_a_kueue_queue(config, monkeypatch):
    # A suspended JobSet there waits for admission, which only its Kueue Workload tells apart
    # from one Kueue gave up on: recovery is told the job is queued, as on a queued pool.
    seen: set[str] = set()
    original = reconcile.reconcile_jobs

    def spy(cluster, jobs, **kwargs):
        seen.update(kwargs.get("queued", ()))
        return original(cluster, jobs, **kwargs)

    monkeypatch.setattr(reconcile, "reconcile_jobs", spy)
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["kueueQueue"] = True
    run_stack(config)
    assert seen == {_job(config)["name"]}
