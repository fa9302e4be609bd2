"""The reference trainer's progress records and save requests (docs/trainer.md, "Progress and
save requests"): what recovery reads to tell hung training from slow training, and how it asks
a run to checkpoint before a maintenance window.

The parsing and the record are tested in this process (the trainer's modules imported as
train.py imports them); the agreement, on two real JAX processes forming one cluster on loopback:
both save once for a request at the same step, and a host stopped in the middle of training leaves
the other's record saying that its step stopped advancing while it still writes."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from support.fakes.fake_metadata import EXAMPLE_NOTICE, MAINTENANCE_EVENT, PREEMPTED, FakeMetadataServer
from support.harness.sandbox import LocalStore, Output, Pod, gang, job_pod, trainer_modules
from tpu_training_components.domain.progress import read_record as parse_record

HOSTS = 2
DEADLINE = 240.0
"""Against a hang only."""


@pytest.fixture(scope="module")
def trainer() -> Iterator[SimpleNamespace]:
    with trainer_modules() as modules:
        yield modules


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
def test_a_bad_save_request_is_ignored_with_the_reason(
    trainer: SimpleNamespace, text: str, problem: str
) -> None:
    found, why = trainer.save_requests.read_save_request(text, NOW)
    assert found is None
    assert why is not None and why.startswith(problem), why


def test_a_good_save_request_is_read(trainer: SimpleNamespace) -> None:
    found, why = trainer.save_requests.read_save_request(request(reason="maintenance", before=FUTURE), NOW)
    assert why is None
    assert found == trainer.save_requests.SaveRequest("maintenance-1", "maintenance", 4102444800.0)
    # Without a time or a reason: save soon, "requested".
    found, why = trainer.save_requests.read_save_request(request(), NOW)
    assert why is None and found == trainer.save_requests.SaveRequest("maintenance-1", "requested", None)
    assert 0 < trainer.save_requests.request_token("maintenance-1") < 2**31
    assert trainer.save_requests.request_token("maintenance-1") != trainer.save_requests.request_token(
        "maintenance-2"
    )


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
    trainer: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = trainer.settings.read_settings(
        {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_PROGRESS_SECONDS": "0.02"}
    )
    from etils import epath

    beacon = trainer.progress.Beacon(epath.Path(tmp_path), settings, 1, 2)
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
    assert trainer.save_requests.parse_utc(record["written_at"]) >= trainer.save_requests.parse_utc(
        record["advanced_at"]
    )

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
    soon = trainer.save_requests.utc_text(time.time() + 120)
    (tmp_path / "save-request.json").write_text(request(reason="maintenance", before=soon))
    token = wait_until("the request", beacon.requested)
    assert token == trainer.save_requests.request_token("maintenance-1")
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
    again = trainer.progress.Beacon(epath.Path(tmp_path), settings, 1, 2)
    again.start()
    time.sleep(0.1)
    assert again.requested() == 0
    again.stop("complete")
    assert "save-requested" not in capsys.readouterr().out


NOTICE = dict(EXAMPLE_NOTICE)
"""The metadata server's upcoming-maintenance answer as Compute Engine's host-maintenance page
shows it: snake_case, ``can_reschedule`` a string (tests/project/test_fidelity.py pins the shape)."""
CAMEL_NOTICE = {
    "type": "SCHEDULED",
    "windowStartTime": "2026-11-26T04:00:00Z",
    "windowEndTime": "2026-11-26T08:00:00Z",
    "latestWindowStartTime": "2026-11-26T04:00:01Z",
    "canReschedule": True,
    "maintenanceStatus": "PENDING",
}
"""The same notice in the Cloud TPU API's spelling (``Node.upcomingMaintenance``), also read."""
BEFORE_NOTICE = datetime(2026, 11, 26, 3, 0, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("<html>", "not JSON"),
        ("[]", "not a JSON object"),
        (json.dumps({**NOTICE, "window_start_time": "soon"}), "window_start_time='soon' is not an RFC 3339"),
        (
            json.dumps({**CAMEL_NOTICE, "windowStartTime": "2026-11-26T04:00:00"}),
            "windowStartTime='2026-11-26T04:00:00'",
        ),
        (json.dumps({**NOTICE, "window_end_time": 5}), "window_end_time=5 is not an RFC 3339 time"),
        (
            json.dumps({**NOTICE, "window_end_time": "2026-11-26T03:00:00Z"}),
            "the window 2026-11-26T04:00:00Z to 2026-11-26T03:00:00Z ends before it starts",
        ),
        (
            json.dumps({**NOTICE, "maintenance_status": "DONE"}),
            "maintenance_status='DONE' is neither PENDING",
        ),
        (json.dumps({**CAMEL_NOTICE, "maintenanceStatus": "DONE"}), "maintenanceStatus='DONE' is neither"),
        # An object with no window in either spelling is not "nothing scheduled": it is said.
        (json.dumps({"windowstart": "2026-11-26T04:00:00Z"}), "no window_start_time or windowStartTime"),
    ],
)
def test_a_bad_maintenance_notice_is_ignored_with_the_reason(
    trainer: SimpleNamespace, answer: str, problem: str
) -> None:
    found, why = trainer.notices.read_maintenance_notice(answer, BEFORE_NOTICE)
    assert found is None and why is not None and why.startswith(problem), why


