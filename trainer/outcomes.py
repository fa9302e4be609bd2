"""How a start of the trainer ends and what it says on the way: the exit codes the retry loop
reads, the errors that lead to them, and the log lines (``tpu-trainer: EVENT key=value ...``)
that the startup script's log, recovery and the tests read (docs/trainer.md, "The contract").
Standard library only."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

LOG_PREFIX = "tpu-trainer:"

EXIT_COMPLETE = 0
EXIT_BAD_CONFIG = 2
EXIT_INCOMPATIBLE = 3
EXIT_DIVERGED = 4
EXIT_TRY_AGAIN = 75
"""``EX_TEMPFAIL``: storage or the cluster could not be reached for now; nothing was changed."""
EXIT_STOPPED = 128 + signal.SIGTERM


class ConfigError(ValueError):
    """A variable of the run's environment, or a path, that the trainer cannot use."""


class TryAgain(RuntimeError):
    """Storage or the cluster could not be reached for now; a later attempt may succeed."""


class IncompatibleCheckpoint(RuntimeError):
    """The checkpoint belongs to another run; nothing was touched."""


class Diverged(RuntimeError):
    """The loss or the state stopped being finite; nothing of it was saved."""


def log(event: str, **fields: Any) -> None:
    """One line per event: ``tpu-trainer: EVENT key=value ...``, flushed at once, so the startup
    script's log (and a test reading it) sees each line as it happens."""
    parts = [LOG_PREFIX, event, *(f"{key}={value}" for key, value in fields.items())]
    # One write with its newline: print() writes the text and the newline apart when output is
    # unbuffered, and a library thread's traceback on stderr (the same pipe under a startup
    # script or a container runtime) could land in between, breaking the line for its readers.
    sys.stdout.write(" ".join(parts) + "\n")
    sys.stdout.flush()


def quoted(text: str) -> str:
    """A value with spaces, as one JSON string on one line (at most 300 characters)."""
    return json.dumps(" ".join(text.split())[:300])


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def fail(code: int, message: str) -> int:
    print(f"{LOG_PREFIX} {message} (exit {code})", file=sys.stderr, flush=True)
    return code
