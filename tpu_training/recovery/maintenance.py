"""Maintenance notices for `tpu-training recover` and `tpu-training status`: read them, name
the training each affects, and ask that training to checkpoint before the window.

- TPU VMs: the ``upcomingMaintenance`` of the nodes the probe listed (the same Cloud TPU API call
  per zone, ``live.tpu_api``), never another call.
- GKE: one Kubernetes list call of the nodes of the stack's node pools (``live.kube_api.
  list_pool_nodes``); a node's notice affects every Job and JobSet on its pool.

For each notice whose window is ahead (``maintenance_notices.save_deadline``), each affected run
gets a save request in its ``CHECKPOINT_DIR`` (``stack_config.derived``, as `tpu-training status`
finds it): reason ``maintenance``, the notice's stable id, ``before`` the window start less the
stack's ``checkpointing.costSeconds``. The request in place is read first: one with the same id
is not written again. A run affected by several notices is asked for the earliest window first.
Nothing here changes a recovery decision, and nothing is fatal: a failure is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Optional

from tpu_training_components.domain.maintenance_notices import (
    SAVE_REASON,
    MaintenanceNotice,
    gke_notice,
    save_deadline,
    tpu_notice,
)
from tpu_training_components.domain.recovery import failure_summary
from tpu_training_components.live.kube_api import PoolNodes, list_pool_nodes
from tpu_training_components.live.kube_client import ClusterRef
from tpu_training_components.live.progress_records import standing_request_id, write_save_request
from tpu_training_components.live.tpu_api import LiveNodes

from tpu_training import stack_config

STORAGE_SECONDS = 15.0
"""Each Cloud Storage request's timeout (reading and writing a save request)."""

# What became of the save request of one notice for one run.
REQUESTED = "requested"
"""Written by this round."""
ALREADY_REQUESTED = "alreadyRequested"
"""A request with this notice's id was there already."""
NOT_REQUESTED = "notRequested"
"""Not written: a dry run, or `status` (which only reads)."""
FAILED = "failed"
"""Reading or writing it failed (a warning says why); the next round tries again."""
EARLIER_FIRST = "earlierWindowFirst"
"""Another notice's window starts earlier for this run: that one is asked first."""
NOT_ASKED = "notAsked"
"""No save is asked: the window is ONGOING, or its start is unknown."""


@dataclass(frozen=True)
class Run:
    """A training run a notice affects."""

    kind: str
    """``tpuVm`` or ``job``."""
    name: str
    checkpoint_dir: str


@dataclass
class SaveAsked:
    run: Run
    status: str
    before: Optional[datetime] = None


@dataclass
class NoticeReport:
    notice: MaintenanceNotice
    affected: list[Run] = field(default_factory=list)
    saves: list[SaveAsked] = field(default_factory=list)

    @property
    def save_requested(self) -> bool:
        """A request with this notice's id stands in every affected run's folder."""
        return bool(self.saves) and all(s.status in (REQUESTED, ALREADY_REQUESTED) for s in self.saves)

    def line(self) -> str:
        notice = self.notice
        kind = f"{notice.type} " if notice.type else ""
        runs = ", ".join(run.name for run in self.affected) or "no training of this stack"
        saves = "; ".join(f"{s.run.name}: {_said(s)}" for s in self.saves) or "no save asked"
        window = f"window {notice.window()}"
        return f"{notice.what}: {kind}maintenance {notice.status}, {window}; affects {runs}; {saves}"

    def to_json(self) -> dict[str, Any]:
        return {
            **self.notice.to_json(),
            "affected": [{"kind": run.kind, "name": run.name} for run in self.affected],
            "saveRequested": self.save_requested,
            "saveRequests": [
                {
                    "name": s.run.name,
                    "checkpointDir": s.run.checkpoint_dir,
                    "id": self.notice.request_id,
                    "before": s.before.strftime("%Y-%m-%dT%H:%M:%SZ") if s.before else None,
                    "status": s.status,
                }
                for s in self.saves
            ],
        }


def _said(save: SaveAsked) -> str:
    before = f" (before {save.before.strftime('%Y-%m-%dT%H:%M:%SZ')})" if save.before else ""
    return {
        REQUESTED: f"save requested{before}",
        ALREADY_REQUESTED: f"save already requested{before}",
        NOT_REQUESTED: f"save not requested{before}",
        FAILED: "save request failed",
        EARLIER_FIRST: "an earlier window's save is asked first",
        NOT_ASKED: "no save asked",
    }[save.status]


