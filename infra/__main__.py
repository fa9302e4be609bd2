"""The stack program: read the stack's config, then wire the components. `pulumi up` runs this.

One function per part of the stack, in the order the parts are declared, each returning what the
parts after it use; ``main`` calls them. The Pulumi language host runs this file with only
`infra/` on `sys.path`; the components come from the installed `tpu_training_components` package,
the stack's config and what the program reads and exports (``tpu_training.program``) from the
installed `tpu_training` package beside it (see infra/requirements.txt).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__" and __package__ == "infra":
    # `python -m infra`: the language host runs this folder as __main__ (no package; see the end
    # of the file), so this is someone running the program outside Pulumi, where it cannot work.
    print(
        "infra/ is the Pulumi program of this project: `pulumi preview` and `pulumi up` run it, in a "
        "stack's context. Without the Pulumi CLI: `tpu-training plan [--stack NAME]` shows what "
        "`pulumi up` would do, `tpu-training cost` what the stack costs, `tpu-training status` "
        "how training is doing and `tpu-training recover` re-creates what was lost (README.md)",
        file=sys.stderr,
    )
    sys.exit(64)  # sysexits.h EX_USAGE: the command line is wrong
from typing import Optional, TypeVar

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from tpu_training_components import (
    CheckpointBucket,
    FlexStartTpuNodePool,
    GkeTpuCluster,
    PreemptibleTpuVm,
    ProjectApis,
    QueuedProvisioning,
    RecoveredJob,
    RecoveredTpuVm,
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
from tpu_training_components.domain import capacity_ladder
from tpu_training_components.domain.capacity_ladder import Rung
from tpu_training_components.domain.recovery_rounds import (
    ROUND_ENV,
)
from tpu_training_components.domain.required_access import apis_for_features
from tpu_training_components.errors import InvalidArgument
from tpu_training_components.resources.tpu_vm import QueuedVmArgs
from typing_extensions import TypedDict

from tpu_training import stack_config
from tpu_training.program.last_update import LastUpdate, read_last_update, recovery_cause
from tpu_training.program.outputs import declare_monitoring, declared_cost, export_outputs
from tpu_training.program.parts import Environments, Foundation, Gke, TpuVms, TrainingWorkload, Workloads
from tpu_training.stack_config import ClusterConfig, StackConfig, derived

# --- What the last update left --------------------------------------------------------------


# --- Project APIs and the network -----------------------------------------------------------


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
            for object_name, path in settings.trainer_code.paths(PROJECT_FOLDER).items():
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


def recovered_tpu_vm(vm: stack_config.TpuVmConfig, rung: Rung) -> RecoveredTpuVm:
    """How recovery reads VM ``vm`` standing on ``rung``: by its node, or (requested from the
    queue there) by its queued resource first."""
    entry = RecoveredTpuVm(name=vm.name, zone=rung.zone, provisioning=rung.provisioning)
    if vm.request_on(rung.provisioning) is not None:
        entry["queued"] = True
    return entry


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
            "tpu_vms": [judged(recovered_tpu_vm(vm, standing_rung(vm, last))) for vm in settings.tpu_vms],
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
    """``capacity_ladder.standing_rung`` of this VM, as the last update and this round leave it."""
    try:
        return capacity_ladder.standing_rung(
            vm.ladder, vm.name, last.outputs, last.round.rungs if last.round is not None else None
        )
    except capacity_ladder.RungNotOnLadder as exc:
        raise InvalidArgument(f"{ROUND_ENV}: {exc}; unset it to run `pulumi up` yourself") from None


def declared_rung(vm: stack_config.TpuVmConfig, last: LastUpdate, recovery: TrainingRecovery) -> Rung:
    """``capacity_ladder.declared_rung`` of this VM, kept or re-created as recovery decided."""
    return capacity_ladder.declared_rung(
        vm.ladder,
        standing_rung(vm, last),
        kept=recovery.vm_decision(vm.name).action == "keep",
        round_declares=last.round is not None and vm.name in last.round.rungs,
    )


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


class QueuedArguments(TypedDict, total=False):
    """The arguments of ``PreemptibleTpuVm`` that request it from the queue."""

    slices: int
    queued: QueuedVmArgs
    max_run_duration: str


def queued_arguments(vm: stack_config.TpuVmConfig, rung: Rung) -> QueuedArguments:
    """``PreemptibleTpuVm``'s queue arguments for ``vm`` on ``rung``: none where it is created
    directly."""
    request = vm.request_on(rung.provisioning)
    found = QueuedArguments()
    if request is None:
        return found
    if vm.slices > 1:
        found["slices"] = vm.slices
    if vm.queued is not None:
        found["queued"] = QueuedVmArgs()
        if vm.queued.valid_for is not None:
            found["queued"]["valid_for"] = vm.queued.valid_for
        if vm.queued.valid_after is not None:
            found["queued"]["valid_after"] = vm.queued.valid_after
    if request.flex_start and vm.max_run_duration is not None:
        found["max_run_duration"] = vm.max_run_duration
    return found


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
                **queued_arguments(vm, rung),
                "train_command": vm.train_command,
                "setup_command": vm.setup_command,
                "checkpoint_dir": derived.vm_checkpoint_dir(settings, vm),
                "environment": environments[vm.name],
                "service_account_email": identity.email,
                "recovery_generation": recovery.vm_generation(vm.name),
                "recovery_cause": recovery_cause(vm.name, last, recovery.vm_cause, stockouts),
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
    # JobSets, Kueue for pools with a queue (queued provisioning, or kueueQueue); neither where
    # the cluster already runs it (cluster.installJobSet, cluster.installKueue).
    queued_pools = [pool for pool in settings.node_pools if pool.queued]
    install_jobset = gke.config.install_job_set and any(job.kind == "JobSet" for job in settings.jobs)
    install_kueue = gke.config.install_kueue and bool(queued_pools)
    engines = (
        WorkloadEngines("engines", {"provider": provider, "jobset": install_jobset, "kueue": install_kueue})
        if install_jobset or install_kueue
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
            "recovery_cause": recovery_cause(job.name, last, recovery.job_cause),
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


# --- Monitoring ----------------------------------------------------------------------------------


# --- The program --------------------------------------------------------------------------------


PROJECT_FOLDER = Path(__file__).absolute().parent.parent
"""The project's folder, Pulumi.yaml's (this program is its ``main: infra/``): the trainer's files
are read from there."""


def main() -> None:
    settings = stack_config.load(project_root=PROJECT_FOLDER)
    for warning in settings.warnings:
        pulumi.log.warn(warning)
    last = read_last_update()
    foundation = declare_foundation(settings)
    buckets = declare_buckets(settings, foundation)
    vm_identity = declare_vm_identity(settings, buckets, foundation)
    # `tpu-training plan` sets this unless --live: an offline plan reads no live state.
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
# pulumi-language-python-exec at 0491e0d1a5, pkg/engine/project.go), as tpu_training.offline does.
if __name__ == "__main__":
    main()
