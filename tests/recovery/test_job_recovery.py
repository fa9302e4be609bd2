"""Recovery is a reconcile, for Jobs: the decision table, the live probe through the real
`kubernetes` and `google-cloud-container` clients against loopback servers, and the whole stack."""

from __future__ import annotations

import copy
import socket

import pytest
from google.oauth2.credentials import Credentials
from support.fakes.fake_kube_api import FakeGkeApi, FakeKubernetesApi, job, self_signed_certificate
from support.harness.program import changed_registrations, run_stack
from tpu_training_components.domain.job_manifests import KUEUE_QUEUE_LABEL
from tpu_training_components.domain.job_recovery import JobCondition, LiveJob, decide_job
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef, make_container_client
from tpu_training_components.resources import reconcile

CLUSTER = ClusterRef("tpu-training-dev", "europe-west4", "tpu-dev")
JOB = "kubernetes:batch/v1:Job"


def live(*conditions: tuple[str, str], active=0, ready=0, generation="4", labels=None):
    return LiveJob(
        "train",
        "default",
        {"recovery-generation": generation, **(labels or {})},
        tuple(JobCondition(kind, "True", reason, "details") for kind, reason in conditions),
        active=active,
        ready=ready,
    )


@pytest.mark.parametrize(
    ("job_state", "action", "generation", "warn"),
    [
        (None, "create", None, False),
        (live(), "keep", 4, False),  # no Pod yet
        (live(active=4, ready=0), "keep", 4, False),  # Pods pending: waiting for flex-start nodes
        (live(active=4, ready=2), "keep", 4, False),
        (live(active=4, ready=4), "keep", 4, False),
        (live(("Complete", "")), "keep", 4, False),
        (live(("SuccessCriteriaMet", ""), ("Complete", "")), "keep", 4, False),
        (live(("Failed", "BackoffLimitExceeded")), "replace", 5, False),
        (live(("Failed", "DeadlineExceeded")), "replace", 5, False),
        (live(("Failed", "PodFailurePolicy")), "replace", 5, False),
        (live(("FailureTarget", "BackoffLimitExceeded"), active=2), "replace", 5, False),
        (live(("Suspended", "JobSuspended")), "keep", 4, True),
        # Kueue's webhook creates a queued Job suspended: waiting for admission, no warning.
        (live(("Suspended", "JobSuspended"), labels={KUEUE_QUEUE_LABEL: "v6e"}), "keep", 4, False),
    ],
)
def test_decision_table(job_state, action, generation, warn):
    decision = decide_job("train", job_state)
    assert (decision.action, decision.generation, decision.warn) == (action, generation, warn)
    assert decision.message.startswith("train: ")


def test_a_condition_that_is_false_does_not_count():
    finished_then_not = LiveJob(
        "train", "default", {}, (JobCondition("Failed", "False", "x"),), active=1, ready=1
    )
    assert decide_job("train", finished_then_not).action == "keep"


def test_failure_reason_is_in_the_message():
    decision = decide_job("train", live(("Failed", "BackoffLimitExceeded")))
    assert "Failed (BackoffLimitExceeded: details)" in decision.message
    assert "resumes from its checkpoint" in decision.message


def test_complete_is_never_rerun():
    assert "never re-run" in decide_job("train", live(("Complete", ""))).message


# --- the probe, through KUBECONFIG ---------------------------------------------------------


@pytest.fixture
def kube():
    with FakeKubernetesApi() as api:
        yield api


def test_one_list_call_per_namespace_whatever_the_number_of_jobs(kube, tmp_path):
    for i in range(30):
        kube.add("default", job(f"job-{i}", active=1, ready=1))
    kube.add("research", job("other", conditions=(("Failed", "True", "BackoffLimitExceeded"),), generation=2))
    result = list_live_jobs(
        CLUSTER, ["default", "research", "default"], kubeconfig=str(kube.kubeconfig(tmp_path))
    )
    assert result.calls == 2 and len(kube.calls) == 2
    assert len(result.jobs) == 31 and not result.failures
    failed = result.jobs[("research", "other")]
    assert failed.generation == 2
    assert failed.conditions == (
        JobCondition("Failed", "True", "BackoffLimitExceeded", "BackoffLimitExceeded happened"),
    )


