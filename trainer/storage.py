"""Where checkpoints live, local or ``gs://``: the paths checked before anything trains, how a
storage error is told apart ("not now" or "not this"), moving a folder, and gcsfs's listings
cache turned off. The storage libraries (etils, gcsfs, google-auth) are imported when used."""

from __future__ import annotations

import errno
import os
import threading
from typing import Any, Iterator, Optional

from outcomes import ConfigError, TryAgain, describe
from settings import Settings


def check_local_folder(variable: str, path: str) -> None:
    """``path`` exists (or can be made) as a folder this process can write to; ``ConfigError``
    naming ``variable`` otherwise."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{variable}={path!r} is a file, not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".tpu-trainer-probe-{os.getpid()}")
        with open(probe, "wb") as handle:
            handle.write(b"probe")
        os.remove(probe)
    except OSError as error:
        reason = error.strerror or describe(error)
        raise ConfigError(
            f"{variable}={path!r} is not a folder this trainer can write to: {reason}"
        ) from None


def check_bucket(settings: Settings, process: int) -> None:
    """``gs://`` is reachable and writable with this machine's credentials, within
    ``TRAINER_STORAGE_TIMEOUT_SECONDS``: ``ConfigError`` for what the stack must fix (no
    credentials, no permission, no bucket), ``TryAgain`` for what may pass."""
    from etils import epath

    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            if not os.environ.get("FSSPEC_GCS_TOKEN"):
                # gcsfs's first choice (its token "google_default"): when it finds none, it goes
                # on to probe for a metadata server and to anonymous access, which a bucket of the
                # stack refuses, after retries. Say so at once instead.
                import google.auth

                google.auth.default()
            folder = epath.Path(settings.checkpoint_dir)
            name = folder / f".tpu-trainer-probe-{process}-{os.getpid()}"
            name.write_bytes(b"probe")
            name.unlink()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - reported below, in one line
            outcome.append(error)

    # A thread, because the storage clients' own deadlines add up to minutes when nothing answers
    # (credential probes of a metadata server that is not there, retries with back-off).
    worker = threading.Thread(target=probe, daemon=True, name="storage-check")
    worker.start()
    worker.join(settings.storage_timeout_seconds)
    if not outcome:
        raise TryAgain(
            f"CHECKPOINT_DIR={settings.checkpoint_dir} did not answer within "
            f"{settings.storage_timeout_seconds:g} s (TRAINER_STORAGE_TIMEOUT_SECONDS)"
        )
    error = outcome[0]
    if error is None:
        return
    kind = storage_failure(error)
    message = f"CHECKPOINT_DIR={settings.checkpoint_dir} cannot be written: {describe(error)}"
    if kind == "transient":
        raise TryAgain(message)
    raise ConfigError(f"{message} (check the machine's credentials and the bucket)")


_TRANSIENT_STATUS = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED")
_TRANSIENT_ERRNOS = {
    errno.EIO,
    errno.EAGAIN,
    errno.EINTR,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.ENETDOWN,
    errno.EPIPE,
    errno.ESTALE,
}
_TRANSIENT_NAMES = {
    # google-api-core, google-auth's transport, aiohttp and requests name what did not answer.
    "ServiceUnavailable",
    "InternalServerError",
    "BadGateway",
    "GatewayTimeout",
    "TooManyRequests",
    "DeadlineExceeded",
    "RetryError",
    "TransportError",
    "ServerDisconnectedError",
    "ClientConnectionError",
    "ClientConnectorError",
    "ClientOSError",
    "ConnectionError",
    "ReadTimeout",
    "ConnectTimeout",
}


def storage_failure(error: BaseException) -> str:
    """``"transient"`` for an error that says storage did not answer (time-outs, I/O errors,
    HTTP 429 and 5xx, gRPC's UNAVAILABLE family); ``"permanent"`` for anything else: what was read
    is missing or wrong, or access is refused."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (TimeoutError, ConnectionError)):
            return "transient"
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return "transient"
        if type(current).__name__ in _TRANSIENT_NAMES:
            return "transient"
        code = getattr(current, "code", None)
        if isinstance(code, int) and (code == 429 or 500 <= code <= 599):
            return "transient"
        text = str(current).lstrip()
        if text.startswith(_TRANSIENT_STATUS) or " 503 " in text or "status 503" in text:
            return "transient"
        current = current.__cause__ or current.__context__
    return "permanent"


def move_folder(source: Any, target: Any) -> None:
    """Move a folder (``etils.epath`` paths): one rename on a disk; on ``gs://`` a copy of each
    object (Cloud Storage's rewrite, within the bucket) then a delete, through the same
    filesystem Orbax lists with, so its listings see the move. (gcsfs's own mv first tries the
    objects.move call, which not every bucket and no emulator offers.) A kill in between leaves the
    step where it was, to be found damaged and moved again."""
    if not str(source).startswith("gs://"):
        target.parent.mkdir(parents=True, exist_ok=True)
        source.rename(target)
        return
    names = sorted(str(item.relative_to(source)) for item in files_under(source))
    if not names:
        raise FileNotFoundError(f"no files under {source}")
    for name in names:
        (source / name).copy(target / name)
    copied = sorted(str(item.relative_to(target)) for item in files_under(target))
    if copied != names:
        raise RuntimeError(f"{target} holds {len(copied)} of the {len(names)} files of {source}; kept both")
    source.rmtree()


def files_under(folder: Any) -> Iterator[Any]:
    # One listing per folder: epath refuses a recursive glob on gs://.
    for item in folder.iterdir():
        if item.is_dir():
            yield from files_under(item)
        else:
            yield item


def list_storage_afresh() -> None:
    """gcsfs answers a listing from the listings it made before (fsspec's listings cache), so a
    step another process saved, or moved, after this one listed the folder would stay unseen or
    seen: every process must see what is in the bucket now. Set before any filesystem is made
    (fsspec.config.conf holds the defaults of new filesystems)."""
    import fsspec

    fsspec.config.conf.setdefault("gcs", {})["use_listings_cache"] = False
