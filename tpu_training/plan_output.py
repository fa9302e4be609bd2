"""What the offline plan shows and writes: the plan document (``--json``), the resource tree, the
recovery decisions' summary, the Kubernetes manifests, and the stack's last deployed outputs the
plan starts from. ``commands/plan.py`` runs the program and prints these."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import yaml
from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.naming import generation_problem
from tpu_training_components.domain.queued_resources import QUEUED_TPU_VM_TYPE, is_queued_tpu_vm
from tpu_training_components.domain.recovery import UNKNOWN_KEPT
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT

from tpu_training import json_file, offline, project_files
from tpu_training.command_line import UsageError

if TYPE_CHECKING:
    from tpu_training.recovery.maintenance import NoticeRound


_SHORT = 72


def _generations(document: dict[str, Any], key: str, shown: str) -> None:
    value = document.get(key)
    if value is None:
        return
    if not isinstance(value, dict):
        raise UsageError(f"--previous-outputs {shown}: {key} must be an object of names to generations")
    for name, generation in value.items():
        if isinstance(generation, float) and generation.is_integer():
            generation = int(generation)
        # A generation becomes the `recovery-generation` label value, which recovery must read back.
        problem = generation_problem(generation)
        if problem:
            raise UsageError(
                f"--previous-outputs {shown}: {key}.{name} = {json.dumps(generation)}: {problem}"
            )


def read_previous_outputs(source: str, *, seconds: float = json_file.SECONDS) -> dict[str, Any]:
    """The stack outputs ``pulumi stack output --json`` printed, with the recovery generations
    checked: what the plan takes as "last deployed"."""
    try:
        document = json_file.read_json(
            source, "--previous-outputs", writer=f"pulumi stack output --json > {source}", seconds=seconds
        )
    except json_file.JsonFileError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(document, dict):
        raise UsageError(
            f"--previous-outputs {source}: expected an object of stack outputs, as "
            f"`pulumi stack output --json` prints, not a {type(document).__name__}"
        )
    for key in (GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT):
        _generations(document, key, source)
    return document


def plan_document(result: offline.ProgramRun) -> dict[str, Any]:
    """The plan as a JSON-ready document (the shape ``--json`` writes)."""
    return {
        "project": result.project,
        "stack": result.stack,
        "resources": [r.to_json() for r in result.registrations],
        "outputs": result.outputs,
        "warnings": result.warnings,
        "cost": cost_estimate.estimate(result.registrations).to_json(),
    }


def _short(value: Any) -> Optional[str]:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if "\n" in text:
        return f"<{text.count(chr(10)) + 1} lines>"
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _is_default(value: Any) -> bool:
    return value is None or value is False or value in ("", [], {})


def render_tree(result: offline.ProgramRun) -> str:
    """A readable tree: each resource under its parent, with its inputs and non-default options."""
    children: dict[str, list[offline.Registration]] = {}
    known = {r.urn for r in result.registrations}
    for r in result.registrations:
        parent = r.parent if r.parent in known else ""
        children.setdefault(parent, []).append(r)

    cloud = sum(1 for r in result.registrations if r.custom)
    lines = [
        f"Stack {result.project}/{result.stack}: {len(result.registrations)} resources "
        f"({cloud} in the cloud or cluster, {len(result.registrations) - cloud} components and the stack)"
    ]

    def walk(parent: str, depth: int) -> None:
        for r in children.get(parent, []):
            pad = "  " * depth
            lines.append(f"{pad}+ {r.type}  {r.name}")
            for key, value in r.inputs.items():
                if key == DYNAMIC_PROVIDER_INPUT:
                    continue  # a dynamic provider's pickled code: nothing a reader can check
                if isinstance(value, dict) and len(_short(value) or "") >= _SHORT:
                    # Show long maps (metadata, labels) one entry a line.
                    for sub_key, sub_value in value.items():
                        lines.append(f"{pad}    {key}.{sub_key}: {_short(sub_value)}")
                else:
                    lines.append(f"{pad}    {key}: {_short(value)}")
            flags = [f"{k}={_short(v)}" for k, v in r.options.items() if not _is_default(v)]
            if flags:
                lines.append(f"{pad}    [options] {', '.join(flags)}")
            walk(r.urn, depth + 1)

    walk("", 1)
    if result.outputs:
        lines.append("Outputs:")
        for key, value in result.outputs.items():
            shown = (
                _short(value)
                if isinstance(value, str) and "\n" in value
                else json.dumps(value, sort_keys=True)
            )
            lines.append(f"  {key}: {shown}")
    for message in result.infos:
        lines.append(f"info: {message}")
    return "\n".join(lines)


DYNAMIC_PROVIDER_INPUT = "__provider"
"""The input in which a Python dynamic resource carries its provider, serialized."""

_DECISION = re.compile(
    r"^(?P<name>[^:\s]+): (?P<reason>.*) -> (?P<verb>is kept|will be replaced|will be created) \("
)


def decisions(result: offline.ProgramRun) -> list[tuple[str, str, str, bool]]:
    """Each TPU VM's and Job's recovery decision as the program logged it: (kind, name, what
    `pulumi up` does with it, whether it was made without live state)."""
    kinds = {str(r.inputs.get("name")): "TPU VM" for r in result.by_type("gcp:tpu/v2Vm:V2Vm")}
    kinds.update(
        {
            str(r.inputs["queuedResourceId"]): "TPU VM"
            for r in result.by_type(QUEUED_TPU_VM_TYPE)
            if is_queued_tpu_vm(r.type, r.inputs)
        }
    )
    kinds.update(
        {
            str((r.inputs.get("metadata") or {}).get("name")): "Job"
            for r in result.by_type("kubernetes:batch/v1:Job")
        }
    )
    kinds.update(
        {
            str((r.inputs.get("metadata") or {}).get("name")): "JobSet"
            for r in result.by_type("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet")
        }
    )
    found = []
    for message in [*result.infos, *result.warnings]:
        match = _DECISION.match(message)
        if match and match["name"] in kinds:
            verb = match["verb"].removeprefix("is ").removeprefix("will be ")
            found.append((kinds[match["name"]], match["name"], verb, UNKNOWN_KEPT in match["reason"]))
    return found


def _packed(entries: Sequence[str], width: int = 100) -> list[str]:
    """Entries separated by commas, as many to an indented line as fit, none split."""
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + len(entry) + 2 <= width:
            lines[-1] += f", {entry}"
        else:
            if lines:
                lines[-1] += ","
            lines.append(f"  {entry}")
    return lines


def render_summary(result: offline.ProgramRun, *, live: bool, compared: bool = False) -> str:
    """A few lines a person reads first: how many resources of each kind, each TPU VM's and
    Job's decision, and where the warnings went."""
    custom = [r for r in result.registrations if r.custom]
    kinds: dict[str, int] = {}
    for registration in custom:
        kinds[registration.type] = kinds.get(registration.type, 0) + 1
    what_up_does = (
        "the changes above are what an `up` of the deployed stack does"
        if compared
        else "a first `pulumi up` creates them all; `--compare-to` says what an `up` of a deployed "
        "stack changes"
    )
    lines = [
        f"Summary: {len(custom)} resources in the cloud or cluster ({what_up_does}):",
        *_packed([f"{count} {kind}" for kind, count in sorted(kinds.items())]),
    ]
    made = decisions(result)
    if made:
        if not live:
            how = "offline: live state not read, every one kept"
        elif all(unknown for *_, unknown in made):
            how = "live state unavailable: every one kept as last deployed"
        else:
            how = "from live state"
        lines.append(
            f"  recovery ({how}): " + ", ".join(f"{kind} {name} {verb}" for kind, name, verb, _ in made)
        )
    if result.warnings:
        lines.append(f"  {len(result.warnings)} warning(s), on standard error")
    return "\n".join(lines)


