"""The stack program: read the stack's config, then wire the components. `pulumi up` runs this.

One function per part of the stack, in the order the parts are declared, each returning what the
parts after it use; ``main`` calls them. The Pulumi language host runs this file with only
`infra/` on `sys.path`; the components come from the installed `tpu_training_components` package
(see infra/requirements.txt).
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__" and __package__ == "infra":
    # `python -m infra`: the language host runs this folder as __main__ (no package; see the end
    # of the file), so this is someone running the program outside Pulumi, where it cannot work.
    print(
        "infra/ is the Pulumi program of this project: `pulumi preview` and `pulumi up` run it, in a "
        "stack's context. Without the Pulumi CLI: `python -m infra.plan [--stack NAME]` shows what "
        "`pulumi up` would do, `python -m infra.cost` what the stack costs, `python -m infra.status` "
        "how training is doing and `python -m infra.recover` re-creates what was lost (README.md)",
        file=sys.stderr,
    )
    sys.exit(64)  # sysexits.h EX_USAGE: the command line is wrong
from dataclasses import dataclass, field
from typing import Any, Optional, TypeVar, Union

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import stack_config
from stack_config import ClusterConfig, StackConfig, derived
from tpu_training_components import (
    CheckpointBucket,
    FlexStartTpuNodePool,
    GkeTpuCluster,
    PreemptibleTpuVm,
    ProjectApis,
    QueuedProvisioning,
    RecoveredJob,
    RecoveredTpuVm,
    StackMonitoring,
    StackMonitoringArgs,
    TpuComputeClass,
    TpuTrainingJob,
    TpuTrainingJobArgs,
    TpuTrainingJobSet,
    TpuTrainingJobSetArgs,
    TrainingNetwork,
    TrainingRecovery,
    TrainingServiceAccount,
    WorkloadEngines,
)
from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.capacity_ladder import (
    LADDERS_OUTPUT,
    Rung,
    current_rung,
    index_of,
    last_deployed_rung,
    rung_prices,
    with_stockout_causes,
)
from tpu_training_components.domain.goodput import CheckpointPlan
from tpu_training_components.domain.recovery import utc_now
from tpu_training_components.domain.recovery_rounds import (
    ROUND_ENV,
    RecoveryRound,
    RoundEnvError,
    as_deployed,
    with_resumed_causes,
)
from tpu_training_components.domain.required_access import apis_for_features
from tpu_training_components.domain.restart_budget import RESTARTS_OUTPUT, history_output
from tpu_training_components.domain.stack_identity import DEPLOYED_AS_OUTPUT, deployed_as, rename_problem
from tpu_training_components.errors import InvalidArgument
from tpu_training_components.resources.reconcile import (
    GENERATIONS_OUTPUT,
    JOB_GENERATIONS_OUTPUT,
    RECOVERIES_OUTPUT,
)

TrainingWorkload = Union[TpuTrainingJob, TpuTrainingJobSet]
Environments = dict[str, dict[str, str]]
"""A training run's name (a TPU VM's or a Job's) -> the environment its processes receive."""


# --- What the last update left --------------------------------------------------------------


@dataclass(frozen=True)
class LastUpdate:
    """This stack's outputs as of its last update, and what this update is: a recovery round of
    `python -m infra.recover` or any other `pulumi up`."""

    outputs: dict[str, Any]
    secrets: frozenset[str]
    """The names of the outputs that are secret."""
    round: Optional[RecoveryRound]
    """The recovery round this update runs, or None for every update `infra.recover` does not run."""

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
        one (infra/recovery_targets.py cites the engine)."""
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


def _recovery_cause(
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


def _read_stack_outputs(own: str) -> Any:
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
    `infra.recover` did not write."""
    own = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    result = _read_stack_outputs(own)
    outputs = (result.value or {}).get("outputs")
    secret = (result.value or {}).get("secretOutputNames") or []
    previous = outputs if isinstance(outputs, dict) else {}
    # A renamed stack would re-name, and so replace, nearly everything: refuse it before it starts.
    rename = rename_problem(previous, pulumi.get_project(), pulumi.get_stack())
    if rename:
        raise InvalidArgument(rename)
    # `python -m infra.recover` says what its own `pulumi up` recovers (None for every other
    # update); read before anything is declared, so a value no round writes changes nothing.
    try:
        recovery_round = RecoveryRound.from_env(os.environ.get(ROUND_ENV))
    except RoundEnvError as exc:
        raise InvalidArgument(str(exc)) from None
    return LastUpdate(previous, frozenset(str(name) for name in secret), recovery_round)