@pytest.mark.parametrize("notice", [NOTICE, CAMEL_NOTICE], ids=["metadata-server", "tpu-api"])
def test_a_maintenance_notice_is_a_request_to_save_before_its_window(
    trainer: SimpleNamespace, notice: dict[str, Any]
) -> None:
    status = "maintenance_status" if "maintenance_status" in notice else "maintenanceStatus"
    found, why = trainer.notices.read_maintenance_notice(json.dumps(notice), BEFORE_NOTICE)
    start = datetime(2026, 11, 26, 4, tzinfo=timezone.utc).timestamp()
    assert why is None
    assert found == trainer.save_requests.SaveRequest(
        "maintenance SCHEDULED 2026-11-26T04:00:00Z", "maintenance", start
    )
    # Under way: save at once. Over: nothing to do, said why.
    ongoing, _ = trainer.notices.read_maintenance_notice(
        json.dumps({**notice, status: "ONGOING"}), start + 60
    )
    assert ongoing is not None and ongoing.before is None
    assert trainer.notices.read_maintenance_notice(json.dumps(notice), start + 5 * 3600) == (
        None,
        "its window ended at 2026-11-26T08:00:00Z",
    )
    assert trainer.notices.notice_can_reschedule(json.dumps(notice)) == (
        "false" if notice is NOTICE else "true"
    )


@pytest.mark.parametrize(
    "answer",
    ["", "{}", "NONE", json.dumps({"error": "no notifications have been received yet, try again later"})],
)
def test_nothing_scheduled_is_no_notice_and_nothing_said(trainer: SimpleNamespace, answer: str) -> None:
    assert trainer.notices.read_maintenance_notice(answer, BEFORE_NOTICE) == (None, None)


@pytest.mark.parametrize(
    ("key", "value", "save", "problem"),
    [
        ("maintenance-event", "NONE", False, None),
        ("maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE", False, None),
        ("maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", True, None),
        ("maintenance-event", "TERMINATE", False, "maintenance-event='TERMINATE' is none of NONE, MIGRATE"),
        ("preempted", "FALSE", False, None),
        ("preempted", "TRUE\n", True, None),
        ("preempted", "true", False, "preempted='true' is none of TRUE, FALSE"),
    ],
)
def test_a_short_notice_saves_now_only_for_a_terminate_or_a_preemption(
    trainer: SimpleNamespace, key: str, value: str, save: bool, problem: str | None
) -> None:
    said, why = trainer.notices.read_short_notice(key, value)
    assert said is save
    assert why == problem if problem is None else why is not None and why.startswith(problem)


def beacon_settings(trainer: SimpleNamespace, tmp_path: Path, server: FakeMetadataServer) -> Any:
    return trainer.settings.read_settings(
        {
            "CHECKPOINT_DIR": str(tmp_path),
            "TRAIN_STEPS": "10",
            "TRAINER_PROGRESS_SECONDS": "0.02",
            "TRAINER_METADATA_WAIT_SECONDS": "2",
            "TRAINER_MAINTENANCE_URL": server.url,
        }
    )


def upcoming_reads(server: FakeMetadataServer) -> list[tuple[str, dict[str, list[str]], str]]:
    return [r for r in list(server.requests) if r[0].endswith("/upcoming-maintenance")]