def test_only_this_projects_jobs_are_read(kube, tmp_path):
    kube.add("default", job("theirs", ours=False))
    kube.add("default", job("ours"))
    result = list_live_jobs(CLUSTER, ["default"], kubeconfig=str(kube.kubeconfig(tmp_path)))
    assert set(result.jobs) == {("default", "ours")}


def test_kubeconfig_comes_from_the_environment(kube, tmp_path, monkeypatch):
    kube.add("default", job("ours"))
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
    result = list_live_jobs(CLUSTER, ["default"])
    assert set(result.jobs) == {("default", "ours")}
    assert result.source.startswith("KUBECONFIG=")


@pytest.mark.parametrize("status", [500, 403, 401])
def test_http_errors_are_unknown_not_absent(kube, tmp_path, status):
    kube.fail_with = status
    result = list_live_jobs(CLUSTER, ["default", "research"], kubeconfig=str(kube.kubeconfig(tmp_path)))
    assert set(result.failures) == {"default", "research"}
    assert f"HTTP {status}" in result.failures["default"]
    assert not result.jobs


def test_time_out(kube, tmp_path):
    kube.delay_seconds = 1.0
    result = list_live_jobs(CLUSTER, ["default"], kubeconfig=str(kube.kubeconfig(tmp_path)), timeout=0.2)
    assert "default" in result.failures


