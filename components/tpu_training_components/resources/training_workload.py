"""What a training Job and a training JobSet share: their arguments, their validation, and the
objects that outlive any one workload of a run (its Workload Identity binding, Kubernetes service
account, run-parameters ConfigMap and headless Service), declared once here.

A run may change kind (``slices`` 1 -> 2 turns a Job into a JobSet, and back). Both components
alias each other's type, so the engine finds a run's objects at the URN they were deployed at and
diffs them instead of creating new ones under the new component and deleting the old ones (for
Kubernetes objects of the same name that is an ``AlreadyExists`` error, or the old delete
removing the new object; for the IAM binding, the delete revoking what the new Pods need). The
engine carries a component's alias to every child (pulumi/pulumi v3.259.0
pkg/resource/deploy/step_generator.go ``generateAliases``, ``inheritedChildAlias``), and the
workload itself aliases the other kind's workload, so that it is *replaced*, the old one deleted
first (delete_before_replace), instead of a new workload created beside the old one, which still
holds the slice, and the old one deleted at the end of the update.
"""

from typing import Any, ClassVar, Mapping, Optional, Sequence

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.job_manifests import (
    TrainingJobSpec,
    image_problem,
    job_name_problem,
    namespace_problem,
    run_parameters_manifest,
    service_account_manifest,
)
from ..domain.jobset_manifests import JOBSET_API_VERSION, JOBSET_KIND
from ..domain.naming import generation_problem
from ..domain.node_pool_plan import TpuNodePoolPlan
from ..domain.recovery import CAUSE_ANNOTATION, cause_problem
from ..domain.startup_script import CHECKPOINT_VARIABLE
from ..domain.termination_grace import GKE_MAX_HONOURED_GRACE_SECONDS
from ..validation import (
    ARGUMENTS,
    Problems,
    check_arguments,
    checkpoint_places,
    count_problem,
    kubernetes_labels,
)
from .tpu_node_pool import TpuNodePoolSelection, plan_selection

JOB_COMPONENT = "tpu-training:gke:TpuTrainingJob"
JOBSET_COMPONENT = "tpu-training:gke:TpuTrainingJobSet"
JOB_RESOURCE = "kubernetes:batch/v1:Job"
JOBSET_RESOURCE = f"kubernetes:{JOBSET_API_VERSION}:{JOBSET_KIND}"
"""The Pulumi types of the two workloads (a CustomResource's is built from its apiVersion and kind)."""


@with_config(ARGUMENTS)
class TpuTrainingJobArgs(TypedDict):
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    node_pool: TpuNodePoolSelection
    """The pool whose slices the run uses (``FlexStartTpuNodePool.selection``): its shape, its
    capacity type and its GKE node pools decide where the Pods go. On a queued pool the workload
    goes through the pool's Kueue queue (``QueuedProvisioning``), which must serve its namespace."""
    image: str
    """Container image of the trainer."""
    command: Sequence[str]
    """The training command; it must resume from the latest checkpoint in ``CHECKPOINT_DIR``."""
    checkpoint_dir: str
    """``gs://`` prefix for this run's checkpoints; keep it stable across re-creations."""
    google_service_account: pulumi.Input[str]
    """Email of the Google service account the Pods act as (Workload Identity)."""
    google_service_account_id: pulumi.Input[str]
    """Its resource id (``projects/P/serviceAccounts/EMAIL``), to grant the binding on."""
    workload_pool: pulumi.Input[str]
    """The cluster's Workload Identity pool (``GkeTpuCluster.workload_pool``)."""
    namespace: NotRequired[str]
    """Kubernetes namespace (default ``default``); it must exist."""
    job_name: NotRequired[str]
    """Name of the Job or JobSet (and of its service account and Service); the component's name
    when omitted."""
    environment: NotRequired[Mapping[str, str]]
    """Variables for the trainer (``GLOBAL_BATCH_SIZE``, ``TRAIN_STEPS``, ...). They reach the
    Pods through the ConfigMap ``{job_name}-run-parameters``, read when a container starts: a
    change updates it in place and applies from the Pods' next start, without replacing a
    running workload."""
    recovery_generation: NotRequired[pulumi.Input[int]]
    """Bumped to re-create the workload (see ``job_recovery``); default 0."""
    recovery_cause: NotRequired[pulumi.Input[str]]
    """Why recovery last re-created it (``TrainingRecovery.job_cause``): written into the
    ``tpu-training/recovery-cause`` annotation of the Job or JobSet itself (not its Pod template,
    so it never restarts a running workload); "" or omitted writes none."""
    privileged: NotRequired[bool]
    """Run the trainer privileged, as GKE's flex-start training page's multi-host example does
    (default False: the TPU device plugin exposes the chips without it on current GKE)."""
    labels: NotRequired[Mapping[str, str]]
    """Kubernetes labels on every object, besides the project's own."""
    termination_grace_seconds: NotRequired[int]
    """How long a Pod told to stop may take to save before it is killed
    (``terminationGracePeriodSeconds``, 0-3600): the checkpoint's time with a margin
    (``domain.termination_grace.pod_grace_seconds(cost_seconds)`` suggests one). Kubernetes' 30 s
    when omitted.
    Part of the Pod template: a change replaces a running workload."""


