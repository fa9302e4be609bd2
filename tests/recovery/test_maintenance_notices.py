"""Maintenance notices (issue 27, item 1): read from the Cloud TPU API's v2 node list and
from GKE node labels and taints, named, and turned into a save request the reference trainer
reads, once per notice; bad input is a warning naming the node and the value; a notice never
changes a recovery decision.

Sources:
- the Cloud TPU v2 REST discovery document, revision 20261001 (``tpu.v2.json`` in
  google-api-python-client 2.202.0, requirements-dev.txt): ``Node.upcomingMaintenance``
  {type, canReschedule, windowStartTime, windowEndTime, latestWindowStartTime,
  maintenanceStatus}, ``type`` UNKNOWN_TYPE | SCHEDULED | UNSCHEDULED, ``maintenanceStatus``
  UNKNOWN | PENDING | ONGOING, times RFC 3339 text; the fake's answers are validated against it
  in tests/project/test_fidelity.py. google-cloud-tpu 1.28.0's ``tpu_v2`` messages (from the v2 proto)
  lack the field, so it is read from the answer's JSON.
- GKE: Google's "Manage GKE node disruption for GPUs and TPUs",
  https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu, and "Manage
  AI-optimized GKE clusters", https://cloud.google.com/ai-hypercomputer/docs/manage/manage-gke-clusters
  (GKE 1.31.1-gke.2008000+: the label ``cloud.google.com/scheduled-maintenance-time``, epoch
  seconds); the exact keys of the other label and the taints as GKE's node maintenance
  controller declares them (package nodemanagement.gke.io/maintenance-controller, constants
  ``latestStartTimeLabel``, ``activeMaintenanceLabel``, ``maintenanceWindowStartTaintKey``,
  ``nodeTerminationTaintKey``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.fakes.fake_kube_nodes import FakeNodeApi, gke_node
from support.fakes.fake_tpu_api import FakeTpuApi
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.sandbox import trainer_modules
from tpu_training_components.domain import maintenance_notices as mn
from tpu_training_components.domain.recovery import decide
from tpu_training_components.live import endpoints
from tpu_training_components.live.kube_api import list_pool_nodes
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.progress_records import SAVE_REQUEST
from tpu_training_components.live.tpu_api import list_live_nodes
from tpu_training_components.resources import reconcile

from tpu_training import exit_codes, project_files
from tpu_training.recovery import maintenance
from tpu_training.recovery.recovery_round import Recoverer
from tpu_training.recovery.stack_probe import Probe, Target, load_settings, notice_step

ZONE = "europe-west4-a"
NOW = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc)
START = NOW + timedelta(hours=3)
VM_BUCKET = "tpu-training-dev-dev-ckpt-europe-west4"
JOB_BUCKET = "tpu-training-dev-dev-ckpt-us-east5"
VM_RUN = f"gs://{VM_BUCKET}/checkpoints/demo-tpu"
JOB_RUN = f"gs://{JOB_BUCKET}/checkpoints/train-v6e"
CLUSTER = ClusterRef("tpu-training-dev", "us-east5", "tpu-dev")


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def upcoming(start: datetime = START, **changes: Any) -> dict[str, Any]:
    """``upcomingMaintenance`` as the v2 REST API writes it."""
    return {
        "type": "SCHEDULED",
        "canReschedule": True,
        "windowStartTime": rfc3339(start),
        "windowEndTime": rfc3339(start + timedelta(hours=4)),
        "latestWindowStartTime": rfc3339(start + timedelta(days=2)),
        "maintenanceStatus": "PENDING",
        **changes,
    }


# --- the client library: what this code relies on ---------------------------------------------


def test_the_v2_rest_node_has_upcoming_maintenance_and_the_v2_message_drops_it():
    """Why nodes are listed through v2 and the notice is read from the answer's JSON: the v2 REST
    API's ``Node`` has ``upcomingMaintenance`` (its discovery document, the published schema),
    while google-cloud-tpu's ``tpu_v2`` messages, made from the v2 proto, have no such field."""
    from importlib.metadata import version

    from google.cloud import tpu_v2
    from support.harness.discovery import discovery_document

    document = discovery_document("tpu", "v2")
    assert document["revision"] == "20261001"
    schemas = document["schemas"]
    assert schemas["Node"]["properties"]["upcomingMaintenance"]["$ref"] == "UpcomingMaintenance"
    maintenance = schemas["UpcomingMaintenance"]["properties"]
    assert sorted(maintenance) == sorted(upcoming())
    assert maintenance["type"]["enum"] == ["UNKNOWN_TYPE", "SCHEDULED", "UNSCHEDULED"]
    assert maintenance["maintenanceStatus"]["enum"] == ["UNKNOWN", "PENDING", "ONGOING"]
    # Times are RFC 3339 *text* (no google-datetime format): one that does not parse reaches
    # maintenance_notices, which warns.
    assert maintenance["windowStartTime"] == {
        "description": maintenance["windowStartTime"]["description"],
        "type": "string",
    }
    # The same node states and health as the library's message: the decision table reads them.
    assert schemas["Node"]["properties"]["state"]["enum"] == [s.name for s in tpu_v2.Node.State]
    assert schemas["Node"]["properties"]["health"]["enum"] == [h.name for h in tpu_v2.Node.Health]
    assert version("google-cloud-tpu") == "1.28.0"
    assert "upcoming_maintenance" not in tpu_v2.Node.meta.fields


