"""A training run as a JobSet on one or several multi-host TPU slices, gang-restarted by JobSet in
the cluster and re-created by `pulumi up` once JobSet gives up."""

from typing import Any, Mapping, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from typing_extensions import NotRequired

from ..domain.job_manifests import TrainingJobSpec, run_parameters_manifest, service_account_manifest
from ..domain.jobset_manifests import (
    DEFAULT_MAX_RESTARTS,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    MAX_RESTARTS_LIMIT,
    TrainingJobSetSpec,
    jobset_manifest,
    jobset_name_problem,
)
from ..domain.naming import dns_label_problem
from ..errors import (
    CHECKPOINT_VARIABLE,
    InvalidArgument,
    check_known,
    check_resource_name,
    check_whole_number,
)
from .tpu_node_pool import TpuNodePoolSelection
from .training_job import TpuTrainingJobArgs, _declare, _validate


class TpuTrainingJobSetArgs(TypedDict):
    # The Job's arguments, each with its docstring (the component schema reads them from here).
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    node_pool: TpuNodePoolSelection
    """The pool whose slice the JobSet runs on (``FlexStartTpuNodePool.selection``): its shape, its
    capacity type and its GKE node pools decide where the Pods go. On a queued pool the JobSet
    goes through the pool's Kueue queue (``QueuedProvisioning``), which must serve its namespace."""
    image: str
    """Container image of the trainer."""
    command: Sequence[str]
    """The training command; it must resume from the latest checkpoint in ``CHECKPOINT_DIR``."""
    checkpoint_dir: str
    """``gs://`` prefix for this Job's checkpoints; keep it stable across re-creations."""
    google_service_account: pulumi.Input[str]
    """Email of the Google service account the Pods act as (Workload Identity)."""
    google_service_account_id: pulumi.Input[str]
    """Its resource id (``projects/P/serviceAccounts/EMAIL``), to grant the binding on."""
    workload_pool: pulumi.Input[str]
    """The cluster's Workload Identity pool (``GkeTpuCluster.workload_pool``)."""
    namespace: NotRequired[str]
    """Kubernetes namespace (default ``default``); it must exist."""
    job_name: NotRequired[str]
    """Name of the Job (and its service account and Service); the component's name when omitted."""
    environment: NotRequired[Mapping[str, str]]
    """Variables for the trainer (``GLOBAL_BATCH_SIZE``, ``TRAIN_STEPS``, ...). They reach the
    Pods through the ConfigMap ``{job_name}-run-parameters``, read when a container starts: a
    change updates it in place and applies from the Pods' next start, without replacing a
    running Job."""
    recovery_generation: NotRequired[pulumi.Input[int]]
    """Bumped to re-create the Job (see ``job_recovery``); default 0."""
    privileged: NotRequired[bool]
    """Run the trainer privileged, as GKE's flex-start training page's multi-host example does (default "
    "False: the
    TPU device plugin exposes the chips without it on current GKE)."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on every object, besides the project's own."""
    # What only a JobSet takes.
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


def _check(name: str, args: TpuTrainingJobSetArgs) -> tuple[Any, int]:
    where = f"TpuTrainingJobSet {name!r}"
    check_known(where, args, TpuTrainingJobSetArgs.__annotations__)
    job_keys = TpuTrainingJobArgs.__annotations__
    job_args = {key: value for key, value in args.items() if key in job_keys}
    pool = _validate(name, job_args)  # type: ignore[arg-type]
    slices = args.get("slices", 1)
    check_whole_number(where, "slices", slices)
    max_restarts = args.get("max_restarts", DEFAULT_MAX_RESTARTS)
    check_whole_number(where, "max_restarts", max_restarts)
    if not pool.multi_host:
        raise InvalidArgument(
            f"{where}: node pool {pool.name!r} has single-host slices ({pool.shape.machine_type.name} "
            f"{pool.shape.topology}, 1 VM); a JobSet here takes multi-host slices only, as GKE's "
            f"Multislice does; use TpuTrainingJob for a single-host slice"
        )
    if not 1 <= slices <= pool.slices:
        raise InvalidArgument(
            f"{where}: slices = {slices}; node pool {pool.name!r} holds {pool.slices} slice(s), so "
            f"1-{pool.slices} are allowed; raise the pool's slices first"
        )
    if max_restarts > MAX_RESTARTS_LIMIT:
        raise InvalidArgument(f"{where}: max_restarts = {max_restarts}; allowed: 0-{MAX_RESTARTS_LIMIT}")
    problem = jobset_name_problem(args.get("job_name", name), slices, pool.shape.vms)
    if problem:
        raise InvalidArgument(f"{where}: {problem}")
    queue = args.get("queue_name")
    if queue is not None:
        problem = dns_label_problem("queue name", queue, 63)
        if problem:
            raise InvalidArgument(f"{where}: {problem}")
    if pool.queued_provisioning:
        if queue is not None and queue != pool.queue_name:
            raise InvalidArgument(
                f"{where}: queue_name = {queue!r}; node pool {pool.name!r} has queued provisioning, "
                f"and only its own queue {pool.queue_name!r} asks GKE for its nodes; leave "
                f"queue_name out (or give {pool.queue_name!r})"
            )
        if slices > 1:
            # Kueue asks for a whole workload in one ProvisioningRequest, and GKE's queued
            # provisioning brings up node pools one request at a time; xpk stopped queueing
            # multislice flex-start (AI-Hypercomputer/xpk 7df05a95, "Don't set
            # --enable-queued-provisioning for flex multislice", #631), and Cluster Toolkit's
            # queued TPU examples run one slice per JobSet.
            raise InvalidArgument(
                f"{where}: slices = {slices} on node pool {pool.name!r}, which has queued "
                f"provisioning: a queued JobSet spans 1 slice here (allowed: 1); run one JobSet per "
                f"slice, or span slices on a pool without queuedProvisioning"
            )
    return pool, slices