# --- Project APIs and the network -----------------------------------------------------------


@dataclass(frozen=True)
class Foundation:
    """What everything else waits for or runs in: the APIs the stack enables, and its network."""

    apis: Optional[ProjectApis]
    network: Optional[TrainingNetwork]

    @property
    def after_apis(self) -> list[pulumi.Resource]:
        """``depends_on`` of whatever calls an API the stack enables."""
        return [self.apis] if self.apis is not None else []

    @property
    def after_network(self) -> list[pulumi.Resource]:
        """``depends_on`` of whatever needs the network's routes (NAT) from its first boot."""
        return [self.network] if self.network is not None else []

    def network_in(
        self, region: str, own: tuple[Optional[str], Optional[str]]
    ) -> tuple[Optional[pulumi.Input[str]], Optional[pulumi.Input[str]]]:
        """The (network, subnetwork) a VM or the cluster in ``region`` uses: the stack's, or its
        own config's (``network.create: false``)."""
        if self.network is None:
            return own
        return self.network.network_id, self.network.subnets[region].id


def declare_foundation(settings: StackConfig) -> Foundation:
    # A new project has most APIs off: the stack enables those its resources need (enableApis,
    # never disabled on destroy), and what calls an API waits for it.
    network_regions = derived.network_regions(settings)
    stack_apis = apis_for_features(
        tpu_vms=bool(settings.tpu_vms),
        cluster=settings.cluster is not None,
        network=settings.network.create and bool(network_regions),
        buckets=bool(derived.regions(settings)),
        monitoring=settings.monitoring.enabled,
    )
    apis = (
        ProjectApis("apis", {"apis": list(stack_apis), "project": settings.gcp_project})
        if settings.enable_apis and stack_apis
        else None
    )
    # Private TPU VMs and nodes reach gs://, packages and images only through Private Google
    # Access and Cloud NAT: the stack declares a network that has both, unless told to use yours.
    network = (
        TrainingNetwork(
            "network",
            {
                "network_name": derived.network_name(settings),
                "regions": list(network_regions),
                "gke_region": settings.cluster.location if settings.cluster else None,
                "iap_ssh": settings.network.iap_ssh,
                "project": settings.gcp_project,
            },
            opts=pulumi.ResourceOptions(depends_on=[apis] if apis is not None else []),
        )
        if settings.network.create and network_regions
        else None
    )
    return Foundation(apis, network)


# --- Checkpoint buckets and the trainer's code ----------------------------------------------


def declare_buckets(settings: StackConfig, foundation: Foundation) -> dict[str, CheckpointBucket]:
    """One checkpoint bucket per region with TPUs, by region, each holding the trainer's code."""
    buckets = {
        region: CheckpointBucket(
            f"checkpoints-{region}",
            {
                "region": region,
                "bucket_name": derived.bucket_name(settings, region),
                "project": settings.gcp_project,
                "labels": derived.common_labels(settings),
                "noncurrent_version_retention_days": settings.bucket.noncurrent_version_retention_days,
                "noncurrent_versions_kept": settings.bucket.noncurrent_versions_kept,
                "protect": settings.bucket.protect,
                "retain_on_delete": settings.bucket.retain_on_delete,
            },
            opts=pulumi.ResourceOptions(depends_on=foundation.after_apis),
        )
        for region in derived.regions(settings)
    }
    # The trainer travels with the stack: uploaded to every checkpoint bucket, found by each VM
    # and Job at $TRAINER_CODE, so a copy of the stack in another project trains the same code.
    if settings.trainer_code is not None:
        for region, bucket in buckets.items():
            for object_name, path in settings.trainer_code.paths().items():
                gcp.storage.BucketObject(
                    f"checkpoints-{region}-{object_name.replace('/', '-')}",
                    bucket=bucket.bucket_name,
                    name=object_name,
                    # Relative to the program's working directory, so the asset is the same on
                    # every machine that checks the project out (the engine compares asset paths too).
                    source=pulumi.FileAsset(os.path.relpath(path)),
                    opts=pulumi.ResourceOptions(parent=bucket),
                )
    return buckets


