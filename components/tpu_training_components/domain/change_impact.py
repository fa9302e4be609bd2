"""What `pulumi up` does to each resource when its declared inputs or options change: create,
delete, update in place or replace, in which order, and what that means for a running training.

Pure Python (no Pulumi): it compares two plans in the shape ``tpu-training plan --json``
writes (``resources: [{urn, type, name, parent, custom, inputs, options}]``), so a plan written
from the deployed commit tells what the next `pulumi up` of this commit would do. It models the
Pulumi engine (pulumi/pulumi v3.259.0, commit 0ac56e876614aedf12771d73ef7e80959b8a6fd4,
``pkg/resource/deploy/step_generator.go``): finding a resource's old state by its URN or its
aliases (``getOldResource``, ``generateAliases``), ``ignoreChanges`` (``processIgnoreChanges``),
``replaceOnChanges`` (``applyReplaceOnChanges``), replacement triggers, delete-before-replace,
protect, and the replacement of everything on a replaced provider. Which fields each provider
replaces on is data, per type, in ``provider_rules``: nothing here knows a resource type. Field
paths are the engine's camelCase inputs (``nodeConfig.maxRunDuration``, ``spec.template``), list
items matched whatever their index.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Sequence

from .provider_rules import (
    HELM_RELEASE_TYPE,
    KUBERNETES_PROVIDER,
    NEXT_BOOT,
    TRAINING_RESTARTS,
    content_replacements,
    kubernetes_provider_replaced,
    plan_facts,
    rules_for,
)

__all__ = ["NEXT_BOOT", "TRAINING_RESTARTS", "ResourceChange", "changed_paths", "classify", "compare_plans"]

Action = Literal["create", "delete", "update", "replace", "same"]

_INDEX = re.compile(r"\[\d+\]")
_ENGINE = "Pulumi engine, pkg/resource/deploy/step_generator.go"
ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class ResourceChange:
    """What `pulumi up` does to one resource, and why."""

    urn: str
    type: str
    name: str
    action: Action
    changed: tuple[str, ...] = ()
    """The input paths that differ (``metadata.startup-script``, ``spec.template...image``)."""
    because: tuple[str, ...] = ()
    """Why it is replaced: the paths or trigger that force it, each with its rule's source."""
    notes: tuple[str, ...] = ()
    """What the change means for the running thing (when it takes effect, what blocks it)."""
    effects: tuple[str, ...] = ()
    """Markers for callers (``NEXT_BOOT``)."""
    replaced_means: str = ""
    delete_first: Optional[bool] = None
    """For a replacement: the old resource is deleted before the new one is created (True), or
    after (False); None when the provider decides and this module cannot say."""
    previous_urn: str = ""
    """The URN the resource was deployed at, when it is found there by an alias."""
    blocked: str = ""
    """Why `pulumi up` fails on this step instead of doing it ('' when it does not)."""

    @property
    def restarts_training(self) -> bool:
        return self.action == "replace" and TRAINING_RESTARTS in self.replaced_means

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "action": self.action,
            "changed": list(self.changed),
            "because": list(self.because),
            "notes": list(self.notes),
            "effects": list(self.effects),
            "restartsTraining": self.restarts_training,
            "deleteFirst": self.delete_first,
            "previousUrn": self.previous_urn or None,
            "blocked": self.blocked or None,
        }


