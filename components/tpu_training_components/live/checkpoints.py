"""Read a run's newest checkpoint from its bucket: the step and when it was saved.

A run's ``CHECKPOINT_DIR`` (``gs://BUCKET/PREFIX``) holds one folder per saved step, named by the
step (Orbax's ``CheckpointManager`` layout), and on Cloud Storage Orbax writes
``commit_success.txt`` into a step's folder last, when the save is complete
(orbax/checkpoint/_src/path/atomicity.py, ``CommitFileTemporaryPath``): a folder without it is a
save still being written, or one a preemption cut short. The reference trainer (and any trainer
keeping the contract of docs/trainer.md) writes ``TRAINING_COMPLETE`` there when it is done.

One listing of the step folders, then one read per candidate step, newest first, until a complete
one: a few calls per run, bounded by ``max_candidates``, and all of them by one deadline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from ..library_internals import storage_session
from .deadline import MAX_PAGES, PROBE_DEADLINE_SECONDS, Deadline
from .http_answers import checking_answers

COMMIT_FILE = "commit_success.txt"
COMPLETION_MARKER = "TRAINING_COMPLETE"
_GS = re.compile(r"^gs://([^/]+)/?(.*)$")


@dataclass(frozen=True)
class CheckpointState:
    """What the bucket says of one run."""

    step: Optional[int]
    """The newest complete checkpoint's step; None when there is none."""
    saved_at: Optional[datetime]
    """When that checkpoint's save completed (its commit file's creation time)."""
    incomplete_steps: tuple[int, ...]
    """Newer step folders without a commit file: a save in progress, or one cut short."""
    complete: bool
    """The trainer wrote ``TRAINING_COMPLETE``: the run is done."""


def split_gs(uri: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    match = _GS.match(uri)
    if match is None:
        raise ValueError(f"{uri!r} is not a gs:// location")
    return match.group(1), match.group(2).strip("/")


def read_checkpoints(
    client: Any,
    checkpoint_dir: str,
    *,
    timeout: float,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_candidates: int = 5,
) -> CheckpointState:
    """The newest complete checkpoint under ``checkpoint_dir`` (a ``google.cloud.storage.Client``
    reads it); raises the client's error when the bucket cannot be read, ``DeadlineExceeded``
    when the reads take more than ``deadline`` seconds in all (each request waits at most
    ``timeout``, or the time left if that is shorter)."""
    bucket_name, prefix = split_gs(checkpoint_dir)
    folder = f"{prefix}/" if prefix else ""
    by = Deadline(deadline, f"listing {checkpoint_dir}")
    with checking_answers(storage_session(client), by):
        names, prefixes = _list_folder(client, bucket_name, folder, timeout, by)
        steps = sorted(
            (int(p[len(folder) :].rstrip("/")) for p in prefixes if p[len(folder) :].rstrip("/").isdigit()),
            reverse=True,
        )
        bucket = client.bucket(bucket_name)
        incomplete: list[int] = []
        for step in steps[:max_candidates]:
            commit = bucket.get_blob(f"{folder}{step}/{COMMIT_FILE}", timeout=by.timeout(timeout), retry=None)
            if commit is not None:
                return CheckpointState(
                    step, commit.time_created, tuple(incomplete), f"{folder}{COMPLETION_MARKER}" in names
                )
            incomplete.append(step)
    return CheckpointState(None, None, tuple(incomplete), f"{folder}{COMPLETION_MARKER}" in names)


def _list_folder(
    client: Any, bucket: str, folder: str, timeout: float, by: Deadline
) -> tuple[set[str], set[str]]:
    """The names of the objects directly in ``folder``, and of its subfolders: one request per
    page, each with the time left (the client's own iterator gives every page the first one's)."""
    names: set[str] = set()
    prefixes: set[str] = set()
    token: Optional[str] = None
    for _ in range(MAX_PAGES):
        listing = client.list_blobs(
            bucket, prefix=folder, delimiter="/", page_token=token, timeout=by.timeout(timeout), retry=None
        )
        page = next(listing.pages, None)  # the first page; iterating on would read the next
        if page is not None:
            names.update(blob.name for blob in page)
            prefixes.update(page.prefixes)
        token = listing.next_page_token
        if not token:
            return names, prefixes
    raise RuntimeError(f"gs://{bucket}/{folder} has more than {MAX_PAGES} pages of checkpoints")
