"""What the last update left, read by the program before it declares anything: the stack's own
outputs (the engine's `readStackOutputs`), and what this update is (a recovery round of
`tpu-training recover`, or any other `pulumi up`). Outputs keyed by VM or Job are exported
through ``LastUpdate.export`` so a targeted recovery round keeps what they say of the others."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
from tpu_training_components.domain.recovery_rounds import (
    ROUND_ENV,
    RecoveryRound,
    RoundEnvError,
    as_deployed,
)
from tpu_training_components.domain.stack_identity import rename_problem
from tpu_training_components.errors import InvalidArgument


@dataclass(frozen=True)
class LastUpdate:
    """This stack's outputs as of its last update, and what this update is: a recovery round of
    `tpu-training recover` or any other `pulumi up`."""

    outputs: dict[str, Any]
    secrets: frozenset[str]
    """The names of the outputs that are secret."""
    round: Optional[RecoveryRound]
    """The recovery round this update runs, or None for every update `tpu-training recover` does not run."""

    @property
    def recovered_vms(self) -> frozenset[str]:
        return self.round.tpu_vms if self.round else frozenset()

    @property
    def recovered_jobs(self) -> frozenset[str]:
        return self.round.jobs if self.round else frozenset()

    def export(self, key: str, value: Any, recovered: frozenset[str] = frozenset()) -> None:
        """Export an output keyed by VM, Job or pool name. A recovery round's targeted update
        changes only the ``recovered`` ones, and the engine keeps every other resource as the state
        has it (and creates none that is not there): the output keeps what it said of every other
        one (tpu_training/recovery/recovery_targets.py cites the engine)."""
        if self.round is None or not self.round.targeted:
            pulumi.export(key, value)
            return
        previous = self.outputs.get(key)
        deployed = pulumi.Output.from_input(value).apply(lambda new: as_deployed(previous, new, recovered))
        pulumi.export(key, pulumi.Output.secret(deployed) if key in self.secrets else deployed)

    def export_by_kind(self, key: str, value: Any, recovered: frozenset[str]) -> None:
        """``export`` for an output keyed by kind, then by name (``lastRecoveries``: ``tpuVms``,
        ``jobs``): each kind's entries kept as ``export`` keeps them."""
        if self.round is None or not self.round.targeted:
            pulumi.export(key, value)
            return
        previous = self.outputs.get(key)
        before = previous if isinstance(previous, dict) else {}
        deployed = pulumi.Output.from_input(value).apply(
            lambda new: {
                kind: as_deployed(before.get(kind), entries, recovered) for kind, entries in new.items()
            }
        )
        pulumi.export(key, pulumi.Output.secret(deployed) if key in self.secrets else deployed)


def recovery_cause(
    name: str,
    last: LastUpdate,
    recorded: Any,
    stockouts: frozenset[str] = frozenset(),
) -> Any:
    """The cause written on a re-created VM or Job: ``stockout`` one rung down its ladder; the
    cause of the recovery an interrupted update began, when this round carries it on; else the
    one ``lastRecoveries`` records (``recorded(name)``)."""
    if name in stockouts:
        return "stockout"
    if last.round is not None and name in last.round.resumed:
        return last.round.resumed[name]
    return recorded(name)


CHECKPOINT_READ_ATTEMPTS = 5
"""Reads of the stack's own outputs before the program gives up on a torn checkpoint."""


def read_stack_outputs(own: str) -> Any:
    """The engine's read of this stack's outputs, tried again on a torn read: with a file backend,
    an update that starts at once (`pulumi up --skip-preview`, and recovery's own rounds) writes the
    stack's checkpoint while the program reads it, and the read now and then fails with "failed to
    load checkpoint: EOF" (seen in the engine tier, Pulumi v3.274.1, pkg/backend/diy/state.go).
    Any other failure, or the same one every time, ends the program as before."""
    for attempt in range(1, CHECKPOINT_READ_ATTEMPTS):
        try:
            return pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": own})
        except Exception as exc:  # the SDK raises a bare Exception for a failed invoke
            if "failed to load checkpoint" not in str(exc):
                raise
        time.sleep(0.2 * attempt)
    # The last attempt: whatever it raises ends the program.
    return pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": own})


def read_last_update() -> LastUpdate:
    """The stack's outputs as of its last update, read now, before anything is declared: a check
    in an Output's apply would run while the engine already replaces resources. The engine's own
    read of a stack's outputs (its builtin `pulumi:pulumi:readStackOutputs`, what a StackReference
    reads, pkg/resource/deploy/builtins.go, which the engine serves for the `pulumi` package,
    pkg/resource/deploy/providers/registry.go loadProvider) answers synchronously through an
    invoke. Raises ``InvalidArgument`` for a renamed stack or a recovery round's value that
    `tpu-training recover` did not write."""
    own = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    result = read_stack_outputs(own)
    outputs = (result.value or {}).get("outputs")
    secret = (result.value or {}).get("secretOutputNames") or []
    previous = outputs if isinstance(outputs, dict) else {}
    # A renamed stack would re-name, and so replace, nearly everything: refuse it before it starts.
    rename = rename_problem(previous, pulumi.get_project(), pulumi.get_stack())
    if rename:
        raise InvalidArgument(rename)
    # `tpu-training recover` says what its own `pulumi up` recovers (None for every other
    # update); read before anything is declared, so a value no round writes changes nothing.
    try:
        recovery_round = RecoveryRound.from_env(os.environ.get(ROUND_ENV))
    except RoundEnvError as exc:
        raise InvalidArgument(str(exc)) from None
    return LastUpdate(previous, frozenset(str(name) for name in secret), recovery_round)
