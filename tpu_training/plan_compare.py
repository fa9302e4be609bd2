"""`tpu-training plan --compare-to BASE.json`: what the next `pulumi up` would do to what is
deployed, resource by resource, by the providers' rules (``components/change_impact.py``).

The offline plan has no view of the deployed state. BASE.json is a plan written earlier with
``--json`` from the deployed commit (CI writes one from the base branch); this module reads it,
compares it with the plan just made, and says per resource: created, deleted, updated in place or
REPLACED, naming every replacement that restarts a training, and for each TPU VM whose metadata
changed, that it takes effect at the node's next boot unless its ``restartGeneration`` is bumped.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from tpu_training_components.domain.change_impact import NEXT_BOOT, ResourceChange, compare_plans

from tpu_training import json_file

_TPU_VM = "gcp:tpu/v2Vm:V2Vm"
_JOB = "kubernetes:batch/v1:Job"
_NODE_POOL = "gcp:container/nodePool:NodePool"
_VERBS = {"create": "create", "delete": "delete", "update": "update in place", "replace": "REPLACE"}


class CompareError(Exception):
    """The ``--compare-to`` file cannot be used; nothing was run."""


def read_base(source: str, stack: Optional[str] = None) -> dict[str, Any]:
    """The plan in ``source`` (as ``tpu-training plan --json`` writes it), checked to be one:
    every problem names the file and the place in it."""
    shown = f"--compare-to {source}"
    try:
        document = json_file.read_json(
            source, "--compare-to", writer=f"tpu-training plan --stack STACK --json {source}"
        )
    except json_file.JsonFileError as exc:
        raise CompareError(str(exc)) from None
    if not isinstance(document, dict) or not isinstance(document.get("resources"), list):
        raise CompareError(
            f"{shown}: not a plan: expected an object with a 'resources' list, as "
            f"`tpu-training plan --json` writes"
        )
    for index, resource in enumerate(document["resources"]):
        where = f"{shown}: resources[{index}]"
        if not isinstance(resource, dict):
            raise CompareError(f"{where} is a {type(resource).__name__}, not an object")
        for key in ("urn", "type", "name"):
            if not isinstance(resource.get(key), str) or not resource[key]:
                raise CompareError(
                    f"{where}.{key} = {json.dumps(resource.get(key))}; expected a non-empty string"
                )
        for key in ("inputs", "options"):
            if not isinstance(resource.get(key, {}), dict):
                raise CompareError(f"{where}.{key} must be an object, not {json.dumps(resource[key])[:80]}")
        _check_shapes(where, resource)
    base_stack = document.get("stack")
    if stack is not None and base_stack is not None and base_stack != stack:
        raise CompareError(
            f"{shown}: is a plan of stack {base_stack!r}, this plan is of {stack!r}; compare a stack "
            f"with its own deployed plan"
        )
    return document


# The shape of what the comparison reads besides inputs, as `tpu-training plan --json` writes it.
_OPTION_LISTS = ("dependsOn", "ignoreChanges", "replaceOnChanges")


def _check_shapes(where: str, resource: dict[str, Any]) -> None:
    def refuse(key: str, expected: str) -> None:
        raise CompareError(f"{where}.{key} = {json.dumps(_dotted(resource, key))[:80]}; expected {expected}")

    if not isinstance(resource.get("parent", ""), str):
        refuse("parent", "a URN (a string)")
    if not isinstance(resource.get("custom", True), bool):
        refuse("custom", "true or false")
    options = resource.get("options") or {}
    for key in _OPTION_LISTS:
        value = options.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            refuse(f"options.{key}", "a list of strings")
    if not isinstance(options.get("provider", ""), str):
        refuse("options.provider", "a provider URN (a string)")
    aliases = options.get("aliases", [])
    if not isinstance(aliases, list) or not all(_an_alias(alias) for alias in aliases):
        refuse("options.aliases", 'a list of {"urn": URN} or {"spec": {name, type, parentUrn, ...}}')
    # The provider's kubeconfig is compared by its active cluster; any shape is read (an
    # unreadable one is a change that replaces: provider_rules._active_cluster).


def _an_alias(alias: Any) -> bool:
    if not isinstance(alias, dict):
        return False
    spec = alias.get("spec", {})
    return (
        isinstance(alias.get("urn", ""), str)
        and isinstance(spec, dict)
        and all(isinstance(spec.get(k, ""), str) for k in ("name", "type", "parentUrn", "stack", "project"))
        and isinstance(spec.get("noParent", False), bool)
    )


def _dotted(resource: dict[str, Any], key: str) -> Any:
    value: Any = resource
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def compare(base: dict[str, Any], plan: dict[str, Any]) -> list[ResourceChange]:
    """What happens to each resource going from ``base`` to ``plan`` (both plan documents)."""
    return compare_plans(base["resources"], plan["resources"])


def summary(changes: list[ResourceChange]) -> dict[str, int]:
    counts = {action: 0 for action in ("create", "update", "replace", "delete", "same")}
    for change in changes:
        counts[change.action] += 1
    return counts


def to_json(source: str, changes: list[ResourceChange]) -> dict[str, Any]:
    """The comparison as the plan document's ``changes`` key."""
    return {
        "base": source,
        "summary": summary(changes),
        "restartsTraining": [c.name for c in changes if c.restarts_training],
        "resources": [c.to_json() for c in changes if c.action != "same"],
    }