@dataclass
class NoticeRound:
    notices: list[NoticeReport] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unread: list[tuple[str, str]] = field(default_factory=list)
    """(what, why) for each listing that could not be read: the notices of its nodes are unknown,
    so no notice is not "none"."""

    def to_json(self) -> list[dict[str, Any]]:
        return [report.to_json() for report in self.notices]


def _gke_pools(settings: stack_config.StackConfig) -> dict[str, str]:
    """GKE node pool name -> the ``nodePools`` entry it is a slice of."""
    return {
        gke_name: pool.name
        for pool in settings.node_pools
        for gke_name in stack_config.derived.pool_plan(settings, pool).pool_names
    }


def affected_runs(settings: stack_config.StackConfig, notice: MaintenanceNotice) -> list[Run]:
    """The VM a TPU notice is about, or every Job and JobSet on the pool of a GKE node."""
    derived = stack_config.derived
    if notice.source == "tpu":
        return [
            Run("tpuVm", vm.name, derived.vm_checkpoint_dir(settings, vm))
            for vm in settings.tpu_vms
            if vm.name == notice.node and notice.zone in vm.ladder_zones
        ]
    pool = _gke_pools(settings).get(notice.pool)
    return [
        Run("job", job.name, derived.job_checkpoint_dir(settings, job))
        for job in settings.jobs
        if pool is not None and job.node_pool == pool
    ]


def read_notices(
    settings: stack_config.StackConfig,
    tpu_nodes: Optional[LiveNodes],
    pool_nodes: Optional[PoolNodes],
    now: datetime,
) -> tuple[list[MaintenanceNotice], list[str]]:
    """Every notice of the stack's VMs and pools, and the warnings on the way."""
    notices: list[MaintenanceNotice] = []
    warnings: list[str] = []
    if tpu_nodes is not None:
        ours = {(zone, vm.name) for vm in settings.tpu_vms for zone in vm.ladder_zones}
        for (zone, name), node in sorted(tpu_nodes.nodes.items()):
            if (zone, name) in ours:
                read = tpu_notice(name, zone, node.maintenance, now)
                notices += read.notices
                warnings += read.warnings
    if pool_nodes is not None:
        if pool_nodes.failure is not None:
            warnings.append(unread_warning("GKE nodes", pool_nodes.failure))
        for pool_node in sorted(pool_nodes.nodes, key=lambda n: n.name):
            read = gke_notice(pool_node, now)
            notices += read.notices
            warnings += read.warnings
    return notices, warnings


def unread_warning(what: str, why: str) -> str:
    return f"{what} not read, so their maintenance notices are unknown: {why}"


def unread_listings(
    settings: stack_config.StackConfig, tpu_nodes: Optional[LiveNodes], pool_nodes: Optional[PoolNodes]
) -> list[tuple[str, str]]:
    """(what, why) for each listing of the stack's nodes that could not be read."""
    zones = sorted({zone for vm in settings.tpu_vms for zone in vm.ladder_zones})
    unread = []
    if zones and tpu_nodes is None:
        unread.append(("TPU nodes", "not listed this round"))
    elif tpu_nodes is not None:
        unread += [
            (f"TPU nodes in {zone}", tpu_nodes.failures[zone]) for zone in zones if zone in tpu_nodes.failures
        ]
    if pool_nodes is not None and pool_nodes.failure is not None:
        unread.append(("GKE nodes", pool_nodes.failure))
    return unread


