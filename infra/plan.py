"""Show what `pulumi up` would create for a stack, without a cloud account or the Pulumi CLI.

    python -m infra.plan [--stack NAME] [--json PATH|-] [--manifests DIR] [--live [--notices]]
                         [--previous-outputs FILE] [--compare-to BASE_JSON]

Runs the real stack program under the Pulumi SDK's mocks with the stack's config files and prints
every resource it registers. Touches no network, unless --live: then the program reads the live
TPU nodes through the Cloud TPU API (or the endpoint in TPU_API_ENDPOINT) and the live training
Jobs through the Kubernetes API (KUBECONFIG, or the GKE API and Application Default
Credentials) exactly as `pulumi up` does, and shows the recovery decisions; with --notices, also
the maintenance notices of the stack's VMs and pools (one more TPU API call per zone, one more
Kubernetes call; no save is asked: `python -m infra.recover` does that). --manifests writes
every Kubernetes object as a YAML file, for reading or `kubectl apply --dry-run=server -f DIR`.
--previous-outputs takes what `pulumi stack output --json` printed as the stack's last deployed
state, so the plan shows the recovery generations `pulumi up` would declare. --compare-to takes
a plan written with --json from the deployed commit and says per resource what `pulumi up` does
to it: create, update in place, REPLACE (and whether a training restarts), delete.

Exit status (see EXIT_*): 0 on success; 2 when the configuration or a project file is invalid;
64 when the command line is (an unknown option, a stack name Pulumi refuses, an output path that
cannot be written, an unreadable, endless or never-written --previous-outputs file, an
unreadable --compare-to file, `--json -` with standard output closed), checked before any work;
73 when an output could not be written after the plan ran; 130 when interrupted (Ctrl-C). The
reason is always on stderr, on one line.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    # Run from inside infra/ (`python plan.py`, `python -m plan`), where `from infra import`
    # fails: run as `python -m infra.plan` from the project folder (infra/from_inside.py).
    import importlib

    importlib.import_module("from_inside").run_from_project("infra.plan")

import gc
import os
import signal
import sys
from types import FrameType
from typing import NoReturn, Optional

EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGINT): 128 + the signal's number, as shells report it."""


def _interrupted(signum: int, frame: Optional[FrameType]) -> None:
    # One line and out, wherever the interrupt lands: in the middle of an SDK's import it would
    # otherwise end in a traceback of whatever was importing (SystemExit prints none). Nothing
    # the plan writes is half-done in a way a re-run does not redo.
    os.write(2, b"interrupted\n")
    raise SystemExit(EXIT_INTERRUPTED)


def exit_quickly(status: int) -> NoReturn:
    """End a command by the interpreter's own exit, once its output is out, without the
    collector's last passes over every object the SDKs made (``gc.freeze``: the objects are left
    to the teardown, which frees them anyway). Measured with benchmarks/plan_speed.py's method
    (fresh processes, interleaved, 7 rounds, median CPU time, 2026-11-26): a plain exit costs the
    dev plan 3.72 -> 4.72 s and the 256-VM plan 7.81 -> 9.13 s; with the freeze 3.93 s and
    7.57 s, within noise of leaving without any teardown."""
    try:
        if sys.stdout is not None:  # None: started with standard output closed
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`... | head`): Python would complain again when it flushes
        # standard output at exit, so point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _interrupted)
    # A one-shot command: the collector would walk the SDKs' hundreds of thousands of objects,
    # again and again while they import, to free almost nothing (the process ends in seconds).
    # Before the imports below, which is where that time goes. Measured as for exit_quickly: with
    # the collector on, the dev plan takes 4.46 s of CPU instead of 3.86 s, the 256-VM plan 10.64
    # instead of 7.60 s, for 9 MiB less at its peak (benchmarks/plan_speed.py's machine, busy).
    gc.disable()

import argparse  # noqa: E402 - after the collector is off, on purpose
import json  # noqa: E402
import re  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, Callable, Sequence  # noqa: E402

