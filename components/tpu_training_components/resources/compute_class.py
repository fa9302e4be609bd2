"""The custom ComputeClass of a TPU node pool with a capacity ladder: GKE tries the rungs' node
pools in the ladder's order (``domain.compute_class``)."""

from typing import Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import with_config
from typing_extensions import NotRequired, TypedDict

from ..domain.compute_class import COMPUTE_CLASS_API_VERSION, compute_class_manifest
from ..validation import ARGUMENTS, check_arguments, kubernetes_labels
from .tpu_node_pool import TpuNodePoolSelection, plan_selection


@with_config(ARGUMENTS)
class TpuComputeClassArgs(TypedDict):
    provider: k8s.Provider
    """Kubernetes provider of the cluster (``GkeTpuCluster.provider``)."""
    node_pool: TpuNodePoolSelection
    """The pool (``FlexStartTpuNodePool.selection`` of a pool with a ``ladder``): its TPU, zones,
    rungs and node lifetime make the class's priority rules."""
    labels: NotRequired[Mapping[str, str]]
    """Labels on the ComputeClass, besides the project's own."""


class TpuComputeClass(pulumi.ComponentResource):
    """A ``cloud.google.com/v1`` ComputeClass named after a pool with a ladder, one priority rule
    per rung in the ladder's order, ``whenUnsatisfiable: DoNotScaleUp``, no node pool
    auto-creation and no active migration (``domain.compute_class`` says why). The pool's Jobs
    select it by ``cloud.google.com/compute-class``; declare them with ``depends_on`` this.

    Children: ``{name}-class`` (``kubernetes:cloud.google.com/v1:ComputeClass``).
    """

    class_name: pulumi.Output[str]
    """The ComputeClass's name: the Pods' ``cloud.google.com/compute-class`` selector."""
    rungs: pulumi.Output[list[str]]
    """The capacities GKE tries, in order."""

    def __init__(
        self, name: str, args: TpuComputeClassArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        problems = check_arguments("TpuComputeClass", name, args, TpuComputeClassArgs, opts)
        kubernetes_labels(problems, args.get("labels", {}))
        pool = plan_selection(problems, args["node_pool"])
        if pool.compute_class is None:
            problems.add(
                "node_pool",
                f"node pool {pool.name!r} has no ladder; a ComputeClass is for a pool of two or more "
                f"capacities (its ladder)",
            )
        problems.raise_any()
        super().__init__("tpu-training:gke:TpuComputeClass", name, {}, opts)
        manifest = compute_class_manifest(pool, args.get("labels"))
        self.compute_class = k8s.apiextensions.CustomResource(
            f"{name}-class",
            api_version=COMPUTE_CLASS_API_VERSION,
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args["provider"]),
        )
        self.class_name = pulumi.Output.from_input(manifest["metadata"]["name"])
        self.rungs = pulumi.Output.from_input(list(pool.ladder))
        self.register_outputs({"class_name": self.class_name, "rungs": self.rungs})