class TpuTrainingJobSet(pulumi.ComponentResource):
    """A training run as a ``jobset.x-k8s.io`` JobSet: ``slices`` Indexed Jobs of one Pod per VM,
    one per multi-host slice, restarted together by JobSet when any worker fails. The JobSet
    controller must be installed in the cluster (``WorkloadEngines``).

    Children: ``{name}-workload-identity`` (IAM binding), ``{name}-ksa`` (ServiceAccount),
    ``{name}-run-parameters`` (ConfigMap of the run's variables), ``{name}-jobset`` (JobSet; its
    headless Service is JobSet's own).
    """

    job_name: pulumi.Output[str]
    """Name of the JobSet (and of its service account and Service)."""
    namespace: pulumi.Output[str]
    """Kubernetes namespace of the JobSet."""
    slices: pulumi.Output[int]
    """Slices the JobSet spans."""
    recovery_generation: pulumi.Output[int]
    """The generation declared: it changes only when `pulumi up` re-creates the JobSet."""
    checkpoint_uri: pulumi.Output[str]
    """Where the run's checkpoints are (``gs://``); it outlives every JobSet of its name."""

    def __init__(
        self, name: str, args: TpuTrainingJobSetArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        check_resource_name("TpuTrainingJobSet", name, opts)
        pool, slices = _check(name, args)
        super().__init__("tpu-training:gke:TpuTrainingJobSet", name, {}, opts)
        job_name = args.get("job_name", name)
        namespace = args.get("namespace", "default")
        generation = pulumi.Output.from_input(args.get("recovery_generation", 0))
        # As for a Job: only the checkpoint directory is in the Pod template; the run parameters
        # come from the ConfigMap, so tuning them leaves the JobSet as it is.
        run_parameters = {k: v for k, v in args.get("environment", {}).items() if k != CHECKPOINT_VARIABLE}
        job = TrainingJobSpec(
            name=job_name,
            namespace=namespace,
            image=args["image"],
            command=tuple(args["command"]),
            node_selector=pool.node_selector,
            node_pool=pool.name,
            chips_per_vm=pool.shape.machine_type.chips_per_vm,
            vms=pool.shape.vms,
            service_account=job_name,
            generation=generation.apply(str),
            env={CHECKPOINT_VARIABLE: args["checkpoint_dir"]},
            run_parameters=run_parameters,
            privileged=args.get("privileged", False),
            labels=dict(args.get("labels", {})),
            # On a queued pool: the pool's queue, and the taint GKE puts on its nodes tolerated.
            queue=args.get("queue_name", pool.queue_name),
            tolerations=pool.tolerations,
        )
        spec = TrainingJobSetSpec(
            job=job, slices=slices, max_restarts=args.get("max_restarts", DEFAULT_MAX_RESTARTS)
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args["provider"])

        self.binding = gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity",
            service_account_id=args["google_service_account_id"],
            role="roles/iam.workloadIdentityUser",
            member=pulumi.Output.concat(
                "serviceAccount:", args["workload_pool"], f"[{namespace}/{job_name}]"
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.service_account = _declare(
            k8s.core.v1.ServiceAccount,
            f"{name}-ksa",
            service_account_manifest(job, args["google_service_account"]),
            on_cluster,
        )
        self.run_parameters = _declare(
            k8s.core.v1.ConfigMap, f"{name}-run-parameters", run_parameters_manifest(job), on_cluster
        )
        manifest = jobset_manifest(spec)
        self.jobset = k8s.apiextensions.CustomResource(
            f"{name}-jobset",
            api_version=JOBSET_API_VERSION,
            kind=JOBSET_KIND,
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions.merge(
                on_cluster,
                pulumi.ResourceOptions(
                    depends_on=[self.binding, self.service_account, self.run_parameters],
                    # A new generation re-creates the JobSet: how `pulumi up` recovers it.
                    replacement_trigger=generation,
                    # JobSet's webhook refuses any change of replicatedJobs on a JobSet that is
                    # not suspended (pkg/webhooks/jobset_webhook.go ValidateUpdate, v0.12.0), and
                    # pulumi-kubernetes knows no replace-on-change field of a custom resource: a
                    # changed spec (image, command, slices) must re-create it, as a changed Pod
                    # template re-creates a Job. The run parameters are not in the spec.
                    replace_on_changes=["spec"],
                    # Its name is fixed: the old JobSet goes before the new one comes.
                    delete_before_replace=True,
                ),
            ),
        )
        self.job_name = pulumi.Output.from_input(job_name)
        self.namespace = pulumi.Output.from_input(namespace)
        self.slices = pulumi.Output.from_input(slices)
        self.recovery_generation = generation
        self.checkpoint_uri = pulumi.Output.from_input(args["checkpoint_dir"])
        self.register_outputs(
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "slices": self.slices,
                "recovery_generation": self.recovery_generation,
                "checkpoint_uri": self.checkpoint_uri,
            }
        )