def changed_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """Every path at which ``new`` differs from ``old``: dicts key by key, lists of equal length
    item by item (``containers[0].image``), anything else as a whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        paths: list[str] = []
        keys = set(old) | set(new)
        if "fileAsset" in old and "fileAsset" in new and ("sha256" in old) != ("sha256" in new):
            # A file asset from a plan written before plans carried its contents' hash: compared by
            # its path, as that plan was; its contents are not known.
            keys.discard("sha256")
        for key in sorted(keys, key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                if old.get(key) != new.get(key):
                    paths.append(sub)
                continue
            paths.extend(changed_paths(old[key], new[key], sub))
        return paths
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            p
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for p in changed_paths(a, b, f"{path}[{i}]")
        ]
    return [] if _same(old, new) else [path]


def _same(old: Any, new: Any) -> bool:
    # JSON has one number type: 3 and 3.0 are the same input (and True is not 1).
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    return bool(old == new)


def _components(path: str) -> list[str]:
    return [part for part in _INDEX.sub("", path).split(".") if part]


def _at_or_under(path: str, rule: str) -> bool:
    """``path`` is ``rule`` or lies under it (list indices aside; ``*`` in ``rule`` matches any
    one key, as in an engine property path)."""
    parts, rule_parts = _components(path), _components(rule)
    return len(parts) >= len(rule_parts) and all(
        r in ("*", p) for p, r in zip(parts, rule_parts, strict=False)
    )


def _covers(path: str, rule: str) -> bool:
    """The change at ``path`` includes ``rule``'s field: at, under, or a whole block above it."""
    return _at_or_under(path, rule) or _at_or_under(rule, path)


def _options(resource: Mapping[str, Any]) -> Mapping[str, Any]:
    return resource.get("options") or {}


# --- URNs and aliases (step_generator.go collapseAliasToUrn, inheritedChildAlias, generateAliases) --


def _urn_parts(urn: str) -> tuple[str, str, str, str]:
    """(stack, project, qualified type, name) of ``urn:pulumi:STACK::PROJECT::QTYPE::NAME``;
    ValueError for anything else."""
    parts = urn.split("::", 3)
    if len(parts) != 4 or not parts[0].startswith("urn:pulumi:"):
        raise ValueError(f"not a URN: {urn!r}")
    head, project, qualified, name = parts
    return head.removeprefix("urn:pulumi:"), project, qualified, name


def _qualified_type(urn: str) -> str:
    return _urn_parts(urn)[2]


def _make_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    """resource.NewURN: a child's type is qualified by its parent's, except under the root stack."""
    parent_type = _qualified_type(parent) if parent else ""
    qualified = f"{parent_type}${type_}" if parent_type and parent_type != ROOT_STACK_TYPE else type_
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


def normal_urn(urn: str) -> str:
    """A URN as the engine writes it: without the root stack's type in front of the type of a
    resource under it (the SDK's mock monitor, which the offline plan runs under, puts it there)."""
    try:
        stack, project, qualified, name = _urn_parts(urn)
    except ValueError:
        return urn  # not a URN: matched as it is, never through an alias
    return f"urn:pulumi:{stack}::{project}::{qualified.removeprefix(ROOT_STACK_TYPE + '$')}::{name}"