def with_cause(metadata: dict[str, Any], cause: Optional[pulumi.Input[str]]) -> dict[str, Any]:
    """The workload's own metadata with the recovery cause annotation, only when there is a cause
    (a workload never recovered keeps the metadata it had)."""
    if cause is None:
        return metadata
    annotations = dict(metadata.get("annotations") or {})
    return {
        **metadata,
        "annotations": pulumi.Output.from_input(cause).apply(
            lambda word: {**annotations, **({CAUSE_ANNOTATION: word} if word else {})}
        ),
    }


class TrainingWorkload(pulumi.ComponentResource):
    """The base of ``TpuTrainingJob`` and ``TpuTrainingJobSet``: it checks the arguments, declares
    the run's identity, ConfigMap and Service, and leaves the workload to the subclass.

    Children: ``{name}-workload-identity`` (IAM binding), ``{name}-ksa`` (ServiceAccount),
    ``{name}-run-parameters`` (ConfigMap of the run's variables), ``{name}-hosts`` (headless
    Service of a multi-host run), and the subclass's workload.
    """

    _TYPE: ClassVar[str]
    """The component's type token (never changes)."""
    _OTHER_TYPE: ClassVar[str]
    """The other kind's type token, which this one aliases."""
    _ARGS: ClassVar[Any]
    """The arguments' ``TypedDict``."""

    job_name: pulumi.Output[str]
    """Name of the workload (and of its service account and Service)."""
    namespace: pulumi.Output[str]
    """Kubernetes namespace of the workload."""
    recovery_generation: pulumi.Output[int]
    """The generation declared: it changes only when `pulumi up` re-creates the workload."""
    checkpoint_uri: pulumi.Output[str]
    """Where the run's checkpoints are (``gs://``); it outlives every workload of its name."""

    def __init__(self, name: str, args: Any, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        problems = check_arguments(self._TYPE.rsplit(":", 1)[-1], name, args, self._ARGS, opts)
        self._check(problems, name, args)
        pool = plan_selection(problems, args["node_pool"])
        self._check_on(problems, pool, name, args)
        problems.raise_any()
        super().__init__(
            self._TYPE,
            name,
            {},
            pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=self._OTHER_TYPE)])
            ),
        )
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
            chips_per_vm=pool.shape.machine_type.chips_per_vm,
            vms=pool.shape.vms,
            service_account=job_name,
            generation=generation.apply(str),
            # The run's checkpoints outlive every workload of its name: that is how a new one resumes.
            env={CHECKPOINT_VARIABLE: args["checkpoint_dir"]},
            run_parameters=run_parameters,
            privileged=args.get("privileged", False),
            labels=dict(args.get("labels", {})),
            # On a queued pool: Kueue admits the workload through the pool's queue, and its Pods
            # tolerate the taint GKE puts on the nodes it provisions for them.
            queue=self._queue(args, pool),
            tolerations=pool.tolerations,
            termination_grace_seconds=args.get("termination_grace_seconds"),
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args["provider"])

        # Only this run's Kubernetes service account may act as the Google one.
        self.binding = gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity",
            service_account_id=args["google_service_account_id"],
            role="roles/iam.workloadIdentityUser",
            member=pulumi.Output.concat(
                "serviceAccount:", args["workload_pool"], f"[{namespace}/{job_name}]"
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.service_account = declare(
            k8s.core.v1.ServiceAccount,
            f"{name}-ksa",
            service_account_manifest(spec, args["google_service_account"]),
            on_cluster,
        )
        # Updated in place on a change of its data: the provider GkeTpuCluster makes has
        # enableConfigMapMutable (without it, pulumi-kubernetes replaces a ConfigMap whose data
        # changes, provider/pkg/provider/diff.go forceNewProperties). The workload names it by a
        # plain string, not an output of this resource: were the ConfigMap ever replaced, the
        # engine re-creates only dependents with an input taken from it (pkg/resource/deploy/
        # step_generator.go calculateDependentReplacements), so a depends_on edge keeps the workload.
        self.run_parameters = declare(
            k8s.core.v1.ConfigMap, f"{name}-run-parameters", run_parameters_manifest(spec), on_cluster
        )
        # The Pods' DNS subdomain, named after the run: the same object whichever kind runs it,
        # its selector following the kind (updated in place).
        service = self._service_manifest(spec)
        self.service = (
            declare(k8s.core.v1.Service, f"{name}-hosts", service, on_cluster)
            if service is not None
            else None
        )
        self._declare_workload(
            name,
            args,
            spec,
            pulumi.ResourceOptions.merge(
                on_cluster,
                pulumi.ResourceOptions(
                    # The Pods must be able to reach their checkpoints, read their parameters and
                    # find each other from the first step.
                    depends_on=[
                        self.binding,
                        self.service_account,
                        self.run_parameters,
                        *([self.service] if self.service is not None else []),
                    ],
                    # A new generation re-creates the workload: that is how `pulumi up` recovers it.
                    replacement_trigger=generation,
                    # Its name is fixed: the old workload goes before the new one comes.
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
                **self._outputs(),
            }
        )

    def _check(self, problems: Problems, name: str, args: Any) -> None:
        """Add every problem with the values of the arguments both kinds take."""
        problems.check("job_name", job_name_problem(args.get("job_name", name)))
        if not args["command"] or not args["command"][0].strip():
            problems.add(
                "command",
                "has no program to run; give the training command as a list of words, the program first",
                args["command"],
            )
        problems.check("image", image_problem(args["image"]))
        problems.check("namespace", namespace_problem(args.get("namespace", "default")))
        checkpoint_places(problems, args["checkpoint_dir"], args.get("environment", {}))
        generation = args.get("recovery_generation", 0)
        # It becomes the Pods' `recovery-generation` label value, which recovery reads back (an
        # Output, or other awaitable, is checked by nobody: its value is not known yet).
        if isinstance(generation, int):
            problems.check("recovery_generation", count_problem(generation) or generation_problem(generation))
        cause = args.get("recovery_cause", "")
        if isinstance(cause, str):
            problems.check("recovery_cause", cause_problem(cause))
        kubernetes_labels(problems, args.get("labels", {}))
        if "termination_grace_seconds" in args:
            problems.check(
                "termination_grace_seconds",
                count_problem(args["termination_grace_seconds"], most=GKE_MAX_HONOURED_GRACE_SECONDS),
            )

    def _check_on(self, problems: Problems, pool: TpuNodePoolPlan, name: str, args: Any) -> None:
        """Add every problem with the arguments on the pool ``pool`` (a subclass's own)."""

    def _queue(self, args: Any, pool: TpuNodePoolPlan) -> Optional[str]:
        """The Kueue LocalQueue that admits the workload: the pool's own on a queued pool."""
        return pool.queue_name

    def _service_manifest(self, spec: TrainingJobSpec) -> Optional[dict[str, Any]]:
        """The run's headless Service, or None when its Pods need none."""
        raise NotImplementedError

    def _declare_workload(
        self, name: str, args: Any, spec: TrainingJobSpec, opts: pulumi.ResourceOptions
    ) -> None:
        """Declare the workload itself (a Job, a JobSet) with ``opts``."""
        raise NotImplementedError

    def _outputs(self) -> dict[str, Any]:
        """The subclass's own outputs, registered with the shared ones."""
        return {}


def declare(kind: Any, name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions) -> Any:
    """A pulumi-kubernetes resource from a manifest built by ``job_manifests``."""
    fields = {key: manifest[key] for key in ("metadata", "spec", "data") if key in manifest}
    return kind(name, **fields, opts=opts)
