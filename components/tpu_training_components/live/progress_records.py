"""Read a run's progress records from its bucket, and write it a save request (docs/trainer.md,
"Progress and save requests"; the records are judged by ``domain.progress``).

One listing of ``progress.process-*`` under the run's ``CHECKPOINT_DIR``, then one read per
record, at most ``max_records``: a run of N hosts costs N + 1 calls. Each call has its own
timeout and no retry: the caller's round is bounded, and an unread record is unknown, never
stalled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from ..domain.progress import PROGRESS_PREFIX, ProcessProgress, read_record
from .checkpoints import split_gs

SAVE_REQUEST = "save-request.json"
SAVE_REQUEST_FORMAT = "tpu-training-save-request/1"
MAX_RECORDS = 1024
"""More processes than the largest slice has hosts (a v5p-12288 has 1,536 chips on 384 hosts)."""


@dataclass
class ProgressReading:
    records: list[ProcessProgress] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Each record that is not one, named, with why."""


def read_progress(
    client: Any, checkpoint_dir: str, *, timeout: float, max_records: int = MAX_RECORDS
) -> ProgressReading:
    """Every process's record under ``checkpoint_dir`` (a ``google.cloud.storage.Client`` reads
    them); raises the client's error when the bucket cannot be listed."""
    bucket_name, prefix = split_gs(checkpoint_dir)
    folder = f"{prefix}/" if prefix else ""
    reading = ProgressReading()
    blobs = client.list_blobs(
        bucket_name, prefix=f"{folder}{PROGRESS_PREFIX}", timeout=timeout, retry=None, max_results=max_records
    )
    bucket = client.bucket(bucket_name)
    for listed in blobs:
        where = f"gs://{bucket_name}/{listed.name}"
        try:
            # By name, not by the listed generation: a record rewritten since the listing is newer.
            text = bucket.blob(listed.name).download_as_text(timeout=timeout, retry=None)
        except Exception as exc:  # noqa: BLE001 - one record unread is that record unknown
            reading.problems.append(f"{where}: not read ({type(exc).__name__})")
            continue
        record, problem = read_record(text)
        if record is None:
            reading.problems.append(f"{where}: {problem}")
        else:
            reading.records.append(record)
    reading.records.sort(key=lambda record: record.process)
    return reading


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
    bucket_name, prefix = split_gs(checkpoint_dir)
    name = f"{prefix}/{SAVE_REQUEST}" if prefix else SAVE_REQUEST
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
