"""A Kubernetes training Job on a TPU node pool, re-created by `pulumi up` when it has failed."""

from typing import Any, Mapping, Optional, Sequence, TypedDict

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from typing_extensions import NotRequired

from ..domain.job_manifests import (
    TrainingJobSpec,
    headless_service_manifest,
    image_problem,
    job_manifest,
    job_name_problem,
    namespace_problem,
    run_parameters_manifest,
    service_account_manifest,
)
from ..domain.node_pool_plan import TpuNodePoolPlan
from ..errors import (
    CHECKPOINT_VARIABLE,
    InvalidArgument,
    check_checkpoint_dir,
    check_environment,
    check_known,
    check_labels,
    check_resource_name,
    check_whole_number,
)
from .tpu_node_pool import TpuNodePoolSelection, plan_selection


class TpuTrainingJobArgs(TypedDict):
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    node_pool: TpuNodePoolSelection
    """The pool whose slice the Job runs on (``FlexStartTpuNodePool.selection``): its shape, its
    capacity type and its GKE node pools decide where the Pods go. On a queued pool the Job goes
    through the pool's Kueue queue (``QueuedProvisioning``), which must serve its namespace."""
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


def _validate(name: str, args: TpuTrainingJobArgs) -> TpuNodePoolPlan:
    where = f"TpuTrainingJob {name!r}"
    check_known(where, args, TpuTrainingJobArgs.__annotations__)
    pool = plan_selection(where, args["node_pool"])
    problem = job_name_problem(args.get("job_name", name))
    if problem:
        raise InvalidArgument(f"{where}: {problem}")
    if not args["command"] or not args["command"][0].strip():
        raise InvalidArgument(
            f"{where}: command {list(args['command'])!r} has no program to run; give the training "
            f"command as a list of words, the program first"
        )
    for problem in (image_problem(args["image"]), namespace_problem(args.get("namespace", "default"))):
        if problem:
            raise InvalidArgument(f"{where}: {problem}")
    check_checkpoint_dir(where, args["checkpoint_dir"])
    check_environment(where, args.get("environment", {}), args["checkpoint_dir"])
    check_whole_number(where, "recovery_generation", args.get("recovery_generation", 0))
    check_labels(where, args.get("labels", {}))
    return pool


class TpuTrainingJob(pulumi.ComponentResource):
    """A training Job on a TPU slice: a single-host ``batch/v1`` Job, or for a multi-host slice a
    headless Service and an Indexed Job of one Pod per VM (GKE's flex-start training page), with a
    Kubernetes service
    account bound to a Google one by Workload Identity.

    Children: ``{name}-workload-identity`` (IAM binding), ``{name}-ksa`` (ServiceAccount),
    ``{name}-hosts`` (headless Service, multi-host only), ``{name}-run-parameters`` (ConfigMap of
    the run's variables), ``{name}-job`` (Job).
    """

    job_name: pulumi.Output[str]
    """Name of the Job (and of its service account and Service)."""
    namespace: pulumi.Output[str]
    """Kubernetes namespace of the Job."""
    recovery_generation: pulumi.Output[int]
    """The generation declared: it changes only when `pulumi up` re-creates the Job."""
    checkpoint_uri: pulumi.Output[str]
    """Where the Job's checkpoints are (``gs://``); it outlives every Job of its name."""

    def __init__(
        self, name: str, args: TpuTrainingJobArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        check_resource_name("TpuTrainingJob", name, opts)
        pool = _validate(name, args)
        super().__init__("tpu-training:gke:TpuTrainingJob", name, {}, opts)
        shape = pool.shape
        job_name = args.get("job_name", name)
        namespace = args.get("namespace", "default")
        generation = pulumi.Output.from_input(args.get("recovery_generation", 0))
        # The checkpoint directory names the run, so it is written into the Pod template: a
        # change of it is a new run. Everything else is a run parameter, read from a ConfigMap at
        # container start, so tuning it never changes the template (pulumi-kubernetes replaces a
        # Job whose .spec.template changes, provider/pkg/provider/diff.go `job`).
        run_parameters = {k: v for k, v in args.get("environment", {}).items() if k != CHECKPOINT_VARIABLE}
        spec = TrainingJobSpec(
            name=job_name,
            namespace=namespace,
            image=args["image"],
            command=tuple(args["command"]),
            node_selector=pool.node_selector,
            node_pool=pool.name,
            chips_per_vm=shape.machine_type.chips_per_vm,
            vms=shape.vms,
            service_account=job_name,
            generation=generation.apply(str),
            # The Job's checkpoints outlive every Job of its name: that is how a new one resumes.
            env={CHECKPOINT_VARIABLE: args["checkpoint_dir"]},
            run_parameters=run_parameters,
            privileged=args.get("privileged", False),
            labels=dict(args.get("labels", {})),
            # On a queued pool: Kueue admits the Job through the pool's queue, and its Pods
            # tolerate the taint GKE puts on the nodes it provisions for them.
            queue=pool.queue_name,
            tolerations=pool.tolerations,
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args["provider"])

        # Only this Job's Kubernetes service account may act as the Google one.
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
            service_account_manifest(spec, args["google_service_account"]),
            on_cluster,
        )
        # The Service's selector names the Job, not one generation of it: it stays across
        # replacements, and the new Pods get their DNS names again at once.
        self.service = (
            _declare(k8s.core.v1.Service, f"{name}-hosts", headless_service_manifest(spec), on_cluster)
            if spec.multi_host
            else None
        )
        # Updated in place on a change of its data: the provider GkeTpuCluster makes has
        # enableConfigMapMutable (without it, pulumi-kubernetes replaces a ConfigMap whose data
        # changes, provider/pkg/provider/diff.go forceNewProperties). The Job names it by a plain
        # string, not an output of this resource: were the ConfigMap ever replaced, the engine
        # re-creates only dependents with an input taken from it (pkg/resource/deploy/
        # step_generator.go calculateDependentReplacements), so a depends_on edge keeps the Job.
        self.run_parameters = _declare(
            k8s.core.v1.ConfigMap, f"{name}-run-parameters", run_parameters_manifest(spec), on_cluster
        )
        self.job = _declare(
            k8s.batch.v1.Job,
            f"{name}-job",
            job_manifest(spec),
            pulumi.ResourceOptions.merge(
                on_cluster,
                pulumi.ResourceOptions(
                    # The Pods must be able to reach their checkpoints, and read their
                    # parameters, from the first step.
                    depends_on=[self.binding, self.service_account, self.run_parameters],
                    # A new generation re-creates the Job: that is how `pulumi up` recovers it.
                    replacement_trigger=generation,
                    # The Job's name is fixed, so the old Job must go before the new one comes.
                    delete_before_replace=True,
                ),
            ),
        )
        self.job_name = pulumi.Output.from_input(job_name)
        self.namespace = pulumi.Output.from_input(namespace)
        self.recovery_generation = generation
        self.checkpoint_uri = pulumi.Output.from_input(args["checkpoint_dir"])
        self.register_outputs(
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "recovery_generation": self.recovery_generation,
                "checkpoint_uri": self.checkpoint_uri,
            }
        )


def _declare(kind: Any, name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions) -> Any:
    """A pulumi-kubernetes resource from a manifest built by ``job_manifests``."""
    fields = {key: manifest[key] for key in ("metadata", "spec", "data") if key in manifest}
    return kind(name, **fields, opts=opts)
