"""Recovery is a reconcile, for Kubernetes training Jobs: decide from a Job's live status whether
`pulumi up` re-creates it.

Pure Python. A failed Job stays failed: Kubernetes never restarts it and pulumi-kubernetes sees no
diff, so the program reads the live Jobs itself and bumps the *recovery generation* of each failed
one. The generation is the Job's ``replacement_trigger`` and its ``recovery-generation`` label, so
the new Job resumes from the same ``CHECKPOINT_DIR``. The decision tables are in docs/gke.md and
docs/multislice.md; a suspended Job on a Kueue queue is decided by its Workload (kueue_recovery).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping, Optional

from .job_manifests import KUEUE_QUEUE_LABEL
from .kueue_recovery import NOT_READ, KueueState, queued_verdict
from .recovery import (
    Cause,
    Condition,
    Decision,
    gone,
    keep,
    parse_generation,
    replace,
    true_condition,
    unreachable,
)

JobCondition = Condition
"""One entry of a Job's or JobSet's ``status.conditions``."""


class _Conditioned:
    """A live workload's recovery generation and conditions, read the same way for Jobs and
    JobSets."""

    labels: Mapping[str, str]
    conditions: tuple[JobCondition, ...]
    uid: str
    created: Optional[datetime]

    @property
    def training(self) -> bool:
        """Every Pod ready, and nothing says it ended or waits (each kind says how)."""
        raise NotImplementedError

    @property
    def waits_on_kueue(self) -> bool:
        """Suspended, with a Kueue queue label: Kueue's webhook created it suspended, and only Kueue
        resumes it (or never does, once it has given up on its Workload)."""
        return KUEUE_QUEUE_LABEL in self.labels and self.condition("Suspended") is not None

    @property
    def generation(self) -> Optional[int]:
        """The ``recovery-generation`` label; None when absent or not a plain number."""
        return parse_generation(self.labels)

    def condition(self, *types: str) -> JobCondition | None:
        """The first condition of one of ``types`` whose status is True."""
        return true_condition(self.conditions, *types)


@dataclass(frozen=True)
class LiveJob(_Conditioned):
    """What the Kubernetes API says of one Job."""

    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[JobCondition, ...] = ()
    active: int = 0
    """Pods pending or running."""
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    uid: str = ""
    """``metadata.uid``: what its Kueue Workload names as its controller."""
    created: Optional[datetime] = None
    """``metadata.creationTimestamp``: when this generation was created."""

    @property
    def training(self) -> bool:
        """Every Pod is running and ready, and nothing says the Job ended or waits: only then can
        its training be judged by its progress."""
        return (
            self.condition("Complete", "SuccessCriteriaMet", "Failed", "FailureTarget", "Suspended") is None
            and self.active > 0
            and self.ready >= self.active
        )


_DISRUPTED = ("DisruptionTarget", "Evict", "Preempt", "DeletionByTaintManager", "TerminationByKubelet")
"""Words Kubernetes' own reasons and messages use for a Pod disrupted by something other than
its workload (the DisruptionTarget condition's reasons: EvictionByEvictionAPI,
PreemptionByScheduler, DeletionByTaintManager, TerminationByKubelet)."""


def failure_cause(failed: JobCondition) -> Cause:
    """A Job or JobSet that failed because its Pods were disrupted, or on its own."""
    said = f"{failed.reason} {failed.message}"
    return Cause.EVICTED if any(word in said for word in _DISRUPTED) else Cause.FAILED


def _explain(condition: JobCondition) -> str:
    detail = ": ".join(part for part in (condition.reason, condition.message) if part)
    return f" ({detail})" if detail else ""


def _decide_queued(name: str, kind: str, generation: Optional[int], kueue: KueueState) -> Decision:
    verdict = queued_verdict(kind, kueue)
    if verdict.replace:
        return replace(name, generation, verdict.reason, verdict.cause or Cause.FAILED)
    kept = keep(name, generation, verdict.reason, warn=verdict.warn)
    return dataclasses.replace(kept, unavailable=verdict.unknown)


def decide_job(name: str, live: LiveJob | None, kueue: KueueState = NOT_READ) -> Decision:
    """The decision table for one Job whose namespace the API answered for (docs/gke.md);
    ``kueue``: what is known of its Kueue Workload, when it runs on a queued pool."""
    if live is None:
        return gone(name, "no such Job in its namespace")
    generation = live.generation
    # SuccessCriteriaMet precedes Complete for Jobs with a success policy; both mean done.
    done = live.condition("Complete", "SuccessCriteriaMet")
    if done is not None:
        return keep(name, generation, f"Job is {done.type}; a finished training is never re-run")
    # FailureTarget is set as soon as the Job is bound to fail, before its Pods are gone.
    failed = live.condition("Failed", "FailureTarget")
    if failed is not None:
        why = f"Job has {failed.type}{_explain(failed)}; the new Job resumes from its checkpoint"
        return replace(name, generation, why, failure_cause(failed))
    suspended = live.condition("Suspended")
    if suspended is not None:
        # Kueue's webhook creates a queued Job suspended; Kueue lifts that when it admits it.
        if live.waits_on_kueue:
            return _decide_queued(name, "Job", generation, kueue)
        return keep(
            name,
            generation,
            "Job is suspended; someone suspended it on purpose, resume it with "
            '`kubectl patch job ... -p \'{"spec":{"suspend":false}}\'`',
            warn=True,
        )
    if live.active == 0:
        return keep(name, generation, "Job has no Pod yet; it is starting")
    if live.ready < live.active:
        return keep(
            name,
            generation,
            f"Job has {live.active} Pods, {live.ready} ready; the rest are pending "
            f"(flex-start provisions nodes on demand)",
        )
    return keep(name, generation, f"Job is running ({live.active} Pods ready)")


def unreachable_cluster(name: str, problem: str) -> Decision:
    """When the cluster cannot say: keep the last deployed generation. Never replace on unknown."""
    return unreachable(name, problem, api="Kubernetes API")


# --- JobSets (jobset.x-k8s.io/v1alpha2) ------------------------------------------------------
# A JobSet restarts itself in the cluster: every disruption, and up to maxRestarts real failures,
# re-create all its Jobs in seconds without `pulumi up`. Only a JobSet that has given up (Failed)
# is left to the reconcile, which replaces it as it replaces a failed Job.


@dataclass(frozen=True)
class LiveJobSet(_Conditioned):
    """What the Kubernetes API says of one JobSet."""

    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[JobCondition, ...] = ()
    """``status.conditions``: Completed, Failed, Suspended, StartupPolicy..., as JobSet sets them."""
    restarts: int = 0
    """``status.restarts``: gang restarts so far, disruptions included."""
    restarts_counted: int = 0
    """``status.restartsCountTowardsMax``: those that count against ``maxRestarts``."""
    slices: int = 0
    """Child Jobs the JobSet declares (``replicas`` of its replicated jobs)."""
    ready: int = 0
    """Child Jobs whose Pods are all ready (``replicatedJobsStatus[].ready``)."""
    uid: str = ""
    """``metadata.uid``: what its Kueue Workload names as its controller."""
    created: Optional[datetime] = None
    """``metadata.creationTimestamp``: when this generation was created."""

    @property
    def training(self) -> bool:
        """Every slice is ready, and nothing says the JobSet ended or waits."""
        return (
            self.condition("Completed", "Failed", "Suspended") is None
            and self.slices > 0
            and self.ready >= self.slices
        )


def decide_jobset(name: str, live: LiveJobSet | None, kueue: KueueState = NOT_READ) -> Decision:
    """The decision table for one JobSet whose namespace the API answered for (docs/multislice.md);
    ``kueue``: what is known of its Kueue Workload, when it runs on a queued pool. The decision
    carries the JobSet's own restarts, for the restart budget."""
    if live is None:
        return gone(name, "no such JobSet in its namespace")
    decision = _decide_jobset(name, live, kueue)
    return dataclasses.replace(decision, restarts=live.restarts, created=live.created)


