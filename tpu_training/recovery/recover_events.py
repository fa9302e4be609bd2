"""Cluster events for `tpu-training recover --watch`: a ``ClusterWatcher`` beside the rounds,
watching what the last round's config names, whose relevant changes wake the next round early.

The watcher decides nothing; a round it wakes lists everything as every round does. TPU VMs
have no watch (the Cloud TPU API offers none): they are read by every round, as before.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from tpu_training_components.domain.node_pool_plan import POOL_NODE_LABEL
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.kube_watch import ClusterWatcher, WatchLimits, WatchScope

from tpu_training import stack_config

STOP_SECONDS = 2.0
"""How long closing the watcher may take: its streams' sockets are shut down, then joined."""

Scope = tuple[ClusterRef, WatchScope]


def scope_of(settings: stack_config.StackConfig) -> Optional[Scope]:
    """What a round of this stack reads from its cluster, to watch; None: no cluster to watch."""
    if settings.cluster is None or not settings.recovery.read_live_state:
        return None
    cluster = ClusterRef(settings.gcp_project, settings.cluster.location, settings.cluster.name)
    jobs = sorted({job.namespace for job in settings.jobs if job.kind == "Job"})
    jobsets = sorted({job.namespace for job in settings.jobs if job.kind == "JobSet"})
    pools = sorted({pool.name for pool in settings.node_pools})
    scope = WatchScope(
        job_namespaces=tuple(jobs),
        jobset_namespaces=tuple(jobsets),
        pod_namespaces=tuple(sorted({*jobs, *jobsets})),
        # The stack's own label on its pools' nodes (node_pool_plan.TpuNodePoolPlan.node_labels).
        node_selector=f"{POOL_NODE_LABEL} in ({','.join(pools)})" if pools else None,
    )
    return None if scope.empty else (cluster, scope)


class ClusterEvents:
    """Keeps one watcher running for the scope the last round's config gave (``note``, called
    with each round's settings), restarted when that scope changes (``follow``, between rounds).
    Each relevant change calls ``wake(reason)``; ``say`` gets the watcher's warnings."""

    def __init__(
        self,
        wake: Callable[[str], None],
        say: Callable[[str], None],
        *,
        limits: Optional[WatchLimits] = None,
        make: Callable[..., Any] = ClusterWatcher,
    ) -> None:
        self._wake, self._say, self._make = wake, say, make
        self._limits = limits or WatchLimits()
        self._wanted: Optional[Scope] = None
        self._running: Optional[Scope] = None
        self._watcher: Any = None

    def note(self, settings: stack_config.StackConfig) -> None:
        self._wanted = scope_of(settings)

    def follow(self) -> None:
        if self._wanted == self._running:
            return
        self.close()
        self._running = self._wanted
        if self._wanted is not None:
            cluster, scope = self._wanted
            self._watcher = self._make(cluster, scope, self._wake, warn=self._say, limits=self._limits)
            self._watcher.start()

    def close(self) -> None:
        if self._watcher is not None and not self._watcher.stop(STOP_SECONDS):
            self._say(f"warning: the cluster watcher did not stop within {STOP_SECONDS:g} s")
        self._watcher, self._running = None, None
