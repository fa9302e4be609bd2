"""The checks that span the GKE keys (``cluster``, ``nodePools``, ``jobs``): unique names, each
Job on a pool that can hold it, the cluster's size and version. ``StackConfig`` runs them."""

from __future__ import annotations

from typing import Optional

from tpu_training_components.domain import catalogue
from tpu_training_components.domain.gke_cluster_plan import gke_version_problem
from tpu_training_components.domain.jobset_manifests import jobset_name_problem
from tpu_training_components.domain.node_pool_plan import (
    MAX_NODES_PER_CLUSTER,
    QUEUED_PROVISIONING_MIN_GKE_VERSION,
    TpuNodePoolPlan,
)
from tpu_training_components.errors import suggestion

from .fields import PROJECT, repeated
from .gke import SYSTEM_POOL, ClusterConfig, JobConfig
from .keys import StackKeys

PoolPlans = list[TpuNodePoolPlan | catalogue.CatalogueError]
"""Each ``nodePools`` entry's plan, or why it has none, in the entries' order."""


def _jobset_problems(index: int, job: JobConfig, plan: TpuNodePoolPlan) -> list[str]:
    """What a Job's slices, workload and maxRestarts may be on its pool (issue 20)."""
    key = f"{PROJECT}:jobs[{index}]"
    if job.workload == "job" and job.slices > 1:
        return [
            f"{key}.workload = 'job' with slices = {job.slices}: a plain Job runs on one slice; "
            f"several slices need a JobSet (workload: jobset, or leave workload out)"
        ]
    if plan.queued_provisioning and job.slices > 1:
        return [
            f"{key}.slices = {job.slices} on node pool {plan.name!r}, which has provisioning: "
            f"flex-start-queued: a queued workload spans one slice (allowed: 1); run one job per "
            f"slice, or span slices on a pool of another provisioning"
        ]
    if job.kind == "Job":
        if job.max_restarts is not None:
            return [
                f"{key}.maxRestarts = {job.max_restarts}: only a JobSet restarts itself; set "
                f"workload: jobset, or leave maxRestarts out"
            ]
        return []
    problems = []
    if not plan.multi_host:
        problems.append(
            f"{key}: a JobSet ({'slices = ' + str(job.slices) if job.slices > 1 else 'workload: jobset'}) "
            f"needs multi-host slices, and node pool {plan.name!r} has single-host ones "
            f"({plan.shape.machine_type.name} {plan.shape.topology}, 1 VM each): GKE's Multislice "
            f"takes only multi-host TPU slice node pools; use a multi-host shape"
            + (
                f" such as machineType: {fix.machine_type.name} with topology: {fix.topology} "
                f"({fix.vms} VMs a slice)"
                if (fix := catalogue.multi_host_shape(plan.shape)) is not None
                else ""
            )
            + ", or one slice with a plain Job"
        )
    if job.slices > plan.slices:
        problems.append(
            f"{key}.slices = {job.slices}: node pool {plan.name!r} holds {plan.slices} slice(s); "
            f"raise its slices to at least {job.slices}, or ask for fewer"
        )
    if plan.multi_host:
        problem = jobset_name_problem(job.name, job.slices, plan.shape.vms)
        if problem:
            problems.append(f"{key}.name: {problem}")
    return problems


def gke_problems(config: StackKeys, planned: PoolPlans) -> list[str]:
    """Every problem of the cluster, node pools and jobs together, each naming its key."""
    problems: list[str] = []
    pool_names = [pool.name for pool in config.node_pools]
    for name in repeated(pool_names):
        problems.append(f"{PROJECT}:nodePools: node pool names must be unique; repeated: {name}")
    for name in repeated([job.name for job in config.jobs]):
        problems.append(f"{PROJECT}:jobs: job names must be unique; repeated: {name}")
    for name in sorted({job.name for job in config.jobs} & {vm.name for vm in config.tpu_vms}):
        problems.append(
            f"{PROJECT}:jobs: {name!r} also names a TPU VM; each training run needs a name "
            f"of its own, because the name picks its checkpoint directory"
        )
    if config.cluster is None:
        if config.node_pools or config.jobs:
            problems.append(
                f"{PROJECT}:nodePools and {PROJECT}:jobs need {PROJECT}:cluster "
                f"(at least {{name, location}}) to run on"
            )
        return problems
    # GKE pool name -> (the nodePools entry it comes from, how to name that in a message).
    gke_pools: dict[str, tuple[Optional[str], str]] = {
        SYSTEM_POOL: (None, f"{PROJECT}:cluster's CPU system pool")
    }
    for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True)):
        key = f"{PROJECT}:nodePools[{index}]"
        if isinstance(plan, catalogue.CatalogueError):
            problems.append(f"{key} ({pool.name}): {plan}")
            continue
        for gke_name in plan.pool_names:
            here = (pool.name, f"a pool of {key} ({pool.name})")
            owner, described = gke_pools.setdefault(gke_name, here)
            # Two entries of one name are reported above, as repeated names.
            if owner != pool.name:
                problems.append(
                    f"{key}.name = {pool.name!r}: its GKE node pool {gke_name!r} is also the "
                    f"name of {described}; rename the pool"
                )
    problems.extend(_cluster_size_problems(config, config.cluster, planned))
    problems.extend(_queued_version_problems(config, config.cluster, planned))
    for index, job in enumerate(config.jobs):
        if job.node_pool not in pool_names:
            problems.append(
                f"{PROJECT}:jobs[{index}].nodePool = {job.node_pool!r}: no such node pool"
                f"{suggestion(job.node_pool, pool_names)}; declared: {', '.join(pool_names) or 'none'}"
            )
            continue
        pool_index = pool_names.index(job.node_pool)
        plan = planned[pool_index]
        if isinstance(plan, TpuNodePoolPlan):
            problems.extend(_jobset_problems(index, job, plan))
    problems.extend(_oversubscription_problems(config, planned))
    return problems