def test_the_rest_shape_parses_into_the_librarys_message_without_the_notice():
    from google.cloud import tpu_v2

    answer = {
        "nodes": [
            {"name": "projects/p/locations/z/nodes/a", "state": "READY", "upcomingMaintenance": upcoming()}
        ]
    }
    (node,) = tpu_v2.ListNodesResponse.from_json(json.dumps(answer), ignore_unknown_fields=True).nodes
    assert node.state.name == "READY"
    # Dropped by the message: live/tpu_api reads it from the answer itself.
    assert "upcoming_maintenance" not in type(node).meta.fields


# --- TPU notices through the loopback API ------------------------------------------------------


def test_one_list_call_per_zone_gives_states_and_notices_and_the_decision_is_unchanged():
    with FakeTpuApi() as api:
        api.add(ZONE, "demo-tpu", "READY", health="HEALTHY", upcomingMaintenance=upcoming())
        api.add(ZONE, "other", "READY", labels={"recovery-generation": "4"})
        live = list_live_nodes("p", [ZONE], endpoint=api.endpoint)
        (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], live=live, now=NOW)
    assert len(api.calls) == 1 and live.calls == 1
    assert api.calls[0].split("?")[0].startswith("/v2/projects/p/locations/")
    node = live.nodes[(ZONE, "demo-tpu")]
    assert node.maintenance == upcoming()
    assert live.nodes[(ZONE, "other")].maintenance == {}
    # A healthy node with a notice is kept, exactly as without one.
    assert decision == decide("demo-tpu", replace(node, maintenance={}), now=NOW)
    assert decision.action == "keep"
    (notice,) = mn.tpu_notice("demo-tpu", ZONE, node.maintenance, NOW).notices
    assert (notice.type, notice.status, notice.window_start, notice.can_reschedule) == (
        "SCHEDULED",
        "PENDING",
        START,
        True,
    )


def test_a_time_that_does_not_parse_is_a_warning_and_the_decision_stands():
    with FakeTpuApi() as api:
        api.allow_off_schema = True  # a status the published enum lacks, on purpose
        api.add(
            ZONE,
            "demo-tpu",
            "READY",
            labels={"recovery-generation": "4"},
            upcomingMaintenance=upcoming(windowStartTime="tomorrow", maintenanceStatus="MAYBE"),
        )
        live = list_live_nodes("p", [ZONE], endpoint=api.endpoint)
    (decision,) = reconcile.reconcile_tpu_vms("p", [("demo-tpu", ZONE)], live=live, now=NOW)
    assert (decision.action, decision.generation, decision.unavailable) == ("keep", 4, False)
    read = mn.tpu_notice("demo-tpu", ZONE, live.nodes[(ZONE, "demo-tpu")].maintenance, NOW)
    assert any("windowStartTime = 'tomorrow' is not an RFC 3339 time" in w for w in read.warnings)
    assert any("maintenanceStatus = 'MAYBE'" in w for w in read.warnings)