class _AliasResolver:
    """Which deployed resource each declared one is, as the engine's step generator finds it: its
    own URN first, then its aliases, its parent's aliases carried down to it."""

    def __init__(self, new: Mapping[str, Mapping[str, Any]], olds: set[str]) -> None:
        self.new = new
        self.olds = olds
        self.found: dict[str, str] = {}
        """New URN -> the old URN it was found at through an alias."""
        self.claimed: set[str] = set()

    def old_urn(self, urn: str) -> Optional[str]:
        """The deployed URN of ``urn`` (itself, or an alias), or None when it is new."""
        if urn in self.olds:
            return urn
        try:
            aliases = self._aliases(urn)
        except (ValueError, TypeError, KeyError, AttributeError):
            aliases = []  # a URN or alias this module cannot read: matched by URN alone
        for alias in aliases:
            if alias in self.olds and alias not in self.new and alias not in self.claimed:
                self.found[urn] = alias
                self.claimed.add(alias)
                return alias
        return None

    def _aliases(self, urn: str) -> list[str]:
        resource = self.new[urn]
        stack, project, _, name = _urn_parts(urn)
        type_ = resource["type"]
        parent = normal_urn(resource["parent"]) if resource.get("parent") else ""
        specs = [a for a in _options(resource).get("aliases") or [] if isinstance(a, Mapping)]
        result = [self._collapse(spec, name, type_, parent, stack, project) for spec in specs]
        parent_alias = self.found.get(parent) if parent else None
        if parent_alias:
            result.append(self._inherited(type_, name, parent, parent_alias))
            for alias in list(result[: len(specs)]):
                _, _, qualified, alias_name = _urn_parts(alias)
                result.append(self._inherited(qualified.rsplit("$", 1)[-1], alias_name, parent, parent_alias))
        return [a for a in dict.fromkeys(result) if a]

    def _collapse(
        self, alias: Mapping[str, Any], name: str, type_: str, parent: str, stack: str, project: str
    ) -> str:
        if alias.get("urn"):
            return normal_urn(str(alias["urn"]))
        spec = alias.get("spec") or {}
        alias_parent = normal_urn(spec["parentUrn"]) if spec.get("parentUrn") else parent
        if spec.get("parentUrn"):
            alias_parent = self.found.get(alias_parent, alias_parent)
        if spec.get("noParent") or (alias_parent and _qualified_type(alias_parent) == ROOT_STACK_TYPE):
            alias_parent = ""
        return _make_urn(
            spec.get("stack") or stack,
            spec.get("project") or project,
            alias_parent,
            spec.get("type") or type_,
            spec.get("name") or name,
        )

    @staticmethod
    def _inherited(type_: str, name: str, parent: str, parent_alias: str) -> str:
        # A child named after its parent ("{parent}-ksa") is aliased under the parent's old name.
        parent_name, alias_parent_name = _urn_parts(parent)[3], _urn_parts(parent_alias)[3]
        alias_name = alias_parent_name + name[len(parent_name) :] if name.startswith(parent_name) else name
        stack, project, _, _ = _urn_parts(parent_alias)
        return _make_urn(stack, project, parent_alias, type_, alias_name)