MANIFEST_HEADER = "# Generated by `tpu-training manifests`; regenerated on every run.\n"
EARLIER_HEADERS = ("# Generated by `python -m infra.plan --manifests`; regenerated on every run.\n",)
"""What earlier versions wrote at the top of their manifests: their files are the plan's too."""


_MANIFEST_FIELDS = ("apiVersion", "kind", "metadata", "spec")


class ManifestError(Exception):
    """``--manifests`` cannot write its files as asked; nothing was written."""


def kubernetes_objects(result: offline.ProgramRun) -> list[dict[str, Any]]:
    """Every Kubernetes object the program declares, as the manifest pulumi-kubernetes sends:
    the declared inputs (the provider adds its `app.kubernetes.io/managed-by` label on apply).
    A Helm release (``kubernetes:helm.sh/v3:Release``) is no object of its own: its chart's
    objects are rendered by Helm in the cluster, so it has no manifest here (``helm_releases``)."""
    objects = []
    for registration in result.registrations:
        inputs = registration.inputs
        if registration.custom and registration.type.startswith("kubernetes:") and "kind" in inputs:
            # Manifest order for a human reader: apiVersion, kind, metadata, spec, the rest.
            ordered = {key: inputs[key] for key in _MANIFEST_FIELDS if key in inputs}
            ordered.update({k: v for k, v in inputs.items() if k not in ordered})
            objects.append(ordered)
    return objects