def test_an_ongoing_window_that_ends_unhealthy_is_the_decision_tables_to_handle():
    with FakeTpuApi() as api:
        since = NOW - timedelta(hours=1)
        api.add(
            ZONE,
            "demo-tpu",
            "READY",
            health="UNHEALTHY_MAINTENANCE",
            healthDescription=f"The TPU had a maintenance event at {rfc3339(since)}",
            labels={"recovery-generation": "4"},
            upcomingMaintenance=upcoming(NOW - timedelta(hours=2), maintenanceStatus="ONGOING"),
        )
        (decision,) = reconcile.reconcile_tpu_vms(
            "p", [("demo-tpu", ZONE)], client=endpoints.tpu_nodes_client(api.endpoint), now=NOW
        )
    assert (decision.action, decision.generation) == ("replace", 5)  # past the 30-minute grace


# --- bad input: a warning naming the node and the value, never an exception ---------------------


@pytest.mark.parametrize(
    ("changes", "warning", "kept"),
    [
        (
            {"windowEndTime": "soon"},
            "upcomingMaintenance.windowEndTime = 'soon' is not an RFC 3339 time",
            True,
        ),
        ({"windowStartTime": "2026-13-40T00:00:00Z"}, "windowStartTime = '2026-13-40T00:00:00Z'", True),
        ({"windowStartTime": "2026-11-26T12:00:00"}, "windowStartTime = '2026-11-26T12:00:00' is not", True),
        ({"windowStartTime": None}, "a maintenance notice without a window start", True),
        ({"windowEndTime": rfc3339(START - timedelta(hours=1))}, "the maintenance window ends (", True),
        ({"latestWindowStartTime": rfc3339(START - timedelta(hours=1))}, "the latest start (", True),
        ({"maintenanceStatus": "MAYBE"}, "maintenanceStatus = 'MAYBE' is neither PENDING nor ONGOING", True),
        (
            {
                "windowStartTime": rfc3339(NOW - timedelta(days=3)),
                "windowEndTime": rfc3339(NOW - timedelta(days=2)),
                "latestWindowStartTime": rfc3339(NOW - timedelta(days=2)),
            },
            "a PENDING maintenance notice whose window is over",
            False,
        ),
    ],
)
def test_bad_tpu_notices_are_warnings_that_name_the_node_and_the_value(changes, warning, kept):
    raw = {key: value for key, value in upcoming(**changes).items() if value is not None}
    read = mn.tpu_notice("demo-tpu", ZONE, raw, NOW)
    assert len(read.warnings) == 1, read.warnings
    assert read.warnings[0].startswith(f"TPU VM demo-tpu ({ZONE}): ")
    assert warning in read.warnings[0]
    assert len(read.notices) == (1 if kept else 0)


def test_a_bad_end_is_dropped_and_the_start_still_asks_for_a_save():
    read = mn.tpu_notice("demo-tpu", ZONE, upcoming(windowEndTime=rfc3339(START - timedelta(hours=1))), NOW)
    (notice,) = read.notices
    assert notice.window_end is None and notice.window_start == START
    assert mn.save_deadline(notice, NOW, timedelta(seconds=60)) == START - timedelta(seconds=60)


def test_a_notice_without_a_start_asks_for_no_save():
    raw = {k: v for k, v in upcoming().items() if k != "windowStartTime"}
    (notice,) = mn.tpu_notice("demo-tpu", ZONE, raw, NOW).notices
    assert mn.save_deadline(notice, NOW, timedelta(0)) is None


def test_the_save_deadline_keeps_the_checkpoints_time_before_the_window():
    (notice,) = mn.tpu_notice("demo-tpu", ZONE, upcoming(), NOW).notices
    cost = timedelta(seconds=60)
    assert mn.save_deadline(notice, NOW, cost) == START - cost
    # Closer than the checkpoint's time: the start itself (maintenance may begin later in its window).
    assert mn.save_deadline(notice, START - timedelta(seconds=30), cost) == START
    # In the window, nothing started yet: by its end.
    assert mn.save_deadline(notice, START + timedelta(hours=1), cost) == START + timedelta(hours=4)
    # ONGOING: the node is being stopped; nothing to ask.
    assert mn.save_deadline(replace(notice, status="ONGOING"), NOW, cost) is None


