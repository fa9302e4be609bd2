"""Read a run's progress records from its bucket, read and write its save request (docs/trainer.md,
"Progress and save requests"; the records are judged by ``domain.progress``).

One listing of ``progress.process-*`` under the run's ``CHECKPOINT_DIR``, then one read per
record, at most ``max_records``: a run of N hosts costs N + 1 calls, each with the client's own
timeout cut to the time left of one deadline, and no retry. An unread record is unknown, never
stalled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from ..domain.progress import PROGRESS_PREFIX, ProcessProgress, read_record
from ..library_internals import storage_session
from .checkpoints import split_gs
from .deadline import PROBE_DEADLINE_SECONDS, Deadline, DeadlineExceeded
from .http_answers import checking_answers, timeouts_of

SAVE_REQUEST = "save-request.json"
SAVE_REQUEST_FORMAT = "tpu-training-save-request/1"
MAX_RECORD_BYTES = 64 * 1024
"""A record is a few hundred bytes; what is longer is cut, and then is not a record."""
MAX_RECORDS = 1024
"""More processes than the largest slice has hosts (a v5p-12288 has 1,536 chips on 384 hosts)."""


@dataclass
class ProgressReading:
    records: list[ProcessProgress] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Each record that is not one, named, with why."""


def read_progress(
    client: Any,
    checkpoint_dir: str,
    *,
    timeout: float,
    deadline: float = PROBE_DEADLINE_SECONDS,
    max_records: int = MAX_RECORDS,
) -> ProgressReading:
    """Every process's record under ``checkpoint_dir`` (a ``google.cloud.storage.Client`` reads
    them); raises the client's error when the bucket cannot be listed, ``DeadlineExceeded`` when
    the reads take more than ``deadline`` seconds in all."""
    bucket_name, prefix = split_gs(checkpoint_dir)
    folder = f"{prefix}/" if prefix else ""
    reading = ProgressReading()
    by = Deadline(deadline, f"progress in {checkpoint_dir}")
    with checking_answers(storage_session(client), by):
        # One page: max_records is more than a page holds only for slices no one runs.
        listing = client.list_blobs(
            bucket_name,
            prefix=f"{folder}{PROGRESS_PREFIX}",
            max_results=max_records,
            timeout=by.timeout(timeout),
            retry=None,
        )
        names = [blob.name for blob in next(listing.pages, [])]
    bucket = client.bucket(bucket_name)
    for name in names:
        where = f"gs://{bucket_name}/{name}"
        try:
            # The record's own bytes (not the API's JSON, so outside checking_answers), at most
            # MAX_RECORD_BYTES, each read waiting at most the time left. By name, not by the
            # listed generation: a record rewritten since the listing is newer.
            with timeouts_of(by):
                data = bucket.blob(name).download_as_bytes(
                    end=MAX_RECORD_BYTES - 1, timeout=by.timeout(timeout), retry=None
                )
        except DeadlineExceeded:
            raise
        except Exception as exc:  # noqa: BLE001 - one record unread is that record unknown
            reading.problems.append(f"{where}: not read ({type(exc).__name__})")
            continue
        record, problem = read_record(data.decode("utf-8", errors="replace"))
        if record is None:
            reading.problems.append(f"{where}: {problem}")
        else:
            reading.records.append(record)
    reading.records.sort(key=lambda record: record.process)
    return reading


def _request_object(checkpoint_dir: str) -> tuple[str, str]:
    """The bucket and object name of the save request in ``checkpoint_dir``."""
    bucket_name, prefix = split_gs(checkpoint_dir)
    return bucket_name, f"{prefix}/{SAVE_REQUEST}" if prefix else SAVE_REQUEST


def standing_request_id(client: Any, checkpoint_dir: str, *, timeout: float) -> Optional[str]:
    """The ``id`` of the save request that stands in ``checkpoint_dir`` (read before one is
    written, so that a notice seen every round is asked for once; no retry); None when there is
    none, or it holds no id. Raises the client's error when it cannot be read."""
    from google.api_core.exceptions import NotFound

    bucket_name, name = _request_object(checkpoint_dir)
    try:
        data = (
            client.bucket(bucket_name)
            .blob(name)
            .download_as_bytes(end=MAX_RECORD_BYTES - 1, timeout=timeout, retry=None)
        )
    except NotFound:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return None
    identity = found.get("id") if isinstance(found, dict) else None
    return identity if isinstance(identity, str) else None


def write_save_request(
    client: Any,
    checkpoint_dir: str,
    request_id: str,
    *,
    reason: str,
    before: Optional[datetime],
    timeout: float,
) -> str:
    """Ask the run to checkpoint once, soon (before ``before``); returns the object's URL."""
    bucket_name, name = _request_object(checkpoint_dir)
    document = {
        "format": SAVE_REQUEST_FORMAT,
        "id": request_id,
        "reason": reason,
        "before": before.isoformat().replace("+00:00", "Z") if before is not None else None,
    }
    blob = client.bucket(bucket_name).blob(name)
    blob.upload_from_string(
        json.dumps(document), content_type="application/json", timeout=timeout, retry=None
    )
    return f"gs://{bucket_name}/{name}"