# --- Recovery ---------------------------------------------------------------------------------


Recovered = TypeVar("Recovered", RecoveredTpuVm, RecoveredJob)


def declare_recovery(settings: StackConfig, offline: bool, last: LastUpdate) -> TrainingRecovery:
    """Recovery is a reconcile: read the live nodes (one call per zone) and Jobs (one per
    namespace and kind, Kueue's Workloads too for queued ones), decide, say why; each VM and Job
    is declared at the generation decided here. ``offline``: read no live state."""
    checks = derived.hang_checks(settings)

    def judged(entry: Recovered) -> Recovered:
        # Where its trainer's progress records are, and how long it may stall (domain/progress.py).
        check = checks.get(entry["name"])
        if check is not None and check.checkpoint_dir.startswith("gs://"):
            entry["checkpoint_dir"] = check.checkpoint_dir
            if check.hang_minutes is not None:
                entry["hang_minutes"] = check.hang_minutes
        return entry

    return TrainingRecovery(
        "recovery",
        {
            "project": settings.gcp_project,
            # Read before anything was declared (read_last_update), not by a StackReference the
            # engine would read while it writes the state.
            "previous_outputs": last.outputs,
            # Each VM is judged on the rung it stands on (the last deployed, or the round's).
            "tpu_vms": [
                judged(RecoveredTpuVm(name=vm.name, zone=standing_rung(vm, last).zone))
                for vm in settings.tpu_vms
            ],
            "jobs": [
                judged(
                    RecoveredJob(
                        name=job.name,
                        namespace=job.namespace,
                        kind=job.kind,
                        # Kueue's Workload tells a queued job that waits from one Kueue gave up on.
                        queued=derived.job_pool(settings, job).queued,
                    )
                )
                for job in settings.jobs
            ],
            "cluster": (
                {
                    "project": settings.gcp_project,
                    "location": settings.cluster.location,
                    "name": settings.cluster.name,
                }
                if settings.cluster
                else None
            ),
            "read_live_state": settings.recovery.read_live_state and not offline,
            "maintenance_grace_minutes": settings.recovery.maintenance_grace_minutes,
        },
    )


# --- TPU VMs ----------------------------------------------------------------------------------


def standing_rung(vm: stack_config.TpuVmConfig, last: LastUpdate) -> Rung:
    """The rung of its capacity ladder a VM stands on before this update decides: the one a
    recovery round declares it on, or else the one last deployed (still on the ladder), or else
    the preferred one."""
    if last.round is not None and vm.name in last.round.rungs:
        rung = last.round.rungs[vm.name]
        if index_of(vm.ladder, rung) is None:
            raise InvalidArgument(
                f"{ROUND_ENV}: TPU VM {vm.name}: rung {rung} is not on its ladder "
                f"({', '.join(str(r) for r in vm.ladder)}); unset it to run `pulumi up` yourself"
            )
        return rung
    return current_rung(vm.ladder, last_deployed_rung(last.outputs, vm.name))


def declared_rung(vm: stack_config.TpuVmConfig, last: LastUpdate, recovery: TrainingRecovery) -> Rung:
    """The rung a VM is declared on: where it stands while it is kept (a running VM never moves,
    whatever the ladder's order says); a recovery round's rung; the preferred rung when any other
    update creates or replaces it (climbing back up at its next recovery)."""
    standing = standing_rung(vm, last)
    if recovery.vm_decision(vm.name).action == "keep":
        return standing
    if last.round is not None and vm.name in last.round.rungs:
        return standing
    return vm.ladder[0]


@dataclass(frozen=True)
class TpuVms:
    """The stack's TPU VMs by name, and the environment each one's training receives."""

    vms: dict[str, PreemptibleTpuVm] = field(default_factory=dict)
    environments: Environments = field(default_factory=dict)
    rungs: dict[str, tuple[int, Rung]] = field(default_factory=dict)
    """Each VM's rung of its capacity ladder, and its place there (0: the preferred)."""


