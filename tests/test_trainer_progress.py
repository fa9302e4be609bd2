"""The reference trainer's progress records and save requests (docs/trainer.md, "Progress and
save requests"): what recovery reads to tell hung training from slow training, and how it asks
a run to checkpoint before a maintenance window.

The parsing and the record are tested in this process (the trainer file imported as a module);
the agreement, on two real JAX processes forming one cluster on loopback: both save once for a
request at the same step, and a host stopped in the middle of training leaves the other's record
saying that its step stopped advancing while it still writes."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest
from support.loopback import LoopbackJsonServer
from support.sandbox import LocalStore, Output, Pod, gang, job_pod, trainer_module
from tpu_training_components.domain.progress import read_record as parse_record

HOSTS = 2
DEADLINE = 240.0
"""Against a hang only."""


@pytest.fixture(scope="module")
def train() -> Iterator[ModuleType]:
    with trainer_module() as module:
        yield module


FUTURE = "2100-01-01T00:00:00Z"
NOW = datetime(2026, 11, 26, tzinfo=timezone.utc).timestamp()


def in_two_minutes() -> str:
    return datetime.fromtimestamp(time.time() + 120, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def request(**fields: Any) -> str:
    return json.dumps({"format": "tpu-training-save-request/1", "id": "maintenance-1", **fields})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "not an object with format 'tpu-training-save-request/1'"),
        (json.dumps({"id": "x"}), "not an object with format"),
        (request(id=""), "id must be a non-empty string of at most 200 characters"),
        (request(id="x" * 201), "id must be a non-empty string"),
        (request(id=7), "id must be a non-empty string"),
        (request(reason=["maintenance"]), "reason must be a string"),
        (request(before="tomorrow"), "before='tomorrow' is not an RFC 3339 time with a zone"),
        (request(before="2100-01-01T00:00:00"), "before='2100-01-01T00:00:00' is not an RFC 3339 time"),
        (request(before="2000-01-01T00:00:00Z"), "before=2000-01-01T00:00:00Z has passed"),
    ],
)
def test_a_bad_save_request_is_ignored_with_the_reason(train: ModuleType, text: str, problem: str) -> None:
    found, why = train.read_save_request(text, NOW)
    assert found is None
    assert why is not None and why.startswith(problem), why


def test_a_good_save_request_is_read(train: ModuleType) -> None:
    found, why = train.read_save_request(request(reason="maintenance", before=FUTURE), NOW)
    assert why is None
    assert found == train.SaveRequest("maintenance-1", "maintenance", 4102444800.0)
    # Without a time or a reason: save soon, "requested".
    found, why = train.read_save_request(request(), NOW)
    assert why is None and found == train.SaveRequest("maintenance-1", "requested", None)
    assert 0 < train.request_token("maintenance-1") < 2**31
    assert train.request_token("maintenance-1") != train.request_token("maintenance-2")


def read_record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def wait_until(what: str, check: Any, seconds: float = 30.0) -> Any:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            found = check()
        except (OSError, ValueError, KeyError):
            found = None
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_the_beacon_publishes_progress_and_reads_requests_once(
    train: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = train.read_settings(
        {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_PROGRESS_SECONDS": "0.02"}
    )
    from etils import epath

    beacon = train.Beacon(epath.Path(tmp_path), settings, 1, 2)
    beacon.start()
    record_path = tmp_path / "progress.process-1.json"
    first = wait_until("a starting record", lambda: read_record(record_path))
    assert first["phase"] == "starting" and first["step"] is None and first["processes"] == 2
    assert first["format"] == "tpu-training-progress/1" and first["target_examples"] == 320

    beacon.phase("training")
    beacon.advanced(3, 96, 0.5)
    record = wait_until("step 3", lambda: (r := read_record(record_path))["step"] == 3 and r)
    assert record["examples"] == 96 and record["step_seconds"] == 0.5 and record["phase"] == "training"
    # What recovery reads (domain/progress.py) is what the trainer writes.
    parsed, problem = parse_record(record_path.read_text())
    assert problem is None and parsed is not None and (parsed.process, parsed.step) == (1, 3)
    assert train.parse_utc(record["written_at"]) >= train.parse_utc(record["advanced_at"])

    # Garbage: said once, however often it is read; training is never asked to save.
    (tmp_path / "save-request.json").write_text("garbage")
    wait_until(
        "the garbage read twice", lambda: read_record(record_path)["written_at"] > record["written_at"]
    )
    time.sleep(0.1)
    assert beacon.requested() == 0
    said = capsys.readouterr().out
    assert said.count("save-request-ignored") == 1 and '"not JSON"' in said

    # A request for a time further away than the lead (600 s by default) waits for it.
    (tmp_path / "save-request.json").write_text(request(reason="maintenance", before=FUTURE))
    wait_until("the far request read", lambda: beacon.pending is not None)
    assert beacon.requested() == 0
    soon = train.utc_text(time.time() + 120)
    (tmp_path / "save-request.json").write_text(request(reason="maintenance", before=soon))
    token = wait_until("the request", beacon.requested)
    assert token == train.request_token("maintenance-1")
    assert capsys.readouterr().out.count("save-requested") == 2  # the far one, then the near one
    beacon.saving_for(token)
    assert beacon.requested() == 0  # one save per request, though the commit takes a while
    beacon.committed(7)
    beacon.saved_for(token)
    beacon.stop("complete")
    final = read_record(record_path)
    assert final["phase"] == "complete" and final["saved_step"] == 7
    assert final["request_done"] == "maintenance-1"

    # A later start (a restarted Pod) reads what it did: the same request is not saved for again.
    again = train.Beacon(epath.Path(tmp_path), settings, 1, 2)
    again.start()
    time.sleep(0.1)
    assert again.requested() == 0
    again.stop("complete")
    assert "save-requested" not in capsys.readouterr().out


NOTICE = {
    "type": "SCHEDULED",
    "windowStartTime": "2026-11-26T04:00:00Z",
    "windowEndTime": "2026-11-26T08:00:00Z",
    "latestWindowStartTime": "2026-11-26T04:00:01Z",
    "canReschedule": True,
    "maintenanceStatus": "PENDING",
}
"""The metadata server's upcoming-maintenance answer, in the shape of Google's "View maintenance
notifications" page for Cloud TPU (its Cloud Logging example's metadata)."""
BEFORE_NOTICE = datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("<html>", "not JSON"),
        ("[]", "not a JSON object"),
        (json.dumps({**NOTICE, "windowStartTime": "soon"}), "windowStartTime='soon' is not an RFC 3339 time"),
        (
            json.dumps({**NOTICE, "windowStartTime": "2026-11-26T04:00:00"}),
            "windowStartTime='2026-11-26T04:00:00'",
        ),
        (json.dumps({**NOTICE, "windowEndTime": 5}), "windowEndTime=5 is not an RFC 3339 time"),
        (
            json.dumps({**NOTICE, "windowEndTime": "2026-11-26T03:00:00Z"}),
            "the window 2026-11-26T04:00:00Z to 2026-11-26T03:00:00Z ends before it starts",
        ),
        (json.dumps({**NOTICE, "maintenanceStatus": "DONE"}), "maintenanceStatus='DONE' is neither PENDING"),
    ],
)
def test_a_bad_maintenance_notice_is_ignored_with_the_reason(
    train: ModuleType, answer: str, problem: str
) -> None:
    found, why = train.read_maintenance_notice(answer, BEFORE_NOTICE)
    assert found is None and why is not None and why.startswith(problem), why


