"""A training run as a JobSet on one or several multi-host TPU slices, gang-restarted by JobSet in
the cluster and re-created by `pulumi up` once JobSet gives up."""

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired

from ..domain.job_manifests import TrainingJobSpec
from ..domain.jobset_manifests import (
    DEFAULT_MAX_RESTARTS,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    MAX_RESTARTS_LIMIT,
    TrainingJobSetSpec,
    jobset_manifest,
    jobset_name_problem,
    jobset_service_manifest,
)
from ..domain.naming import dns_label_problem
from ..domain.node_pool_plan import TpuNodePoolPlan
from ..validation import ARGUMENTS, Problems, count_problem
from .training_workload import (
    JOB_COMPONENT,
    JOB_RESOURCE,
    JOBSET_COMPONENT,
    TpuTrainingJobArgs,
    TrainingWorkload,
    with_cause,
)


@with_config(ARGUMENTS)
class TpuTrainingJobSetArgs(TpuTrainingJobArgs):
    """A Job's arguments, and what only a JobSet takes."""

    slices: NotRequired[int]
    """Slices the run spans (default 1): one child Job of one Pod per VM on each, one slice per
    GKE node pool. At most the pool's ``slices``; more than one is TPU Multislice."""
    max_restarts: NotRequired[int]
    """Gang restarts of the whole JobSet for real failures before it is Failed and the next
    `pulumi up` replaces it (default 3). Disruptions (preemption, drain, flex-start expiry,
    maintenance) restart it without counting."""
    queue_name: NotRequired[str]
    """The Kueue LocalQueue that admits the JobSet: on a queued pool, the pool's own (its name,
    the default); elsewhere a queue of your own Kueue, none by default."""


class TpuTrainingJobSet(TrainingWorkload):
    """A training run as a ``jobset.x-k8s.io`` JobSet: ``slices`` Indexed Jobs of one Pod per VM,
    one per multi-host slice, restarted together by JobSet when any worker fails. The JobSet
    controller must be installed in the cluster (``WorkloadEngines``).

    Children: ``{name}-workload-identity`` (IAM binding), ``{name}-ksa`` (ServiceAccount),
    ``{name}-run-parameters`` (ConfigMap of the run's variables), ``{name}-hosts`` (the headless
    Service JobSet would otherwise make itself), ``{name}-jobset`` (JobSet).
    """

    _TYPE = JOBSET_COMPONENT
    _OTHER_TYPE = JOB_COMPONENT
    _ARGS = TpuTrainingJobSetArgs

    slices: pulumi.Output[int]
    """Slices the JobSet spans."""

    def __init__(
        self, name: str, args: TpuTrainingJobSetArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__(name, args, opts)

    def _check(self, problems: Problems, name: str, args: Any) -> None:
        super()._check(problems, name, args)
        max_restarts = args.get("max_restarts", DEFAULT_MAX_RESTARTS)
        problems.check("max_restarts", count_problem(max_restarts, most=MAX_RESTARTS_LIMIT))
        queue = args.get("queue_name")
        if queue is not None:
            problems.check("queue_name", dns_label_problem("queue name", queue, 63))

    def _check_on(self, problems: Problems, pool: TpuNodePoolPlan, name: str, args: Any) -> None:
        slices = args.get("slices", 1)
        if not pool.multi_host:
            problems.add(
                "node_pool",
                f"node pool {pool.name!r} has single-host slices ({pool.shape.machine_type.name} "
                f"{pool.shape.topology}, 1 VM); a JobSet here takes multi-host slices only, as GKE's "
                f"Multislice does; use TpuTrainingJob for a single-host slice",
            )
        if not 1 <= slices <= pool.slices:
            problems.add(
                "slices",
                f"node pool {pool.name!r} holds {pool.slices} slice(s), so 1-{pool.slices} are allowed; "
                f"raise the pool's slices first",
                slices,
            )
        elif pool.queued_provisioning and slices > 1:
            # Kueue asks for a whole workload in one ProvisioningRequest, and GKE's queued
            # provisioning brings up node pools one request at a time; xpk stopped queueing
            # multislice flex-start (AI-Hypercomputer/xpk 7df05a95, "Don't set
            # --enable-queued-provisioning for flex multislice", #631), and Cluster Toolkit's
            # queued TPU examples run one slice per JobSet.
            problems.add(
                "slices",
                f"node pool {pool.name!r} has queued provisioning: a queued JobSet spans 1 slice here "
                f"(allowed: 1); run one JobSet per slice, or span slices on a pool without "
                f"queuedProvisioning",
                slices,
            )
        else:
            problems.check(
                "job_name", jobset_name_problem(args.get("job_name", name), slices, pool.shape.vms)
            )
        queue = args.get("queue_name")
        if pool.queue_name is not None and queue is not None and queue != pool.queue_name:
            problems.add(
                "queue_name",
                f"node pool {pool.name!r} has its own Kueue queue {pool.queue_name!r}, whose quota is its "
                f"chips; leave queue_name out (or give {pool.queue_name!r})",
                queue,
            )

    def _queue(self, args: Any, pool: TpuNodePoolPlan) -> Optional[str]:
        return args.get("queue_name", pool.queue_name)

    def _service_manifest(self, spec: TrainingJobSpec) -> Optional[dict[str, Any]]:
        return jobset_service_manifest(spec)

    def _declare_workload(
        self, name: str, args: Any, spec: TrainingJobSpec, opts: pulumi.ResourceOptions
    ) -> None:
        slices = args.get("slices", 1)
        manifest = jobset_manifest(
            TrainingJobSetSpec(
                job=spec, slices=slices, max_restarts=args.get("max_restarts", DEFAULT_MAX_RESTARTS)
            )
        )
        self.jobset = k8s.apiextensions.CustomResource(
            f"{name}-jobset",
            api_version=JOBSET_API_VERSION,
            kind=JOBSET_KIND,
            metadata=with_cause(manifest["metadata"], args.get("recovery_cause")),
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(
                    # JobSet's webhook refuses any change of replicatedJobs on a JobSet that is
                    # not suspended (pkg/webhooks/jobset_webhook.go ValidateUpdate, v0.12.0), and
                    # pulumi-kubernetes knows no replace-on-change field of a custom resource: a
                    # changed spec (image, command, slices) must re-create it, as a changed Pod
                    # template re-creates a Job. The run parameters are not in the spec.
                    replace_on_changes=["spec"],
                    # The run's Job, when it had one: replaced by this JobSet, the Job deleted first.
                    aliases=[pulumi.Alias(name=f"{name}-job", type_=JOB_RESOURCE)],
                ),
            ),
        )
        self.slices = pulumi.Output.from_input(slices)

    def _outputs(self) -> dict[str, Any]:
        return {"slices": self.slices}