def declare_vm_identity(
    settings: StackConfig, buckets: dict[str, CheckpointBucket], foundation: Foundation
) -> Optional[TrainingServiceAccount]:
    """The TPU VMs' Google identity, with object access to every checkpoint bucket; None
    without TPU VMs."""
    if not settings.tpu_vms:
        return None
    return TrainingServiceAccount(
        "trainer",
        {
            "account_id": derived.service_account_id(settings),
            "project": settings.gcp_project,
            "buckets": {region: b.bucket_name for region, b in buckets.items()},
        },
        opts=pulumi.ResourceOptions(depends_on=foundation.after_apis),
    )


def declare_tpu_vms(
    settings: StackConfig,
    identity: TrainingServiceAccount,
    foundation: Foundation,
    recovery: TrainingRecovery,
    last: LastUpdate,
) -> TpuVms:
    environments = {vm.name: derived.vm_environment(settings, vm) for vm in settings.tpu_vms}
    vms = {}
    rungs = {}
    stockouts = last.round.stockouts if last.round is not None else frozenset()
    for vm in settings.tpu_vms:
        vm_network, vm_subnetwork = foundation.network_in(vm.region, (vm.network, vm.subnetwork))
        rung = declared_rung(vm, last, recovery)
        rungs[vm.name] = (vm.ladder.index(rung), rung)
        vms[vm.name] = PreemptibleTpuVm(
            vm.name,
            {
                "zone": rung.zone,
                "accelerator_type": vm.accelerator_type,
                "runtime_version": vm.runtime_version,
                "provisioning": rung.provisioning,
                "train_command": vm.train_command,
                "setup_command": vm.setup_command,
                "checkpoint_dir": derived.vm_checkpoint_dir(settings, vm),
                "environment": environments[vm.name],
                "service_account_email": identity.email,
                "recovery_generation": recovery.vm_generation(vm.name),
                "recovery_cause": _recovery_cause(vm.name, last, recovery.vm_cause, stockouts),
                "restart_generation": vm.restart_generation,
                "external_ip": vm.external_ip,
                # A secret anywhere in tpuVms (`pulumi config set --secret --path
                # 'tpuVms[0].env.KEY'`) makes the whole key secret, the startup script included.
                "secret_metadata": stack_config.is_config_secret(f"{stack_config.PROJECT}:tpuVms"),
                "network": vm_network,
                "subnetwork": vm_subnetwork,
                "labels": derived.common_labels(settings),
                "project": settings.gcp_project,
            },
            # The VM's identity must hold its bucket access, and its network a route to Google
            # APIs and the internet (NAT), before the startup script runs.
            opts=pulumi.ResourceOptions(depends_on=[identity, *foundation.after_network]),
        )
    return TpuVms(vms, environments, rungs)


# --- GKE: the cluster and its TPU node pools --------------------------------------------------


@dataclass(frozen=True)
class Gke:
    """The GKE cluster, as configured and as declared, and its TPU node pools by name."""

    config: ClusterConfig
    cluster: GkeTpuCluster
    pools: dict[str, FlexStartTpuNodePool]


def declare_gke(settings: StackConfig, cluster_config: ClusterConfig, foundation: Foundation) -> Gke:
    cluster_network, cluster_subnetwork = foundation.network_in(
        cluster_config.location, (cluster_config.network, cluster_config.subnetwork)
    )
    network = foundation.network
    cluster = GkeTpuCluster(
        cluster_config.name,
        {
            "location": cluster_config.location,
            "project": settings.gcp_project,
            "release_channel": cluster_config.release_channel,
            "min_version": cluster_config.min_version,
            "maintenance_window": {
                "start_time": cluster_config.maintenance_window.start_time,
                "end_time": cluster_config.maintenance_window.end_time,
                "recurrence": cluster_config.maintenance_window.recurrence,
            },
            "system_machine_type": cluster_config.system_machine_type,
            "system_max_nodes": cluster_config.system_max_nodes,
            "network": cluster_network,
            "subnetwork": cluster_subnetwork,
            "pods_range_name": network.plan.pods_range_name if network else None,
            "services_range_name": network.plan.services_range_name if network else None,
            "upgrade_exclusion_scope": cluster_config.upgrade_exclusion_scope,
            "upgrade_exclusion_start": cluster_config.upgrade_exclusion_start,
            "master_ipv4_cidr_block": cluster_config.master_ipv4_cidr_block,
            "node_account_id": derived.node_service_account_id(settings),
            "deletion_protection": cluster_config.deletion_protection,
            "labels": derived.common_labels(settings),
        },
        # Nodes pull images through the network's NAT from their first boot.
        opts=pulumi.ResourceOptions(depends_on=[*foundation.after_apis, *foundation.after_network]),
    )
    pools = {
        pool.name: FlexStartTpuNodePool(
            pool.name,
            {
                "cluster": cluster.cluster_name,
                "cluster_region": cluster_config.location,
                "machine_type": pool.machine_type,
                "topology": pool.topology,
                "node_locations": list(pool.node_locations),
                "slices": pool.slices,
                "flex_start": pool.flex_start,
                "spot": pool.spot,
                "reservation": pool.reservation,
                "max_run_duration": pool.max_run_duration,
                "queued_provisioning": pool.queued_provisioning,
                "kueue_queue": pool.kueue_queue,
                # A capacity ladder (none: empty): its rungs' pools, tried in order through the
                # pool's ComputeClass.
                "ladder": list(pool.ladder),
                "service_account_email": cluster.node_service_account_email,
                "labels": derived.common_labels(settings),
                "project": settings.gcp_project,
            },
            # Nodes may only join once the cluster's system pool is up.
            opts=pulumi.ResourceOptions(depends_on=[cluster]),
        )
        for pool in settings.node_pools
    }
    return Gke(cluster_config, cluster, pools)