def restart_hint(node: str) -> str:
    """How to make a metadata edit of TPU VM ``node`` take effect now: the stack's restart knob."""
    return (
        f"to apply it now: bump restartGeneration of the tpuVms entry {node!r} "
        f"(tpu-training:tpuVms[].restartGeneration); that re-creates this VM alone, and its "
        f"training restarts from its checkpoint"
    )


def _node_name(plan: dict[str, Any], urn: str) -> str:
    for resource in plan["resources"]:
        if resource.get("urn") == urn:
            return str((resource.get("inputs") or {}).get("name") or resource["name"])
    return urn


def render(source: str, changes: list[ResourceChange], plan: dict[str, Any]) -> str:
    """Readable lines: one per changed resource, with why, and a count of each action."""
    counts = summary(changes)
    lines = [f"Changes against {source} (what `pulumi up` would do to what that plan deployed):"]
    for change in changes:
        if change.action == "same":
            continue
        lines.append(f"  {_VERBS[change.action]:<15} {change.type}  {change.name}")
        if change.action == "replace":
            means = f" — {change.replaced_means}" if change.replaced_means else ""
            lines.append(f"      {change.name}: replaced{means}")
            lines.extend(f"      because {reason}" for reason in change.because)
            if change.delete_first is not None:
                order = "deleted before the new one is created" if change.delete_first else "deleted after"
                lines.append(f"      the old one is {order}")
            lines.extend(f"      note: {note}" for note in change.notes)
        elif change.action == "update":
            lines.append(
                f"      changed: {', '.join(change.changed[:8])}{' ...' if len(change.changed) > 8 else ''}"
            )
            lines.extend(f"      note: {note}" for note in change.notes)
            if NEXT_BOOT in change.effects:
                lines.append(f"      {restart_hint(_node_name(plan, change.urn))}")
        elif change.action == "delete" and change.type in (_TPU_VM, _JOB):
            lines.append(
                f"      {change.name}: deleted — its training stops (checkpoints stay in the bucket)"
            )
        elif change.action == "delete" and change.type == _NODE_POOL:
            # A pool goes with its nodes: a Job running there loses its Pods, and they wait for
            # the capacity that is left (another rung of a ladder, or a pool created in its place).
            lines.append(
                f"      {change.name}: deleted with its nodes — a training running on them stops and "
                f"restarts from its checkpoint where its Pods are scheduled next"
            )
        lines.extend(f"      note: {note}" for note in change.notes if change.action in ("create", "delete"))
        if change.blocked:
            lines.append(f"      `pulumi up` FAILS here: {change.blocked}")
    lines.append(
        f"  {counts['create']} to create, {counts['update']} to update in place, {counts['replace']} to "
        f"replace, {counts['delete']} to delete, {counts['same']} unchanged"
    )
    restarting = [c.name for c in changes if c.restarts_training]
    if restarting:
        lines.append(f"  training restarts from its checkpoint on: {', '.join(restarting)}")
    return "\n".join(lines)
