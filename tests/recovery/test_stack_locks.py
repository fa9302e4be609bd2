"""Whose lock holds the stack, and when a recovery round releases it (tpu_training/recovery/stack_locks.py).

The refusal below is the one pulumi/pulumi v3.274.1 prints for a diy backend
(pkg/backend/diy/lock.go ``checkForLock``: "\\n  %v: created by %v@%v (pid %v) at %v", the time
in RFC 3339); the engine tier meets the real one (tests/engine/test_engine_crash.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from tpu_training.recovery.stack_locks import (
    CLOCK_MARGIN,
    LockHolder,
    LockNotRemovable,
    judge_locks,
    lock_holders,
    remove_lock,
    runs_pulumi,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
BOUND = timedelta(hours=4, minutes=1)
REFUSAL = (
    "error: the stack is currently locked by 2 lock(s). Either wait for the other process(es) to end "
    "or delete the lock file with `pulumi cancel`.\n"
    "  file:///srv/state/.pulumi/locks/organization/tpu-training/dev/8d1e.json: created by "
    "ci@runner-7 (pid 4242) at 2026-12-02T11:58:00Z\n"
    "  gs://bucket/.pulumi/locks/organization/tpu-training/dev/0a2b.json: created by "
    "ml.ops@laptop.local (pid 77) at 2026-12-02T07:00:00+01:00\n"
)


def holder(host: str, pid: int, taken_at: datetime | None) -> LockHolder:
    return LockHolder("file:///state/lock.json", "ci", host, pid, taken_at)


def test_the_holders_are_read_from_the_refusal_of_a_file_or_cloud_storage_backend() -> None:
    first, second = lock_holders(REFUSAL)
    assert (first.user, first.host, first.pid) == ("ci", "runner-7", 4242)
    assert first.taken_at == datetime(2026, 12, 2, 11, 58, tzinfo=timezone.utc)
    assert first.url.endswith("/dev/8d1e.json")
    assert (second.user, second.host, second.pid) == ("ml.ops", "laptop.local", 77)
    assert second.taken_at == datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


def test_a_pulumi_cloud_refusal_names_no_holder_and_nothing_is_released() -> None:
    refusal = "error: [409] Conflict: Another update is currently in progress."
    assert lock_holders(refusal) == []
    verdict = judge_locks([], this_host="a", runs_pulumi=lambda pid: False, now=NOW, stale_after=BOUND)
    assert not verdict.release and "not known" in verdict.summary


def test_a_lock_whose_process_is_gone_from_this_host_is_released_and_the_line_says_why() -> None:
    verdict = judge_locks(
        [holder("here", 4242, NOW)],
        this_host="here",
        runs_pulumi=lambda pid: False,
        now=NOW,
        stale_after=BOUND,
    )
    assert verdict.release
    assert verdict.lines == (
        "lock of ci@here (pid 4242, since 2026-12-02T12:00:00Z): no such process runs here any more",
    )


def test_a_lock_held_by_a_live_process_is_never_released_however_old() -> None:
    old = NOW - timedelta(days=3)
    verdict = judge_locks(
        [holder("here", 4242, old)],
        this_host="here",
        runs_pulumi=lambda pid: pid == 4242,
        now=NOW,
        stale_after=BOUND,
    )
    assert not verdict.release and "still runs here" in verdict.summary


def test_another_hosts_lock_is_released_only_past_the_longest_recovery_update_and_the_clock_margin() -> None:
    bound = BOUND + CLOCK_MARGIN

    def judged(age: timedelta) -> bool:
        return judge_locks(
            [holder("elsewhere", 1, NOW - age)],
            this_host="here",
            runs_pulumi=lambda pid: True,
            now=NOW,
            stale_after=BOUND,
        ).release

    assert not judged(timedelta(minutes=5))
    assert not judged(bound)
    assert judged(bound + timedelta(seconds=1))
    young = judge_locks(
        [holder("elsewhere", 1, NOW - timedelta(minutes=5))],
        this_host="here",
        runs_pulumi=lambda pid: True,
        now=NOW,
        stale_after=BOUND,
    )
    assert "left alone until it is older than 4 h 16 min" in young.summary


def test_one_live_holder_among_dead_ones_keeps_every_lock() -> None:
    verdict = judge_locks(
        [holder("here", 1, NOW), holder("here", 2, NOW)],
        this_host="here",
        runs_pulumi=lambda pid: pid == 2,
        now=NOW,
        stale_after=BOUND,
    )
    assert not verdict.release and len(verdict.lines) == 2


def test_a_holder_on_another_host_at_an_unreadable_time_is_left_alone() -> None:
    verdict = judge_locks(
        [holder("elsewhere", 1, None)],
        this_host="here",
        runs_pulumi=lambda pid: False,
        now=NOW,
        stale_after=BOUND,
    )
    assert not verdict.release and "cannot be read" in verdict.summary


def test_runs_pulumi_tells_a_live_pulumi_process_from_a_gone_one_and_from_a_reused_pid() -> None:
    # A live process whose command line names pulumi; then the same pid gone.
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()", "pulumi-up-double"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"up\n"  # it runs, exec'd
        assert runs_pulumi(process.pid)
    finally:
        process.communicate(b"")
    assert not runs_pulumi(process.pid)
    # This test's own pid is live but runs no Pulumi CLI: a reused pid holds nothing.
    if os.path.isdir("/proc/self") and b"pulumi" not in open("/proc/self/cmdline", "rb").read().lower():
        assert not runs_pulumi(os.getpid())
    assert not runs_pulumi(0)


@pytest.mark.parametrize("line", ["  garbage: created by nobody", "  x: created by a@b (pid q) at now"])
def test_lines_that_are_not_holders_are_not_read_as_holders(line: str) -> None:
    assert lock_holders(line) == []


def test_a_refusal_that_lists_fewer_holders_than_it_counts_releases_nothing() -> None:
    one_unreadable = REFUSAL.replace("ml.ops@laptop.local (pid 77)", "ml.ops@laptop.local (pid ?)")
    assert lock_holders(one_unreadable) == []


def test_remove_lock_deletes_the_one_named_file_and_nothing_else(tmp_path) -> None:
    locks = tmp_path / "state" / ".pulumi" / "locks" / "organization" / "tpu-training" / "dev"
    locks.mkdir(parents=True)
    dead, taken_since = locks / "8d1e.json", locks / "a7c0.json"
    dead.write_text("{}")
    taken_since.write_text("{}")  # another recoverer's, taken after the dead one was judged
    remove_lock(f"file://{dead}?no_tmp_dir=true")
    assert not dead.exists() and taken_since.exists()
    remove_lock(f"file://{dead}")  # already gone: no error
    # The form CLIs built before path.Join: the lock's key after the backend URL, query and all.
    older = locks / "0b3c.json"
    older.write_text("{}")
    remove_lock(
        f"file://{tmp_path / 'state'}?no_tmp_dir=true/.pulumi/locks/organization/tpu-training/dev/0b3c.json"
    )
    assert not older.exists()
    # A relative backend (file://./state) is read from the CLI's own folder.
    relative = "file://./state/.pulumi/locks/organization/tpu-training/dev/a7c0.json"
    remove_lock(relative, cwd=str(tmp_path))
    assert not taken_since.exists()


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "file:///srv/state/.pulumi/locks/organization/p/s/not-a-lock.txt",
        "s3://bucket/.pulumi/locks/organization/p/s/8d1e.json",
    ],
)
def test_remove_lock_refuses_what_is_no_lock_file_or_a_backend_it_cannot_delete_in(url: str) -> None:
    with pytest.raises(LockNotRemovable):
        remove_lock(url)


def test_remove_lock_deletes_a_cloud_storage_backends_lock_object(monkeypatch) -> None:
    from google.cloud import storage
    from support.fakes.loopback_gcs import LoopbackGcs
    from tpu_training_components.live.endpoints import STORAGE_ENDPOINT_VARIABLE, storage_client

    with LoopbackGcs("state-bucket") as gcs:
        monkeypatch.setenv(STORAGE_ENDPOINT_VARIABLE, gcs.endpoint)
        bucket: storage.Bucket = storage_client("p").bucket("state-bucket")
        for name in ("8d1e.json", "a7c0.json"):
            bucket.blob(f"stacks/.pulumi/locks/organization/p/dev/{name}").upload_from_string("{}")
        remove_lock("gs://state-bucket/stacks/.pulumi/locks/organization/p/dev/8d1e.json")
        assert gcs.objects("state-bucket", "stacks/.pulumi/locks/") == [
            "stacks/.pulumi/locks/organization/p/dev/a7c0.json"
        ]
        remove_lock("gs://state-bucket/stacks/.pulumi/locks/organization/p/dev/8d1e.json")  # gone: no error