# --- GKE: the training workloads and what they run through ----------------------------------


@dataclass(frozen=True)
class Workloads:
    """The training Jobs and JobSets by name, and the environment of each one's Pods."""

    jobs: dict[str, TrainingWorkload] = field(default_factory=dict)
    environments: Environments = field(default_factory=dict)


def declare_workloads(
    settings: StackConfig,
    gke: Gke,
    buckets: dict[str, CheckpointBucket],
    foundation: Foundation,
    recovery: TrainingRecovery,
    last: LastUpdate,
) -> Workloads:
    provider = gke.cluster.provider
    # The Pods' Google identity: objects in the cluster region's bucket, nothing else.
    pod_identity = (
        TrainingServiceAccount(
            "gke-trainer",
            {
                "account_id": derived.gke_service_account_id(settings),
                "project": settings.gcp_project,
                "buckets": {gke.config.location: buckets[gke.config.location].bucket_name},
                "display_name": "TPU training Pods on GKE (Workload Identity)",
            },
            opts=pulumi.ResourceOptions(depends_on=foundation.after_apis),
        )
        if settings.jobs
        else None
    )
    namespaces = {
        name: k8s.core.v1.Namespace(
            f"namespace-{name}",
            metadata={"name": name, "labels": {"app.kubernetes.io/part-of": "tpu-training"}},
            opts=pulumi.ResourceOptions(provider=provider),
        )
        for name in derived.namespaces(settings)
    }
    # The engines a stack's workloads need, installed only then: the JobSet controller for
    # JobSets, Kueue for pools with a queue (queued provisioning, or kueueQueue).
    uses_jobsets = any(job.kind == "JobSet" for job in settings.jobs)
    queued_pools = [pool for pool in settings.node_pools if pool.queued]
    engines = (
        WorkloadEngines(
            "engines", {"provider": provider, "jobset": uses_jobsets, "kueue": bool(queued_pools)}
        )
        if uses_jobsets or queued_pools
        else None
    )
    # Each queued pool's Kueue objects: its flavor, ProvisioningRequest settings, admission check
    # and queues, one LocalQueue per namespace of the Jobs that run on it.
    queues = {}
    for pool in queued_pools:
        pool_namespaces = sorted({job.namespace for job in settings.jobs if job.node_pool == pool.name}) or [
            "default"
        ]
        queues[pool.name] = QueuedProvisioning(
            f"{pool.name}-queue",
            {
                "provider": provider,
                "node_pool": gke.pools[pool.name].selection,
                "namespaces": pool_namespaces,
            },
            opts=pulumi.ResourceOptions(
                depends_on=[
                    *([engines] if engines is not None else []),
                    *(namespaces[n] for n in pool_namespaces if n in namespaces),
                ]
            ),
        )
    # Each pool with a capacity ladder: its ComputeClass, which its Jobs' Pods select.
    classes = {
        pool.name: TpuComputeClass(
            f"{pool.name}-ladder",
            {"provider": provider, "node_pool": gke.pools[pool.name].selection},
            opts=pulumi.ResourceOptions(depends_on=[gke.pools[pool.name]]),
        )
        for pool in settings.node_pools
        if pool.ladder
    }
    environments = {job.name: derived.job_environment(settings, job) for job in settings.jobs}
    jobs = (
        declare_jobs(
            settings, gke, pod_identity, namespaces, engines, queues, recovery, environments, classes, last
        )
        if pod_identity is not None
        else {}
    )
    return Workloads(jobs, environments)


