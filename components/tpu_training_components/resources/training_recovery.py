"""Recovery that comes with the components: declare a ``TrainingRecovery`` listing the TPU VMs
and training Jobs, and hand each its generation. It reads the live nodes and Jobs (one call per
zone, one per namespace and kind), decides with the decision tables, says why, and remembers what this
stack last deployed, so that a later `pulumi up` re-creates exactly what was lost."""

import math
from datetime import datetime, timedelta
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain import recovery as _recovery
from ..domain.progress import HangCheck
from ..domain.queued_resources import QueuedRequest, requested_from_queue
from ..domain.recovery import Cause, Decision
from ..errors import InvalidArgument
from ..live.kube_client import ClusterRef
from ..live.tpu_api import list_live_nodes
from ..validation import ARGUMENTS, Problems, check_arguments, count_problem
from . import reconcile
from .tpu_vm import PROVISIONING_MODELS

JOB_KINDS = ("Job", reconcile.JOBSET)


class RecoveredTpuVm(TypedDict):
    """A TPU VM under recovery."""

    name: str
    """Its TPU node name (``PreemptibleTpuVm``'s ``node_name``, by default the component's name)."""
    zone: str
    """Its zone, e.g. ``europe-west4-a``."""
    checkpoint_dir: NotRequired[str]
    """Its ``CHECKPOINT_DIR`` (``gs://...``): when given, a READY VM whose trainer's progress
    records there have not advanced for ``hang_minutes`` is hung and replaced (docs/trainer.md,
    "Progress and save requests"); one that never published progress is kept."""
    hang_minutes: NotRequired[float]
    """How long its training may go without a step (1 to 10080; default: 20 of its measured
    steps, at least 10 minutes)."""
    provisioning: NotRequired[str]
    """As its ``PreemptibleTpuVm``'s (default ``spot``): ``flex-start`` is always requested from
    the queue, in the API version that has it."""
    queued: NotRequired[bool]
    """True when its ``PreemptibleTpuVm`` is requested from the Cloud TPU queue (``queued`` or
    ``slices`` > 1; default False). Its queued resource is read then, not only its node: a
    request still waiting for capacity is kept (re-requesting would lose its place in the queue),
    one the service suspended or failed for want of capacity is requested again."""


def is_queued(vm: RecoveredTpuVm) -> bool:
    """Whether ``vm`` is a queued resource (``RecoveredTpuVm.queued``)."""
    return requested_from_queue(vm.get("provisioning", "spot"), bool(vm.get("queued")), slices=1)


class RecoveredJob(TypedDict):
    """A training Job under recovery."""

    name: str
    """The Job's name (``TpuTrainingJob``'s ``job_name``, by default the component's name)."""
    namespace: NotRequired[str]
    """Its Kubernetes namespace (default ``default``)."""
    checkpoint_dir: NotRequired[str]
    """Its ``CHECKPOINT_DIR`` (``gs://...``): when given, a Job or JobSet whose Pods are all ready
    but whose trainer's progress records there have not advanced for ``hang_minutes`` is hung and
    replaced at a new generation; one that never published progress is kept."""
    hang_minutes: NotRequired[float]
    """How long its training may go without a step (1 to 10080; default: 20 of its measured
    steps, at least 10 minutes)."""
    kind: NotRequired[str]
    """``Job`` (default: ``TpuTrainingJob``) or ``JobSet`` (``TpuTrainingJobSet``): which kind of
    object the name is, and so which decision table decides."""
    queued: NotRequired[bool]
    """True when it runs on a node pool with queued provisioning (through Kueue; default False).
    While it is suspended on its queue, its Kueue Workload is read too (one more list call in its
    namespace): one Kueue deactivated (GKE took the capacity back) is queued anew at the next
    generation, one that waits for admission is kept."""


def queued_api_version(provisioning: str) -> str:
    """The TPU API version a queued VM of ``provisioning`` is requested (and so read) through."""
    return QueuedRequest(provisioning).api_version


