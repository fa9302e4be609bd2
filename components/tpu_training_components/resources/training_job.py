"""A Kubernetes training Job on a TPU node pool, re-created by `pulumi up` when it has failed."""

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from ..domain.job_manifests import TrainingJobSpec, headless_service_manifest, job_manifest
from .training_workload import (
    JOB_COMPONENT,
    JOBSET_COMPONENT,
    JOBSET_RESOURCE,
    TpuTrainingJobArgs,
    TrainingWorkload,
    declare,
    with_cause,
)

__all__ = ["TpuTrainingJob", "TpuTrainingJobArgs"]


class TpuTrainingJob(TrainingWorkload):
    """A training Job on a TPU slice: a single-host ``batch/v1`` Job, or for a multi-host slice a
    headless Service and an Indexed Job of one Pod per VM (GKE's flex-start training page), with a
    Kubernetes service account bound to a Google one by Workload Identity.

    Children: ``{name}-workload-identity`` (IAM binding), ``{name}-ksa`` (ServiceAccount),
    ``{name}-hosts`` (headless Service, multi-host only), ``{name}-run-parameters`` (ConfigMap of
    the run's variables), ``{name}-job`` (Job).
    """

    _TYPE = JOB_COMPONENT
    _OTHER_TYPE = JOBSET_COMPONENT
    _ARGS = TpuTrainingJobArgs

    def __init__(
        self, name: str, args: TpuTrainingJobArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__(name, args, opts)

    def _service_manifest(self, spec: TrainingJobSpec) -> Optional[dict[str, Any]]:
        # The Service's selector names the Job, not one generation of it: it stays across
        # replacements, and the new Pods get their DNS names again at once.
        return headless_service_manifest(spec) if spec.multi_host else None

    def _declare_workload(
        self, name: str, args: Any, spec: TrainingJobSpec, opts: pulumi.ResourceOptions
    ) -> None:
        manifest = job_manifest(spec)
        self.job = declare(
            k8s.batch.v1.Job,
            f"{name}-job",
            {**manifest, "metadata": with_cause(manifest["metadata"], args.get("recovery_cause"))},
            # The run's JobSet, when it had one: replaced by this Job, the JobSet deleted first.
            pulumi.ResourceOptions.merge(
                opts,
                pulumi.ResourceOptions(aliases=[pulumi.Alias(name=f"{name}-jobset", type_=JOBSET_RESOURCE)]),
            ),
        )