def test_refused_connection(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    result = list_live_jobs(CLUSTER, ["default"], kubeconfig=str(config), timeout=2)
    assert "default" in result.failures


def test_unreadable_kubeconfig(tmp_path):
    result = list_live_jobs(CLUSTER, ["default"], kubeconfig=str(tmp_path / "missing"))
    assert "default" in result.failures


# --- the probe, through the GKE API and a bearer token, over TLS --------------------------------


def test_gke_api_gives_the_endpoint_and_ca_and_adc_the_token(tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    with FakeKubernetesApi(tls=(cert, key)) as kube, FakeGkeApi() as gke:
        kube.add("default", job("train", active=4, ready=4))
        gke.add(CLUSTER.path, kube.address, cert.read_bytes())
        result = list_live_jobs(
            CLUSTER,
            ["default"],
            kubeconfig="",
            container_client=make_container_client(gke.endpoint),
            credentials=Credentials(token="token-from-adc"),
        )
    assert not result.failures, result.failures
    assert set(result.jobs) == {("default", "train")}
    assert gke.calls == [f"/v1/{CLUSTER.path}"]
    assert kube.headers[0]["authorization"] == "Bearer token-from-adc"


def test_a_cluster_that_does_not_exist_has_no_jobs():
    with FakeGkeApi() as gke:
        result = list_live_jobs(
            CLUSTER, ["default"], kubeconfig="", container_client=make_container_client(gke.endpoint)
        )
    assert result.cluster_absent and not result.failures
    decisions = reconcile.reconcile_jobs(CLUSTER, [("train", "default")], read=lambda c, n: result)
    assert [(d.action, d.reason) for d in decisions] == [("create", "cluster tpu-dev does not exist yet")]


def test_no_credentials_keeps_everything():
    # conftest points GOOGLE_APPLICATION_CREDENTIALS at a file that does not exist.
    with FakeGkeApi() as gke:
        gke.add(CLUSTER.path, "127.0.0.1:1", b"not used")
        result = list_live_jobs(
            CLUSTER, ["default"], kubeconfig="", container_client=make_container_client(gke.endpoint)
        )
    assert "DefaultCredentialsError" in result.failures["default"]
    decision = reconcile.reconcile_jobs(CLUSTER, [("train", "default")], read=lambda c, n: result)[0]
    assert (decision.action, decision.generation, decision.warn) == ("keep", None, True)
    assert "nothing is replaced on unknown state" in decision.message


# --- the whole stack, reading live Jobs ---------------------------------------------------------


@pytest.fixture
def live_cluster(monkeypatch, tmp_path, kube):
    monkeypatch.delenv("TPU_TRAINING_OFFLINE", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
    return kube


@pytest.fixture
def gke_only(config):
    """The dev config without its TPU VM, so only the Job probe reads live state."""
    config["tpu-training:tpuVms"] = []
    return config


def _job(run, name="train-v6e"):
    return run.one(JOB, f"{name}-job")


def test_failed_job_is_replaced_alone(gke_only, live_cluster, decided_at):
    gke_only["tpu-training:jobs"].append(dict(gke_only["tpu-training:jobs"][0], name="other-run"))
    gke_only["tpu-training:nodePools"][0]["slices"] = 2  # a slice for each run
    live_cluster.add(
        "default", job("train-v6e", generation=3, conditions=(("Failed", "True", "BackoffLimitExceeded"),))
    )
    live_cluster.add("default", job("other-run", generation=3, active=4, ready=4))
    previous = {"jobRecoveryGenerations": {"train-v6e": 3, "other-run": 3}}

    failed = run_stack(copy.deepcopy(gke_only), previous_outputs=previous)
    # One namespace: its Jobs, then its Pods (other-run trains, so when its Pods started is read
    # to judge its progress).
    assert live_cluster.calls == ["/apis/batch/v1/namespaces/default/jobs", "/api/v1/namespaces/default/pods"]
    replaced = _job(failed)
    assert replaced.options["replacementTrigger"] == decided_at
    assert replaced.options["deleteBeforeReplace"] is True
    assert replaced.inputs["metadata"]["labels"]["recovery-generation"] == str(decided_at)
    assert any(
        "train-v6e: Job has Failed (BackoffLimitExceeded" in m and "will be replaced" in m
        for m in failed.infos
    )

    # The new Job says why it was made, in its own metadata (not its Pod template).
    assert replaced.inputs["metadata"]["annotations"]["tpu-training/recovery-cause"] == "failed"
    assert "tpu-training/recovery-cause" not in str(replaced.inputs["spec"])
    assert "tpu-training/recovery-cause" not in _job(failed, "other-run").inputs["metadata"]["annotations"]

    # Against the same stack with the Job running again, only the failed Job's registration differs.
    live_cluster.jobs.clear()
    live_cluster.add("default", job("train-v6e", generation=3, active=4, ready=4))
    live_cluster.add("default", job("other-run", generation=3, active=4, ready=4))
    steady = run_stack(copy.deepcopy(gke_only), previous_outputs=previous)
    assert changed_registrations(failed, steady) == ["train-v6e-job"]


def test_complete_job_keeps_its_generation(gke_only, live_cluster):
    live_cluster.add("default", job("train-v6e", generation=2, conditions=(("Complete", "True", ""),)))
    run = run_stack(gke_only, previous_outputs={"jobRecoveryGenerations": {"train-v6e": 2}})
    assert _job(run).options["replacementTrigger"] == 2
    assert any("Job is Complete; a finished training is never re-run -> is kept" in m for m in run.infos)


def test_cluster_down_keeps_the_last_deployed_generation(gke_only, live_cluster):
    live_cluster.fail_with = 503
    run = run_stack(gke_only, previous_outputs={"jobRecoveryGenerations": {"train-v6e": 7}})
    assert _job(run).options["replacementTrigger"] == 7
    assert any(
        "Kubernetes API unavailable (ServiceException: HTTP 503 Service Unavailable)" in w
        for w in run.warnings
    )


def test_absent_job_gets_a_new_generation_so_a_plain_up_recreates_it(gke_only, live_cluster, decided_at):
    """Deleted by hand: still in the stack's state, so only a new trigger makes `pulumi up`
    (without --refresh) create it again."""
    run = run_stack(gke_only, previous_outputs={"jobRecoveryGenerations": {"train-v6e": 2}})
    assert _job(run).options["replacementTrigger"] == decided_at
    assert any(
        "no such Job in its namespace -> will be created (a new recovery generation)" in m for m in run.infos
    )


@pytest.mark.parametrize("label", ["junk", "²", "", "1e3"])
def test_unreadable_generation_label_never_counts_as_zero(label):
    running = decide_job("train", live(active=4, ready=4, generation=label))
    assert (running.action, running.generation, running.warn) == ("keep", None, True)
    failed = decide_job("train", live(("Failed", "BackoffLimitExceeded"), generation=label))
    assert (failed.action, failed.generation, failed.after_last_deployed) == ("replace", None, True)


def test_absent_job_never_deployed_gets_a_new_generation_too(gke_only, live_cluster, decided_at):
    run = run_stack(gke_only, previous_outputs={"jobRecoveryGenerations": {}})
    assert _job(run).options["replacementTrigger"] == decided_at
