"""Recovery is a reconcile, for workloads queued through Kueue: tell a suspended Job or JobSet that
waits for admission (keep it) from one Kueue will never resume (replace it at the next generation),
by its Kueue Workload.

Pure Python. What Kueue does, read from its source at tag v0.19.2 (kubernetes-sigs/kueue, commit
8eab68778fc1b52affe165fdf5af29d1e9b4f3cb), the version the stack installs:

- Kueue makes one ``kueue.x-k8s.io/v1beta2`` Workload per Job or JobSet, in its namespace, with the
  Job as its controller (an ownerReference with ``controller: true``) and the label
  ``kueue.x-k8s.io/job-uid: <the Job's uid>`` (pkg/controller/jobframework/reconciler.go
  ``ConstructWorkload``), named ``<kind>-<name>-<hash>`` (jobframework/workload_names.go). A
  replaced Job has a new uid, and so a new Workload.
- When GKE takes a ProvisioningRequest's capacity back (``CapacityRevoked``), Kueue rejects the
  admission check (pkg/controller/admissionchecks/provisioning/controller.go); a rejected check
  makes the Workload's ``DeactivationTarget`` condition, then ``spec.active: false``, then an
  eviction with the ``Evicted`` reason ``DeactivatedDueToAdmissionCheck``
  (pkg/controller/core/workload_controller.go ``reconcileCheckBasedEviction``, ``Reconcile``;
  pkg/workload/evict/evict.go ``Evict``, pkg/workload/patching/patching.go ``ReasonWithCause``).
  The Job is suspended again and stays so: an inactive Workload is never queued
  (workload_controller.go ``Update``: "Workload will not be queued because the workload is not
  active"). The same happens when the ProvisioningRequest fails, or its booking expires, more
  often than the check's retry limit allows, and when Pods never get ready too many times
  (``RequeuingLimitExceeded``). Someone who sets ``spec.active: false`` by hand gets the reason
  ``Deactivated`` with no cause (evict.go ``IsEvictedDueToDeactivationByKueue`` tells the two apart).
- Every other eviction of an active Workload is requeued by Kueue itself: at once after a
  preemption or node failures (``Requeued`` True), after a back-off
  (``status.requeueState.requeueAt``) after a PodsReady time-out or an admission check to retry,
  and when a stopped queue runs again (workload_controller.go, jobframework/reconciler.go step 6).
- A Workload ``Finished`` while its Job never finished (``FailedToStart``: Kueue could not start
  it) is never started again either (reconciler.go step 7 and ``Finish``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .recovery import UNKNOWN_KEPT, Cause, Condition, true_condition

KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label Kueue puts on a Workload: the uid of the Job or JobSet it stands for."""
KUEUE_WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"

# Causes of a deactivation by Kueue (the part after "DeactivatedDueTo") after which the capacity
# is gone or never came: a new Job, queued anew, asks GKE again.
_CAPACITY_LOST = frozenset({"AdmissionCheck", "RequeuingLimitExceeded"})
_DEACTIVATED = "Deactivated"
_DUE_TO = "DeactivatedDueTo"
_STOPPED_QUEUE = frozenset({"ClusterQueueStopped", "LocalQueueStopped"})
_LONGEST_DETAIL = 300


WorkloadCondition = Condition
"""One entry of a Workload's ``status.conditions``."""


@dataclass(frozen=True)
class LiveWorkload:
    """What the Kubernetes API says of one Kueue Workload."""

    name: str
    namespace: str
    owner_uid: str = ""
    """The uid of its controller (the Job or JobSet it stands for); "" when it has none."""
    active: bool = True
    """``spec.active`` (true when absent: the CRD's default)."""
    conditions: tuple[WorkloadCondition, ...] = ()
    requeue_at: str = ""
    """``status.requeueState.requeueAt``: when Kueue queues an evicted Workload again."""

    def condition(self, type_: str) -> Optional[WorkloadCondition]:
        """The condition of that type, when its status is True."""
        return true_condition(self.conditions, type_)

    def deactivation_cause(self) -> Optional[str]:
        """Why Kueue deactivated it ("AdmissionCheck", ...), "" when someone did by hand, None
        when it is active."""
        if self.active:
            return None
        evicted = self.condition("Evicted")
        if evicted is not None and evicted.reason.startswith(_DUE_TO):
            return evicted.reason[len(_DUE_TO) :]
        # Kueue sets this first, then spec.active, then evicts (and drops it): between the two.
        target = self.condition("DeactivationTarget")
        return target.reason if target is not None else ""


@dataclass(frozen=True)
class KueueState:
    """What recovery knows of the Kueue Workload of one suspended, queued Job or JobSet."""

    read: bool = False
    """Its namespace's Workloads were asked for (the stack queues it, and the probe reads live)."""
    problem: Optional[str] = None
    """Why they could not be read (no Workload CRD, an unreadable answer...): unknown."""
    workloads: tuple[LiveWorkload, ...] = ()
    """The Workloads whose controller it is, when read."""


