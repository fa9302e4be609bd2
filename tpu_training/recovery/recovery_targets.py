"""What a recovery `pulumi up` touches: the URNs of the TPU VMs and Jobs a round decided to
create or replace, found by running the stack program offline, and how they stand against the
changes a full `pulumi up` would make beside them.

Why targets (`pulumi up --target URN`), and what the engine does with them, read in Pulumi's own
source (pulumi/pulumi at 1b5949891b, v3.259.0-14; the CLI this project requires is newer):

- only a targeted resource is diffed and changed; every other one is registered but kept "same",
  with its old inputs, no provider call (pkg/resource/deploy/step_generator.go: "If not targeted,
  stub out the provider check and use the old inputs directly", ~l.1315; "Planner decided not to
  update ... not being in target group (same)", ~l.1570). So an edit that is committed but not
  deployed is not applied by a recovery round, and a round's cloud work is one VM or Job.
- `--refresh` with targets refreshes only the targets (pkg/resource/deploy/deployment_executor.go,
  "If they did provider --target's then only create refresh steps for those specific targets",
  ~l.712); a round that recovers one VM of 256 reads one VM.
- reads are not targeted: the stack reference that tells the program what was last deployed is
  read in every update (step_generator.go ``GenerateReadSteps`` has no target check, ~l.292).
- the stack's outputs (the generations recovery reads back) are written from the root stack
  resource's RegisterResourceOutputs, which the step executor keeps until the end of the update
  and then writes, merged over the old ones if the update failed (pkg/resource/deploy/
  step_executor.go ``executeRegisterResourceOutputs``, ~l.212-270, pulumi#15754). The root stack
  and every provider are always part of a targeted update without being named
  (step_generator.go ``isImplicitlyTargetedResource``, ~l.1287-1300).
- so the root stack is never named as a target: a named target's dependents and children are
  allowed deletes (``getTargetDependents``, ~l.2543-2573, called from
  ``determineAllowedResourcesToDeleteFromTargets``), every resource is a child of the root, and a
  resource removed from the stack file but not yet deployed would get a delete step the engine
  refuses ("will be destroyed but was not specified in --target list", ``GenerateDeletes``,
  ~l.2510-2535) after the recovery's own steps ran. Not named, that resource is kept as the
  state has it (an untargeted same step, ~l.2445-2452).
- the stack program is told which VMs and Jobs the update recovers (``ROUND_ENV``: the CLI hands
  its environment to the language host, sdk/go/common/resource/plugin/plugin.go ``ExecPlugin``,
  and the Python host to the program, sdk/python/cmd/pulumi-language-python/main.go ``Run``),
  so its outputs keep what they said of every other one: an untargeted resource keeps its state,
  and one not in the state is not created (a skipped create, step_generator.go ~l.1760-1780,
  whose outputs the program sees unknown: pkg/resource/deploy/step.go ``SameStep.Apply``).
- a resource the program declares that is not in the state and not targeted is not created; a
  targeted resource that depends on one fails the update ("untargeted create",
  step_generator.go ~l.515-533). A target must exist in the state or be registered by the
  program (deployment_executor.go ``checkTargets``, ~l.56).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Collection, Sequence

from tpu_training_components.domain.queued_resources import is_queued_tpu_vm

from tpu_training import offline, project_files
from tpu_training.recovery.automation import PendingChange, stack_urn

VM_TYPE = "gcp:tpu/v2Vm:V2Vm"
JOB_TYPE = "kubernetes:batch/v1:Job"
JOBSET_TYPE = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
NODE_POOL_TYPE = "gcp:container/nodePool:NodePool"
CONFIG_MAP_TYPE = "kubernetes:core/v1:ConfigMap"


class TargetsNotFound(Exception):
    """The program declares no resource for a VM or Job the round decided on."""


@dataclass(frozen=True)
class RecoveryTargets:
    """The resources a round recovers, by the name of the VM or Job it decided on."""

    stack: str
    """The root stack resource's URN, which holds the generations read back next time. Never a
    target: the engine takes it into every update (see the module's docstring)."""
    urns: dict[str, str]
    """VM or Job name -> the URN of its TPU node or Kubernetes Job."""
    dependencies: dict[str, frozenset[str]] = field(default_factory=dict)
    """URN -> what the engine needs in the state before it can change it: parent, dependencies,
    provider."""
    sources: dict[str, frozenset[str]] = field(default_factory=dict)
    """Job or JobSet URN -> what it takes its shape from and the engine leaves untargeted: the
    node pools its component depends on (their nodes' labels are its node selector) and the
    ConfigMaps it mounts (its run parameters). A pending change of one would make it half old."""


def find_targets(
    project: project_files.Project,
    stack: str,
    config: dict[str, str],
    secret_keys: Sequence[str],
    recovering: Sequence[tuple[str, str]],
) -> RecoveryTargets:
    """Run the stack program offline (no live reads, the given config) and find the resource of
    every ``(kind, name)`` in ``recovering``: ``tpuVm`` -> its node (or its queued resource),
    ``job`` -> its Job.
    Raises ``TargetsNotFound``."""
    program_dir = str(project.program_dir)
    if program_dir not in sys.path:
        sys.path.insert(0, program_dir)
    was = os.environ.get("TPU_TRAINING_OFFLINE")
    os.environ["TPU_TRAINING_OFFLINE"] = "1"  # the round has read the live state already
    try:
        run = offline.run(
            offline.program_body(project.program_dir),
            project=project.name,
            stack=stack,
            config=config,
            secret_keys=list(secret_keys),
        )
    finally:
        if was is None:
            os.environ.pop("TPU_TRAINING_OFFLINE", None)
        else:
            os.environ["TPU_TRAINING_OFFLINE"] = was
    engine = engine_urns(run.registrations, project.name, stack)
    by_name: dict[tuple[str, str], str] = {}
    for registration in run.registrations:
        if registration.type == VM_TYPE:
            by_name[("tpuVm", str(registration.inputs.get("name")))] = registration.urn
        elif is_queued_tpu_vm(registration.type, registration.inputs):
            # A VM requested from the queue: its request is what is re-created.
            by_name[("tpuVm", str(registration.inputs["queuedResourceId"]))] = registration.urn
        elif registration.type in (JOB_TYPE, JOBSET_TYPE):
            metadata = registration.inputs.get("metadata") or {}
            by_name[("job", str(metadata.get("name")))] = registration.urn
    missing = [f"{kind} {name}" for kind, name in recovering if (kind, name) not in by_name]
    if missing:
        raise TargetsNotFound(
            f"the stack program declares no resource for {', '.join(missing)}; nothing was changed"
        )
    registrations = {r.urn: r for r in run.registrations}
    urns = {name: engine[by_name[(kind, name)]] for kind, name in recovering}
    dependencies = {}
    sources = {}
    for kind, name in recovering:
        registration = registrations[by_name[(kind, name)]]
        needed = {*registration.options.get("dependsOn", ()), registration.parent}
        if registration.provider:
            needed.add(_provider_urn(registration.provider))
        dependencies[urns[name]] = frozenset(engine.get(u, u) for u in needed if u in engine)
        if kind == "job":
            sources[urns[name]] = frozenset(engine[u] for u in _shaped_by(registration, registrations))
    return RecoveryTargets(stack_urn(project.name, stack), urns, dependencies, sources)


def _shaped_by(workload: offline.Registration, registrations: dict[str, offline.Registration]) -> set[str]:
    """The node pools a workload's components depend on, and the ConfigMaps it depends on."""
    found = {u for u in workload.options.get("dependsOn", ()) if _is(registrations, u, CONFIG_MAP_TYPE)}
    ancestor = registrations.get(workload.parent)
    while ancestor is not None:
        found |= {u for u in ancestor.options.get("dependsOn", ()) if _is(registrations, u, NODE_POOL_TYPE)}
        ancestor = registrations.get(ancestor.parent)
    return found


def _is(registrations: dict[str, offline.Registration], urn: str, type_: str) -> bool:
    return urn in registrations and registrations[urn].type == type_


def _provider_urn(reference: str) -> str:
    # A provider reference is "URN::ID"; the URN itself contains "::".
    return reference.rsplit("::", 1)[0]


def engine_urns(registrations: Sequence[offline.Registration], project: str, stack: str) -> dict[str, str]:
    """Each recorded resource's URN as the engine makes it: the SDK's mock monitor names a
    resource after its parent's last type only, and puts the root stack's type before a
    top-level component's, where the engine chains every ancestor's type but the root stack's
    (pkg/resource/deploy/deployment.go ``generateURN``, ~l.796: "don't use the root stack type;
    otherwise, use the full qualified type")."""
    by_urn = {r.urn: r for r in registrations}
    qualified: dict[str, str] = {}

    def qualified_type(urn: str) -> str:
        if urn not in qualified:
            registration = by_urn[urn]
            parent = registration.parent
            prefix = f"{qualified_type(parent)}$" if parent in by_urn else ""
            qualified[urn] = prefix + registration.type
        return qualified[urn]

    return {
        urn: f"urn:pulumi:{stack}::{project}::{qualified_type(urn)}::{registration.name}"
        for urn, registration in by_urn.items()
    }


PROVIDER_TYPE_PREFIX = "pulumi:providers:"


@dataclass(frozen=True)
class TargetedRound:
    """A round's `pulumi up`, set against what a full update would change."""

    targets: tuple[str, ...]
    """The URNs to update: each VM or Job recovered, and nothing else (never the root stack)."""
    refresh: bool
    """Whether the update may refresh its targets: not when one of them is missing from the
    stack's state (the engine checks refresh targets against the state alone and would refuse
    it: deployment_executor.go ``checkTargets``, called before the program runs)."""
    beside: tuple[PendingChange, ...]
    """Changes a full `pulumi up` would make that recovery did not decide: left alone."""
    never_deployed: tuple[str, ...]
    """Decided "create", in no generation output and not in the stack's state: a VM or Job
    added to the stack file and never deployed, which is a pending edit, not a recovery."""
    blocked: dict[str, tuple[str, ...]]
    """Name -> URNs it needs that are pending creates: it cannot be recovered alone."""
    half_old: dict[str, tuple[PendingChange, ...]] = field(default_factory=dict)
    """Job or JobSet name -> pending changes of what it takes its shape from (its node pool, its
    run parameters): recovered alone it would take the edit while they keep the deployed shape
    (Pods selecting labels no node has, or reading old parameters), so it is not recovered."""
    providers: tuple[PendingChange, ...] = ()
    """Pending changes of providers. The engine takes every provider into a targeted update
    (step_generator.go, providers are always registered; a new default provider version fails
    every untargeted resource on the old one, "a change of providers mixed with --target",
    ~l.1566-1581): no targeted update can leave them alone."""


def set_against(
    targets: RecoveryTargets,
    pending: Sequence[PendingChange],
    deployed: Collection[str] = (),
    *,
    apply_pending: bool = False,
) -> TargetedRound:
    """Which targets a round updates, given the preview's ``pending`` changes and the names of
    the VMs and Jobs the stack has ``deployed`` (its generation outputs)."""
    ops = {change.urn: change.op for change in pending}
    own = set(targets.urns.values()) | {targets.stack}
    beside = tuple(change for change in pending if change.urn not in own)
    if apply_pending:
        return TargetedRound((), True, beside, (), {})
    providers = tuple(c for c in beside if _type_of(c.urn).startswith(PROVIDER_TYPE_PREFIX))
    # Not in the state ("create") and never deployed: a new VM or Job. Not in the state but
    # deployed before (a refresh dropped it after it was lost, then its re-creation failed):
    # recovery's to create.
    never_deployed = tuple(
        name for name, urn in targets.urns.items() if ops.get(urn) == "create" and name not in deployed
    )
    creates = {change.urn for change in beside if change.op == "create"}
    blocked = {
        name: tuple(sorted(targets.dependencies.get(urn, frozenset()) & creates))
        for name, urn in targets.urns.items()
        if name not in never_deployed and targets.dependencies.get(urn, frozenset()) & creates
    }
    half_old = {}
    for name, urn in targets.urns.items():
        edits = tuple(c for c in beside if c.urn in targets.sources.get(urn, frozenset()))
        if edits and name not in never_deployed and name not in blocked:
            half_old[name] = edits
    chosen = [
        urn
        for name, urn in targets.urns.items()
        if name not in never_deployed and name not in blocked and name not in half_old
    ]
    if providers:
        chosen = []
    return TargetedRound(
        tuple(chosen),
        not any(ops.get(urn) == "create" for urn in chosen),
        beside,
        never_deployed,
        blocked,
        half_old=half_old,
        providers=providers,
    )


def _type_of(urn: str) -> str:
    parts = urn.split("::")
    return parts[2].rsplit("$", 1)[-1] if len(parts) >= 4 else ""


def describe(round_: TargetedRound) -> list[str]:
    """The lines a round says about what it leaves alone, and why it cannot recover something."""
    if round_.providers:
        shown = "; ".join(change.shown for change in round_.providers)
        return [
            f"a provider change is pending ({shown}): a targeted update would apply it to every "
            f"resource, so nothing is recovered alone; run `pulumi up`, or recover with --apply-pending"
        ]
    lines = [
        f"pending change left alone (deploy it with `pulumi up`, or recover with --apply-pending): "
        f"{change.shown}"
        for change in round_.beside
    ]
    lines += [
        f"{name} was never deployed: creating it is a pending change, left alone (`pulumi up` deploys it)"
        for name in round_.never_deployed
    ]
    lines += [
        f"{name} cannot be recovered alone: it needs {', '.join(needs)}, not deployed yet; run `pulumi up`, "
        f"or recover with --apply-pending"
        for name, needs in round_.blocked.items()
    ]
    lines += [
        f"{name} is not recovered: what it takes its shape from has a pending edit ("
        f"{'; '.join(change.shown for change in edits)}); re-created alone it would take the edit while "
        f"that keeps the deployed shape (Pods waiting for nodes no pool has, or reading old run "
        f"parameters); run `pulumi up` to deploy the edit, or recover with --apply-pending"
        for name, edits in round_.half_old.items()
    ]
    return lines
