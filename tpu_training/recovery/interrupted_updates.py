"""What a killed or failed recovery update left in the stack's state, and how the next round
settles it from live state: pure Python, on the state as `pulumi stack export` prints it.

A recovery update replaces a TPU VM or a Job delete-first (their names are fixed). Read in
pulumi/pulumi v3.274.1 and seen under the engine tier (tests/engine/test_engine_crash.py), an update
that dies in the middle leaves, for the resource it was replacing:

- the old resource marked ``pendingReplacement`` once its delete ran: the next update replaces it
  whatever the program declares (pkg/resource/deploy/step_generator.go, ~l.2051) and skips its
  delete (pkg/resource/deploy/step.go, ~l.1694), so a node that still exists would be created a
  second time and refused (409);
- a pending ``creating`` operation holding the new resource's inputs once its create started,
  kept by every later update until someone clears it (pkg/backend/snapshot.go, ~l.847), and which
  nothing in the state connects to the object the cloud may already have made.

Pulumi leaves the judgement to an operator (`pulumi refresh --clear-pending-creates`,
`--import-pending-creates`, `pulumi state edit`). A recovery round is that operator for the
resources it recovers, and judges by what the live state says of each one (``Live``):

- a pending create whose object exists at the generation it was creating: the update made it;
  it is adopted (the resource in the state becomes the one the create was making, with the
  live object's ID; a targeted `pulumi refresh` then reads its outputs);
- a pending create whose object does not exist: cleared, and the round creates it again;
- a ``pendingReplacement`` resource whose object is gone: removed, as a refresh removes any
  resource whose object is gone; the round creates it again;
- a ``pendingReplacement`` resource whose object still exists at its generation: no longer
  marked, so the engine's own replacement deletes it before creating the new one;
- anything whose live state could not be read: nothing is changed (never on unknown).

What the interrupted update was doing is kept: the cause it recorded on the new object (the
``recovery-cause`` label of a TPU node, the ``tpu-training/recovery-cause`` annotation of a Job)
is the cause of the recovery the next round resumes, instead of "missing".
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Optional

from tpu_training_components.domain.queued_resources import (
    QUEUED_TPU_VM_TYPE,
    is_queued_tpu_vm,
    requested_node,
)
from tpu_training_components.domain.recovery import CAUSE_ANNOTATION, CAUSE_LABEL, Cause

from tpu_training.recovery.recovery_targets import JOB_TYPE, JOBSET_TYPE, VM_TYPE

PENDING_CREATE = "creating"

_TRIGGER = re.compile(r"^recovery (\d+), restart \d+$")


@dataclass(frozen=True)
class Live:
    """What the live state says of one recovered resource's object."""

    exists: Optional[bool]
    """None: it could not be read."""
    generation: Optional[int] = None
    """Its recovery generation, when it exists and says one."""


@dataclass(frozen=True)
class Interruption:
    """What an interrupted update left for one URN."""

    urn: str
    creating: Optional[dict[str, Any]] = None
    """The resource a pending create was making (the operation's ``resource``)."""
    replaced: Optional[dict[str, Any]] = None
    """The resource in the state marked ``pendingReplacement``."""
    unread: Optional[dict[str, Any]] = None
    """A resource an earlier round adopted whose outputs no refresh has read yet (they are still
    its inputs, ``settle``): that round was killed before its own update."""

    @property
    def cause(self) -> Optional[Cause]:
        """The cause the interrupted recovery recorded on what it was creating."""
        made = self.creating if self.creating is not None else self.unread
        return recorded_cause(made) if made is not None else None


def generation_of(resource: Mapping[str, Any]) -> Optional[int]:
    """A resource's recovery generation: its replacement trigger (``tpu_vm.replacement_trigger``:
    the generation, or "recovery G, restart R"); a queued TPU VM's is its ``generation`` input,
    which replaces it when it changes."""
    trigger = resource.get("replacementTrigger")
    if is_queued_tpu_vm(resource.get("type"), resource.get("inputs")):
        trigger = resource["inputs"].get("generation")
    if isinstance(trigger, bool):
        return None
    if isinstance(trigger, (int, float)) and float(trigger).is_integer():
        return int(trigger)
    if isinstance(trigger, str):
        found = _TRIGGER.match(trigger)
        if found is not None:
            return int(found[1])
        if trigger.isdigit():
            return int(trigger)
    return None