@pytest.mark.parametrize(
    ("labels", "taints", "warning", "status"),
    [
        (
            {mn.SCHEDULED_MAINTENANCE_LABEL: "next-week"},
            (),
            "label cloud.google.com/scheduled-maintenance-time='next-week'",
            "PENDING",
        ),
        (
            {mn.SCHEDULED_MAINTENANCE_LABEL: "1e9"},
            (),
            "='1e9' is not a time in seconds since the epoch",
            "PENDING",
        ),
        (
            {mn.LATEST_MAINTENANCE_LABEL: str(int(START.timestamp()))},
            (),
            "without a window start",
            "PENDING",
        ),
        (
            {mn.SCHEDULED_MAINTENANCE_LABEL: str(int((NOW - timedelta(days=1)).timestamp()))},
            (),
            "a PENDING maintenance notice whose window is over",
            None,
        ),
    ],
)
def test_bad_gke_notices_are_warnings_that_name_the_node_and_the_value(labels, taints, warning, status):
    node = mn.PoolNode("gke-node-1", {mn.NODE_POOL_LABEL: "v6e-4x4", **labels}, taints)
    read = mn.gke_notice(node, NOW)
    assert any(
        w.startswith("GKE node gke-node-1 (pool v6e-4x4): ") and warning in w for w in read.warnings
    ), read.warnings
    assert [n.status for n in read.notices] == ([status] if status else [])


def test_gke_labels_and_taints_read_as_notices():
    start = str(int(START.timestamp()))
    pending = mn.PoolNode("n-1", {mn.NODE_POOL_LABEL: "p", mn.SCHEDULED_MAINTENANCE_LABEL: start})
    started = mn.PoolNode("n-2", {mn.NODE_POOL_LABEL: "p"}, (mn.WINDOW_STARTED_TAINT,))
    ending = mn.PoolNode("n-3", {mn.NODE_POOL_LABEL: "p"}, (mn.IMPENDING_TERMINATION_TAINT,))
    active = mn.PoolNode("n-4", {mn.NODE_POOL_LABEL: "p", mn.ACTIVE_MAINTENANCE_LABEL: "ONGOING"})
    quiet = mn.PoolNode("n-5", {mn.NODE_POOL_LABEL: "p"}, ("google.com/tpu",))
    (notice,) = mn.gke_notice(pending, NOW).notices
    assert (notice.status, notice.window_start, notice.pool, notice.source) == ("PENDING", START, "p", "gke")
    for node in (started, ending, active):
        read = mn.gke_notice(node, NOW)
        assert [n.status for n in read.notices] == ["ONGOING"] and read.warnings == []
    assert mn.gke_notice(quiet, NOW).notices == []


# --- GKE nodes through the loopback Kubernetes API ----------------------------------------------


def test_one_call_lists_the_pools_nodes_with_their_labels_and_taints(tmp_path: Path):
    with FakeNodeApi() as kube:
        start = str(int(START.timestamp()))
        kube.nodes += [
            gke_node("n-1", "v6e-4x4", labels={mn.SCHEDULED_MAINTENANCE_LABEL: start}),
            gke_node("n-2", "v6e-4x4-1", taints=(mn.IMPENDING_TERMINATION_TAINT,)),
            gke_node("other", "someone-elses"),
        ]
        nodes = list_pool_nodes(CLUSTER, ["v6e-4x4", "v6e-4x4-1"], kubeconfig=str(kube.kubeconfig(tmp_path)))
    assert nodes.failure is None and nodes.calls == 1
    assert kube.node_selectors == ["cloud.google.com/gke-nodepool in (v6e-4x4,v6e-4x4-1)"]
    assert [(n.name, n.pool) for n in nodes.nodes] == [("n-1", "v6e-4x4"), ("n-2", "v6e-4x4-1")]
    assert nodes.nodes[0].labels[mn.SCHEDULED_MAINTENANCE_LABEL] == start
    assert nodes.nodes[1].taints == ("google.com/tpu", mn.IMPENDING_TERMINATION_TAINT)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'{"kind": "NodeList", "items": [{"metadata": {}}]}', "node 0 of the answer has no name"),
        (
            b'{"kind": "NodeList", "items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}',
            "not a map of strings",
        ),
        (
            b'{"kind": "NodeList", "items": [{"metadata": {"name": "n"}, "spec": {"taints": "x"}}]}',
            "not a list",
        ),
        (b'{"kind": "JobList", "items": []}', "not a NodeList"),
    ],
)
def test_a_node_list_that_is_not_one_is_a_failure_not_an_exception(tmp_path: Path, body: bytes, problem: str):
    with FakeNodeApi() as kube:
        kube.raw_body = body
        nodes = list_pool_nodes(CLUSTER, ["v6e-4x4"], kubeconfig=str(kube.kubeconfig(tmp_path)))
    assert nodes.nodes == [] and nodes.failure is not None and problem in nodes.failure


