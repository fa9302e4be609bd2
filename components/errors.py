"""Errors the components raise for bad arguments."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping

import pulumi

from .naming import label_problem


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


def check_labels(where: str, labels: Mapping[str, str]) -> None:
    """Reject labels Google Cloud would refuse, before anything is declared."""
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")