def recorded_cause(resource: Mapping[str, Any]) -> Optional[Cause]:
    """The cause written on a resource: a TPU node's label (in a queued TPU VM's request, its
    node spec's), a Job's or JobSet's annotation."""
    inputs = resource.get("inputs") or {}
    labels = inputs.get("labels") if isinstance(inputs, dict) else None
    if is_queued_tpu_vm(resource.get("type"), resource.get("inputs")):
        labels = requested_node(inputs).get("labels")
    metadata = inputs.get("metadata") if isinstance(inputs, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    for found in (
        labels.get(CAUSE_LABEL) if isinstance(labels, dict) else None,
        annotations.get(CAUSE_ANNOTATION) if isinstance(annotations, dict) else None,
    ):
        if isinstance(found, str) and found in {c.value for c in Cause}:
            return Cause(found)
    return None


def _deployment(state: Mapping[str, Any]) -> dict[str, Any]:
    deployment = state.get("deployment")
    return deployment if isinstance(deployment, dict) else {}


def _entries(deployment: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The objects under ``key`` (``resources``, ``pending_operations``); anything else a state
    this version cannot read holds there is passed over, never a crash."""
    found = deployment.get(key)
    return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []


def interruptions(state: Mapping[str, Any], urns: Collection[str]) -> dict[str, Interruption]:
    """What interrupted updates left for ``urns`` (the resources recovery manages); every other
    resource's pending operations are someone else's and stay as they are."""
    deployment = _deployment(state)
    found: dict[str, Interruption] = {}
    for entry in _entries(deployment, "resources"):
        urn = str(entry.get("urn"))
        if urn in urns and entry.get("pendingReplacement"):
            found[urn] = Interruption(urn, replaced=entry)
        elif urn in urns and _unread(entry):
            found[urn] = Interruption(urn, unread=entry)
    for operation in _entries(deployment, "pending_operations"):
        resource = operation.get("resource")
        if not isinstance(resource, dict):
            continue
        urn = str(resource.get("urn"))
        if urn in urns and operation.get("type") == PENDING_CREATE:
            found[urn] = Interruption(
                urn, creating=resource, replaced=found.get(urn, Interruption(urn)).replaced
            )
    return found


def any_interrupted(state: Mapping[str, Any]) -> bool:
    """Whether the state holds anything an interrupted update leaves (cheap: decides whether the
    round looks further)."""
    deployment = _deployment(state)
    return bool(_entries(deployment, "pending_operations")) or any(
        entry.get("pendingReplacement") or _unread(entry) for entry in _entries(deployment, "resources")
    )


RECOVERED_TYPES = frozenset({VM_TYPE, QUEUED_TPU_VM_TYPE, JOB_TYPE, JOBSET_TYPE})
"""The resources recovery creates and replaces."""


def _unread(entry: Mapping[str, Any]) -> bool:
    # Their provider's outputs always add to the inputs (a node's state, a Job's uid): outputs
    # equal to the inputs are the ones ``settle`` gives an adopted resource until its refresh.
    # (A provider resource's outputs are its inputs: not one of these types.)
    inputs = entry.get("inputs")
    return entry.get("type") in RECOVERED_TYPES and bool(inputs) and entry.get("outputs") == inputs


@dataclass
class Settlement:
    """The state with the interruptions settled, and what was done to each."""

    state: dict[str, Any]
    lines: list[str] = field(default_factory=list)
    adopted: dict[str, Optional[Cause]] = field(default_factory=dict)
    """URN -> the cause recorded on it: objects the interrupted update made, now in the state."""
    resumed: dict[str, Cause] = field(default_factory=dict)
    """URN -> the cause of the recovery the interrupted update was making, for those the round
    creates again."""
    unknown: list[str] = field(default_factory=list)
    """URNs whose live state could not be read: nothing was changed."""


def _short(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def settle(
    state: Mapping[str, Any],
    found: Mapping[str, Interruption],
    live: Mapping[str, Live],
    project: str = "",
) -> Settlement:
    """The state with every interruption in ``found`` settled from ``live`` (the module's
    docstring gives the rules). ``project``: the stack's Google Cloud project, for the ID of a
    TPU node whose resource the state no longer holds (``object_id``). Changes nothing when any
    of them cannot be judged."""
    settled = Settlement(copy.deepcopy(dict(state)))
    unknown = [urn for urn in found if live.get(urn, Live(None)).exists is None]
    unknown += [
        urn
        for urn, interruption in found.items()
        if urn not in unknown and live[urn].exists and live[urn].generation is None
    ]
    if unknown:
        settled.unknown = sorted(unknown)
        return settled
    deployment = _deployment(settled.state)
    resources = _entries(deployment, "resources")
    operations = _entries(deployment, "pending_operations")
    for urn, interruption in sorted(found.items()):
        now = live[urn]
        name = _short(urn)
        creating, replaced = interruption.creating, interruption.replaced
        if interruption.unread is not None:
            if now.exists and now.generation == generation_of(interruption.unread):
                settled.adopted[urn] = interruption.cause
                settled.lines.append(
                    f"{name}: adopted by a round killed before its own update; that update runs now"
                )
            continue
        if creating is not None:
            operations = [
                op
                for op in operations
                if not ((op.get("resource") or {}).get("urn") == urn and op.get("type") == PENDING_CREATE)
            ]
            made = generation_of(creating)
            if now.exists and made is not None and now.generation == made:
                # The ID the new object's own inputs give first: after a move down a capacity
                # ladder it is in another zone than the old resource's ID says.
                identifier = (
                    object_id(creating, project) or (replaced or {}).get("id") or _id_in_state(resources, urn)
                )
                if identifier:
                    adopted = {**copy.deepcopy(creating), "id": identifier}
                    # Its outputs until a refresh reads them (the round's own `up --refresh`
                    # does): what it was created with, as an import starts from.
                    adopted["outputs"] = adopted.get("outputs") or copy.deepcopy(adopted.get("inputs") or {})
                    adopted.pop("pendingReplacement", None)
                    resources = _put(resources, urn, adopted)
                    settled.adopted[urn] = interruption.cause
                    settled.lines.append(
                        f"{name}: a killed update created it (generation {made}) but never recorded it; "
                        f"adopted into the state as {identifier}"
                    )
                    continue
            settled.lines.append(
                f"{name}: a killed update's pending create (generation {made}) made nothing that "
                f"runs now; cleared"
            )
            if interruption.cause is not None:
                settled.resumed[urn] = interruption.cause
        if replaced is None:
            continue
        if not now.exists:
            resources = [r for r in resources if r is not replaced and not _same(r, replaced)]
            settled.lines.append(
                f"{name}: the object an interrupted replacement deleted (generation "
                f"{generation_of(replaced)}) is gone; removed from the state, as a refresh removes it"
            )
        elif now.generation == generation_of(replaced):
            resources = [_unmarked(r) if _same(r, replaced) else r for r in resources]
            settled.lines.append(
                f"{name}: the object an interrupted replacement was to delete (generation "
                f"{now.generation}) still exists; no longer marked, so its replacement deletes it first"
            )
        else:
            settled.lines.append(
                f"{name}: marked for replacement at generation {generation_of(replaced)}, but generation "
                f"{now.generation} exists; left for the round's own decision"
            )
    deployment["resources"] = resources
    if operations:
        deployment["pending_operations"] = operations
    else:
        deployment.pop("pending_operations", None)
    return settled


def object_id(resource: Mapping[str, Any], project: str) -> Optional[str]:
    """The ID the provider gives the object a resource's inputs make, for the kinds recovery
    creates: a TPU node ``projects/P/locations/ZONE/nodes/NAME`` (pulumi-gcp's V2Vm, as Terraform's
    google_tpu_v2_vm imports it), a namespaced Kubernetes object ``NAMESPACE/NAME``
    (pulumi-kubernetes). None for anything else, or inputs that do not say."""
    inputs = resource.get("inputs")
    if not isinstance(inputs, dict):
        return None
    kind = str(resource.get("type", ""))
    if is_queued_tpu_vm(resource.get("type"), resource.get("inputs")):
        request, zone = inputs.get("queuedResourceId"), inputs.get("zone")
        owner = inputs.get("project") or project
        if all(isinstance(part, str) and part for part in (request, zone, owner)):
            return f"projects/{owner}/locations/{zone}/queuedResources/{request}"
        return None
    if kind == VM_TYPE:
        name, zone = inputs.get("name"), inputs.get("zone")
        owner = inputs.get("project") or project
        if all(isinstance(part, str) and part for part in (name, zone, owner)):
            return f"projects/{owner}/locations/{zone}/nodes/{name}"
        return None
    metadata = inputs.get("metadata")
    if (
        kind.startswith("kubernetes:")
        and isinstance(metadata, dict)
        and isinstance(metadata.get("name"), str)
    ):
        return f"{metadata.get('namespace') or 'default'}/{metadata['name']}"
    return None


def _same(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    return (
        one.get("urn") == other.get("urn")
        and one.get("id") == other.get("id")
        and bool(one.get("pendingReplacement")) == bool(other.get("pendingReplacement"))
    )


def _unmarked(resource: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in resource.items() if key != "pendingReplacement"}


def _id_in_state(resources: list[dict[str, Any]], urn: str) -> Optional[str]:
    return next((r.get("id") for r in resources if r.get("urn") == urn and r.get("id")), None)


def _put(resources: list[dict[str, Any]], urn: str, adopted: dict[str, Any]) -> list[dict[str, Any]]:
    """``resources`` with ``adopted`` in the place of every entry for ``urn`` (or, when there is
    none, after its parent and dependencies, which the state requires to come first)."""
    placed = False
    result = []
    for resource in resources:
        if resource.get("urn") != urn:
            result.append(resource)
        elif not placed:
            result.append(adopted)
            placed = True
    if not placed:
        result.append(adopted)
    return result