# --- save requests: the dev stack, a loopback bucket, the trainer's own parser -----------------


@pytest.fixture(scope="module")
def settings():
    project = project_files.load_project(Path(__file__).resolve().parents[2])
    return load_settings(Target(project, "dev", "dev")).settings


@pytest.fixture
def gcs():
    with LoopbackGcs(VM_BUCKET, JOB_BUCKET) as server:
        yield server, endpoints.storage_client("tpu-training-dev", server.endpoint)


def _tpu_notice(start: datetime = START, node: str = "demo-tpu") -> mn.MaintenanceNotice:
    (notice,) = mn.tpu_notice(node, ZONE, upcoming(start), NOW).notices
    return notice


def _request(client: Any, run: str) -> dict[str, Any]:
    bucket, _, prefix = run[len("gs://") :].partition("/")
    return json.loads(client.bucket(bucket).blob(f"{prefix}/{SAVE_REQUEST}").download_as_text())


def _writes(server: LoopbackGcs) -> list[str]:
    return [r for r in server.requests if r.startswith(("POST /upload", "PUT /upload"))]


def test_a_notice_is_asked_once_and_the_trainer_accepts_the_request(settings, gcs):
    server, client = gcs
    first = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=lambda: client, write=True)
    (report,) = first.notices
    assert [(r.kind, r.name, r.checkpoint_dir) for r in report.affected] == [("tpuVm", "demo-tpu", VM_RUN)]
    assert report.save_requested and [s.status for s in report.saves] == [maintenance.REQUESTED]
    assert first.warnings == []
    written = _request(client, VM_RUN)
    # The stack's checkpointing.costSeconds (20) before the window.
    assert written == {
        "format": "tpu-training-save-request/1",
        "id": f"maintenance-tpu-demo-tpu-{int(START.timestamp())}",
        "reason": "maintenance",
        "before": rfc3339(START - timedelta(seconds=20)),
    }
    with trainer_modules() as trainer:
        request, problem = trainer.save_requests.read_save_request(json.dumps(written), NOW.timestamp())
    assert problem is None
    assert request == trainer.save_requests.SaveRequest(
        written["id"], "maintenance", (START - timedelta(seconds=20)).timestamp()
    )

    writes = len(_writes(server))
    again = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=lambda: client, write=True)
    assert [s.status for s in again.notices[0].saves] == [maintenance.ALREADY_REQUESTED]
    assert again.notices[0].save_requested
    assert len(_writes(server)) == writes  # nothing written a second time

    # The window moved: another notice, another request.
    moved = maintenance.request_saves(
        settings, [_tpu_notice(START + timedelta(hours=1))], NOW, storage=lambda: client, write=True
    )
    assert [s.status for s in moved.notices[0].saves] == [maintenance.REQUESTED]
    assert (
        _request(client, VM_RUN)["id"]
        == f"maintenance-tpu-demo-tpu-{int((START + timedelta(hours=1)).timestamp())}"
    )