def test_a_maintenance_notice_is_a_request_to_save_before_its_window(train: ModuleType) -> None:
    found, why = train.read_maintenance_notice(json.dumps(NOTICE), BEFORE_NOTICE)
    start = datetime(2026, 11, 26, 4, tzinfo=timezone.utc).timestamp()
    assert why is None
    assert found == train.SaveRequest("maintenance SCHEDULED 2026-11-26T04:00:00Z", "maintenance", start)
    # Under way: save at once. Over: nothing to do, said why. None coming: nothing, nothing said.
    ongoing, _ = train.read_maintenance_notice(
        json.dumps({**NOTICE, "maintenanceStatus": "ONGOING"}), start + 60
    )
    assert ongoing is not None and ongoing.before is None
    assert train.read_maintenance_notice(json.dumps(NOTICE), start + 5 * 3600) == (
        None,
        "its window ended at 2026-11-26T08:00:00Z",
    )
    none = json.dumps({"error": "no notifications have been received yet, try again later"})
    assert train.read_maintenance_notice(none, BEFORE_NOTICE) == (None, None)


class MetadataServer(LoopbackJsonServer):
    """A TPU VM's metadata server on loopback: the ``upcoming-maintenance`` key answers
    ``answer`` (none coming, until a test sets a notice)."""

    PATH = "/computeMetadata/v1/instance/upcoming-maintenance"

    def __init__(self) -> None:
        super().__init__()
        self.answer: Any = {"error": "no notifications have been received yet, try again later"}
        self.flavors: list[str] = []

    def route(self, method: str, path: str, query: str, headers: dict[str, str]) -> tuple[int, Any]:
        self.flavors.append(headers.get("Metadata-Flavor", ""))
        return (200, self.answer) if path == self.PATH else (404, {})


