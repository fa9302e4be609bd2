"""Live probes against a misbehaving API on loopback: every call ends within its deadline, and a
probe that cannot say is "unavailable" (keep, warn), never a hang or a replacement."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pytest
from support.fakes.fake_kube_api import (
    FakeGkeApi,
    FakeKubernetesApi,
    job,
    kubeconfig_for,
    self_signed_certificate,
)
from support.fakes.fake_redirect import RedirectingServer
from support.fakes.fake_tpu_api import FakeTpuApi
from support.fakes.loopback import LoopbackJsonServer, not_found
from tpu_training_components.live import endpoints
from tpu_training_components.live.checkpoints import read_checkpoints
from tpu_training_components.live.deadline import DeadlineExceeded, call_with_deadline
from tpu_training_components.live.kube_api import list_live_jobs
from tpu_training_components.live.kube_client import ClusterRef, make_container_client
from tpu_training_components.live.tpu_api import list_live_nodes, make_client
from tpu_training_components.resources import reconcile

ZONE = "europe-west4-a"
DEADLINE = 1.5
# What "within the deadline" allows for: thread start-up and one loopback round trip.
SLACK = 1.5


def _timed(call):
    started = time.monotonic()
    value = call()
    return value, time.monotonic() - started


def _probe_nodes(api: FakeTpuApi, **options):
    return _timed(
        lambda: list_live_nodes("p", [ZONE], client=make_client(api.endpoint), deadline=DEADLINE, **options)
    )


def test_endless_pages_stop_at_the_page_cap():
    # The cap, not the deadline, is under test: six pages get 30 s, which a loaded machine needs
    # (a CI run at load average 4 to 5 took over 1.5 s for them).
    with FakeTpuApi() as api:
        api.endless_pages = True  # pages without nodes (a node on two pages is refused itself)
        live, seconds = _timed(
            lambda: list_live_nodes("p", [ZONE], client=make_client(api.endpoint), deadline=30.0, max_pages=5)
        )
    assert live.failures[ZONE] == (
        "TooManyPages: projects/p/locations/europe-west4-a has more than 5 pages of nodes"
    )
    assert len(api.calls) == 6 and not live.nodes and seconds < 30.0 + SLACK


def test_a_node_on_two_pages_makes_the_zone_unavailable():
    with FakeTpuApi() as api:
        api.add(ZONE, "demo-tpu", "READY")
        api.endless_pages = True  # every page repeats the node
        live, _ = _probe_nodes(api)
    assert (
        live.failures[ZONE]
        == f"MalformedAnswer: projects/p/locations/{ZONE}: node 'demo-tpu' is on two pages"
    )


def test_endless_pages_stop_at_the_deadline_when_pages_are_slow():
    with FakeTpuApi() as api:
        api.endless_pages = True
        api.delay_seconds = 0.2
        live, seconds = _probe_nodes(api)
    assert live.failures[ZONE].startswith(
        "DeadlineExceeded: listing projects/p/locations/europe-west4-a took"
    )
    assert seconds < DEADLINE + SLACK


def test_a_dripping_body_never_trips_the_read_timeout_but_trips_the_deadline():
    with FakeTpuApi() as api:
        api.add(ZONE, "demo-tpu", "READY")
        api.drip_seconds = 0.3
        live, seconds = _probe_nodes(api, timeout=1.0)  # each byte comes well within 1 s
    assert live.failures[ZONE].startswith("DeadlineExceeded")
    assert seconds < DEADLINE + SLACK


def test_a_hanging_server_trips_the_deadline():
    with FakeTpuApi() as api:
        api.delay_seconds = 30
        live, seconds = _probe_nodes(api, timeout=60)
    assert live.failures[ZONE].startswith("DeadlineExceeded") and seconds < DEADLINE + SLACK


@pytest.mark.filterwarnings("ignore:Unrecognized State enum value")
@pytest.mark.parametrize("body", [b"{not json", b'{"nodes": "lots"}', b'{"nodes": [{"state": 7}]}'])
def test_malformed_answers_are_unavailable(body):
    """An unknown state *name* reads as STATE_UNSPECIFIED (the client drops it): the decision
    table keeps such a node (tests/recovery/test_recovery.py); these answers cannot be read at all."""
    with FakeTpuApi() as api:
        api.raw_body = body
        live, _ = _probe_nodes(api)
    assert ZONE in live.failures and not live.nodes


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[]", "the answer is a JSON list, not an object"),
        (b'"nodes"', "the answer is a JSON str, not an object"),
        (b'{"nodes": [{"state": "READY"}]}', "node 0 of the answer has no name"),
        (b'{"nodes": [{"name": "", "state": "READY"}]}', "node 0 of the answer has no name"),
        (
            b'{"unreachable": ["projects/p/locations/europe-west4-a"]}',
            "the API reports unreachable locations ['projects/p/locations/europe-west4-a']",
        ),
        (
            b'{"nodes": [{"name": "projects/p/locations/europe-west4-a/nodes/demo-tpu", "state": "READY"},'
            b' {"name": "projects/p/locations/europe-west4-a/nodes/demo-tpu", "state": "PREEMPTED"}]}',
            "the answer names node 'demo-tpu' twice",
        ),
        (
            b'{"nodes": [{"name": "projects/p/locations/us-east5-a/nodes/demo-tpu", "state": "PREEMPTED"}]}',
            "node 0 of the answer is 'projects/p/locations/us-east5-a/nodes/demo-tpu', of another location",
        ),
    ],
)
def test_answers_the_client_reads_as_an_empty_zone_are_unavailable(body, reason):
    """The client library parses these as a zone without nodes, which would make every VM of
    the zone look deleted (and re-created by the next `up`): they are failures instead."""
    with FakeTpuApi() as api:
        api.raw_body = body
        live, _ = _probe_nodes(api)
    assert live.failures[ZONE] == f"MalformedAnswer: projects/p/locations/{ZONE}: {reason}"


def test_an_unknown_state_is_reported_as_sent_and_kept():
    with FakeTpuApi() as api:
        api.allow_off_schema = True  # a state newer than the pinned discovery document, on purpose
        api.add(ZONE, "demo-tpu", "DEFRAGMENTING", labels={"recovery-generation": "3"})
        (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], client=make_client(api.endpoint))
    assert (decision.action, decision.generation, decision.warn) == ("keep", 3, True)
    assert "node is in state 'DEFRAGMENTING', which this version does not know" in decision.message


def test_a_node_with_a_name_and_nothing_else_is_kept():
    with FakeTpuApi() as api:
        api.raw_body = b'{"nodes": [{"name": "projects/p/locations/europe-west4-a/nodes/demo-tpu"}]}'
        (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], client=make_client(api.endpoint))
    assert (decision.action, decision.generation, decision.warn) == ("keep", None, True)
    assert "the API gave the node no state" in decision.message


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([{"metadata": {"labels": {}}}], "item 0 of the answer has no name"),
        ([job("train", active=1), job("train", failed=1)], "the answer names Job 'train' twice"),
        (
            [dict(job("train", failed=1), metadata={"name": "train", "namespace": "other"})],
            "'train' is in namespace 'other'",
        ),
    ],
)
def test_job_lists_that_cannot_be_matched_one_to_one_are_unavailable(tmp_path, items, reason):
    with FakeKubernetesApi() as kube:
        kube.raw_body = json.dumps({"apiVersion": "batch/v1", "kind": "JobList", "items": items}).encode()
        live = list_live_jobs(
            ClusterRef("p", "us-east5", "tpu-dev"), ["default"], kubeconfig=str(kube.kubeconfig(tmp_path))
        )
    assert live.failures["default"] == f"MalformedAnswer: Jobs in default: {reason}"
    assert not live.jobs


def test_every_fault_keeps_the_last_deployed_generation_with_a_warning():
    with FakeTpuApi() as api:
        api.endless_pages = True
        client = make_client(api.endpoint)
        now = datetime(2026, 11, 21, tzinfo=timezone.utc)
        (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], client=client, now=now)
    # The reconcile uses the default deadline and page cap: the cap ends it here.
    assert (decision.action, decision.generation, decision.warn) == ("keep", None, True)
    assert "TPU API unavailable (TooManyPages" in decision.message


def test_a_hanging_gke_api_is_unavailable_not_a_hang():
    cluster = ClusterRef("p", "us-east5", "tpu-dev")
    with FakeGkeApi() as gke:
        gke.delay_seconds = 30
        live, seconds = _timed(
            lambda: list_live_jobs(
                cluster,
                ["default"],
                kubeconfig="",
                container_client=make_container_client(gke.endpoint),
                deadline=DEADLINE,
                timeout=60,
            )
        )
    assert live.failures["default"].startswith("DeadlineExceeded: finding projects/p/locations/us-east5")
    assert seconds < DEADLINE + SLACK


def test_call_with_deadline_passes_results_and_errors_through():
    assert call_with_deadline(lambda: 42, 1, "answer") == 42
    with pytest.raises(KeyError):
        call_with_deadline(lambda: {}["x"], 1, "lookup")
    with pytest.raises(DeadlineExceeded, match="sleeping took longer than 0.1 s"):
        call_with_deadline(lambda: time.sleep(2), 0.1, "sleeping")


# --- answers that are not the API's own: never "no such node", always "unavailable" ------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_a_server_with_an_empty_zone_is_unavailable(status):
    """`requests` follows redirects by itself; the server it lands on answers "no nodes", which
    would make the VM look deleted and re-create it. The redirect is never followed."""
    now = datetime(2026, 11, 21, tzinfo=timezone.utc)
    with FakeTpuApi() as elsewhere, RedirectingServer(elsewhere.endpoint, status) as api:
        client = make_client(api.endpoint)
        (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], client=client, now=now)
    assert api.calls and not elsewhere.calls
    assert (decision.action, decision.generation, decision.unavailable) == ("keep", None, True)
    redirect = f"answered with HTTP {status}, a redirect to '{elsewhere.endpoint}/v2/projects/p"
    assert redirect in decision.message


@pytest.mark.parametrize(
    ("content_type", "body", "reason"),
    [
        ("text/html", b"{}", "answered with Content-Type 'text/html', not application/json"),
        (
            "text/html; charset=utf-8",
            b"<html>Sign in to the Wi-Fi</html>",
            "Content-Type 'text/html; charset",
        ),
        ("", b"{}", "answered with Content-Type '', not application/json"),
    ],
)
def test_a_200_that_is_not_json_is_unavailable(content_type, body, reason):
    with FakeTpuApi() as api:
        api.content_type, api.raw_body = content_type, body
        live, _ = _probe_nodes(api)
    assert live.failures[ZONE].startswith(f"UnexpectedAnswer: listing projects/p/locations/{ZONE}: ")
    assert reason in live.failures[ZONE] and not live.nodes


@pytest.mark.parametrize("status", [203, 300])
def test_a_status_a_list_is_never_answered_with_is_unavailable(status):
    with FakeTpuApi() as api:
        api.fail_with, api.raw_body = status, b"{}"
        live, _ = _probe_nodes(api)
    assert f"answered with HTTP {status}" in live.failures[ZONE] and not live.nodes


def test_the_same_page_token_for_ever_is_refused_at_its_second_coming():
    with FakeTpuApi() as api:
        api.repeated_token = "again"
        live, seconds = _probe_nodes(api)
    assert live.failures[ZONE] == (
        f"MalformedAnswer: projects/p/locations/{ZONE}: the API hands out page token 'again' twice"
    )
    assert len(api.calls) == 2 and seconds < DEADLINE + SLACK


def test_a_huge_answer_is_refused_before_it_is_read_whole():
    with FakeTpuApi() as api:
        for i in range(50):
            api.add(ZONE, f"vm-{i}", "READY")
        live, _ = _probe_nodes(api, max_bytes=1000)
    assert live.failures[ZONE].startswith("UnexpectedAnswer: listing projects/p/locations/")
    assert "bytes, more than 1000" in live.failures[ZONE] and not live.nodes


def test_a_tls_error_is_unavailable(tmp_path):
    from google.auth.credentials import AnonymousCredentials

    with FakeTpuApi(tls=self_signed_certificate(tmp_path)) as api:
        api.add(ZONE, "demo-tpu", "READY")
        # The certificate is one no trust store holds.
        client = endpoints.tpu_nodes_client(api.endpoint, credentials=AnonymousCredentials())
        live = list_live_nodes("p", [ZONE], client=client, deadline=DEADLINE)
    assert "SSLError" in live.failures[ZONE] or "CERTIFICATE_VERIFY_FAILED" in live.failures[ZONE]
    assert not live.nodes


# --- the Kubernetes probe: answers from elsewhere, and the credentials path --------------------

CLUSTER = ClusterRef("p", "us-east5", "tpu-dev")


def _probe_jobs(kubeconfig, **options):
    return _timed(
        lambda: list_live_jobs(CLUSTER, ["default"], kubeconfig=str(kubeconfig), deadline=DEADLINE, **options)
    )


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirected_job_list_is_unavailable_and_keeps_the_running_job(tmp_path, status):
    """urllib3 follows redirects unless told not to; the server it lands on has no Jobs, which
    would make the running Job look deleted and re-create it."""
    with FakeKubernetesApi() as elsewhere, RedirectingServer(elsewhere.endpoint, status) as kube:
        kubeconfig = str(kubeconfig_for(kube.endpoint, tmp_path))
        (decision,) = reconcile.reconcile_jobs(
            CLUSTER, [("train", "default")], read=lambda c, ns: list_live_jobs(c, ns, kubeconfig=kubeconfig)
        )
    assert kube.calls and not elsewhere.calls
    assert (decision.action, decision.generation, decision.unavailable) == ("keep", None, True)
    assert f"Kubernetes API unavailable (ApiException: HTTP {status}" in decision.message


@pytest.mark.parametrize(
    ("content_type", "body", "reason"),
    [
        ("text/html", b'{"kind": "JobList", "items": []}', "answered with Content-Type 'text/html'"),
        ("application/json", b'{"items": []}', "the answer is a None, not a JobList"),
        ("application/json", b"[]", "the answer is a 'list', not a JobList"),
        ("application/json", b"<html>proxy</html>", "the answer is not JSON"),
        ("application/json", b'{"kind": "JobList", "items": {}}', "the JobList's items are not a list"),
        (
            "application/json",
            b'{"kind": "JobList", "items": [{"metadata": {"name": "train"}, "status": {"failed": "1"}}]}',
            'status.failed is "1", not a count',
        ),
    ],
)
def test_job_list_answers_that_are_not_a_job_list_are_unavailable(tmp_path, content_type, body, reason):
    with FakeKubernetesApi() as kube:
        kube.content_type, kube.raw_body = content_type, body
        live, _ = _probe_jobs(kube.kubeconfig(tmp_path))
    assert reason in live.failures["default"] and not live.jobs


def test_a_huge_job_list_is_refused(tmp_path):
    with FakeKubernetesApi() as kube:
        for i in range(20):
            kube.add("default", job(f"train-{i}", active=1))
        live, _ = _probe_jobs(kube.kubeconfig(tmp_path), max_bytes=2000)
    assert "bytes, more than 2000" in live.failures["default"] and not live.jobs


def test_a_dripping_job_list_trips_the_deadline(tmp_path):
    with FakeKubernetesApi() as kube:
        kube.add("default", job("train", active=1))
        kube.drip_seconds = 0.3
        live, seconds = _probe_jobs(kube.kubeconfig(tmp_path), timeout=1.0)
    assert live.failures["default"].startswith("DeadlineExceeded: listing Jobs in default")
    assert seconds < DEADLINE + SLACK


def _release(fifo):
    # Opening the FIFO for writing lets the reader still blocked on it (the probe's abandoned
    # thread, or an exec plugin) finish, so nothing outlives the test.
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader is waiting on it, nothing to let go
        pass


def test_a_kubeconfig_that_is_a_fifo_trips_the_deadline(tmp_path):
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    try:
        live, seconds = _probe_jobs(fifo)
    finally:
        _release(fifo)
    assert live.failures["default"].startswith(f"DeadlineExceeded: loading KUBECONFIG={fifo} took")
    assert seconds < DEADLINE + SLACK and not live.jobs


_CREDENTIAL = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}


def _exec_user(tmp_path, script: str) -> str:
    plugin = tmp_path / "credential-helper"
    plugin.write_text(f"#!/bin/sh\n{script}\n")
    plugin.chmod(0o755)
    return f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: {plugin}}}}}"


def test_an_exec_plugin_that_hangs_trips_the_deadline(tmp_path):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    with FakeKubernetesApi() as kube:
        kube.add("default", job("train", active=1))
        try:
            live, seconds = _probe_jobs(kube.kubeconfig(tmp_path, _exec_user(tmp_path, f"cat '{gate}'")))
        finally:
            _release(gate)
    assert live.failures["default"].startswith("DeadlineExceeded: loading KUBECONFIG=")
    assert seconds < DEADLINE + SLACK and not kube.calls


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("echo 'not json'", "exec: failed to decode process output"),
        ("echo '{}'", "exec: malformed response. missing key 'apiVersion'"),
        ("echo boom >&2; exit 3", "exec: process returned 3. boom"),
        (
            f"echo '{json.dumps(dict(_CREDENTIAL, status={}))}'",
            "exec: missing token or clientCertificateData field in plugin output",
        ),
    ],
)
def test_an_exec_plugin_that_gives_no_credentials_is_unavailable_not_no_such_job(tmp_path, script, reason):
    """The client logs the plugin's failure and lists without credentials; a server that
    answers that (here: one without authentication, answering no Jobs) is not answering for ours."""
    with FakeKubernetesApi() as kube:
        live, _ = _probe_jobs(kube.kubeconfig(tmp_path, _exec_user(tmp_path, script)))
    assert live.failures["default"].startswith("CredentialsUnavailable: KUBECONFIG=")
    assert reason in live.failures["default"]
    assert not kube.calls and not live.jobs


def test_an_exec_plugin_with_a_token_is_used(tmp_path):
    token = json.dumps(dict(_CREDENTIAL, status={"token": "t0k"}))
    with FakeKubernetesApi() as kube:
        kube.add("default", job("train", active=1))
        live, _ = _probe_jobs(kube.kubeconfig(tmp_path, _exec_user(tmp_path, f"echo '{token}'")))
    assert not live.failures and ("default", "train") in live.jobs
    assert kube.headers[0]["authorization"] == "Bearer t0k"


@pytest.mark.parametrize(
    ("raw_body", "content_type"),
    [
        (b"<html>404 page not found</html>", "text/html"),
        (b'{"error": {"code": 404, "message": "no route"}}', "application/json"),
    ],
)
def test_a_404_that_is_not_googles_no_such_cluster_is_unavailable_not_absent(raw_body, content_type):
    """Only the GKE API's own NOT_FOUND says the cluster does not exist (and its Jobs are to be
    created); a proxy's or a wrong endpoint's 404 page says nothing."""
    with FakeGkeApi() as gke:
        gke.raw_body, gke.content_type = raw_body, content_type
        live = list_live_jobs(
            CLUSTER,
            ["default"],
            kubeconfig="",
            container_client=make_container_client(gke.endpoint),
            deadline=DEADLINE,
        )
    assert not live.cluster_absent and live.failures["default"].startswith("NotFound")


def test_googles_own_not_found_is_an_absent_cluster():
    with FakeGkeApi() as gke:
        live = list_live_jobs(
            CLUSTER,
            ["default"],
            kubeconfig="",
            container_client=make_container_client(gke.endpoint),
            deadline=DEADLINE,
        )
    assert live.cluster_absent and not live.failures


def test_a_redirected_gke_api_is_unavailable_not_absent():
    with FakeGkeApi() as elsewhere, RedirectingServer(elsewhere.endpoint, 302) as gke:
        live = list_live_jobs(
            CLUSTER,
            ["default"],
            kubeconfig="",
            container_client=make_container_client(gke.endpoint),
            deadline=DEADLINE,
        )
    assert not live.cluster_absent and not elsewhere.calls
    assert live.failures["default"].startswith(
        "UnexpectedAnswer: finding projects/p/locations/us-east5/clusters/tpu-dev"
    )


# --- a run's checkpoints in its bucket (tpu-training status) ----------------------------------


class FakeStorageApi(LoopbackJsonServer):
    """The Cloud Storage JSON API's listing and object reads, for one bucket holding a run's step
    folder 10 with its commit file."""

    def route(self, method, path, query, headers):
        if path == "/storage/v1/b/ckpts/o":
            return 200, {"kind": "storage#objects", "prefixes": ["run/10/"]}
        if path == "/storage/v1/b/ckpts/o/run%2F10%2Fcommit_success.txt":
            return 200, {
                "kind": "storage#object",
                "bucket": "ckpts",
                "name": "run/10/commit_success.txt",
                "timeCreated": "2026-11-26T07:00:00.000Z",
            }
        return not_found()


def test_a_bucket_whose_listing_drips_is_cut_off_at_the_deadline():
    with FakeStorageApi() as gcs:
        client = endpoints.storage_client("p", gcs.endpoint)
        assert read_checkpoints(client, "gs://ckpts/run", timeout=5).step == 10
        gcs.drip_seconds = 0.3  # each byte well within the read timeout
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="listing gs://ckpts/run took longer than 1.5 s"):
            read_checkpoints(client, "gs://ckpts/run", timeout=1.0, deadline=DEADLINE)
    assert time.monotonic() - started < DEADLINE + SLACK
