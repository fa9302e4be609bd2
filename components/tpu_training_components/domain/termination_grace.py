"""How long a stopped trainer has to save, and whether its save fits. Pure Python.

A trainer told to stop (SIGTERM: preemption, maintenance, a drain) saves once and exits
(docs/trainer.md). Kubernetes gives a Pod ``terminationGracePeriodSeconds`` before it kills it:
30 s unless the Pod says otherwise, which a save of a large model does not fit. The Pods of a
training Job therefore ask for a grace of their own, which does not follow the save's measured time:
the grace is part of the Pod template, and a Job whose template changes is replaced
(pulumi-kubernetes diff.go), so a grace derived from ``costSeconds`` would restart training on a
tuning edit. The plan warns instead when the save, with its margin, no longer fits the grace. What
the capacity grants is another matter: a Spot or preemptible node's notice is short whatever the Pod
asks, and a TPU VM's shutdown script has the seconds Compute Engine gives it. The plan says when the
save cannot fit, and what is lost then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

GKE_MAX_HONOURED_GRACE_SECONDS = 3600
"""GKE drains a node for an upgrade "respecting PodDisruptionBudget and GracefulTerminationPeriod
settings for up to one hour" (GKE docs, node-pool-upgrade-strategies; extended-duration-pods: "For
automatic node upgrades, the grace period can be up to one hour"). A longer grace buys nothing."""
GKE_SPOT_POD_GRACE_SECONDS = 15
"""A Spot or preemptible GKE node stops 30 s after its preemption notice; the kubelet gives
non-system Pods the first 15 s of it (GKE docs, spot-vms and preemptible-vms: "a value greater than
15 seconds in terminationGracePeriodSeconds has no effect"). GKE 1.35.0-gke.1171000 and later can
extend the window to 120 s through the node pool's system configuration."""
GKE_SPOT_EXTENDED_GRACE_SECONDS = 120
TPU_VM_SHUTDOWN_SECONDS = 25
"""What the shutdown script waits for the trainer on a preempted TPU VM (startup_script.py,
``render_shutdown_script``): Compute Engine powers a Spot or preemptible VM off 30 s after its soft
shutdown (Compute Engine ``Scheduling.skipGuestOsShutdown``: "30 seconds for Spot VMs")."""

SAVE_MARGIN_FACTOR = 1.5
SAVE_MARGIN_SECONDS = 30
"""The grace a Pod needs: the save once and a half (a loaded disk or bucket is slower than the
measured save), plus 30 s for the step in progress, the hosts agreeing on a stop step, and leaving
the cluster."""
GRACE_STEPS_SECONDS = (60, 120, 300, 600, 1200, 1800, GKE_MAX_HONOURED_GRACE_SECONDS)
"""The graces the plan suggests: the first of these that covers a save's need, so that a value
set once survives small re-measurements."""
DEFAULT_POD_GRACE_SECONDS = 120
"""The Pods' grace when the stack sets none (``checkpointing.podGraceSeconds``): covers a save of
up to 60 s with its margin, and is what the dev stack's Pods asked for when the grace still followed
its 60 s ``costSeconds``, so those running Jobs keep their template."""


def pod_grace_seconds(cost_seconds: float) -> int:
    """The grace a trainer whose checkpoint takes ``cost_seconds`` to be committed needs: the first
    step of ``GRACE_STEPS_SECONDS`` that covers 1.5 x the save + 30 s (never below Kubernetes'
    default 30 s), at most what GKE honours. What the plan suggests, never what it sets."""
    if not (math.isfinite(cost_seconds) and cost_seconds > 0):
        raise ValueError(f"a checkpoint's cost {cost_seconds!r} s must be a number of seconds above 0")
    needed = SAVE_MARGIN_FACTOR * cost_seconds + SAVE_MARGIN_SECONDS
    return next((step for step in GRACE_STEPS_SECONDS if step >= needed), GKE_MAX_HONOURED_GRACE_SECONDS)


def grace_fit_problem(cost_seconds: float, grace_seconds: int) -> Optional[str]:
    """Why the Pods' grace does not cover a save of ``cost_seconds`` with its margin, and what to
    set; None when it does (or when no grace GKE honours would)."""
    needed = pod_grace_seconds(cost_seconds)
    if grace_seconds >= needed or grace_seconds >= GKE_MAX_HONOURED_GRACE_SECONDS:
        return None
    return (
        f"a checkpoint takes {cost_seconds:g} s (checkpointing.costSeconds), and the stop save needs "
        f"{SAVE_MARGIN_FACTOR * cost_seconds + SAVE_MARGIN_SECONDS:g} s with its margin "
        f"({SAVE_MARGIN_FACTOR:g} x the save + {SAVE_MARGIN_SECONDS} s), but the Pods' grace is "
        f"{grace_seconds} s (checkpointing.podGraceSeconds): a drain or a "
        f"maintenance event kills the trainer before its stop save is committed. Set "
        f"checkpointing.podGraceSeconds to {needed}; that changes the Pod template and so replaces a "
        f"running Job, which restarts from its last checkpoint: do it between runs"
    )


@dataclass(frozen=True)
class StopNotice:
    """How long one kind of capacity lets a stopped trainer run before it is killed."""

    seconds: int
    grants: str
    """Who grants it: "a Spot GKE node gives its Pods 15 s of its 30 s notice"."""
    remedy: str


SPOT_GKE_POOL = StopNotice(
    GKE_SPOT_POD_GRACE_SECONDS,
    f"a Spot GKE node gives its Pods {GKE_SPOT_POD_GRACE_SECONDS} s of its 30 s preemption notice",
    (
        f"extend the Pods' window to {GKE_SPOT_EXTENDED_GRACE_SECONDS} s (GKE 1.35.0-gke.1171000 and "
        f"later, the node pool's system configuration)"
    ),
)
PREEMPTIBLE_TPU_VM = StopNotice(
    TPU_VM_SHUTDOWN_SECONDS,
    f"a preemptible or Spot TPU VM gives its trainer {TPU_VM_SHUTDOWN_SECONDS} s of its 30 s notice "
    f"(the shutdown script)",
    "use on-demand or reserved capacity, which stops only for maintenance",
)


def save_fit_problem(
    cost_seconds: float, notice: StopNotice, interval_seconds: Optional[int]
) -> Optional[str]:
    """Why a save of ``cost_seconds`` does not fit the capacity's stop notice, and what is lost
    then; None when it fits."""
    if cost_seconds <= notice.seconds:
        return None
    interval = f" ({interval_seconds} s)" if interval_seconds else ""
    return (
        f"a checkpoint takes {cost_seconds:g} s (checkpointing.costSeconds), but {notice.grants}: "
        f"when preempted, the run is killed before its stop save is committed and resumes from the "
        f"checkpoint before, losing up to one checkpoint interval{interval} of training. Make the "
        f"save fit (asynchronous, smaller), or {notice.remedy}"
    )
