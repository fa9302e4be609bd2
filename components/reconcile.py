"""Recovery by `pulumi up`: read the live TPU nodes, decide, log why, and hand each VM its
recovery generation. Use it before declaring ``PreemptibleTpuVm`` resources."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Optional, Sequence

import pulumi

from .recovery import Decision, decide, unreachable, utc_now
from .tpu_api import list_live_nodes

GENERATIONS_OUTPUT = "recoveryGenerations"
"""Stack output holding ``{vm name: generation}``; read back on the next run."""


def reconcile_tpu_vms(
    project: str,
    vms: Sequence[tuple[str, str]],
    *,
    read_live_state: bool = True,
    grace: timedelta = timedelta(minutes=30),
    now: Optional[datetime] = None,
    client: Any = None,
) -> list[Decision]:
    """Decide for every ``(name, zone)``: one API list call per zone, then the decision table.
    With ``read_live_state=False`` (an offline plan) every VM keeps its last generation."""
    if not read_live_state:
        return [
            Decision(name, "keep", None, "live state not read (offline); last generation kept")
            for name, _ in vms
        ]
    live = list_live_nodes(project, {zone for _, zone in vms}, client=client)
    now = now or utc_now()
    decisions = []
    for name, zone in vms:
        if zone in live.failures:
            decisions.append(unreachable(name, live.failures[zone]))
        else:
            decisions.append(decide(name, live.nodes.get((zone, name)), now=now, grace=grace))
    return decisions


def log_decisions(decisions: Sequence[Decision]) -> None:
    """One line per VM, so a preview in CI says what `up` will do and why."""
    for decision in decisions:
        (pulumi.log.warn if decision.warn else pulumi.log.info)(decision.message)


def last_deployed_generations() -> pulumi.Output[dict[str, int]]:
    """The generations this stack exported on its last successful update, read through a
    reference to the stack itself; ``{}`` before the first one. This is the "last known" value
    that an unreachable API or a missing node falls back to, so nothing is replaced on unknown."""
    own = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    reference = pulumi.StackReference(f"{pulumi.get_stack()}-previous-state", stack_name=own)
    return reference.get_output(GENERATIONS_OUTPUT).apply(
        lambda value: {str(k): int(v) for k, v in (value or {}).items()}
    )


def generation_for(decision: Decision, previous: pulumi.Output[dict[str, int]]) -> pulumi.Input[int]:
    """The decision's generation, or the last deployed one (0 if none) when it keeps that."""
    if decision.generation is not None:
        return decision.generation
    return previous.apply(lambda gens: gens.get(decision.name, 0))