def test_a_gke_node_notice_asks_every_job_on_its_pool_and_the_earliest_window_first(settings, gcs):
    _, client = gcs
    later = str(int((START + timedelta(hours=5)).timestamp()))
    sooner = str(int(START.timestamp()))
    notices = [
        *mn.gke_notice(
            mn.PoolNode("n-1", {mn.NODE_POOL_LABEL: "v6e-4x4", mn.SCHEDULED_MAINTENANCE_LABEL: later}), NOW
        ).notices,
        *mn.gke_notice(
            mn.PoolNode("n-2", {mn.NODE_POOL_LABEL: "v6e-4x4", mn.SCHEDULED_MAINTENANCE_LABEL: sooner}), NOW
        ).notices,
        *mn.gke_notice(
            mn.PoolNode("x-1", {mn.NODE_POOL_LABEL: "not-ours", mn.SCHEDULED_MAINTENANCE_LABEL: sooner}), NOW
        ).notices,
    ]
    result = maintenance.request_saves(settings, notices, NOW, storage=lambda: client, write=True)
    by_node = {r.notice.node: r for r in result.notices}
    assert [r.name for r in by_node["n-2"].affected] == ["train-v6e"]
    assert [s.status for s in by_node["n-2"].saves] == [maintenance.REQUESTED]
    assert [s.status for s in by_node["n-1"].saves] == [maintenance.EARLIER_FIRST]
    assert by_node["x-1"].affected == [] and not by_node["x-1"].save_requested
    assert _request(client, JOB_RUN)["id"] == f"maintenance-gke-n-2-{sooner}"


def test_a_write_that_fails_is_a_warning_and_the_next_round_asks_again(settings, gcs):
    server, client = gcs
    server.intercept = lambda method, path, query: not path.startswith("/upload")
    failed = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=lambda: client, write=True)
    assert [s.status for s in failed.notices[0].saves] == [maintenance.FAILED]
    assert not failed.notices[0].save_requested
    assert len(failed.warnings) == 1
    assert failed.warnings[0].startswith(
        f"TPU VM demo-tpu: the save request in {VM_RUN} could not be written"
    )
    server.intercept = None
    retried = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=lambda: client, write=True)
    assert [s.status for s in retried.notices[0].saves] == [maintenance.REQUESTED]


def test_no_storage_client_is_a_warning(settings):
    def no_credentials() -> Any:
        raise RuntimeError("no Application Default Credentials")

    result = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=no_credentials, write=True)
    assert [s.status for s in result.notices[0].saves] == [maintenance.FAILED]
    assert "no Application Default Credentials" in result.warnings[0]


def test_without_write_nothing_is_written(settings, gcs):
    server, client = gcs
    result = maintenance.request_saves(settings, [_tpu_notice()], NOW, storage=lambda: client, write=False)
    assert [s.status for s in result.notices[0].saves] == [maintenance.NOT_REQUESTED]
    assert _writes(server) == []


# --- a recover round: the notices in its output and JSON, the decisions untouched ----------------


def test_a_round_names_the_notices_asks_once_and_warns_once(settings, gcs, tmp_path, monkeypatch):
    server, client = gcs
    with FakeTpuApi() as tpu, FakeNodeApi() as kube:
        tpu.add(
            ZONE,
            "demo-tpu",
            "READY",
            health="HEALTHY",
            labels={"recovery-generation": "3"},
            upcomingMaintenance=upcoming(),
        )
        kube.add("default", _job())
        stale = str(int((NOW - timedelta(days=1)).timestamp()))
        kube.nodes.append(gke_node("n-1", "v6e-4x4", labels={mn.SCHEDULED_MAINTENANCE_LABEL: stale}))
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        probe = Probe()
        step = notice_step(probe, write=True)
        step.storage = lambda _: client
        step_now = step.__call__
        lines: list[str] = []
        recoverer = Recoverer(
            Target(project_files.load_project(Path(__file__).resolve().parents[2]), "dev", "dev"),
            probe=probe,
            up=None,
            say=lines.append,
            notices=lambda s, now: step_now(s, NOW),
        )
        first = recoverer.run_round()
        second = recoverer.run_round()
    assert len(tpu.calls) == 2  # one per round: the notices come from the probe's own listing
    assert [d.action for _, d in first.decisions] == ["keep", "keep"]
    (tpu_notice,) = first.to_json()["notices"]
    assert tpu_notice["node"] == "demo-tpu" and tpu_notice["type"] == "SCHEDULED"
    assert tpu_notice["window"]["start"] == rfc3339(START) and tpu_notice["status"] == "PENDING"
    assert tpu_notice["affected"] == [{"kind": "tpuVm", "name": "demo-tpu"}]
    assert tpu_notice["saveRequested"] is True
    assert tpu_notice["saveRequests"][0]["status"] == maintenance.REQUESTED
    assert second.to_json()["notices"][0]["saveRequests"][0]["status"] == maintenance.ALREADY_REQUESTED
    assert any(
        line.startswith("info: maintenance notice: TPU VM demo-tpu: SCHEDULED maintenance PENDING")
        for line in lines
    )
    stale_warnings = [line for line in lines if "whose window is over" in line]
    assert len(stale_warnings) == 1 and "GKE node n-1 (pool v6e-4x4)" in stale_warnings[0]
    assert len(_writes(server)) == 1