class RecoveryCluster(TypedDict):
    """The GKE cluster the Jobs run on, by name: it is read before anything is declared."""

    project: str
    """Project of the cluster."""
    location: str
    """Region (or zone) of the cluster."""
    name: str
    """Name of the cluster (``GkeTpuCluster``'s ``cluster_name``)."""


@with_config(ARGUMENTS)
class TrainingRecoveryArgs(TypedDict):
    project: str
    """Google Cloud project of the TPU VMs."""
    tpu_vms: NotRequired[Sequence[RecoveredTpuVm]]
    """The TPU VMs whose live nodes decide their generations."""
    jobs: NotRequired[Sequence[RecoveredJob]]
    """The training Jobs whose live state decides their generations; needs ``cluster``."""
    cluster: NotRequired[Optional[RecoveryCluster]]
    """Where ``jobs`` run."""
    read_live_state: NotRequired[bool]
    """Read the live nodes and Jobs (default True). False keeps every last deployed generation:
    an offline preview, or a stack that must not change on its own."""
    previous_outputs: NotRequired[Mapping[str, Any]]
    """This stack's outputs as of its last update, when the caller read them before declaring
    anything (the stack program does: ``pulumi:pulumi:readStackOutputs``). Without it the
    component reads them through a ``StackReference`` to this very stack, which the engine reads
    while the update runs: with a file backend that read can meet the engine's own write of the
    state and fail the update ("failed to load checkpoint: EOF")."""
    maintenance_grace_minutes: NotRequired[int]
    """How long a node under maintenance may stay unhealthy before it is replaced (default 30)."""


MAX_GRACE_MINUTES = 7 * 24 * 60
"""The longest maintenance grace, a week (also the stack file's ``recovery.maintenanceGraceMinutes``)."""


def _check_values(problems: Problems, args: TrainingRecoveryArgs) -> None:
    for key, entries in (("tpu_vms", args.get("tpu_vms", ())), ("jobs", args.get("jobs", ()))):
        seen: set[str] = set()
        for index, entry in enumerate(entries):
            if entry["name"] in seen:
                problems.add((key, index, "name"), f"repeats the name {entry['name']!r}; each must be unique")
            seen.add(entry["name"])
    for index, vm in enumerate(args.get("tpu_vms", ())):
        provisioning = vm.get("provisioning", "spot")
        if provisioning not in PROVISIONING_MODELS:
            allowed = ", ".join(PROVISIONING_MODELS)
            problems.add(
                ("tpu_vms", index, "provisioning"), f"{provisioning!r} is not one; allowed: {allowed}"
            )
    for index, job in enumerate(args.get("jobs", ())):
        kind = job.get("kind", "Job")
        if kind not in JOB_KINDS:
            problems.add(
                ("jobs", index, "kind"),
                f"{kind!r} is no kind recovery reads; allowed: {', '.join(JOB_KINDS)}",
            )
    if args.get("jobs") and not args.get("cluster"):
        problems.add("cluster", "required with jobs: give the cluster they run on")
    # A week at most, as the stack file allows: a longer grace is no recovery (and past about
    # 10**12 minutes no date can hold it).
    grace = args.get("maintenance_grace_minutes", 30)
    problems.check("maintenance_grace_minutes", count_problem(grace, most=MAX_GRACE_MINUTES))
    judged: tuple[tuple[str, Sequence[Any]], ...] = (
        ("tpu_vms", args.get("tpu_vms", ())),
        ("jobs", args.get("jobs", ())),
    )
    for key, listed in judged:
        for index, item in enumerate(listed):
            minutes = item.get("hang_minutes")
            if minutes is not None and not (math.isfinite(minutes) and 1 <= minutes <= MAX_GRACE_MINUTES):
                allowed = f"allowed: 1-{MAX_GRACE_MINUTES}"
                problems.add((key, index, "hang_minutes"), f"{minutes!r} is out of range; {allowed}")
            folder = item.get("checkpoint_dir")
            if folder is not None and not folder.startswith("gs://"):
                problems.add(
                    (key, index, "checkpoint_dir"),
                    f"{folder!r} is not a gs:// location; recovery reads progress from Cloud Storage only",
                )


