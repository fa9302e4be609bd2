"""The stack program: read the stack's config, then wire the components. `pulumi up` runs this.

The Pulumi language host runs this file with only `infra/` on `sys.path`; the components come
from the installed `tpu_training_components` package (see infra/requirements.txt).
"""

import os
from typing import Any, Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import stack_config
from tpu_training_components import (
    CheckpointBucket,
    FlexStartTpuNodePool,
    GkeTpuCluster,
    PreemptibleTpuVm,
    ProjectApis,
    QueuedProvisioning,
    TpuTrainingJob,
    TpuTrainingJobArgs,
    TpuTrainingJobSet,
    TpuTrainingJobSetArgs,
    TrainingNetwork,
    TrainingRecovery,
    TrainingServiceAccount,
    WorkloadEngines,
)
from tpu_training_components.domain.recovery_rounds import (
    ROUND_ENV,
    RecoveryRound,
    RoundEnvError,
    as_deployed,
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

# `python -m infra.plan` sets this unless --live: an offline plan reads no live state.
OFFLINE = os.environ.get("TPU_TRAINING_OFFLINE") == "1"

settings = stack_config.load()
for warning in settings.warnings:
    pulumi.log.warn(warning)


def last_outputs() -> tuple[dict[str, Any], set[str]]:
    """This stack's outputs as of its last update, and which of them are secret, read now, before
    anything is declared: a check in an Output's apply would run while the engine already
    replaces resources. The engine's own read of a stack's outputs (its builtin
    `pulumi:pulumi:readStackOutputs`, what a StackReference reads, pkg/resource/deploy/builtins.go,
    which the engine serves for the `pulumi` package, pkg/resource/deploy/providers/registry.go
    loadProvider) answers synchronously through an invoke."""
    own = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": own})
    outputs = (result.value or {}).get("outputs")
    secret = (result.value or {}).get("secretOutputNames") or []
    return (outputs if isinstance(outputs, dict) else {}), {str(name) for name in secret}


previous_outputs, previous_secrets = last_outputs()
# A renamed stack would re-name, and so replace, nearly everything: refuse it before it starts.
rename = rename_problem(previous_outputs, pulumi.get_project(), pulumi.get_stack())
if rename:
    raise InvalidArgument(rename)
# `python -m infra.recover` says what its own `pulumi up` recovers (None for every other update);
# read before anything is declared, so a value no round writes changes nothing.
try:
    recovery_round = RecoveryRound.from_env(os.environ.get(ROUND_ENV))
except RoundEnvError as exc:
    raise InvalidArgument(str(exc)) from None

# A new project has most APIs off: the stack enables those its resources need (enableApis, never
# disabled on destroy), and what calls an API waits for it.
stack_apis = apis_for_features(
    tpu_vms=bool(settings.tpu_vms),
    cluster=settings.cluster is not None,
    network=settings.network.create and bool(settings.network_regions),
    buckets=bool(settings.regions),
)
apis = (
    ProjectApis("apis", {"apis": list(stack_apis), "project": settings.gcp_project})
    if settings.enable_apis and stack_apis
    else None
)
after_apis = [apis] if apis is not None else []

# Private TPU VMs and nodes reach gs://, packages and images only through Private Google Access
# and Cloud NAT: the stack declares a network that has both, unless told to use yours.
network = (
    TrainingNetwork(
        "network",
        {
            "network_name": settings.network_name,
            "regions": list(settings.network_regions),
            "gke_region": settings.cluster.location if settings.cluster else None,
            "iap_ssh": settings.network.iap_ssh,
            "project": settings.gcp_project,
        },
        opts=pulumi.ResourceOptions(depends_on=after_apis),
    )
    if settings.network.create and settings.network_regions
    else None
)


def network_in(region: str, own: tuple[Optional[str], Optional[str]]) -> tuple[Any, Any]:
    """The (network, subnetwork) a VM or the cluster in ``region`` uses: the stack's, or its own
    config's (``network.create: false``)."""
    if network is None:
        return own
    return network.network_id, network.subnets[region].id


checkpoint_buckets = {
    region: CheckpointBucket(
        f"checkpoints-{region}",
        {
            "region": region,
            "bucket_name": settings.bucket_name(region),
            "project": settings.gcp_project,
            "labels": settings.common_labels,
            "noncurrent_version_retention_days": settings.bucket.noncurrent_version_retention_days,
            "noncurrent_versions_kept": settings.bucket.noncurrent_versions_kept,
            "protect": settings.bucket.protect,
            "retain_on_delete": settings.bucket.retain_on_delete,
        },
        opts=pulumi.ResourceOptions(depends_on=after_apis),
    )
    for region in settings.regions
}

# The trainer travels with the stack: uploaded to every checkpoint bucket, found by each VM and
# Job at $TRAINER_CODE, so a copy of the stack in another project trains the same code.
if settings.trainer_code is not None:
    for region, bucket in checkpoint_buckets.items():
        for object_name, path in settings.trainer_code.paths().items():
            gcp.storage.BucketObject(
                f"checkpoints-{region}-{object_name.replace('/', '-')}",
                bucket=bucket.bucket_name,
                name=object_name,
                # Relative to the program's working directory, so the asset is the same on every
                # machine that checks the project out (the engine compares asset paths too).
                source=pulumi.FileAsset(os.path.relpath(path)),
                opts=pulumi.ResourceOptions(parent=bucket),
            )

trainer = (
    TrainingServiceAccount(
        "trainer",
        {
            "account_id": settings.service_account_id,
            "project": settings.gcp_project,
            "buckets": {region: b.bucket_name for region, b in checkpoint_buckets.items()},
        },
        opts=pulumi.ResourceOptions(depends_on=after_apis),
    )
    if settings.tpu_vms
    else None
)


# Recovery is a reconcile: read the live nodes (one call per zone) and Jobs (one per namespace and
# kind, Kueue's Workloads too for queued ones), decide, say why; each VM and Job is declared at the
# generation decided here.
recovery = TrainingRecovery(
    "recovery",
    {
        "project": settings.gcp_project,
        "tpu_vms": [{"name": vm.name, "zone": vm.zone} for vm in settings.tpu_vms],
        "jobs": [
            {
                "name": job.name,
                "namespace": job.namespace,
                "kind": job.kind,
                # Kueue's Workload tells a queued job that waits from one Kueue gave up on.
                "queued": settings.job_pool(job).queued,
            }
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
        "read_live_state": settings.recovery.read_live_state and not OFFLINE,
        "maintenance_grace_minutes": settings.recovery.maintenance_grace_minutes,
    },
)

# Computed once: each VM's and Job's environment goes to its resource and to a stack output.
training_environments = {vm.name: settings.training_environment(vm) for vm in settings.tpu_vms}
job_environments = {job.name: settings.job_environment(job) for job in settings.jobs}

tpu_vms = {}
for vm in settings.tpu_vms:
    assert trainer is not None
    vm_network, vm_subnetwork = network_in(vm.region, (vm.network, vm.subnetwork))
    tpu_vms[vm.name] = PreemptibleTpuVm(
        vm.name,
        {
            "zone": vm.zone,
            "accelerator_type": vm.accelerator_type,
            "runtime_version": vm.runtime_version,
            "provisioning": vm.provisioning,
            "train_command": vm.train_command,
            "setup_command": vm.setup_command,
            "checkpoint_dir": settings.checkpoint_dir(vm),
            "environment": training_environments[vm.name],
            "service_account_email": trainer.email,
            "recovery_generation": recovery.vm_generation(vm.name),
            "restart_generation": vm.restart_generation,
            "external_ip": vm.external_ip,
            "network": vm_network,
            "subnetwork": vm_subnetwork,
            "labels": settings.common_labels,
            "project": settings.gcp_project,
        },
        # The VM's identity must hold its bucket access, and its network a route to Google APIs
        # and the internet (NAT), before the startup script runs.
        opts=pulumi.ResourceOptions(depends_on=[trainer, *([network] if network else [])]),
    )

# --- GKE: cluster, flex-start TPU node pools, training Jobs ----------------------------------

cluster_network, cluster_subnetwork = (
    network_in(settings.cluster.location, (settings.cluster.network, settings.cluster.subnetwork))
    if settings.cluster
    else (None, None)
)
cluster = (
    GkeTpuCluster(
        settings.cluster.name,
        {
            "location": settings.cluster.location,
            "project": settings.gcp_project,
            "release_channel": settings.cluster.release_channel,
            "min_version": settings.cluster.min_version,
            "maintenance_window": {
                "start_time": settings.cluster.maintenance_window.start_time,
                "end_time": settings.cluster.maintenance_window.end_time,
                "recurrence": settings.cluster.maintenance_window.recurrence,
            },
            "system_machine_type": settings.cluster.system_machine_type,
            "system_max_nodes": settings.cluster.system_max_nodes,
            "network": cluster_network,
            "subnetwork": cluster_subnetwork,
            "pods_range_name": network.plan.pods_range_name if network else None,
            "services_range_name": network.plan.services_range_name if network else None,
            "upgrade_exclusion_scope": settings.cluster.upgrade_exclusion_scope,
            "upgrade_exclusion_start": settings.cluster.upgrade_exclusion_start,
            "master_ipv4_cidr_block": settings.cluster.master_ipv4_cidr_block,
            "node_account_id": settings.node_service_account_id,
            "deletion_protection": settings.cluster.deletion_protection,
            "labels": settings.common_labels,
        },
        # Nodes pull images through the network's NAT from their first boot.
        opts=pulumi.ResourceOptions(depends_on=[*after_apis, *([network] if network else [])]),
    )
    if settings.cluster
    else None
)

node_pools = {}
for pool in settings.node_pools:
    assert cluster is not None and settings.cluster is not None
    node_pools[pool.name] = FlexStartTpuNodePool(
        pool.name,
        {
            "cluster": cluster.cluster_name,
            "cluster_region": settings.cluster.location,
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
            "service_account_email": cluster.node_service_account_email,
            "labels": settings.common_labels,
            "project": settings.gcp_project,
        },
        # Nodes may only join once the cluster's system pool is up.
        opts=pulumi.ResourceOptions(depends_on=[cluster]),
    )

# The Pods' Google identity: objects in the cluster region's bucket, nothing else.
pod_identity = (
    TrainingServiceAccount(
        "gke-trainer",
        {
            "account_id": settings.gke_service_account_id,
            "project": settings.gcp_project,
            "buckets": {settings.cluster.location: checkpoint_buckets[settings.cluster.location].bucket_name},
            "display_name": "TPU training Pods on GKE (Workload Identity)",
        },
        opts=pulumi.ResourceOptions(depends_on=after_apis),
    )
    if settings.jobs and settings.cluster
    else None
)

namespaces = {
    name: k8s.core.v1.Namespace(
        f"namespace-{name}",
        metadata={"name": name, "labels": {"app.kubernetes.io/part-of": "tpu-training"}},
        opts=pulumi.ResourceOptions(provider=cluster.provider),
    )
    for name in settings.namespaces
    if cluster is not None
}

# The engines a stack's workloads need, installed only then: the JobSet controller for JobSets,
# Kueue for pools with a queue (queued provisioning, or kueueQueue).
uses_jobsets = any(job.kind == "JobSet" for job in settings.jobs)
queued_pools = [pool for pool in settings.node_pools if pool.queued]
engines = (
    WorkloadEngines(
        "engines", {"provider": cluster.provider, "jobset": uses_jobsets, "kueue": bool(queued_pools)}
    )
    if cluster is not None and (uses_jobsets or queued_pools)
    else None
)

# Each queued pool's Kueue objects: its flavor, ProvisioningRequest settings, admission check and
# queues, one LocalQueue per namespace of the Jobs that run on it.
queues = {}
for pool in queued_pools:
    assert cluster is not None and engines is not None
    pool_namespaces = sorted({job.namespace for job in settings.jobs if job.node_pool == pool.name}) or [
        "default"
    ]
    queues[pool.name] = QueuedProvisioning(
        f"{pool.name}-queue",
        {
            "provider": cluster.provider,
            "node_pool": node_pools[pool.name].selection,
            "namespaces": pool_namespaces,
        },
        opts=pulumi.ResourceOptions(
            depends_on=[engines, *(namespaces[n] for n in pool_namespaces if n in namespaces)]
        ),
    )

jobs: dict[str, Any] = {}
for job in settings.jobs:
    assert cluster is not None and pod_identity is not None
    job_pool = node_pools[job.node_pool]
    job_args: TpuTrainingJobArgs = {
        "provider": cluster.provider,
        "node_pool": job_pool.selection,
        "image": job.image,
        "command": list(job.command),
        "checkpoint_dir": settings.job_checkpoint_dir(job),
        "environment": job_environments[job.name],
        "google_service_account": pod_identity.email,
        "google_service_account_id": pod_identity.account.name,
        "workload_pool": cluster.workload_pool,
        "namespace": job.namespace,
        "recovery_generation": recovery.job_generation(job.name),
        "privileged": job.privileged,
    }
    grace = settings.job_termination_grace_seconds()
    if grace is not None:
        # Time for the stop save: the checkpoint's cost with a margin (docs/trainer.md).
        job_args["termination_grace_seconds"] = grace
    # Pods wait for their pool's nodes; the bucket access must exist before training starts; a
    # JobSet needs its controller's CRD and webhook, and a workload on a queued pool Kueue's webhook
    # (which suspends it until admitted) and its pool's queue.
    queue = queues.get(job.node_pool)
    job_opts = pulumi.ResourceOptions(
        depends_on=[
            job_pool,
            pod_identity,
            *([namespaces[job.namespace]] if job.namespace in namespaces else []),
            *([engines] if engines is not None and (job.kind == "JobSet" or queue is not None) else []),
            *([queue] if queue is not None else []),
        ]
    )
    if job.kind == "JobSet":
        jobset_args = TpuTrainingJobSetArgs(**job_args, slices=job.slices)
        if job.max_restarts is not None:
            jobset_args["max_restarts"] = job.max_restarts
        jobs[job.name] = TpuTrainingJobSet(job.name, jobset_args, opts=job_opts)
    else:
        jobs[job.name] = TpuTrainingJob(job.name, job_args, opts=job_opts)


def export_deployed(key: str, value: Any, recovered: frozenset[str] = frozenset()) -> None:
    """Export an output keyed by VM, Job or pool name. A recovery round's targeted update changes
    only the ``recovered`` ones, and the engine keeps every other resource as the state has it
    (and creates none that is not there): the output keeps what it said of every other one
    (infra/recovery_targets.py cites the engine)."""
    if recovery_round is None or not recovery_round.targeted:
        pulumi.export(key, value)
        return
    previous = previous_outputs.get(key)
    deployed = pulumi.Output.from_input(value).apply(lambda new: as_deployed(previous, new, recovered))
    pulumi.export(key, pulumi.Output.secret(deployed) if key in previous_secrets else deployed)


recovered_vms = recovery_round.tpu_vms if recovery_round else frozenset()
recovered_jobs = recovery_round.jobs if recovery_round else frozenset()
pulumi.export("checkpointBuckets", {region: b.url for region, b in checkpoint_buckets.items()})
export_deployed("trainingEnvironments", training_environments, recovered_vms)
export_deployed(
    "tpuVms",
    {name: {"zone": v.zone, "state": v.state, "health": v.health} for name, v in tpu_vms.items()},
    recovered_vms,
)
# Read back by the next run's TrainingRecovery as "what this stack last deployed".
export_deployed(GENERATIONS_OUTPUT, recovery.vm_generations, recovered_vms)
if cluster is not None:
    pulumi.export(
        "cluster", {"name": cluster.cluster_name, "location": cluster.location, "endpoint": cluster.endpoint}
    )
    pulumi.export("kubeconfig", cluster.kubeconfig)
export_deployed(
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
        for name, p in node_pools.items()
    },
)
export_deployed(
    "jobs",
    {
        name: {
            "namespace": j.namespace,
            "checkpointDir": j.checkpoint_uri,
            "environment": job_environments[name],
        }
        for name, j in jobs.items()
    },
    recovered_jobs,
)
if settings.checkpointing is not None:
    # How often each run checkpoints, and the share of its time preemptions and checkpoints cost.
    checkpoint_plans = {
        **{vm.name: settings.vm_checkpoints(vm) for vm in settings.tpu_vms},
        **{job.name: settings.job_checkpoints(job) for job in settings.jobs},
    }
    export_deployed(
        "checkpointing",
        {
            name: {
                "intervalSeconds": plan.interval_seconds,
                "meanHoursBetweenInterruptions": round(plan.mean_seconds_between_interruptions / 3600, 2),
                "expectedLostPercent": round(100 * plan.expected_lost_fraction, 2),
            }
            for name, plan in checkpoint_plans.items()
            if plan is not None
        },
        recovered_vms | recovered_jobs,
    )
    for name, plan in checkpoint_plans.items():
        if plan is not None:
            pulumi.log.info(
                f"{name}: checkpoint every {plan.interval_seconds} s (Young's interval for a "
                f"{plan.cost_seconds:g} s checkpoint, one interruption per "
                f"{plan.mean_seconds_between_interruptions / 3600:g} h): about "
                f"{100 * plan.expected_lost_fraction:.1f}% of the run lost to checkpoints, re-done work "
                f"and {plan.restart_seconds:g} s restarts"
            )
export_deployed(JOB_GENERATIONS_OUTPUT, recovery.job_generations, recovered_jobs)
# Each Job's recoveries within its restart budget's window, read back by the watcher.
previous_job_generations = previous_outputs.get(JOB_GENERATIONS_OUTPUT)
pulumi.export(
    RESTARTS_OUTPUT,
    recovery.job_generations.apply(
        lambda declared: history_output(
            previous_outputs.get(RESTARTS_OUTPUT) or {},
            recovery_round.restarts if recovery_round else {},
            declared,
            previous_job_generations if isinstance(previous_job_generations, dict) else {},
            by_watcher=recovery_round is not None,
        )
    ),
)
# Read back by the next run, and by `python -m infra.status`: each VM's and Job's last recovery.
export_deployed(RECOVERIES_OUTPUT, recovery.last_recoveries, recovered_vms | recovered_jobs)
# Read back by the next run, which refuses to run under another stack or project name.
pulumi.export(DEPLOYED_AS_OUTPUT, deployed_as(pulumi.get_project(), pulumi.get_stack()))