def _parent_first(resources: Mapping[str, Mapping[str, Any]]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(urn: str) -> None:
        if urn in seen:
            return
        seen.add(urn)
        parent = resources[urn].get("parent")
        if parent and normal_urn(parent) in resources:
            visit(normal_urn(parent))
        order.append(urn)

    for urn in resources:
        visit(urn)
    return order


# --- One resource --------------------------------------------------------------------------------


def provider_replacements(
    type_: str,
    new_inputs: Mapping[str, Any],
    changed: Sequence[str],
    context: Optional[Mapping[str, Any]] = None,
) -> list[tuple[str, str]]:
    """The paths among ``changed`` (a resource's changed inputs) for which its provider answers
    "replace", each with where that rule was read: what the provider's Diff decides, before the
    engine adds its own reasons (triggers, replaceOnChanges, a replaced provider)."""
    rules = rules_for(type_, new_inputs)
    if rules is None or not changed:
        return []
    found = [
        (path, rules.source)
        for path in changed
        if rules.replace_any
        or any(_covers(path, rule) for rule in rules.replace)
        or any(_components(path) == _components(rule) for rule in rules.replace_if_added_or_removed)
    ]
    found += [
        (path, rules.source) for path in content_replacements(type_, new_inputs, changed, context or {})
    ]
    return found


def classify(
    urn: str,
    type_: str,
    name: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    context: Optional[Mapping[str, Any]] = None,
) -> ResourceChange:
    """What `pulumi up` does to a resource declared with ``old`` before and ``new`` now; each a
    plan resource ``{inputs, options}``. ``context`` holds facts about the whole plan
    (``provider_rules.plan_facts``) and ``replacedProviders``: the URNs (or, for resources whose
    plan names none, the types) of the providers this plan replaces."""
    context = context or {}
    old_inputs, new_inputs = old.get("inputs") or {}, new.get("inputs") or {}
    old_options, new_options = _options(old), _options(new)
    ignored = [str(p) for p in new_options.get("ignoreChanges") or []]
    # processIgnoreChanges: an ignored input keeps its old value, so it is no change at all.
    changed = tuple(
        path
        for path in changed_paths(old_inputs, new_inputs)
        if not any(_at_or_under(path, i) for i in ignored)
    )
    because: list[str] = []
    notes: list[str] = []
    effects: list[str] = []

    old_trigger, new_trigger = old_options.get("replacementTrigger"), new_options.get("replacementTrigger")
    # A trigger that differs from the stored one replaces; one that appears where there was none
    # does not (step_generator.go generateStepsFromDiff, shared/REFERENCE.md "Pulumi").
    if old_trigger is not None and new_trigger is not None and not _same(old_trigger, new_trigger):
        because.append(
            f"replacement trigger {json.dumps(old_trigger)} -> {json.dumps(new_trigger)} [{_ENGINE}]"
        )

    if type_ == KUBERNETES_PROVIDER:
        because.extend(kubernetes_provider_replaced(old_inputs, new_inputs))
    provider = normal_urn(new_options["provider"]) if new_options.get("provider") else ""
    replaced_providers = context.get("replacedProviders", ())
    if (provider and provider in replaced_providers) or (
        not provider and type_.startswith("kubernetes:") and KUBERNETES_PROVIDER in replaced_providers
    ):
        because.append(f"its provider is replaced, and every resource on it with it [{_ENGINE}]")

    rules = rules_for(type_, new_inputs)
    because.extend(
        f"{path} changed [{source}]"
        for path, source in provider_replacements(type_, new_inputs, changed, context)
    )
    if rules is not None and changed:
        for path in changed:
            for rule, note in rules.notes.items():
                if _covers(path, rule) and note not in notes:
                    notes.append(note)
            for rule, marker in rules.effects.items():
                if _covers(path, rule) and marker not in effects:
                    effects.append(marker)
    if rules is None and changed and type_ != KUBERNETES_PROVIDER:
        notes.append("no rule here for this type: `pulumi preview` shows whether the provider replaces it")
    # applyReplaceOnChanges: a change at or under a replaceOnChanges path is a replacement.
    for path in changed:
        roc = next((r for r in new_options.get("replaceOnChanges") or [] if _at_or_under(path, str(r))), None)
        if roc is not None:
            because.append(f"{path} changed, and the resource replaces on changes of {roc!r} [{_ENGINE}]")

    if because:
        action: Action = "replace"
        effects = []  # a replaced machine boots fresh: nothing waits for a next boot
    elif changed:
        action = "update"
    else:
        action = "same"
    blocked = ""
    if action == "replace" and old_options.get("protect") and new_options.get("protect"):
        blocked = "it is protected: `pulumi up` refuses to replace it (remove `protect` first)"
    return ResourceChange(
        urn=urn,
        type=type_,
        name=name,
        action=action,
        changed=changed,
        because=tuple(dict.fromkeys(because)),
        notes=tuple(notes) if action == "update" else (),
        effects=tuple(effects),
        replaced_means=rules.replaced_means if rules and action == "replace" else "",
        delete_first=_delete_first(type_, new_inputs, new_options) if action == "replace" else None,
        blocked=blocked,
    )


def _delete_first(type_: str, inputs: Mapping[str, Any], options: Mapping[str, Any]) -> Optional[bool]:
    """Whether a replacement deletes the old resource first: the program's deleteBeforeReplace
    when it sets one (step_generator.go: the goal's option overrides the provider's answer);
    otherwise pulumi-kubernetes asks for it for every named object (provider.go Diff,
    ``deleteBeforeReplace``) and never for a Helm release; other providers decide for themselves
    (None)."""
    if options.get("deleteBeforeReplace"):
        return True
    if type_ == HELM_RELEASE_TYPE:
        return False  # helm_release.go Diff: DeleteBeforeReplace false
    if type_.startswith("kubernetes:") and type_ != KUBERNETES_PROVIDER:
        return bool((inputs.get("metadata") or {}).get("name"))
    return None


# --- A whole plan --------------------------------------------------------------------------------


def compare_plans(
    base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[ResourceChange]:
    """Every resource of ``base`` (what is deployed) and ``new`` (what `pulumi up` would declare),
    matched as the engine matches them (URN, then aliases), with what happens to it. New
    resources first in ``new``'s order, then the deleted ones in ``base``'s. Component resources
    (``custom: false``) are matched (their aliases carry to their children) but left out: the
    engine creates nothing for them in the cloud."""
    before = {normal_urn(r["urn"]): r for r in base}
    after = {normal_urn(r["urn"]): r for r in new}
    resolver = _AliasResolver(after, set(before))
    matched = {urn: resolver.old_urn(urn) for urn in _parent_first(after)}
    context: dict[str, Any] = plan_facts(
        [r.get("inputs") or {} for r in after.values() if r.get("type") == KUBERNETES_PROVIDER]
    )
    # Providers first: what they do decides what happens to every resource on them.
    replaced_providers: set[str] = set()
    for urn, resource in after.items():
        old_urn = matched[urn]
        if resource["type"].startswith("pulumi:providers:") and old_urn is not None:
            change = classify(
                urn, resource["type"], resource["name"], before[old_urn], resource, context=context
            )
            if change.action == "replace":
                replaced_providers.update((urn, resource["type"]))
    context["replacedProviders"] = tuple(sorted(replaced_providers))

    # Each change names the resource by the URN its plan gives it.
    changes = []
    for urn, resource in after.items():
        if not resource.get("custom", True):
            continue
        old_urn = matched[urn]
        if old_urn is None:
            changes.append(ResourceChange(resource["urn"], resource["type"], resource["name"], "create"))
            continue
        change = classify(
            resource["urn"], resource["type"], resource["name"], before[old_urn], resource, context=context
        )
        if old_urn != urn:
            change = _moved(change, before[old_urn]["urn"])
        changes.append(change)
    claimed = {old for old in matched.values() if old is not None}
    for urn, resource in before.items():
        if urn not in claimed and resource.get("custom", True):
            changes.append(_deleted(resource["urn"], resource))
    return _moves_noted(changes)


def _moved(change: ResourceChange, old_urn: str) -> ResourceChange:
    note = f"found at its deployed URN {old_urn} through an alias: diffed, not re-created"
    return ResourceChange(
        **{**change.__dict__, "previous_urn": old_urn, "notes": (*change.notes, note)},
    )


def _deleted(urn: str, resource: Mapping[str, Any]) -> ResourceChange:
    options = _options(resource)
    notes, blocked = [], ""
    if options.get("protect"):
        blocked = "it is protected: `pulumi up` refuses to delete it (remove `protect` first)"
    if options.get("retainOnDelete"):
        notes.append("retainOnDelete: dropped from the stack's state, left in the cloud")
    return ResourceChange(
        urn, resource["type"], resource["name"], "delete", notes=tuple(notes), blocked=blocked
    )


def _moves_noted(changes: list[ResourceChange]) -> list[ResourceChange]:
    """A resource whose URN changed (a new parent or type, a rename) and that no alias carries is,
    to the engine, one resource deleted and another created."""
    created = {(c.type, c.name) for c in changes if c.action == "create"}
    deleted = {(c.type, c.name) for c in changes if c.action == "delete"}
    moved = created & deleted
    if not moved:
        return changes
    note = (
        "its URN changed (a new parent?): without `aliases` Pulumi deletes the old one and creates this one"
    )
    return [
        ResourceChange(**{**c.__dict__, "notes": (*c.notes, note)})
        if c.action in ("create", "delete") and (c.type, c.name) in moved
        else c
        for c in changes
    ]