def declare_jobs(
    settings: StackConfig,
    gke: Gke,
    identity: TrainingServiceAccount,
    namespaces: dict[str, k8s.core.v1.Namespace],
    engines: Optional[WorkloadEngines],
    queues: dict[str, QueuedProvisioning],
    recovery: TrainingRecovery,
    environments: Environments,
    classes: dict[str, TpuComputeClass],
    last: LastUpdate,
) -> dict[str, TrainingWorkload]:
    """Each ``jobs`` entry as a Job or a JobSet, by name."""
    jobs: dict[str, TrainingWorkload] = {}
    for job in settings.jobs:
        pool = gke.pools[job.node_pool]
        job_args: TpuTrainingJobArgs = {
            "provider": gke.cluster.provider,
            "node_pool": pool.selection,
            "image": job.image,
            "command": list(job.command),
            "checkpoint_dir": derived.job_checkpoint_dir(settings, job),
            "environment": environments[job.name],
            "google_service_account": identity.email,
            "google_service_account_id": identity.account.name,
            "workload_pool": gke.cluster.workload_pool,
            "namespace": job.namespace,
            "recovery_generation": recovery.job_generation(job.name),
            "recovery_cause": _recovery_cause(job.name, last, recovery.job_cause),
            "privileged": job.privileged,
        }
        grace = derived.job_termination_grace_seconds(settings)
        if grace is not None:
            # Time for the stop save: the checkpoint's cost with a margin (docs/trainer.md).
            job_args["termination_grace_seconds"] = grace
        # Pods wait for their pool's nodes; the bucket access must exist before training starts;
        # a JobSet needs its controller's CRD and webhook, and a workload on a queued pool Kueue's
        # webhook (which suspends it until admitted) and its pool's queue; a workload on a pool with
        # a ladder, the ComputeClass its Pods select.
        queue = queues.get(job.node_pool)
        compute_class = classes.get(job.node_pool)
        job_opts = pulumi.ResourceOptions(
            depends_on=[
                pool,
                identity,
                *([namespaces[job.namespace]] if job.namespace in namespaces else []),
                *([engines] if engines is not None and (job.kind == "JobSet" or queue is not None) else []),
                *([queue] if queue is not None else []),
                *([compute_class] if compute_class is not None else []),
            ]
        )
        if job.kind == "JobSet":
            jobset_args = TpuTrainingJobSetArgs(**job_args, slices=job.slices)
            if job.max_restarts is not None:
                jobset_args["max_restarts"] = job.max_restarts
            jobs[job.name] = TpuTrainingJobSet(job.name, jobset_args, opts=job_opts)
        else:
            jobs[job.name] = TpuTrainingJob(job.name, job_args, opts=job_opts)
    return jobs


# --- Stack outputs ------------------------------------------------------------------------------


