"""What the stack derives from its config: names, regions, node pool plans, and each training
run's checkpoint directory, checkpoint plan and environment. Plain functions of the keys
(``StackKeys``); they check nothing themselves: ``StackConfig`` runs the checks, some through
these functions, before the program reads a value."""

from __future__ import annotations

from typing import Optional, cast

from tpu_training_components.domain import naming
from tpu_training_components.domain.goodput import (
    CheckpointPlan,
    InterruptionModel,
    mean_seconds_between_interruptions,
    plan_checkpoints,
)
from tpu_training_components.domain.node_pool_plan import TpuNodePoolPlan
from tpu_training_components.domain.progress import HangCheck

from .fields import PROJECT
from .gke import ClusterConfig, JobConfig, NodePoolConfig
from .keys import StackKeys
from .storage import TRAINER_CODE_VARIABLE
from .tpu_vms import TpuVmConfig
from .training import CheckpointingConfig

# --- Names and regions ------------------------------------------------------------------------


def regions(config: StackKeys) -> tuple[str, ...]:
    """Regions with TPUs (VMs, and the cluster's), sorted: one checkpoint bucket each."""
    found = {vm.region for vm in config.tpu_vms}
    if config.cluster is not None and config.node_pools:
        found.add(config.cluster.location)
    return tuple(sorted(found))


def network_regions(config: StackKeys) -> tuple[str, ...]:
    """Regions with TPU VMs or the cluster: one subnet, router and NAT each."""
    found = {vm.region for vm in config.tpu_vms}
    if config.cluster is not None:
        found.add(config.cluster.location)
    return tuple(sorted(found))


def network_name(config: StackKeys) -> str:
    """The VPC the stack declares: ``tpu-training-<stack>`` unless named."""
    return config.network.name or naming.bounded_name(PROJECT, naming.name_part(config.stack))


def bucket_name(config: StackKeys, region: str) -> str:
    """The checkpoint bucket of ``region``: ``bucket.name``, or one made from the project and
    the stack."""
    if config.bucket.name:
        return config.bucket.name
    return naming.bounded_name(config.gcp_project, naming.name_part(config.stack), "ckpt", region)


def _account_id(config: StackKeys, prefix: str) -> str:
    return naming.bounded_name(prefix, naming.name_part(config.stack), limit=30)


def service_account_id(config: StackKeys) -> str:
    """The Google identity of the stack's TPU VMs: one training identity per stack."""
    return _account_id(config, "tpu-train")


def gke_service_account_id(config: StackKeys) -> str:
    """The Google identity of the stack's training Pods (Workload Identity)."""
    return _account_id(config, "tpu-gke")


def node_service_account_id(config: StackKeys) -> str:
    """The Google identity of the cluster's nodes."""
    return _account_id(config, "gke-nodes")


def account_ids(config: StackKeys) -> tuple[str, ...]:
    """Every service account id the stack makes from its name."""
    return service_account_id(config), gke_service_account_id(config), node_service_account_id(config)


def common_labels(config: StackKeys) -> dict[str, str]:
    """The project's own labels, then the user's (which win)."""
    managed_by, project, stack = naming.STACK_LABEL_KEYS
    return {
        managed_by: "pulumi",
        project: PROJECT,
        stack: naming.label_value(config.stack),
        **config.labels,
    }


def namespaces(config: StackKeys) -> tuple[str, ...]:
    """Namespaces of the Jobs, other than ``default``: the stack creates them."""
    return tuple(sorted({job.namespace for job in config.jobs} - {"default"}))


# --- GKE --------------------------------------------------------------------------------------


def cluster_of(config: StackKeys) -> ClusterConfig:
    """The cluster node pools and Jobs run on (``StackConfig`` refuses them without one)."""
    if config.cluster is None:
        raise ValueError(f"{PROJECT}:nodePools and {PROJECT}:jobs need {PROJECT}:cluster")
    return config.cluster


def pool_plan(config: StackKeys, pool: NodePoolConfig) -> TpuNodePoolPlan:
    return pool.plan(cluster_of(config).location)


def job_pool(config: StackKeys, job: JobConfig) -> NodePoolConfig:
    """The ``nodePools`` entry a Job runs on."""
    return next(pool for pool in config.node_pools if pool.name == job.node_pool)


# --- Training runs: checkpoint directories, checkpoint plans, environments -------------------


def _checkpoint_dir(config: StackKeys, region: str, run: str) -> str:
    # Named after the run (a VM or a Job), not after any one instance of it, so one re-created
    # after preemption or failure finds the checkpoints of the one before.
    return f"gs://{bucket_name(config, region)}/checkpoints/{run}"


def vm_checkpoint_dir(config: StackKeys, vm: TpuVmConfig) -> str:
    """Where a VM's run keeps its checkpoints, in the bucket of the VM's region."""
    return _checkpoint_dir(config, vm.region, vm.name)


def job_checkpoint_dir(config: StackKeys, job: JobConfig) -> str:
    """Where a Job's run keeps its checkpoints, in the bucket of the cluster's region."""
    return _checkpoint_dir(config, cluster_of(config).location, job.name)