def request_saves(
    settings: stack_config.StackConfig,
    notices: list[MaintenanceNotice],
    now: datetime,
    *,
    storage: Callable[[], Any],
    write: bool,
) -> NoticeRound:
    """Each notice with the runs it affects and, for each, whether its save request stands;
    with ``write``, the requests that do not stand yet are written."""
    margin = timedelta(seconds=settings.checkpointing.cost_seconds if settings.checkpointing else 0.0)
    result = NoticeRound([NoticeReport(n, affected_runs(settings, n)) for n in notices])
    # Per run, the notice whose save is due first: one request at a time in a run's folder.
    first: dict[str, tuple[datetime, str]] = {}
    for report in result.notices:
        deadline = save_deadline(report.notice, now, margin)
        for run in report.affected:
            candidate = (deadline, report.notice.node) if deadline is not None else None
            if candidate is not None and (run.name not in first or candidate < first[run.name]):
                first[run.name] = candidate
    client: list[Any] = []
    for report in result.notices:
        notice = report.notice
        deadline = save_deadline(notice, now, margin)
        for run in report.affected:
            if deadline is None:
                report.saves.append(SaveAsked(run, NOT_ASKED))
            elif first[run.name][1] != notice.node:
                report.saves.append(SaveAsked(run, EARLIER_FIRST))
            else:
                status = _ask(run, notice, deadline, storage, client, write, result.warnings)
                report.saves.append(SaveAsked(run, status, deadline))
    return result


def _ask(
    run: Run,
    notice: MaintenanceNotice,
    before: datetime,
    storage: Callable[[], Any],
    client: list[Any],
    write: bool,
    warnings: list[str],
) -> str:
    where = f"{notice.what}: the save request in {run.checkpoint_dir}"
    if not run.checkpoint_dir.startswith("gs://"):
        warnings.append(f"{where} cannot be written: its CHECKPOINT_DIR is not in Cloud Storage")
        return FAILED
    try:
        if not client:
            client.append(storage())
        if standing_request_id(client[0], run.checkpoint_dir, timeout=STORAGE_SECONDS) == notice.request_id:
            return ALREADY_REQUESTED
    except Exception as exc:  # noqa: BLE001 - an unread request is written again: same id, one save
        if not write or not client:
            warnings.append(f"{where} could not be read: {failure_summary(exc)}")
            return FAILED
    if not write:
        return NOT_REQUESTED
    try:
        write_save_request(
            client[0],
            run.checkpoint_dir,
            notice.request_id,
            reason=SAVE_REASON,
            before=before,
            timeout=STORAGE_SECONDS,
        )
    except Exception as exc:  # noqa: BLE001 - a failed write is a warning; the next round tries again
        warnings.append(f"{where} could not be written: {failure_summary(exc)}")
        return FAILED
    return REQUESTED


@dataclass
class NoticeStep:
    """One round's notices: read (GKE nodes: one call), turned into save requests (``write``),
    each warning said once for as long as the step lives (a watch says a stale notice once)."""

    tpu_nodes: Callable[[], Optional[LiveNodes]]
    """The TPU nodes the round's probe listed, or None when it listed none."""
    storage: Callable[[stack_config.StackConfig], Any]
    write: bool = True
    read_pool_nodes: Callable[[ClusterRef, list[str]], PoolNodes] = list_pool_nodes
    said: set[str] = field(default_factory=set)

    def __call__(self, settings: stack_config.StackConfig, now: datetime) -> NoticeRound:
        tpu_nodes, pools = self.tpu_nodes(), pool_nodes(settings, self.read_pool_nodes)
        notices, warnings = read_notices(settings, tpu_nodes, pools, now)
        result = request_saves(
            settings, notices, now, storage=lambda: self.storage(settings), write=self.write
        )
        result.unread = unread_listings(settings, tpu_nodes, pools)
        fresh = [w for w in [*warnings, *result.warnings] if w not in self.said]
        self.said.update(fresh)
        result.warnings = fresh
        return result


def pool_nodes(
    settings: stack_config.StackConfig, read: Callable[[ClusterRef, list[str]], PoolNodes] = list_pool_nodes
) -> Optional[PoolNodes]:
    """The nodes of the stack's GKE node pools (one call), or None when it has none."""
    pools = sorted(_gke_pools(settings)) if settings.cluster else []
    if settings.cluster is None or not pools:
        return None
    return read(ClusterRef(settings.gcp_project, settings.cluster.location, settings.cluster.name), pools)


def name_notices(
    settings: stack_config.StackConfig, tpu_nodes: Optional[LiveNodes], now: datetime
) -> NoticeRound:
    """The notices and the runs each affects, read and named only: what the plan shows (it asks
    for no save, and reads no bucket)."""
    pools = pool_nodes(settings)
    notices, warnings = read_notices(settings, tpu_nodes, pools, now)
    return NoticeRound(
        [NoticeReport(n, affected_runs(settings, n)) for n in notices],
        warnings,
        unread_listings(settings, tpu_nodes, pools),
    )