@pytest.mark.parametrize("nothing", [503, 200], ids=["503-error", "empty-object"])
def test_the_beacon_turns_the_metadata_servers_notice_into_one_save(
    trainer: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing: int
) -> None:
    from etils import epath

    with FakeMetadataServer() as server:
        # The key the fake serves is the one a TPU VM's startup script gives the trainer.
        assert server.url.endswith(
            trainer.notices.MAINTENANCE_METADATA_URL.removeprefix("http://metadata.google.internal")
        )
        server.none_status = nothing
        beacon = trainer.progress.Beacon(
            epath.Path(tmp_path), beacon_settings(trainer, tmp_path, server), 0, 1
        )
        beacon.start()
        wait_until("two reads", lambda: len(upcoming_reads(server)) >= 2)
        assert beacon.requested() == 0
        # Asked as Google's examples ask: ?alt=json, with the header.
        assert {(tuple(q.get("alt", [])), flavor) for _, q, flavor in upcoming_reads(server)} == {
            (("json",), "Google")
        }
        # A window days ahead waits; one within the lead is saved for once.
        far = trainer.save_requests.utc_text(time.time() + 3 * 86400)
        server.upcoming = {
            **NOTICE,
            "window_start_time": far,
            "window_end_time": trainer.save_requests.utc_text(time.time() + 4 * 86400),
        }
        wait_until("the far notice read", lambda: beacon.notice is not None)
        assert beacon.requested() == 0
        near = trainer.save_requests.utc_text(time.time() + 300)
        server.upcoming = {
            **NOTICE,
            "window_start_time": near,
            "window_end_time": trainer.save_requests.utc_text(time.time() + 3600),
        }
        token = wait_until("the near notice", beacon.requested)
        assert token == trainer.save_requests.request_token(f"maintenance SCHEDULED {near}")
        beacon.saving_for(token)
        beacon.saved_for(token)
        assert beacon.requested() == 0
        # Not what the key answers (a JSON string): said once, nothing breaks.
        server.allow_off_schema = True
        server.upcoming = "garbage"
        reads = len(upcoming_reads(server))
        wait_until("garbage read twice", lambda: len(upcoming_reads(server)) >= reads + 2)
        # Nothing scheduled again: no notice, nothing said.
        server.upcoming = None
        wait_until("the notice gone", lambda: beacon.notice is None)
        beacon.stop("complete")
    said = capsys.readouterr().out
    assert said.count("maintenance-notice ") == 2 and said.count("maintenance-saved") == 1
    # Each problem is said once per change, however often it is read again. On a loaded machine a
    # read can also run past its bound (0.5 s at these periods), a problem of its own, said too.
    ignored = [
        line.split("reason=", 1)[1] for line in said.splitlines() if "maintenance-notice-ignored" in line
    ]
    assert any('"not a JSON object"' in reason for reason in ignored), said
    assert all(one != two for one, two in zip(ignored, ignored[1:], strict=False)), said
    assert all('"not a JSON object"' in reason or "could not be read" in reason for reason in ignored), said
    assert "can_reschedule=false" in said


