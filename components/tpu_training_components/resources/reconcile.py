"""Recovery by `pulumi up`: read the live TPU nodes and training Jobs, decide, log why, and hand
each its recovery generation. Use it before declaring ``PreemptibleTpuVm`` and ``TpuTrainingJob``
resources."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Collection, Mapping, NamedTuple, Optional, Sequence

import pulumi

from ..domain.job_recovery import LiveJob, LiveJobSet, decide_job, decide_jobset, unreachable_cluster
from ..domain.kueue_recovery import NOT_READ
from ..domain.naming import generation_problem
from ..domain.progress import HangCheck, Stall, Verdict, judge, with_progress
from ..domain.queued_resources import ACTIVE, LiveQueuedResource, decide_queued, read_queued_resource
from ..domain.recovery import (
    Cause,
    Decision,
    LiveNode,
    decide,
    failure_summary,
    fresh_generation,
    unreachable,
    utc_now,
    zoned_time,
)
from ..errors import InvalidArgument
from ..live.endpoints import storage_client
from ..live.kube_api import LiveJobs, list_live_jobs
from ..live.kube_client import ClusterRef
from ..live.progress_records import ProgressReading, read_progress
from ..live.tpu_api import LiveNodes, list_live_nodes

GENERATIONS_OUTPUT = "recoveryGenerations"
"""Stack output holding ``{vm name: generation}``; read back on the next run."""
JOB_GENERATIONS_OUTPUT = "jobRecoveryGenerations"
"""Stack output holding ``{job name: generation}``; read back on the next run."""
RECOVERIES_OUTPUT = "lastRecoveries"
"""Stack output holding ``{"tpuVms": {name: recovery}, "jobs": {name: recovery}}``, each the last
time that VM or Job was created or replaced and why (``TrainingRecovery.last_recoveries``):
what ``tpu-training status`` shows."""


def _not_read(names: Sequence[str]) -> list[Decision]:
    # An offline plan reads nothing, and so changes nothing.
    return [
        Decision(name, "keep", None, "live state not read (offline); last generation kept") for name in names
    ]


ReadProgress = Callable[[str], ProgressReading]
"""The progress records in one checkpoint folder (raises when they cannot be listed)."""
PROGRESS_READ_SECONDS = 10.0


def progress_reader(project: str) -> ReadProgress:
    """Reads progress records with a Cloud Storage client made on first use (its endpoint and
    credentials as ``endpoints.storage_client`` decides)."""
    client: list[Any] = []

    def read(checkpoint_dir: str) -> ProgressReading:
        if not client:
            client.append(storage_client(project))
        return read_progress(client[0], checkpoint_dir, timeout=PROGRESS_READ_SECONDS)

    return read


def judge_training(
    decision: Decision,
    since: Optional[datetime],
    check: HangCheck,
    read: ReadProgress,
    now: datetime,
    *,
    no_start: str = "when its current training started is not known",
) -> Decision:
    """A running VM's or Job's decision once its progress is judged (``progress.with_progress``):
    hung -> replaced, cause ``hung``; anything that cannot be read or believed -> kept, saying so
    (``no_start``: why ``since`` is None)."""
    if since is None:
        stall = Stall(Verdict.UNKNOWN, no_start, doubtful=True)
    elif not check.checkpoint_dir.startswith("gs://"):
        stall = Stall(Verdict.UNKNOWN, f"its CHECKPOINT_DIR {check.checkpoint_dir} is not in Cloud Storage")
    else:
        try:
            reading = read(check.checkpoint_dir)
        except Exception as exc:  # noqa: BLE001 - unread progress is unknown, never hung
            stall = Stall(Verdict.UNKNOWN, f"not read: {failure_summary(exc)}", doubtful=True)
        else:
            stall = judge(reading.records, created_at=since, now=now, hang_minutes=check.hang_minutes)
            if stall.verdict is not Verdict.HUNG and reading.problems:
                # An unreadable record may be the one host that is stalled.
                stall = Stall(Verdict.UNKNOWN, reading.problems[0], doubtful=True)
    return with_progress(decision, stall)


def _node_since(node: Optional[LiveNode]) -> Optional[datetime]:
    """When a READY, healthy node's training began: its creation (the trainer restarts inside
    it, and its records say when each process started)."""
    return zoned_time(node.create_time) if node is not None else None


def reconcile_tpu_vms(
    project: str,
    vms: Sequence[tuple[str, str]],
    *,
    read_live_state: bool = True,
    grace: timedelta = timedelta(minutes=30),
    now: Optional[datetime] = None,
    client: Any = None,
    hang_checks: Mapping[str, HangCheck] = {},
    read_progress: Optional[ReadProgress] = None,
    live: Optional[LiveNodes] = None,
) -> list[Decision]:
    """Decide for every ``(name, zone)``: one API list call per zone (none when ``live`` holds
    what the caller listed already), then the decision table; then, for each READY and healthy
    VM with a ``hang_checks`` entry, its progress records (N + 1 Cloud Storage calls for N
    hosts). With ``read_live_state=False`` (an offline plan) every VM keeps its last
    generation."""
    if not read_live_state:
        return _not_read([name for name, _ in vms])
    if live is None:
        live = list_live_nodes(project, {zone for _, zone in vms}, client=client)
    now = now or utc_now()
    read = read_progress or progress_reader(project)
    decisions = []
    for name, zone in vms:
        if zone in live.failures:
            decisions.append(unreachable(name, live.failures[zone]))
            continue
        node = live.nodes.get((zone, name))
        decision = decide(name, node, now=now, grace=grace)
        if name in hang_checks and node is not None and node.training and decision.action == "keep":
            decision = judge_training(decision, _node_since(node), hang_checks[name], read, now)
        decisions.append(decision)
    return decisions


class QueuedVm(NamedTuple):
    """A TPU VM requested from the Cloud TPU queue, as recovery reads it."""

    name: str
    """Its queued resource's id (``PreemptibleTpuVm``'s node name)."""
    zone: str
    api_version: str
    """``v2``, or ``v2alpha1`` for flex-start (``QueuedRequest.api_version``)."""


@dataclass(frozen=True)
class LiveRequests:
    """The queued resources of some zones: by (zone, id), and the zones that could not be read."""

    requests: dict[tuple[str, str], LiveQueuedResource] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


def list_queued_requests(project: str, vms: Sequence[QueuedVm], *, api: Any = None) -> LiveRequests:
    """One list call of queued resources per zone of ``vms``: at v2alpha1 where one of them is
    requested through it (a flex-start request shows its ``provisioningModel`` there only), else
    at v2. Each version shows every request of the zone, in its own schema."""
    from ..live.queued_api import QueuedResourcesApi

    api = api or QueuedResourcesApi()
    found = LiveRequests()
    versions: dict[str, str] = {}
    for vm in vms:
        versions[vm.zone] = "v2alpha1" if "v2alpha1" in (vm.api_version, versions.get(vm.zone)) else "v2"
    for zone, version in sorted(versions.items()):
        try:
            for item in api.list(f"projects/{project}/locations/{zone}", version):
                request = read_queued_resource(item)
                found.requests[(zone, request.name)] = request
        except Exception as exc:  # noqa: BLE001 - any failure means "unknown", per zone
            found.failures[zone] = failure_summary(exc)
    return found


def reconcile_queued_vms(
    project: str,
    vms: Sequence[QueuedVm],
    *,
    read_live_state: bool = True,
    grace: timedelta = timedelta(minutes=30),
    now: Optional[datetime] = None,
    api: Any = None,
    client: Any = None,
    requests: Optional[LiveRequests] = None,
    live: Optional[LiveNodes] = None,
    hang_checks: Mapping[str, HangCheck] = {},
    read_progress: Optional[ReadProgress] = None,
) -> list[Decision]:
    """Decide for every queued TPU VM (``domain.queued_resources.decide_queued``): one list call
    of queued resources per zone and API version, then one list of nodes per zone, *after* the
    requests (an ACTIVE request's nodes existed before it was ACTIVE, so one missing then is not
    one being made). A caller that read both already passes ``requests`` and ``live``, read in
    that order. A zone whose requests or nodes cannot be read keeps what was last deployed there.
    An ACTIVE request whose nodes all train is judged by its progress records too, as
    ``reconcile_tpu_vms`` judges a VM (``hang_checks``)."""
    if not read_live_state:
        return _not_read([vm.name for vm in vms])
    if live is not None and requests is None:
        raise ValueError("live nodes listed before the requests they belong to: pass requests too")
    if requests is None:
        requests = list_queued_requests(project, vms, api=api)
    if live is None:
        live = list_live_nodes(project, {vm.zone for vm in vms}, client=client)
    now = now or utc_now()
    read = read_progress or progress_reader(project)
    decisions = []
    for vm in vms:
        problem = requests.failures.get(vm.zone) or live.failures.get(vm.zone)
        if problem is not None:
            decisions.append(unreachable(vm.name, problem))
            continue
        request = requests.requests.get((vm.zone, vm.name))
        asked_for = request.node_ids if request is not None else ()
        nodes = [live.nodes[(vm.zone, n)] for n in asked_for if (vm.zone, n) in live.nodes]
        decision = decide_queued(vm.name, request, nodes, now=now, grace=grace)
        working = request is not None and request.state == ACTIVE and decision.action == "keep"
        if vm.name in hang_checks and working and nodes and all(node.training for node in nodes):
            # A multislice run began when its last slice came up.
            since = [_node_since(node) for node in nodes]
            began = None if None in since else max(t for t in since if t is not None)
            decision = judge_training(decision, began, hang_checks[vm.name], read, now)
        decisions.append(decision)
    return decisions


JOBSET = "JobSet"


def reconcile_jobs(
    cluster: ClusterRef,
    jobs: Sequence[tuple[str, str] | tuple[str, str, str]],
    *,
    read_live_state: bool = True,
    read: Callable[..., LiveJobs] = list_live_jobs,
    queued: Collection[str] = (),
    hang_checks: Mapping[str, HangCheck] = {},
    read_progress: Optional[ReadProgress] = None,
    now: Optional[datetime] = None,
    project: str = "",
) -> list[Decision]:
    """Decide for every ``(name, namespace)`` Job, or ``(name, namespace, "JobSet")`` JobSet: one
    list call per namespace and kind, then the decision table. ``queued`` names those that run on
    a pool with queued provisioning: where one of them is suspended on its Kueue queue, its
    namespace's Kueue Workloads are listed too (one more call), which tells one waiting for
    admission from one Kueue gave up on. Where one with a ``hang_checks`` entry is training (every
    Pod ready), its namespace's Pods are listed too (one more call: when its current Pods
    started), and its progress records read and judged. With ``read_live_state=False`` (an
    offline plan) every one keeps its last generation."""
    if not read_live_state:
        return _not_read([entry[0] for entry in jobs])
    if not jobs:
        return []
    kinds = [(entry[0], entry[1], entry[2] if len(entry) > 2 else "Job") for entry in jobs]
    job_namespaces = {namespace for _, namespace, kind in kinds if kind != JOBSET}
    jobset_namespaces = {namespace for _, namespace, kind in kinds if kind == JOBSET}
    workload_namespaces = {namespace for name, namespace, _ in kinds if name in queued}
    # Each only when there is one: a reader of Jobs alone (tests, recover's seam) keeps working.
    options: dict[str, Any] = {}
    if jobset_namespaces:
        options["jobset_namespaces"] = jobset_namespaces
    if workload_namespaces:
        options["workload_namespaces"] = workload_namespaces
    pod_namespaces = {namespace for name, namespace, _ in kinds if name in hang_checks}
    if pod_namespaces:
        options["pod_namespaces"] = pod_namespaces
    live = read(cluster, job_namespaces, **options)
    if live.cluster_absent:
        return [
            Decision(name, "create", None, f"cluster {cluster.name} does not exist yet", cause=Cause.MISSING)
            for name, _, _ in kinds
        ]
    now = now or utc_now()
    read_records = read_progress or progress_reader(project or cluster.project)
    decisions = []
    for name, namespace, kind in kinds:
        workload: LiveJob | LiveJobSet | None
        if kind == JOBSET:
            failure = live.jobset_failures.get(namespace)
            workload = jobset = live.jobsets.get((namespace, name))
            kueue = live.kueue_state(namespace, jobset.uid) if jobset and name in queued else NOT_READ
            decision = decide_jobset(name, jobset, kueue)
        else:
            failure = live.failures.get(namespace)
            workload = job = live.jobs.get((namespace, name))
            kueue = live.kueue_state(namespace, job.uid) if job and name in queued else NOT_READ
            decision = decide_job(name, job, kueue)
        if failure is not None:
            decisions.append(unreachable_cluster(name, failure))
            continue
        if name in hang_checks and workload is not None and workload.training and decision.action == "keep":
            since = live.training_since(namespace, name, workload.created)
            unread = live.pod_failures.get(namespace)
            no_start = f"its Pods could not be listed ({unread})" if unread else "no Pod of it has started"
            decision = judge_training(
                decision, since, hang_checks[name], read_records, now, no_start=no_start
            )
        decisions.append(decision)
    return decisions


def log_decisions(decisions: Sequence[Decision]) -> None:
    """One line per VM, so a preview in CI says what `up` will do and why."""
    for decision in decisions:
        (pulumi.log.warn if decision.warn else pulumi.log.info)(decision.message)


def last_deployed_generations(
    outputs: pulumi.Output[Any], output: str = GENERATIONS_OUTPUT
) -> pulumi.Output[dict[str, int]]:
    """The generations this stack exported under ``output`` on its last successful update;
    ``{}`` before the first one. This is the "last known" value that an unreachable API or a
    missing node or Job falls back to, so nothing is replaced on unknown."""
    return outputs.apply(lambda values: read_generations(output, (values or {}).get(output)))


def read_generations(output: str, value: Any) -> dict[str, int]:
    """The generations in the stack output ``output``; raises ``InvalidArgument`` for a value that
    is no map of generations. Guessing one would replace on unknown: a kept resource declared at
    any other generation than it runs at is replaced."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"stack output {output} = {str(value)[:80]!r} is not a map of name -> recovery generation; "
            f"this stack's last update exported something else under that name"
        )
    generations = {}
    for name, generation in value.items():
        if isinstance(generation, float) and generation.is_integer():
            generation = int(generation)  # every number crosses the wire as a double
        problem = generation_problem(generation)
        if problem:
            raise InvalidArgument(f"stack output {output}.{name}: {problem}")
        generations[str(name)] = generation
    return generations


def generation_for(
    decision: Decision, previous: pulumi.Output[dict[str, int]], now: datetime
) -> pulumi.Input[int]:
    """The generation to declare for ``decision``, made at ``now``.

    - kept: the live resource's own generation (its label), or, when that cannot be read, the
      last deployed one (0 if none): the same value declares no change;
    - created or replaced: a generation never used before (``fresh_generation``): above the live
      one and the last deployed one, and above any an update that failed half-way may have left
      in the stack's state, so the replacement trigger always fires."""
    if decision.action == "keep":
        if decision.generation is not None:
            return decision.generation
        return previous.apply(lambda gens: gens.get(decision.name, 0))
    if decision.generation is not None:
        return fresh_generation(decision.generation, now)
    return previous.apply(lambda gens: fresh_generation(gens.get(decision.name, -1) + 1, now))