def export_outputs(
    settings: StackConfig,
    last: LastUpdate,
    buckets: dict[str, CheckpointBucket],
    tpu_vms: TpuVms,
    gke: Optional[Gke],
    workloads: Workloads,
    recovery: TrainingRecovery,
) -> None:
    recovered_vms, recovered_jobs = last.recovered_vms, last.recovered_jobs
    pulumi.export("checkpointBuckets", {region: b.url for region, b in buckets.items()})
    environments: Any = tpu_vms.environments
    if stack_config.is_config_secret(f"{stack_config.PROJECT}:tpuVms"):
        environments = pulumi.Output.secret(environments)  # they hold the secret env values
    last.export("trainingEnvironments", environments, recovered_vms)
    # zone and provisioning: the rung the next run finds it on (domain/capacity_ladder.py).
    last.export(
        "tpuVms",
        {
            name: {
                "zone": v.zone,
                "provisioning": tpu_vms.rungs[name][1].provisioning,
                "rung": tpu_vms.rungs[name][0],
                "state": v.state,
                "health": v.health,
            }
            for name, v in tpu_vms.vms.items()
        },
        recovered_vms,
    )
    # Read back by the next run's TrainingRecovery as "what this stack last deployed".
    last.export(GENERATIONS_OUTPUT, recovery.vm_generations, recovered_vms)
    if gke is not None:
        cluster = gke.cluster
        pulumi.export(
            "cluster",
            {"name": cluster.cluster_name, "location": cluster.location, "endpoint": cluster.endpoint},
        )
        pulumi.export("kubeconfig", cluster.kubeconfig)
    last.export(
        "nodePools",
        {
            name: {
                "machineType": p.plan.shape.machine_type.name,
                "topology": p.plan.shape.topology,
                "vmsPerSlice": p.plan.shape.vms,
                "maxNodes": p.plan.max_nodes,
                "gkeNodePools": list(p.plan.pool_names),
                "nodeSelector": p.plan.node_selector,
            }
            for name, p in (gke.pools if gke else {}).items()
        },
    )
    last.export(
        "jobs",
        {
            name: {
                "namespace": j.namespace,
                "checkpointDir": j.checkpoint_uri,
                "environment": workloads.environments[name],
            }
            for name, j in workloads.jobs.items()
        },
        recovered_jobs,
    )
    if settings.checkpointing is not None:
        export_checkpointing(settings, last)
    last.export(JOB_GENERATIONS_OUTPUT, recovery.job_generations, recovered_jobs)
    # Each Job's recoveries within its restart budget's window, read back by the watcher.
    previous_job_generations = last.outputs.get(JOB_GENERATIONS_OUTPUT)
    recovery_round = last.round
    pulumi.export(
        RESTARTS_OUTPUT,
        recovery.job_generations.apply(
            lambda declared: history_output(
                last.outputs.get(RESTARTS_OUTPUT) or {},
                recovery_round.restarts if recovery_round else {},
                declared,
                previous_job_generations if isinstance(previous_job_generations, dict) else {},
                by_watcher=recovery_round is not None,
            )
        ),
    )
    # Each rung's price and the worst rung's, for VMs with a ladder (`python -m infra.plan` shows them).
    ladders = {
        vm.name: rung_prices(vm.ladder, vm.accelerator_type) for vm in settings.tpu_vms if len(vm.ladder) > 1
    }
    if ladders:
        pulumi.export(LADDERS_OUTPUT, ladders)
    # Read back by the next run, and by `python -m infra.status`: each VM's and Job's last recovery.
    stockouts = last.round.stockouts if last.round is not None else frozenset()
    resumed = last.round.resumed if last.round is not None else {}
    decided_at = utc_now().strftime("%Y-%m-%dT%H:%M:%SZ")
    last.export_by_kind(
        RECOVERIES_OUTPUT,
        pulumi.Output.all(recovery.last_recoveries, recovery.vm_generations, recovery.job_generations).apply(
            lambda found: with_resumed_causes(
                with_stockout_causes(found[0], stockouts),
                resumed,
                {"tpuVms": found[1], "jobs": found[2]},
                decided_at,
            )
        ),
        recovered_vms | recovered_jobs,
    )
    # Read back by the next run, which refuses to run under another stack or project name.
    pulumi.export(DEPLOYED_AS_OUTPUT, deployed_as(pulumi.get_project(), pulumi.get_stack()))


def export_checkpointing(settings: StackConfig, last: LastUpdate) -> None:
    """How often each run checkpoints, and the share of its time preemptions and checkpoints
    cost: an output, and a line in the update's log."""
    candidates: dict[str, Optional[CheckpointPlan]] = {
        **{vm.name: derived.vm_checkpoints(settings, vm) for vm in settings.tpu_vms},
        **{job.name: derived.job_checkpoints(settings, job) for job in settings.jobs},
    }
    plans = {name: plan for name, plan in candidates.items() if plan is not None}
    last.export(
        "checkpointing",
        {
            name: {
                "intervalSeconds": plan.interval_seconds,
                "meanHoursBetweenInterruptions": round(plan.mean_seconds_between_interruptions / 3600, 2),
                "expectedLostPercent": round(100 * plan.expected_lost_fraction, 2),
            }
            for name, plan in plans.items()
        },
        last.recovered_vms | last.recovered_jobs,
    )
    for name, plan in plans.items():
        pulumi.log.info(
            f"{name}: checkpoint every {plan.interval_seconds} s (Young's interval for a "
            f"{plan.cost_seconds:g} s checkpoint, one interruption per "
            f"{plan.mean_seconds_between_interruptions / 3600:g} h): about "
            f"{100 * plan.expected_lost_fraction:.1f}% of the run lost to checkpoints, re-done work "
            f"and {plan.restart_seconds:g} s restarts"
        )