def plan_vm_checkpoints(checkpointing: CheckpointingConfig, vm: TpuVmConfig) -> CheckpointPlan:
    """Young's interval for a VM's run, or ``GoodputError``."""
    # The preferred capacity type: where a ladder's VM runs unless its capacity runs out.
    preferred = vm.preferred_provisioning
    model = cast(
        InterruptionModel, {"on-demand": "onDemand", "flex-start": "flexStart"}.get(preferred, preferred)
    )
    # One TPU node resource is preempted, stopped or maintained as a whole; several slices
    # requested together are lost together when any one is (hosts=slices). A flex-start run
    # ends at its maxRunDuration.
    request = vm.request_on(preferred)
    mean = mean_seconds_between_interruptions(
        model,
        overrides_hours=checkpointing.mean_hours_between_interruptions,
        run_limit_seconds=request.max_run_seconds if request else None,
        hosts=vm.slices,
    )
    return plan_checkpoints(checkpointing.cost_seconds, mean, restart_seconds=checkpointing.restart_seconds)


def plan_job_checkpoints(
    checkpointing: CheckpointingConfig, pool: TpuNodePoolPlan, slices: int = 1
) -> CheckpointPlan:
    """Young's interval for a Job's run over ``slices`` slices of ``pool``, or ``GoodputError``.
    On a pool with a capacity ladder, for its rung interrupted most often: the run may land on
    any of them."""

    def mean_on(member: TpuNodePoolPlan) -> float:
        model: InterruptionModel = (
            "flexStart"
            if member.flex_start
            else "spot"
            if member.spot
            else "reserved"
            if member.reservation
            else "onDemand"
        )
        return mean_seconds_between_interruptions(
            model,
            overrides_hours=checkpointing.mean_hours_between_interruptions,
            run_limit_seconds=member.max_run_seconds,
            # Every host of every slice: losing any one restarts them all.
            hosts=member.shape.vms * slices,
        )

    mean = min(mean_on(member) for member in pool.rungs or (pool,))
    return plan_checkpoints(checkpointing.cost_seconds, mean, restart_seconds=checkpointing.restart_seconds)


def vm_checkpoints(config: StackKeys, vm: TpuVmConfig) -> Optional[CheckpointPlan]:
    """When the VM's run checkpoints (Young's interval), or None without ``checkpointing``."""
    return plan_vm_checkpoints(config.checkpointing, vm) if config.checkpointing else None


def job_checkpoints(config: StackKeys, job: JobConfig) -> Optional[CheckpointPlan]:
    """When the Job's run checkpoints (Young's interval), or None without ``checkpointing``."""
    if config.checkpointing is None:
        return None
    return plan_job_checkpoints(config.checkpointing, pool_plan(config, job_pool(config, job)), job.slices)


def _environment(
    config: StackKeys,
    checkpoint_dir: str,
    cores: int,
    checkpoints: Optional[CheckpointPlan],
    env: dict[str, str],
) -> dict[str, str]:
    # Where and how often to checkpoint, the run's scale, then the user's own variables (which win).
    plan = config.training.plan_for(cores) if config.training else None
    code = (
        {TRAINER_CODE_VARIABLE: f"{checkpoint_dir.split('/checkpoints/')[0]}/code"}
        if config.trainer_code
        else {}
    )
    return {
        "CHECKPOINT_DIR": checkpoint_dir,
        **code,
        **(checkpoints.environment() if checkpoints else {}),
        **(plan.environment() if plan else {}),
        **env,
    }


def vm_environment(config: StackKeys, vm: TpuVmConfig) -> dict[str, str]:
    """The environment every training process of the VM receives."""
    return _environment(
        config, vm_checkpoint_dir(config, vm), vm.accelerator.cores, vm_checkpoints(config, vm), vm.env
    )


def job_environment(config: StackKeys, job: JobConfig) -> dict[str, str]:
    """The environment of every Pod of the Job, scaled to all the slices it spans."""
    cores = pool_plan(config, job_pool(config, job)).shape.cores * job.slices
    return _environment(config, job_checkpoint_dir(config, job), cores, job_checkpoints(config, job), job.env)


def job_termination_grace_seconds(config: StackKeys) -> Optional[int]:
    """The Pods' ``terminationGracePeriodSeconds``: ``checkpointing.podGraceSeconds``, which does
    not follow ``costSeconds`` (a tuning edit must not replace a running Job), or None (Kubernetes'
    30 s) without ``checkpointing``."""
    return config.checkpointing.pod_grace_seconds if config.checkpointing else None


def hang_checks(config: StackKeys) -> dict[str, HangCheck]:
    """How recovery judges each VM's and Job's training by its progress records: every one, from
    its checkpoint folder, unless ``recovery.hangDetection`` is false (domain/progress.py)."""
    recovery = config.recovery
    if not recovery.hang_detection:
        return {}
    return {
        **{
            vm.name: HangCheck(vm_checkpoint_dir(config, vm), vm.hang_minutes or recovery.hang_minutes)
            for vm in config.tpu_vms
        },
        **{
            job.name: HangCheck(job_checkpoint_dir(config, job), job.hang_minutes or recovery.hang_minutes)
            for job in config.jobs
        },
    }