def decide_tpu_vms(
    project: str,
    vms: Sequence[RecoveredTpuVm],
    *,
    read_live_state: bool,
    grace: timedelta,
    read_progress: reconcile.ReadProgress,
) -> list[Decision]:
    """A decision for each of ``vms``, in their order: a VM created directly by its node
    (``reconcile_tpu_vms``), a queued one by its request and then its nodes
    (``reconcile_queued_vms``). The requests are listed first, then the nodes of every zone
    once, for both."""
    queued = [vm for vm in vms if is_queued(vm)]
    direct = [vm for vm in vms if not is_queued(vm)]
    versions = [
        reconcile.QueuedVm(vm["name"], vm["zone"], queued_api_version(vm.get("provisioning", "spot")))
        for vm in queued
    ]
    requests, live = None, None
    if read_live_state and vms:
        requests = reconcile.list_queued_requests(project, versions) if queued else reconcile.LiveRequests()
        live = list_live_nodes(project, {vm["zone"] for vm in vms})
    decided = {
        d.name: d
        for d in reconcile.reconcile_tpu_vms(
            project,
            [(vm["name"], vm["zone"]) for vm in direct],
            read_live_state=read_live_state,
            grace=grace,
            hang_checks=_hang_checks(direct),
            read_progress=read_progress,
            live=live,
        )
    }
    if queued:
        decided.update(
            (d.name, d)
            for d in reconcile.reconcile_queued_vms(
                project,
                versions,
                read_live_state=read_live_state,
                grace=grace,
                hang_checks=_hang_checks(queued),
                read_progress=read_progress,
                requests=requests,
                live=live,
            )
        )
    return [decided[vm["name"]] for vm in vms]


def _hang_checks(entries: Sequence[Any]) -> dict[str, HangCheck]:
    return {
        entry["name"]: HangCheck(entry["checkpoint_dir"], entry.get("hang_minutes"))
        for entry in entries
        if entry.get("checkpoint_dir")
    }