def helm_releases(result: offline.ProgramRun) -> list[str]:
    """The Helm releases the program installs, as ``name (chart version)``: what `--manifests`
    does not write (Helm renders their objects)."""
    return [
        f"{r.inputs.get('name', r.name)} ({r.inputs.get('chart')} {r.inputs.get('version')})"
        for r in result.registrations
        if r.custom and r.type.startswith("kubernetes:helm.sh/")
    ]


def manifest_file_name(manifest: dict[str, Any]) -> str:
    """``{kind}_{namespace}_{name}.yaml``: '_' appears in no kind, namespace or object name
    (Kubernetes names are DNS labels or subdomains), so no two objects share a file name the way
    `x-train` in `ml` and `train` in `ml-x` would with '-'."""
    metadata = manifest.get("metadata", {})
    namespace = metadata.get("namespace") or "cluster"
    return f"{str(manifest['kind']).lower()}_{namespace}_{metadata['name']}.yaml"


def _written_by_a_plan(path: Path) -> bool:
    """Whether ``path`` is a regular file an earlier plan wrote (it starts with the header).
    Links, folders and files that cannot be read are somebody else's: left alone."""
    if path.is_symlink() or not path.is_file():
        return False
    headers = [header.encode() for header in (MANIFEST_HEADER, *EARLIER_HEADERS)]
    try:
        with path.open("rb") as file:
            start = file.read(max(map(len, headers)))
            return any(start.startswith(header) for header in headers)
    except OSError:
        return False


def _manifest_files(objects: list[dict[str, Any]], directory: Path) -> dict[Path, dict[str, Any]]:
    """Each object's file, every one checked before any is written: two objects never share
    one, and a file that is there already must be one an earlier plan wrote (never a link,
    which would write outside the folder, nor a file of somebody else's)."""
    files: dict[Path, dict[str, Any]] = {}
    for manifest in objects:
        path = directory / manifest_file_name(manifest)
        if path in files:
            first = files[path]
            raise ManifestError(
                f"{path}: both {first['apiVersion']} {first['kind']} and {manifest['apiVersion']} "
                f"{manifest['kind']} {manifest['metadata'].get('name')!r} would be written there"
            )
        if path.is_symlink():
            raise ManifestError(f"{path} is a symbolic link; remove it (the plan writes no file through one)")
        if path.exists() and not _written_by_a_plan(path):
            what = "a file an earlier plan did not write" if path.is_file() else "not a regular file"
            raise ManifestError(
                f"{path} is {what} (no '# Generated by' header): move it away, or write elsewhere"
            )
        files[path] = manifest
    return files


def write_manifests(result: offline.ProgramRun, directory: Path) -> list[Path]:
    """Write one YAML file per Kubernetes object. Files an earlier run wrote (recognised by
    their header) are removed first, so the folder never holds an object the stack dropped.
    Raises ``ManifestError``, before anything is written or removed, when a file cannot be
    written as its own (see ``_manifest_files``)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = _manifest_files(kubernetes_objects(result), directory)
    for old in directory.glob("*.yaml"):
        if _written_by_a_plan(old):
            old.unlink()
    for path, manifest in files.items():
        # O_EXCL and O_NOFOLLOW: a link or file put there since the check is not written through.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(MANIFEST_HEADER + yaml.safe_dump(manifest, sort_keys=False))
    return list(files)


def live_notices(project: project_files.Project, stack: str) -> NoticeRound:
    """--live: the maintenance notices of the stack's VMs and pools (``tpu_training.recovery.maintenance``),
    named with the training each affects. One more Cloud TPU API call per zone and one
    Kubernetes call (the program's own listing stays inside it); no bucket is read and no save
    request written: `tpu-training recover` asks for the saves."""
    from tpu_training_components.domain.recovery import failure_summary
    from tpu_training_components.live.tpu_api import list_live_nodes

    from tpu_training import stack_config
    from tpu_training.recovery.maintenance import NoticeRound, name_notices

    try:
        config, secret_keys, _ = project_files.stack_config(project, stack)
        if secret_keys:
            # The plan reads them as stand-ins, which would name VMs and pools that do not exist.
            raise ValueError(f"Pulumi.{stack}.yaml holds secrets; `tpu-training status` reads them decrypted")
        loaded: list[stack_config.StackConfig] = []
        offline.run(
            lambda: loaded.append(stack_config.load(stack, project_root=project.root)),
            project=project.name,
            stack=stack,
            config=config,
        )
        settings = loaded[0]
        nodes = list_live_nodes(
            settings.gcp_project, {zone for vm in settings.tpu_vms for zone in vm.ladder_zones}
        )
        return name_notices(settings, nodes, datetime.now(timezone.utc))
    except Exception as exc:  # noqa: BLE001 - notices never stop a plan
        return NoticeRound(warnings=[f"maintenance notices not read: {failure_summary(exc)}"])