import pulumi  # noqa: E402
import yaml  # noqa: E402
from tpu_training_components.domain import cost_estimate  # noqa: E402
from tpu_training_components.domain.capacity_ladder import LADDERS_OUTPUT, render_prices  # noqa: E402
from tpu_training_components.domain.naming import generation_problem  # noqa: E402
from tpu_training_components.domain.recovery import UNKNOWN_KEPT  # noqa: E402
from tpu_training_components.resources.reconcile import GENERATIONS_OUTPUT, JOB_GENERATIONS_OUTPUT  # noqa: E402

from infra import json_file, offline, plan_diff  # noqa: E402

if TYPE_CHECKING:
    from infra.maintenance import NoticeRound

EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
EXIT_USAGE = 64
"""The command line is wrong (sysexits.h EX_USAGE): nothing was run."""
EXIT_CANNOT_WRITE = 73
EXIT_LIVE_UNAVAILABLE = 75
"""--live, and no live state could be read at all: the plan shows what was last deployed, not
what is live (sysexits.h EX_TEMPFAIL: try again later)."""
"""An output file could not be written after the plan ran (sysexits.h EX_CANTCREAT)."""
_SHORT = 72

# The Pulumi CLI's rule for stack names (pkg/backend: "^[A-Za-z0-9_.-]{1,100}$").
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class UsageError(Exception):
    """The command line cannot be carried out; exit with ``EXIT_USAGE``."""


class CommandLineParser(argparse.ArgumentParser):
    """argparse, with exit status 64 for a bad command line (shared by infra.recover)."""

    def error(self, message: str) -> NoReturn:
        # argparse exits 2 on a bad argument, which is this tool's status for bad config.
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="python -m infra.plan",
        description="Show every resource `pulumi up` would register for a stack, offline.",
        epilog="Exit status: 0 success; 2 invalid configuration or project file; 64 invalid command "
        "line (nothing was run); 73 an output could not be written; 75 --live read no live state "
        "(try again later); 130 interrupted.",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the plan as JSON to PATH ('-' for standard output, which then holds only the JSON)",
    )
    parser.add_argument(
        "--manifests",
        metavar="DIR",
        help="also write every Kubernetes object the stack would apply to DIR, one YAML file each",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="read live TPU nodes (Cloud TPU API, or TPU_API_ENDPOINT) and training Jobs (KUBECONFIG, "
        "or the GKE API) to show recovery decisions",
    )
    parser.add_argument(
        "--notices",
        action="store_true",
        help="with --live: also name the maintenance notices of the stack's TPU VMs and GKE node pools "
        "(one more TPU API call per zone and one Kubernetes call); asks for no save",
    )
    parser.add_argument(
        "--previous-outputs",
        metavar="FILE",
        help="the stack's last deployed outputs, as `pulumi stack output --json > FILE` prints them: "
        "the recovery generations a kept node or Job stays at (default: none deployed yet)",
    )
    parser.add_argument(
        "--compare-to",
        metavar="BASE_JSON",
        help="a plan written with --json from the deployed commit: say per resource whether "
        "`pulumi up` creates, updates in place, replaces or deletes it, and what restarts a training",
    )
    return parser


# ---------------------------------------------------------------------------------------------
# Checking the command line before any work
# ---------------------------------------------------------------------------------------------


def stack_name(stack: str) -> tuple[str, Optional[str]]:
    """``[org/][project/]name`` as the CLI takes it: (name, project or None)."""
    parts = stack.split("/")
    if len(parts) > 3 or not all(_STACK_NAME.match(part) and part not in (".", "..") for part in parts):
        raise UsageError(
            f"--stack {stack!r}: a stack name is 1 to 100 letters, digits, '-', '_' or '.' (Pulumi's "
            f"rule), optionally after ORG/ or ORG/PROJECT/; the plan reads Pulumi.<name>.yaml"
        )
    return parts[-1], parts[1] if len(parts) == 3 else None


def load_project_for(stack: str, stack_project: Optional[str]) -> offline.Project:
    """The project found from the working directory, which ``--stack`` (its project part
    ``stack_project``) must not contradict. Raises ``offline.ProjectFileError`` (a broken project
    file) or ``UsageError`` (``--stack`` names another project)."""
    project = offline.load_project()
    if stack_project not in (None, project.name):
        raise UsageError(f"--stack {stack!r} names project {stack_project!r}; this is {project.name!r}")
    return project