class TrainingRecovery(pulumi.ComponentResource):
    """Recovery by `pulumi up` for a stack's TPU VMs and Jobs: reads what is live (one call per
    zone, one per namespace and kind), decides what to keep, create or replace, logs why, and gives each
    its recovery generation to declare (``recovery_generation`` of ``PreemptibleTpuVm`` and
    ``TpuTrainingJob``).

    Export ``vm_generations`` as the stack output ``recoveryGenerations`` and ``job_generations``
    as ``jobRecoveryGenerations``: the next run reads them back as "what was last deployed",
    which is what a VM or Job keeps when its live state cannot be read.

    Children: ``{name}-previous-state`` (a ``StackReference`` to this very stack).
    """

    vm_generations: pulumi.Output[dict[str, int]]
    """TPU VM name -> the recovery generation to declare."""
    job_generations: pulumi.Output[dict[str, int]]
    """Job name -> the recovery generation to declare."""
    vm_decisions: pulumi.Output[dict[str, str]]
    """TPU VM name -> what `pulumi up` does with it, and why."""
    job_decisions: pulumi.Output[dict[str, str]]
    """Job name -> what `pulumi up` does with it, and why."""
    last_recoveries: pulumi.Output[dict[str, Any]]
    """``{"tpuVms": {name: recovery}, "jobs": {name: recovery}}``: for each VM and Job the last
    time it was created or replaced, as ``{action, cause, reason, generation, decidedAt}`` (``cause``
    one word of ``domain.recovery.Cause``, ``reason`` the whole sentence); a kept one
    keeps what the stack last exported. Export it as ``lastRecoveries`` (``python -m
    tpu-training status`` reads it)."""

    def __init__(
        self, name: str, args: TrainingRecoveryArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("TrainingRecovery", name, args, TrainingRecoveryArgs, opts)
        _check_values(problems, args)
        problems.raise_any()
        super().__init__("tpu-training:recovery:TrainingRecovery", name, {}, opts)
        read_live_state = args.get("read_live_state", True)
        vms = list(args.get("tpu_vms", ()))
        jobs = list(args.get("jobs", ()))
        cluster = args.get("cluster")

        # One reader (one storage client, made when first needed) for the VMs' and the Jobs' records.
        read_progress = reconcile.progress_reader(args["project"])
        vm_decisions = decide_tpu_vms(
            args["project"],
            vms,
            read_live_state=read_live_state,
            grace=timedelta(minutes=args.get("maintenance_grace_minutes", 30)),
            read_progress=read_progress,
        )
        job_decisions = (
            reconcile.reconcile_jobs(
                ClusterRef(cluster["project"], cluster["location"], cluster["name"]),
                [(job["name"], job.get("namespace", "default"), job.get("kind", "Job")) for job in jobs],
                read_live_state=read_live_state,
                queued={job["name"] for job in jobs if job.get("queued", False)},
                hang_checks=_hang_checks(jobs),
                read_progress=read_progress,
            )
            if cluster and jobs
            else []
        )
        reconcile.log_decisions([*vm_decisions, *job_decisions])
        # For vm_generation/job_generation; private, so it is not one of the schema's outputs.
        self._decided = {"tpu_vms": vm_decisions, "jobs": job_decisions}

        previous: Optional[pulumi.Output[Any]] = None
        if (vms or jobs) and "previous_outputs" in args:
            previous = pulumi.Output.from_input(dict(args["previous_outputs"]))
        elif vms or jobs:
            previous = pulumi.StackReference(
                f"{name}-previous-state",
                stack_name=f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}",
                opts=pulumi.ResourceOptions(parent=self),
            ).outputs
        decided_at = _recovery.utc_now()
        self.vm_generations = self._generations(
            previous, vm_decisions, reconcile.GENERATIONS_OUTPUT, decided_at
        )
        self.job_generations = self._generations(
            previous, job_decisions, reconcile.JOB_GENERATIONS_OUTPUT, decided_at
        )
        self.vm_decisions = pulumi.Output.from_input({d.name: d.message for d in vm_decisions})
        self.job_decisions = pulumi.Output.from_input({d.name: d.message for d in job_decisions})
        self.last_recoveries = (
            pulumi.Output.all(previous, self.vm_generations, self.job_generations).apply(
                lambda values: last_recoveries(
                    values[0],
                    {"tpuVms": (vm_decisions, values[1]), "jobs": (job_decisions, values[2])},
                    decided_at,
                )
            )
            if previous is not None
            else pulumi.Output.from_input({"tpuVms": {}, "jobs": {}})
        )
        self.register_outputs(
            {
                "vm_generations": self.vm_generations,
                "job_generations": self.job_generations,
                "vm_decisions": self.vm_decisions,
                "job_decisions": self.job_decisions,
                "last_recoveries": self.last_recoveries,
            }
        )

    @staticmethod
    def _generations(
        previous: Optional[pulumi.Output[Any]],
        decisions: Sequence[Decision],
        output: str,
        decided_at: datetime,
    ) -> pulumi.Output[dict[str, int]]:
        if previous is None or not decisions:
            return pulumi.Output.from_input({})
        last = reconcile.last_deployed_generations(previous, output)
        # Said on every run, not only on the one whose API is down: by then it is too late.
        previous.apply(lambda outputs: _warn_if_not_exported(outputs, output))
        return pulumi.Output.all(
            *(reconcile.generation_for(decision, last, decided_at) for decision in decisions)
        ).apply(lambda generations: dict(zip((d.name for d in decisions), generations, strict=True)))

    def vm_generation(self, name: str) -> pulumi.Output[int]:
        """The generation to declare for TPU VM ``name`` (one of ``tpu_vms``)."""
        return self._one(self.vm_generations, name, "tpu_vms")

    def job_generation(self, name: str) -> pulumi.Output[int]:
        """The generation to declare for Job ``name`` (one of ``jobs``)."""
        return self._one(self.job_generations, name, "jobs")

    def vm_decision(self, name: str) -> Decision:
        """What recovery decided for TPU VM ``name`` (one of ``tpu_vms``): kept, created or
        replaced, and why."""
        self._one(self.vm_generations, name, "tpu_vms")
        return next(d for d in self._decided["tpu_vms"] if d.name == name)

    def vm_cause(self, name: str) -> pulumi.Output[str]:
        """Why TPU VM ``name`` was last re-created ("" when never, as far as the stack recorded):
        ``PreemptibleTpuVm``'s ``recovery_cause``."""
        self._one(self.vm_generations, name, "tpu_vms")
        return self.last_recoveries.apply(lambda last: _cause_of(last, "tpuVms", name))

    def job_cause(self, name: str) -> pulumi.Output[str]:
        """Why Job ``name`` was last re-created ("" when never): the workload's ``recovery_cause``."""
        self._one(self.job_generations, name, "jobs")
        return self.last_recoveries.apply(lambda last: _cause_of(last, "jobs", name))

    def _one(self, generations: pulumi.Output[dict[str, int]], name: str, key: str) -> pulumi.Output[int]:
        if name not in {decision.name for decision in self._decided[key]}:
            raise InvalidArgument(
                f"TrainingRecovery: {name!r} is not in its {key}; add it there to recover it"
            )
        return generations.apply(lambda by_name: by_name[name])