# --- Monitoring ----------------------------------------------------------------------------------


def declared_cost(foundation: Foundation, tpu_vms: TpuVms, gke: Optional[Gke]) -> str:
    """What the stack's billable resources cost per hour, priced by ``cost_estimate`` as
    ``python -m infra.cost`` prices the plan's registrations: each component names what it
    declared (``priced``), so the dashboard's figure is the plan's."""
    components: list[Any] = [*tpu_vms.vms.values()]
    if foundation.network is not None:
        components.append(foundation.network)
    if gke is not None:
        components += [gke.cluster, *gke.pools.values()]
    return cost_estimate.summary(cost_estimate.estimate(p for c in components for p in c.priced))


def declare_monitoring(
    settings: StackConfig, foundation: Foundation, hourly_cost: str
) -> Optional[StackMonitoring]:
    """Metrics, dashboard and alerts (docs/monitoring.md), unless `monitoring.enabled` is false."""
    if not settings.monitoring.enabled:
        return None
    plans = [derived.vm_checkpoints(settings, vm) for vm in settings.tpu_vms]
    plans += [derived.job_checkpoints(settings, job) for job in settings.jobs]
    intervals = [plan.interval_seconds for plan in plans if plan is not None]
    budget = settings.recovery.restart_budget
    args: StackMonitoringArgs = {
        "stack": settings.stack,
        "project": settings.gcp_project,
        "notify": list(settings.monitoring.notify),
        "restart_budget": budget.restarts,
        "restart_window_hours": budget.window_hours,
        "hourly_cost": hourly_cost,
        # Trainer lines count only from this stack's own VMs and cluster namespaces.
        "tpu_vms": [vm.name for vm in settings.tpu_vms],
        "namespaces": sorted({job.namespace for job in settings.jobs}),
    }
    if settings.cluster is not None:
        args["cluster"] = settings.cluster.name
    if intervals:
        # The slowest run sets the alert: a faster one would page for the slow one's normal gaps.
        args["checkpoint_interval_seconds"] = max(intervals)
    return StackMonitoring("monitoring", args, opts=pulumi.ResourceOptions(depends_on=foundation.after_apis))


# --- The program --------------------------------------------------------------------------------


def main() -> None:
    settings = stack_config.load()
    for warning in settings.warnings:
        pulumi.log.warn(warning)
    last = read_last_update()
    foundation = declare_foundation(settings)
    buckets = declare_buckets(settings, foundation)
    vm_identity = declare_vm_identity(settings, buckets, foundation)
    # `python -m infra.plan` sets this unless --live: an offline plan reads no live state.
    recovery = declare_recovery(settings, offline=os.environ.get("TPU_TRAINING_OFFLINE") == "1", last=last)
    tpu_vms = (
        declare_tpu_vms(settings, vm_identity, foundation, recovery, last)
        if vm_identity is not None
        else TpuVms()
    )
    gke = declare_gke(settings, settings.cluster, foundation) if settings.cluster is not None else None
    workloads = (
        declare_workloads(settings, gke, buckets, foundation, recovery, last)
        if gke is not None
        else Workloads()
    )
    declare_monitoring(settings, foundation, declared_cost(foundation, tpu_vms, gke))
    export_outputs(settings, last, buckets, tpu_vms, gke, workloads, recovery)


# The language host runs this folder as __main__ (`runpy.run_path(args.PROGRAM, run_name='__main__')`
# with the entry point "." for a directory `main`: pulumi/pulumi sdk/python/cmd/
# pulumi-language-python-exec at 0491e0d1a5, pkg/engine/project.go), as infra.offline does.
if __name__ == "__main__":
    main()