def _oversubscription_problems(config: StackKeys, planned: PoolPlans) -> list[str]:
    """A pool without a queue holds at once no more slices than its jobs ask for together. Without
    a queue nothing admits a workload whole: two 2-slice JobSets on a 2-slice pool each start on
    what is free, and with one slice each (JobSet's exclusive placement) both wait forever; two
    multi-host Jobs on one slice split its nodes the same way. A queued pool's Kueue admits one
    workload at a time within the pool's chips, so its jobs may ask for more: they wait their turn."""
    problems = []
    for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True)):
        if not isinstance(plan, TpuNodePoolPlan) or plan.queue_name is not None:
            continue
        runs = [(job.name, job.slices) for job in config.jobs if job.node_pool == pool.name]
        asked = sum(slices for _, slices in runs)
        if len(runs) > 1 and asked > plan.slices:
            shown = ", ".join(f"{name} ({slices})" for name, slices in runs)
            problems.append(
                f"{PROJECT}:nodePools[{index}] ({pool.name}): its jobs ask for {asked} slices together "
                f"({shown}) and it holds {plan.slices}; without a queue nothing admits a run whole, so "
                f"they would split its slices and nodes and wait for each other: raise its slices to "
                f"{asked}, move a job to another pool, or give it kueueQueue: true (Kueue then "
                f"admits each whole, in turn)"
            )
    return problems


def _cluster_size_problems(config: StackKeys, cluster: ClusterConfig, planned: PoolPlans) -> list[str]:
    # A pool without a plan is reported by its own key.
    sizes = [
        (pool.name, plan.max_nodes)
        for pool, plan in zip(config.node_pools, planned, strict=True)
        if isinstance(plan, TpuNodePoolPlan)
    ]
    total = sum(size for _, size in sizes) + cluster.system_max_nodes
    if total <= MAX_NODES_PER_CLUSTER:
        return []
    if cluster.system_max_nodes > MAX_NODES_PER_CLUSTER:
        return [
            f"{PROJECT}:cluster.systemMaxNodes = {cluster.system_max_nodes}: above GKE's limit of "
            f"{MAX_NODES_PER_CLUSTER} nodes per cluster"
        ]
    largest = ", ".join(f"{name}: {size}" for name, size in sorted(sizes, key=lambda s: -s[1])[:3])
    return [
        f"{PROJECT}:nodePools: the pools reach {total} nodes together (the system pool's "
        f"{cluster.system_max_nodes} included; largest {largest}), above GKE's limit of "
        f"{MAX_NODES_PER_CLUSTER} nodes per cluster; use fewer slices or another cluster"
    ]


def _queued_version_problems(config: StackKeys, cluster: ClusterConfig, planned: PoolPlans) -> list[str]:
    """A queued pool needs a newer cluster than flex-start does; checked when the stack pins one
    (unpinned, the release channel's version is far past it)."""
    version = cluster.min_version
    queued = [
        f"{PROJECT}:nodePools[{index}] ({pool.name})"
        for index, (pool, plan) in enumerate(zip(config.node_pools, planned, strict=True))
        if isinstance(plan, TpuNodePoolPlan) and plan.queued_provisioning
    ]
    if not queued or version is None or version == "latest":
        return []
    problem = gke_version_problem(version, QUEUED_PROVISIONING_MIN_GKE_VERSION, "TPU queued provisioning")
    if problem is None:
        return []
    return [f"{PROJECT}:cluster.minVersion = {version!r}: {problem}, which {', '.join(queued)} uses"]
