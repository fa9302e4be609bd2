"""The stack's outputs (what `tpu-training status` and `recover` read back, and what the next
update starts from) and its monitoring, declared from the parts the program made."""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from tpu_training_components import (
    CheckpointBucket,
    StackMonitoring,
    StackMonitoringArgs,
    TrainingRecovery,
)
from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.capacity_ladder import (
    LADDERS_OUTPUT,
    rung_prices,
    with_stockout_causes,
)
from tpu_training_components.domain.goodput import CheckpointPlan
from tpu_training_components.domain.recovery import utc_now
from tpu_training_components.domain.recovery_rounds import (
    with_resumed_causes,
)
from tpu_training_components.domain.restart_budget import RESTARTS_OUTPUT, history_output
from tpu_training_components.domain.stack_identity import DEPLOYED_AS_OUTPUT, deployed_as
from tpu_training_components.resources.reconcile import (
    GENERATIONS_OUTPUT,
    JOB_GENERATIONS_OUTPUT,
    RECOVERIES_OUTPUT,
)

from tpu_training import stack_config
from tpu_training.program.last_update import LastUpdate
from tpu_training.program.parts import Foundation, Gke, TpuVms, Workloads
from tpu_training.stack_config import StackConfig, derived


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
    # Each rung's price and the worst rung's, for VMs with a ladder (`tpu-training plan` shows them).
    ladders = {
        vm.name: rung_prices(vm.ladder, vm.accelerator_type) for vm in settings.tpu_vms if len(vm.ladder) > 1
    }
    if ladders:
        pulumi.export(LADDERS_OUTPUT, ladders)
    # Read back by the next run, and by `tpu-training status`: each VM's and Job's last recovery.
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


def declared_cost(foundation: Foundation, tpu_vms: TpuVms, gke: Optional[Gke]) -> str:
    """What the stack's billable resources cost per hour, priced by ``cost_estimate`` as
    ``tpu-training cost`` prices the plan's registrations: each component names what it
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
