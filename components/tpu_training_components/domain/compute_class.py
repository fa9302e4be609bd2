"""The custom ComputeClass of a TPU node pool with a capacity ladder, as a plain dictionary.

Pure Python with no Pulumi import, like ``kueue_manifests``: the ``TpuComputeClass`` component
hands it to pulumi-kubernetes. A pool with ``ladder`` (``[spot, flex-start]``, say) gets one
``cloud.google.com/v1`` ComputeClass named after it, whose ``priorities`` are the rungs in order,
and one set of node pools per rung (``TpuNodePoolPlan.rungs``) labelled and tainted
``cloud.google.com/compute-class: <pool>``. Its Pods select the class, not a capacity, and the
cluster autoscaler scales up the pools of the first rung that has capacity.

What GKE documents and this module relies on (GKE "About custom ComputeClasses",
concepts/about-custom-compute-classes, and the ComputeClass CRD reference, reference/crds/
computeclass, read 2026-11-28; the CRD's schema as GKE 1.33 serves it, in datreeio/CRDs-catalog
``cloud.google.com/computeclass_v1.json`` at 7b1e26ef9deea49293714d204c1a2270aab1178f):

- custom ComputeClasses exist from GKE 1.30.3-gke.1451000 (``COMPUTE_CLASS_MIN_GKE_VERSION``); a
  TPU flex-start pool already needs 1.33.0-gke.1712000, which every stack's cluster is held to;
- a priority rule describes a TPU by ``tpu: {type, count, topology}`` (``count``: "preferred count
  of TPU chips for a node", so chips per VM), and its capacity by ``spot``, ``flexStart: {enabled}``
  ("Flex Start provisioning model is incompatible with Spot", a CEL rule of the CRD) and
  ``reservations: {affinity: Specific | AnyBestEffort | None, specific: [{name}]}`` ("At least 1
  specific reservation required for specific affinity"); ``location.zones`` and
  ``maxRunDurationSeconds`` narrow it;
- a rule that names ``nodepools`` may hold nothing else ("Nodepool field cannot be set along with
  other fields"): the rules here describe the capacity instead, which the rung's pools match;
- ``whenUnsatisfiable`` is required (``ScaleUpAnyway`` | ``DoNotScaleUp``);
  ``nodePoolAutoCreation.enabled`` defaults to false; ``activeMigration.optimizeRulePriority``
  is required inside ``activeMigration``;
- there is no field for queued provisioning: a ladder has no ``flex-start-queued`` rung
  (``node_pool_plan._check_ladder``).

Nothing here has run on a GKE cluster.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .job_manifests import PART_OF, PART_OF_LABEL
from .node_pool_plan import TpuNodePoolPlan

COMPUTE_CLASS_API_VERSION = "cloud.google.com/v1"
COMPUTE_CLASS_KIND = "ComputeClass"
COMPUTE_CLASS_MIN_GKE_VERSION = "1.30.3-gke.1451000"
"""GKE "About custom ComputeClasses": "available to use in GKE Autopilot mode and GKE Standard mode
in version 1.30.3-gke.1451000 and later"."""

WHEN_UNSATISFIABLE = "DoNotScaleUp"
"""When no rung has capacity, Pods wait, and GKE keeps trying the rungs in order. The other value,
``ScaleUpAnyway``, lets GKE bring up nodes that match no rule: capacity the ladder did not name
(another price, another zone), which a training run should not land on unasked."""

OPTIMIZE_RULE_PRIORITY = False
"""No active migration. With it GKE moves workloads from a lower rung back to a higher one when
capacity returns, which drains the nodes a healthy training runs on: every move restarts it from
its checkpoint, and on a Spot first rung it trades a running slice for one that may be taken
again. Without it a run stays on the rung it got until it is next re-created (preemption,
flex-start's seven days, a recovery), and then GKE tries the first rung again."""

NODE_POOL_AUTO_CREATION = False
"""The rungs' node pools are declared by the stack (``TpuNodePoolPlan.rungs``), not created by GKE:
their settings (COMPACT placement, auto-repair off, the node labels Jobs select, the node service
account, the maximum run duration) stay reviewable in the plan, and the cluster needs neither node
auto-provisioning nor GKE 1.33.3-gke.1136000 (auto-creation through a ComputeClass alone)."""


def priority_rule(plan: TpuNodePoolPlan, rung: TpuNodePoolPlan) -> dict[str, Any]:
    """One rung of ``plan``'s ladder as a ComputeClass priority rule: the TPU slice, the zones and
    the capacity of the rung's pools."""
    shape = plan.shape
    rule: dict[str, Any] = {
        "tpu": {
            "type": shape.accelerator_label,
            "count": shape.machine_type.chips_per_vm,
            "topology": shape.topology,
        },
        "location": {"zones": list(plan.node_locations)},
        # Stated on every rule, so a rule's capacity never rests on a default.
        "spot": rung.spot,
    }
    if rung.flex_start:
        rule["flexStart"] = {"enabled": True}
    rule["reservations"] = (
        {"affinity": "Specific", "specific": [{"name": rung.reservation}]}
        if rung.reservation
        else {"affinity": "None"}
    )
    if plan.max_run_seconds is not None:
        rule["maxRunDurationSeconds"] = plan.max_run_seconds
    return rule


def compute_class_manifest(
    plan: TpuNodePoolPlan, labels: Optional[Mapping[str, str]] = None
) -> dict[str, Any]:
    """The ComputeClass of a pool with a ladder; ``ValueError`` for a pool without one."""
    if plan.compute_class is None:
        raise ValueError(f"node pool {plan.name!r} has no ladder, so no ComputeClass")
    return {
        "apiVersion": COMPUTE_CLASS_API_VERSION,
        "kind": COMPUTE_CLASS_KIND,
        # Cluster-scoped: no namespace.
        "metadata": {
            "name": plan.compute_class,
            "labels": {**(labels or {}), "app.kubernetes.io/name": plan.name, PART_OF_LABEL: PART_OF},
        },
        "spec": {
            "priorities": [priority_rule(plan, rung) for rung in plan.rungs],
            "whenUnsatisfiable": WHEN_UNSATISFIABLE,
            "nodePoolAutoCreation": {"enabled": NODE_POOL_AUTO_CREATION},
            "activeMigration": {"optimizeRulePriority": OPTIMIZE_RULE_PRIORITY},
        },
    }