NOT_READ = KueueState()


def kueue_unreadable(problem: str) -> KueueState:
    return KueueState(read=True, problem=problem)


def kueue_found(workloads: tuple[LiveWorkload, ...]) -> KueueState:
    return KueueState(read=True, workloads=workloads)


@dataclass(frozen=True)
class Verdict:
    """What to do with a suspended, queued Job or JobSet, and why."""

    replace: bool
    reason: str
    warn: bool = False
    unknown: bool = False
    """Kept because the Workload could not be read: a watcher tries again later."""
    cause: Optional[Cause] = None
    """Why it is replaced (``replace``)."""


def _explain(condition: WorkloadCondition) -> str:
    message = condition.message
    if len(message) > _LONGEST_DETAIL:
        message = message[: _LONGEST_DETAIL - 1] + "…"
    return f"{condition.type}: " + ": ".join(part for part in (condition.reason, message) if part)


def _requeue_command(workload: LiveWorkload) -> str:
    return (
        f"`kubectl patch workloads.kueue.x-k8s.io {workload.name} -n {workload.namespace} "
        f'--type=merge -p \'{{"spec":{{"active":true}}}}\'`'
    )


def _capacity_cause(workload: LiveWorkload) -> Cause:
    """A flex-start booking that expired (the ProvisioningRequest's ``BookingExpired``, which
    Kueue's provisioning check copies into its message), or capacity taken back or never given."""
    said = " ".join(
        f"{condition.reason} {condition.message}"
        for condition in workload.conditions
        if condition.type in ("Evicted", "DeactivationTarget")
    )
    return Cause.FLEX_START_EXPIRED if "BookingExpired" in said else Cause.QUEUED_CAPACITY_REVOKED


def queued_verdict(kind: str, state: KueueState) -> Verdict:
    """The decision for a ``kind`` ("Job" or "JobSet") that is suspended and carries a Kueue queue
    label: Kueue's webhook created it suspended, and it stays so until Kueue admits it, or for
    ever once Kueue has given up on it. Never replaced on unknown."""
    waits = f"{kind} waits for Kueue to admit it (all-or-nothing capacity)"
    if not state.read:
        return Verdict(False, waits)
    if state.problem is not None:
        return Verdict(
            False,
            f"{kind} is suspended by Kueue and its Kueue Workload could not be read ({state.problem}): "
            f"waiting for admission or given up, nobody can tell; {UNKNOWN_KEPT}",
            warn=True,
            unknown=True,
        )
    if not state.workloads:
        return Verdict(False, f"{waits}; Kueue has not made its Workload yet")
    if len(state.workloads) > 1:
        names = ", ".join(sorted(w.name for w in state.workloads))
        return Verdict(
            False,
            f"{kind} has {len(state.workloads)} Kueue Workloads ({names}); Kueue keeps one and deletes "
            f"the others, so a later run decides",
        )
    (workload,) = state.workloads
    again = f"Kueue never resumes it, so a new {kind} is queued and resumes from its checkpoint"
    finished = workload.condition("Finished")
    if finished is not None:
        return Verdict(
            True,
            f"Kueue finished its Workload {workload.name} ({_explain(finished)}) before it ran; {again}",
            cause=Cause.FAILED,
        )
    cause = workload.deactivation_cause()
    if cause is not None:
        evicted = workload.condition("Evicted") or workload.condition("DeactivationTarget")
        how = f"{_explain(evicted)}" if evicted is not None else "spec.active false"
        if cause in _CAPACITY_LOST:
            return Verdict(
                True,
                f"Kueue deactivated its Workload {workload.name} ({how}); {again}",
                cause=_capacity_cause(workload),
            )
        who = f"Kueue deactivated it ({cause})" if cause else "someone deactivated it on purpose"
        return Verdict(
            False,
            f"its Kueue Workload {workload.name} is inactive ({how}): {who}, which recovery does not "
            f"undo; queue it again with {_requeue_command(workload)}",
            warn=True,
        )
    if workload.condition("Admitted") is not None:
        return Verdict(False, f"Kueue admitted its Workload {workload.name}; the {kind} is being resumed")
    evicted = workload.condition("Evicted")
    if evicted is not None:
        if evicted.reason in _STOPPED_QUEUE:
            return Verdict(
                False,
                f"Kueue evicted its Workload {workload.name} ({_explain(evicted)}): someone stopped the "
                f"queue; Kueue queues it again when the queue runs",
                warn=True,
            )
        when = f" at {workload.requeue_at}" if workload.requeue_at else ""
        again_at = f"Kueue evicted its Workload {workload.name} ({_explain(evicted)}) and queues it again"
        return Verdict(False, again_at + when)
    if workload.condition("QuotaReserved") is not None:
        return Verdict(False, f"{waits}; quota reserved, its admission check (the node request) is pending")
    return Verdict(False, f"{waits}; its Workload {workload.name} waits in the queue")