def _writable_folder(folder: Path, option: str, shown: str) -> None:
    """``folder`` exists (or can be made under its nearest existing ancestor) and is writable."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{option} {shown}: {existing} is a file, not a folder")
    if existing == folder and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {shown}: no permission to write in {folder}")
    if existing != folder and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {shown}: cannot create {folder}: no permission to write in {existing}")


def _checking_paths(option: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    """A path check that reports the operating system's refusals (a name too long, say) as
    usage errors too."""

    def wrap(check: Callable[[str], None]) -> Callable[[str], None]:
        def checked(target: str) -> None:
            try:
                check(target)
            except OSError as exc:
                raise UsageError(f"{option} {target}: {exc.strerror or exc}") from None

        return checked

    return wrap


@_checking_paths("--json")
def check_json_target(target: str) -> None:
    """``--json PATH`` names a file that can be written: not a folder, in a folder that exists."""
    if target == "-":
        return
    if not target:
        raise UsageError("--json: give a file name, or '-' for standard output")
    path = Path(target).absolute()
    if path.is_dir():
        raise UsageError(f"--json {target}: is a folder; give a file name such as {path / 'plan.json'}")
    if not path.parent.is_dir():
        what = "is a file" if path.parent.exists() else "does not exist"
        raise UsageError(f"--json {target}: the folder {path.parent} {what}")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"--json {target}: no permission to write it")
    if not path.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"--json {target}: no permission to write in {path.parent}")


@_checking_paths("--manifests")
def check_manifest_folder(target: str) -> None:
    """``--manifests DIR`` is a folder, or can be made as one."""
    if not target:
        raise UsageError("--manifests: give a folder")
    path = Path(target).absolute()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--manifests {target}: is a file, not a folder")
    _writable_folder(path, "--manifests", target)


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


_DECISION = re.compile(
    r"^(?P<name>[^:\s]+): (?P<reason>.*) -> (?P<verb>is kept|will be replaced|will be created) \("
)


def decisions(result: offline.ProgramRun) -> list[tuple[str, str, str, bool]]:
    """Each TPU VM's and Job's recovery decision as the program logged it: (kind, name, what
    `pulumi up` does with it, whether it was made without live state)."""
    kinds = {str(r.inputs.get("name")): "TPU VM" for r in result.by_type("gcp:tpu/v2Vm:V2Vm")}
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


MANIFEST_HEADER = "# Generated by `python -m infra.plan --manifests`; regenerated on every run.\n"
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
    header = MANIFEST_HEADER.encode()
    try:
        with path.open("rb") as file:
            return file.read(len(header)) == header
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.json == "-" and sys.stdout is None:
            # Python sets sys.stdout to None when it starts with file descriptor 1 closed (`>&-`).
            raise UsageError("--json -: standard output is closed; give a file name")
        stack, stack_project = stack_name(args.stack)
        if args.notices and not args.live:
            raise UsageError("--notices reads live state: give --live too")
        if args.json is not None:
            check_json_target(args.json)
        if args.manifests is not None:
            check_manifest_folder(args.manifests)
        previous_outputs = read_previous_outputs(args.previous_outputs) if args.previous_outputs else None
        base = plan_diff.read_base(args.compare_to, stack) if args.compare_to is not None else None
    except (UsageError, plan_diff.CompareError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    if args.live:
        os.environ.pop("TPU_TRAINING_OFFLINE", None)
    else:
        os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        project = load_project_for(args.stack, stack_project)
    except offline.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = offline.run_program(project, stack, previous_outputs=previous_outputs)
    except offline.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except pulumi.RunError as exc:
        # Say why a value reads 'offline-secret' when that is what the program refused.
        for warning in offline.stack_config(project, stack)[2]:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR

    document = plan_document(result)
    notices = live_notices(project, stack) if args.notices else None
    if notices is not None:
        # Only with --notices: the plan JSON keeps its shape (and its golden file), and a --live
        # plan its one call per zone and namespace (benchmarks/plan_speed.py).
        document = dict(document, notices=notices.to_json())
    changes = plan_diff.compare(base, document) if base is not None else None
    if changes is not None:
        # Only with --compare-to: the plan JSON keeps its shape otherwise.
        document = dict(document, changes=plan_diff.to_json(args.compare_to, changes))
    writing = args.manifests
    try:
        written = write_manifests(result, Path(args.manifests)) if args.manifests else []
        if args.json == "-":
            json.dump(document, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
            if changes is not None:  # standard output holds only the JSON
                print(plan_diff.render(args.compare_to, changes, document), file=sys.stderr)
            return EXIT_OK
        print(render_tree(result))
        if changes is not None:
            print(plan_diff.render(args.compare_to, changes, document))
        print(cost_estimate.render(cost_estimate.estimate(result.registrations)))
        ladders = result.outputs.get(LADDERS_OUTPUT)
        if isinstance(ladders, dict) and ladders:
            print("Capacity ladders, per hour (docs/cost.md#capacity-ladders):")
            print("\n".join(render_prices(ladders)))
        print(render_summary(result, live=args.live, compared=changes is not None))
        if notices is not None:
            print("maintenance notices:" if notices.notices else "maintenance notices: none")
            for report in notices.notices:
                print(f"  {report.line()}")
        for message in [*result.warnings, *(notices.warnings if notices else [])]:
            print(f"warning: {message}", file=sys.stderr)
        if args.json:
            writing = args.json
            Path(args.json).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
            print(f"plan written to {args.json}", file=sys.stderr)
    except ManifestError as exc:
        print(f"error: cannot write the manifests: {exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        if exc.filename is None and writing is None:  # printing the plan failed: a full disk or pipe
            return _stdout_failed(exc)
        print(f"error: cannot write {exc.filename or writing}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    if args.manifests:
        print(f"{len(written)} Kubernetes manifests written to {args.manifests}", file=sys.stderr)
        for release in helm_releases(result):
            print(f"  not written: Helm release {release}, whose objects Helm renders", file=sys.stderr)
    made = decisions(result)
    if args.live and made and all(unknown for *_, unknown in made):
        print(
            "error: --live read no live state (every API unavailable): the plan shows what was last "
            "deployed, not what is live",
            file=sys.stderr,
        )
        return EXIT_LIVE_UNAVAILABLE
    return EXIT_OK


def live_notices(project: offline.Project, stack: str) -> NoticeRound:
    """--live: the maintenance notices of the stack's VMs and pools (``infra.maintenance``),
    named with the training each affects. One more Cloud TPU API call per zone and one
    Kubernetes call (the program's own listing stays inside it); no bucket is read and no save
    request written: `python -m infra.recover` asks for the saves."""
    from tpu_training_components.domain.recovery import failure_summary
    from tpu_training_components.live.tpu_api import list_live_nodes

    from infra import stack_config
    from infra.maintenance import NoticeRound, name_notices

    try:
        config, secret_keys, _ = offline.stack_config(project, stack)
        if secret_keys:
            # The plan reads them as stand-ins, which would name VMs and pools that do not exist.
            raise ValueError(
                f"Pulumi.{stack}.yaml holds secrets; `python -m infra.status` reads them decrypted"
            )
        loaded: list[stack_config.StackConfig] = []
        offline.run(
            lambda: loaded.append(stack_config.load(stack)), project=project.name, stack=stack, config=config
        )
        settings = loaded[0]
        nodes = list_live_nodes(
            settings.gcp_project, {zone for vm in settings.tpu_vms for zone in vm.ladder_zones}
        )
        return name_notices(settings, nodes, datetime.now(timezone.utc))
    except Exception as exc:  # noqa: BLE001 - notices never stop a plan
        return NoticeRound(warnings=[f"maintenance notices not read: {failure_summary(exc)}"])


def _stdout_failed(exc: OSError) -> int:
    """Standard output took no more of the plan (``/dev/full``, a full disk): say so, and point it
    at nothing so that Python's own flush at exit does not fail again with a traceback."""
    print(f"error: cannot write the plan to standard output: {exc.strerror or exc}", file=sys.stderr)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_CANNOT_WRITE


def _run() -> int:
    try:
        status = main()
        if sys.stdout is not None:  # None: started with standard output closed; print() skips it
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:
                return _stdout_failed(exc)
        return status
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error of the plan. Python would complain
        # again when it flushes stdout at exit, so point stdout at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:  # run as a function, where _interrupted is not installed
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    exit_quickly(_run())