def _decide_jobset(name: str, live: LiveJobSet, kueue: KueueState) -> Decision:
    generation = live.generation
    restarted = (
        f"; JobSet restarted it {live.restarts} time(s), {live.restarts_counted} counted against maxRestarts"
        if live.restarts
        else ""
    )
    done = live.condition("Completed")
    if done is not None:
        return keep(name, generation, "JobSet is Completed; a finished training is never re-run")
    failed = live.condition("Failed")
    if failed is not None:
        why = (
            f"JobSet has Failed{_explain(failed)}{restarted}; its own restarts are spent, so the new "
            f"JobSet resumes from its checkpoint"
        )
        return replace(name, generation, why, failure_cause(failed))
    suspended = live.condition("Suspended")
    if suspended is not None:
        # Kueue creates a JobSet suspended and lifts that when it admits it.
        if live.waits_on_kueue:
            return _decide_queued(name, "JobSet", generation, kueue)
        return keep(
            name,
            generation,
            "JobSet is suspended; someone suspended it on purpose, resume it with "
            '`kubectl patch jobset ... --type=merge -p \'{"spec":{"suspend":false}}\'`',
            warn=True,
        )
    if live.ready < live.slices:
        return keep(
            name,
            generation,
            f"JobSet has {live.ready} of {live.slices} slices ready; the rest are starting "
            f"(flex-start provisions nodes on demand){restarted}",
        )
    return keep(name, generation, f"JobSet is running ({live.slices} slices ready){restarted}")