@pytest.mark.parametrize(
    ("key", "value"), [(MAINTENANCE_EVENT, "TERMINATE_ON_HOST_MAINTENANCE"), (PREEMPTED, "TRUE")]
)
def test_the_beacon_watches_the_short_notice_keys_and_asks_for_a_save_at_once(
    trainer: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    from etils import epath

    with FakeMetadataServer() as server:
        beacon = trainer.progress.Beacon(
            epath.Path(tmp_path), beacon_settings(trainer, tmp_path, server), 0, 1
        )
        beacon.start()
        # The first read has the value and its ETag; then a hanging GET waits for a change.
        wait_until("a hanging GET", lambda: server.waits(key) >= 1)
        assert beacon.requested() == 0
        server.set(key, "MIGRATE_ON_HOST_MAINTENANCE" if key == MAINTENANCE_EVENT else "FALSE")
        server.set(key, value)
        token = wait_until("the save asked for", beacon.requested)
        beacon.saving_for(token)
        beacon.saved_for(token)
        assert beacon.requested() == 0
        waiting = [q for p, q, _ in list(server.requests) if p == key and "wait_for_change" in q]
        beacon.stop("stopped")
    assert all(
        q["wait_for_change"] == ["true"] and q["timeout_sec"] == ["2"] and q["last_etag"] for q in waiting
    )
    said = capsys.readouterr().out
    name = key.rsplit("/", 1)[1]
    assert f"metadata-event key={name} value={value} save=now" in said
    assert said.count("short-notice-saved") == 1


def test_a_metadata_watch_that_cannot_connect_says_so_once_and_never_asks_for_a_save(
    trainer: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from etils import epath

    with FakeMetadataServer() as server:
        url = server.url
    # The server is gone: every read is refused.
    settings = trainer.settings.read_settings(
        {
            "CHECKPOINT_DIR": str(tmp_path),
            "TRAIN_STEPS": "10",
            "TRAINER_PROGRESS_SECONDS": "0.02",
            "TRAINER_MAINTENANCE_URL": url,
        }
    )
    beacon = trainer.progress.Beacon(epath.Path(tmp_path), settings, 0, 1)
    for watch in beacon.watches:
        watch.retry_seconds = 0.01
    beacon.start()
    wait_until("each watch tried three times", lambda: all(w.failures >= 3 for w in beacon.watches))
    assert beacon.requested() == 0
    beacon.stop("complete")
    said = capsys.readouterr().out
    assert said.count("metadata-watch-failed key=maintenance-event ") == 1
    assert said.count("metadata-watch-failed key=preempted ") == 1 and "Connection refused" in said


def test_a_maintenance_url_that_is_no_url_is_refused(trainer: SimpleNamespace, tmp_path: Path) -> None:
    with pytest.raises(
        trainer.outcomes.ConfigError, match="TRAINER_MAINTENANCE_URL='metadata': give an http"
    ):
        trainer.settings.read_settings(
            {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_MAINTENANCE_URL": "metadata"}
        )


def test_progress_off_writes_nothing(trainer: SimpleNamespace, tmp_path: Path) -> None:
    settings = trainer.settings.read_settings(
        {"CHECKPOINT_DIR": str(tmp_path), "TRAIN_STEPS": "10", "TRAINER_PROGRESS_SECONDS": "0"}
    )
    from etils import epath

    beacon = trainer.progress.Beacon(epath.Path(tmp_path), settings, 0, 1)
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
    # Each TPU VM host reads its own metadata server. Nothing scheduled: host 0's answers 503
    # {"error": ...}, host 1's {}; neither is a notice, and neither is said.
    metadata = [FakeMetadataServer().__enter__() for _ in range(HOSTS)]
    metadata[1].none_status = 200
    # Host 1's will announce in the TPU API's camelCase, which a VM's server does not write: the
    # trainer reads it all the same.
    metadata[1].allow_off_schema = True
    pods: list[Pod] = gang(job_pod(store, run), HOSTS)
    pods = [
        replace(
            pod, env={**pod.env, "TRAINER_MAINTENANCE_URL": server.url, "TRAINER_METADATA_WAIT_SECONDS": "5"}
        )
        for pod, server in zip(pods, metadata, strict=True)
    ]
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

        # A maintenance notice that host 0 alone reads from its metadata server (snake_case, as
        # the server writes it), its window within the lead: the hosts agree on it and both save
        # once more, at one step. Then one in the TPU API's camelCase on host 1 alone: the same.
        notice_steps = [step]
        for index, notice in ((0, NOTICE), (1, CAMEL_NOTICE)):
            start, end = (
                ("window_start_time", "window_end_time")
                if index == 0
                else ("windowStartTime", "windowEndTime")
            )
            window = datetime.fromtimestamp(time.time() + 120 + index, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            window_end = datetime.fromtimestamp(time.time() + 3600, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            metadata[index].upcoming = {**notice, start: window, end: window_end}
            noticed = [wait_for(output, "saving", until, reason="requested") for output in outputs]
            [notice_step] = {event.int("step") for event in noticed}
            assert notice_step > notice_steps[-1]
            notice_steps.append(notice_step)
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
            assert [e.int("step") for e in requested] == notice_steps, output.text()
            # Nothing scheduled (503, {}) was never said to be ignored.
            assert "maintenance-notice-ignored" not in output.text(), output.text()
        for output in outputs:
            assert "maintenance-saved" in output.text() and "maintenance-notice " in output.text()
    finally:
        for server in metadata:
            server.__exit__(None, None, None)
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
    trainer: SimpleNamespace,
) -> None:
    from tpu_training_components.domain.maintenance_notices import MaintenanceNotice

    found, why = trainer.notices.read_maintenance_notice(json.dumps(NOTICE), BEFORE_NOTICE, "demo-tpu")
    recovery = MaintenanceNotice(
        node="demo-tpu",
        source="tpu",
        zone="europe-west4-a",
        window_start=datetime(2026, 11, 26, 4, tzinfo=timezone.utc),
    )
    assert why is None and found is not None and found.id == recovery.request_id
    # So a request recovery writes for it after the trainer saved for the notice is done already.
    assert trainer.save_requests.request_token(found.id) == trainer.save_requests.request_token(
        recovery.request_id
    )