def _cause_of(last: Any, kind: str, name: str) -> str:
    # A record written before causes were words holds a sentence there: no cause to label with.
    entry = (last.get(kind) or {}).get(name) if isinstance(last, dict) else None
    cause = entry.get("cause") if isinstance(entry, dict) else None
    return cause if isinstance(cause, str) and cause in {c.value for c in Cause} else ""


def last_recoveries(
    outputs: Optional[dict[str, Any]],
    decided: dict[str, tuple[Sequence[Decision], dict[str, int]]],
    decided_at: datetime,
) -> dict[str, Any]:
    """Per kind (``tpuVms``, ``jobs``) and name, the last creation or replacement and its cause:
    this run's where it creates or replaces, the one the stack last exported where it keeps
    (dropped for a VM or Job the stack no longer has)."""
    exported = (outputs or {}).get(reconcile.RECOVERIES_OUTPUT)
    found: dict[str, Any] = {}
    for kind, (decisions, generations) in decided.items():
        last = exported.get(kind) if isinstance(exported, dict) else None
        last = last if isinstance(last, dict) else {}
        found[kind] = {}
        for decision in decisions:
            if decision.action != "keep":
                found[kind][decision.name] = {
                    "action": decision.action,
                    "cause": str(decision.cause or ""),
                    "reason": decision.reason,
                    "generation": generations.get(decision.name),
                    "decidedAt": decided_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            elif isinstance(last.get(decision.name), dict):
                found[kind][decision.name] = last[decision.name]
    return found


def _warn_if_not_exported(outputs: Optional[dict], output: str) -> None:
    # A stack that has outputs but not this one was deployed without exporting it: "the last
    # deployed generation" then reads as 0, and a kept VM or Job at a later one would be replaced.
    if outputs and output not in outputs:
        pulumi.log.warn(
            f"this stack has outputs but no {output!r}: export TrainingRecovery's generations under "
            f"that name (one TrainingRecovery per stack). Without it, a VM or Job whose live state "
            f"cannot be read is declared at generation 0, which replaces it if it runs at a later one"
        )