def _job() -> dict[str, Any]:
    from support.fakes.fake_kube_api import job

    return job("train-v6e", generation=1, active=4, ready=4)


def test_status_names_the_notices_and_writes_nothing(gcs, tmp_path, monkeypatch, capsys):
    from tpu_training.commands import status

    server, _ = gcs
    with FakeTpuApi() as tpu, FakeNodeApi() as kube:
        tpu.add(ZONE, "demo-tpu", "READY", health="HEALTHY", upcomingMaintenance=upcoming())
        kube.add("default", _job())
        kube.nodes.append(gke_node("n-1", "v6e-4x4", taints=(mn.IMPENDING_TERMINATION_TAINT,)))
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        monkeypatch.setenv(endpoints.STORAGE_ENDPOINT_VARIABLE, server.endpoint)
        outputs = tmp_path / "outputs.json"
        outputs.write_text("{}")
        status.main(["--stack", "dev", "--outputs", str(outputs)], now=NOW)
        text = capsys.readouterr().out
        status.main(["--stack", "dev", "--outputs", str(outputs), "--json"], now=NOW)
        document = json.loads(capsys.readouterr().out)
    assert len(tpu.calls) == 2  # one per run of status: the notices come from the probe's listing
    assert (
        "Maintenance notices:\n  TPU VM demo-tpu: SCHEDULED maintenance PENDING, window 2026-11-26T12:00:00Z"
        in text
    )
    assert "affects demo-tpu; demo-tpu: save not requested (before 2026-11-26T11:59:40Z)" in text
    assert (
        "  GKE node n-1 (pool v6e-4x4): maintenance ONGOING, window unknown start; affects train-v6e" in text
    )
    assert [(n["node"], n["status"], n["saveRequested"]) for n in document["notices"]] == [
        ("demo-tpu", "PENDING", False),
        ("n-1", "ONGOING", False),
    ]
    assert _writes(server) == []


def test_the_live_plan_names_the_notices_when_asked_and_asks_for_no_save(tmp_path):
    from support.harness.program import run_plan

    window = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    with FakeTpuApi() as tpu, FakeNodeApi() as kube:
        tpu.add(
            ZONE,
            "demo-tpu",
            "READY",
            labels={"recovery-generation": "3"},
            upcomingMaintenance=upcoming(window),
        )
        kube.add("default", _job())
        kube.nodes.append(
            gke_node("n-1", "v6e-4x4", labels={mn.SCHEDULED_MAINTENANCE_LABEL: str(int(window.timestamp()))})
        )
        env = {"TPU_API_ENDPOINT": tpu.endpoint, "KUBECONFIG": str(kube.kubeconfig(tmp_path))}
        text = run_plan("--live", "--notices", "--json", str(tmp_path / "plan.json"), env=env)
    assert text.returncode == 0, text.stderr
    assert "recovery (from live state): TPU VM demo-tpu kept, Job train-v6e kept" in text.stdout
    assert (
        f"maintenance notices:\n  TPU VM demo-tpu: SCHEDULED maintenance PENDING, window {rfc3339(window)}"
        in text.stdout
    )
    assert "  GKE node n-1 (pool v6e-4x4): maintenance PENDING" in text.stdout
    assert "affects train-v6e; no save asked" in text.stdout
    notices = json.loads((tmp_path / "plan.json").read_text())["notices"]
    assert [(n["node"], n["affected"], n["saveRequested"]) for n in notices] == [
        ("demo-tpu", [{"kind": "tpuVm", "name": "demo-tpu"}], False),
        ("n-1", [{"kind": "job", "name": "train-v6e"}], False),
    ]


def test_notices_in_the_plan_need_live(capsys):
    from tpu_training.commands import plan

    assert plan.main(["--notices"]) == exit_codes.EXIT_USAGE
    assert "--notices reads live state: give --live too" in capsys.readouterr().err
