"""Errors the components raise for bad arguments."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping, Sequence

import pulumi

from .naming import label_problem
from .startup_script import RESERVED_ENV_NAMES, env_name_problem


class InvalidArgument(pulumi.RunError):
    """A component argument is wrong. Subclasses ``pulumi.RunError`` so the Pulumi CLI prints the
    message alone, without a Python traceback."""


def suggestion(unknown: str, allowed: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a likely typo, else an empty string."""
    close = difflib.get_close_matches(unknown, list(allowed), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_known(where: str, args: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Reject argument names the component does not know; they are almost always typos."""
    allowed = sorted(allowed)
    for key in args:
        if key not in allowed:
            raise InvalidArgument(
                f"{where}: unknown argument {key!r}{suggestion(key, allowed)}; allowed: {', '.join(allowed)}"
            )


def check_one_of(where: str, key: str, value: Any, allowed: Sequence[str]) -> None:
    """Reject a value outside a fixed set of choices, listing them."""
    if value not in allowed:
        raise InvalidArgument(f"{where}: {key} {value!r} is not one of {', '.join(allowed)}")


def check_labels(where: str, labels: Mapping[str, str]) -> None:
    """Reject labels Google Cloud would refuse, before anything is declared."""
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")


def check_checkpoint_dir(where: str, checkpoint_dir: str) -> None:
    """Checkpoints live in Cloud Storage: refuse anything but a ``gs://`` prefix."""
    if not checkpoint_dir.startswith("gs://"):
        raise InvalidArgument(f"{where}: checkpoint_dir {checkpoint_dir!r} must start with gs://")


CHECKPOINT_VARIABLE = "CHECKPOINT_DIR"


def check_environment(where: str, environment: Mapping[str, str], checkpoint_dir: str) -> None:
    """Reject environment variable names a shell or a container would refuse, and values the run
    would not get: ``CHECKPOINT_DIR`` is ``checkpoint_dir`` (it may be repeated, not changed), and
    names that break the training script are refused rather than dropped."""
    for key, value in environment.items():
        problem = env_name_problem(key)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")
        if key == CHECKPOINT_VARIABLE:
            if value != checkpoint_dir:
                raise InvalidArgument(
                    f"{where}: environment {key}={value!r} differs from checkpoint_dir "
                    f"{checkpoint_dir!r}, where the run checkpoints; drop it from environment"
                )
        elif key in RESERVED_ENV_NAMES:
            raise InvalidArgument(f"{where}: environment variable {key}: {RESERVED_ENV_NAMES[key]}")


def check_whole_number(where: str, key: str, value: Any) -> None:
    """A plain count must be a whole number >= 0 (an Output is checked by nobody: its value is not
    known yet). For a recovery generation: it becomes a label value and the replacement trigger,
    where ``2.0`` or ``-1`` would read as a different generation."""
    if isinstance(value, pulumi.Output):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{where}: {key} {value!r} must be a whole number >= 0")
