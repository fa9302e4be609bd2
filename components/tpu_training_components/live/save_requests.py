"""Which save request stands in a run's ``CHECKPOINT_DIR`` (docs/trainer.md, "Progress and save
requests"): read before one is written, so that a notice seen every round is asked for once."""

from __future__ import annotations

import json
from typing import Any, Optional

from .checkpoints import split_gs
from .progress_records import MAX_RECORD_BYTES, SAVE_REQUEST


def standing_request_id(client: Any, checkpoint_dir: str, *, timeout: float) -> Optional[str]:
    """The ``id`` of the ``save-request.json`` in ``checkpoint_dir`` (a
    ``google.cloud.storage.Client`` reads it, no retry); None when there is none, or it holds
    no id. Raises the client's error when it cannot be read."""
    from google.api_core.exceptions import NotFound

    bucket_name, prefix = split_gs(checkpoint_dir)
    name = f"{prefix}/{SAVE_REQUEST}" if prefix else SAVE_REQUEST
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