def test_the_beacon_turns_the_metadata_servers_notice_into_one_save(
    train: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from etils import epath

    # The key the fake serves is the one a TPU VM's startup script gives the trainer.
    assert train.MAINTENANCE_METADATA_URL.endswith(MetadataServer.PATH)
    with MetadataServer() as server:
        settings = train.read_settings(
            {
                "CHECKPOINT_DIR": str(tmp_path),
                "TRAIN_STEPS": "10",
                "TRAINER_PROGRESS_SECONDS": "0.02",
                "TRAINER_MAINTENANCE_URL": server.endpoint + MetadataServer.PATH,
            }
        )
        beacon = train.Beacon(epath.Path(tmp_path), settings, 0, 1)
        beacon.start()
        wait_until("two reads", lambda: len(server.flavors) >= 2)
        assert beacon.requested() == 0 and set(server.flavors) == {"Google"}
        # A window days ahead waits; one within the lead is saved for once.
        far = train.utc_text(time.time() + 3 * 86400)
        server.answer = {
            **NOTICE,
            "windowStartTime": far,
            "windowEndTime": train.utc_text(time.time() + 4 * 86400),
        }
        wait_until("the far notice read", lambda: beacon.notice is not None)
        assert beacon.requested() == 0
        near = train.utc_text(time.time() + 300)
        server.answer = {
            **NOTICE,
            "windowStartTime": near,
            "windowEndTime": train.utc_text(time.time() + 3600),
        }
        token = wait_until("the near notice", beacon.requested)
        assert token == train.request_token(f"maintenance SCHEDULED {near}")
        beacon.saving_for(token)
        beacon.saved_for(token)
        assert beacon.requested() == 0
        # Not what the key answers (a JSON string): said once, nothing breaks.
        server.answer = "garbage"
        reads = len(server.flavors)
        wait_until("garbage read twice", lambda: len(server.flavors) >= reads + 2)
        beacon.stop("complete")
    said = capsys.readouterr().out
    assert said.count("maintenance-notice ") == 2 and said.count("maintenance-saved") == 1
    assert said.count("maintenance-notice-ignored") == 1 and '"not a JSON object"' in said


def test_a_maintenance_url_that_is_no_url_is_refused(train: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(train.ConfigError, match="TRAINER_MAINTENANCE_URL='metadata': give an http"):
        train.read_settings(
            {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_MAINTENANCE_URL": "metadata"}
        )


def test_progress_off_writes_nothing(train: ModuleType, tmp_path: Path) -> None:
    settings = train.read_settings(
        {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_PROGRESS_SECONDS": "0"}
    )
    from etils import epath

    beacon = train.Beacon(epath.Path(tmp_path), settings, 0, 1)
    beacon.start()
    beacon.advanced(1, 32, 0.1)
    beacon.stop("complete")
    assert list(tmp_path.iterdir()) == []


def wait_for(output: Output, name: str, until: float, **fields: str) -> Any:
    for event in output.next_events(until):
        if event.event == name and all(event.fields.get(k) == v for k, v in fields.items()):
            return event
    raise AssertionError(f"the trainer ended without {name} {fields}:\n{output.text()}")


@pytest.mark.usefixtures("jax_compilation_cache")
def test_two_hosts_save_once_for_a_request_and_a_stopped_host_shows_as_stalled(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "checkpoints")
    run = {
        "TRAIN_STEPS": "400",
        "GLOBAL_BATCH_SIZE": "32",
        "CHECKPOINT_INTERVAL_SECONDS": "3600",
        "TRAINER_STEP_SECONDS": "0.02",
        "TRAINER_PROGRESS_SECONDS": "0.05",
        "TRAINER_LOG_EVERY": "10",
    }
    metadata = MetadataServer().__enter__()
    pods: list[Pod] = gang(job_pod(store, run), HOSTS)
    # Only host 0's metadata server will announce maintenance: each TPU VM host reads its own.
    pods[0] = replace(
        pods[0], env={**pods[0].env, "TRAINER_MAINTENANCE_URL": metadata.endpoint + metadata.PATH}
    )
    outputs = [pod.start(tmp_path / f"pod-{index}") for index, pod in enumerate(pods)]
    try:
        until = time.monotonic() + DEADLINE
        wait_for(outputs[0], "step", until, step="20")
        store.path.joinpath("save-request.json").write_text(
            # Wanted within the trainer's lead (600 s): saved for now, not held back.
            request(id="maintenance-node-a", reason="maintenance", before=in_two_minutes())
        )
        saves = [wait_for(output, "saving", until, reason="requested") for output in outputs]
        [step] = {event.int("step") for event in saves}
        for output in outputs:
            wait_for(output, "committed", until, step=str(step))
        records = [store.path / f"progress.process-{index}.json" for index in range(HOSTS)]
        for path in records:
            wait_until(
                f"{path.name} says the request is done",
                lambda path=path: read_record(path)["request_done"] == "maintenance-node-a",
            )

        # A maintenance notice that host 0 alone reads from its metadata server, its window
        # within the lead: the hosts agree on it and both save once more, at one step.
        window = datetime.fromtimestamp(time.time() + 120, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        window_end = datetime.fromtimestamp(time.time() + 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        metadata.answer = {**NOTICE, "windowStartTime": window, "windowEndTime": window_end}
        noticed = [wait_for(output, "saving", until, reason="requested") for output in outputs]
        [notice_step] = {event.int("step") for event in noticed}
        assert notice_step > step
        for output in outputs:
            wait_for(output, "committed", until, step=str(notice_step))

        # Host 1 stops (SIGSTOP: a host stuck in I/O). Host 0 waits for it in the next exchange;
        # its record goes on being written, and says its step stopped advancing.
        outputs[1].process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.5)
            stalled, frozen = read_record(records[0]), read_record(records[1])
            time.sleep(0.3)
            later, still_frozen = read_record(records[0]), read_record(records[1])
        finally:
            outputs[1].process.send_signal(signal.SIGCONT)
        behind = seconds(later["written_at"]) - seconds(later["advanced_at"])
        assert later["step"] == stalled["step"] and later["phase"] == "training"
        assert later["written_at"] > stalled["written_at"] and behind >= 1.0, (stalled, later)
        # The stopped host writes nothing: its record grows old, which recovery sees as well.
        assert still_frozen == frozen

        for output in outputs:
            assert output.finish(timeout=DEADLINE) == 0, output.text()
            requested = [
                e for e in output.events if e.event == "saving" and e.fields["reason"] == "requested"
            ]
            assert [e.int("step") for e in requested] == [step, notice_step], output.text()
        assert "maintenance-saved" in outputs[0].text() and "maintenance-notice " in outputs[0].text()
    finally:
        metadata.__exit__(None, None, None)
        for output in outputs:
            if output.process.poll() is None:
                output.process.kill()
    for path in records:
        final = read_record(path)
        assert final["phase"] == "complete" and final["step"] == 400 and final["saved_step"] == 400
        assert final["request_done"] == "maintenance-node-a"


def seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_on_a_tpu_vm_the_notice_and_recoverys_request_for_one_window_are_one_request(
    train: ModuleType,
) -> None:
    from tpu_training_components.domain.maintenance_notices import MaintenanceNotice

    found, why = train.read_maintenance_notice(json.dumps(NOTICE), BEFORE_NOTICE, "demo-tpu")
    recovery = MaintenanceNotice(
        node="demo-tpu",
        source="tpu",
        zone="europe-west4-a",
        window_start=datetime(2026, 11, 26, 4, tzinfo=timezone.utc),
    )
    assert why is None and found is not None and found.id == recovery.request_id
    # So a request recovery writes for it after the trainer saved for the notice is done already.
    assert train.request_token(found.id) == train.request_token(recovery.request_id)
