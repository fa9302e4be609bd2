"""The error the components raise for bad arguments: every problem at once, each at its property
path, as Pulumi's ``InputPropertiesError`` carries them."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

import pulumi

PropertyPath = tuple[Union[str, int], ...]
"""Argument names and list indices from the arguments down (``("node_pool", "topology")``,
``("command", 0)``); ``()`` is the arguments as a whole."""

_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def format_path(path: PropertyPath) -> str:
    """``path`` in Pulumi's property path syntax (``labels["team-a"]``, ``tpu_vms[0].zone``: the
    grammar of pulumi/pulumi sdk/go/common/resource/properties_path.go ``ParsePropertyPath``)."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _NAME.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return text


@dataclass(frozen=True)
class Refusal:
    """One problem with a component's arguments."""

    path: PropertyPath
    """Where it is."""
    reason: str
    """What is wrong and what is allowed; it shows the value unless ``shown`` does."""
    shown: Optional[str] = None
    """The value, as the message shows it, where the reason does not."""

    def line(self) -> str:
        """The problem in a message: ``path = value: reason``."""
        where = format_path(self.path)
        if self.shown is not None:
            where = f"{where or 'args'} = {self.shown}"
        return f"{where}: {self.reason}" if where else self.reason


class InvalidArgument(pulumi.RunError, pulumi.InputPropertiesError):
    """Arguments a component (or the stack program) refuses.

    A ``pulumi.RunError``, so the Pulumi CLI prints the message alone, without a Python
    traceback; and Pulumi's own ``InputPropertiesError``, whose ``errors`` hold each problem's
    property path and reason, as pulumi-eks reports a node group's bad arguments. The component
    provider sends them to the engine in the schema's names, from ``refusals``.
    """

    def __init__(
        self,
        message: str,
        errors: Optional[list[pulumi.InputPropertyErrorDetails]] = None,
        *,
        where: str = "",
        refusals: Sequence[Refusal] = (),
    ) -> None:
        super().__init__(message, errors)
        self.where = where
        """Who refuses (``PreemptibleTpuVm 'demo'``)."""
        self.refusals = tuple(refusals)
        """The problems, with their paths in Python's names."""

    @classmethod
    def of(cls, where: str, refusals: Sequence[Refusal]) -> InvalidArgument:
        """The error for ``refusals`` (at least one): one line each, after ``where``."""
        lines = [refusal.line() for refusal in refusals]
        message = (
            f"{where}: {lines[0]}"
            if len(lines) == 1
            else f"{where}: {len(lines)} problems with its arguments:\n"
            + "\n".join(f"  - {line}" for line in lines)
        )
        errors: list[pulumi.InputPropertyErrorDetails] = [
            {"property_path": format_path(r.path), "reason": r.reason} for r in refusals if r.path
        ]
        return cls(message, errors, where=where, refusals=refusals)


def suggestion(unknown: str, allowed: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a likely typo, else an empty string."""
    close = difflib.get_close_matches(unknown, list(allowed), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
