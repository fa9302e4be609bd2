"""Run the real stack program without the cloud or the Pulumi CLI, and record what it declares.

Used by ``python -m infra.plan`` and by the tests. It reads ``Pulumi.yaml`` and
``Pulumi.<stack>.yaml`` the way the CLI does (project defaults, namespacing, value encoding), runs
``infra/__main__.py`` under the Pulumi SDK's mocks, and records every resource registration with
its inputs exactly as the engine would receive them and its resource options.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import copy
import functools
import hashlib
import json
import logging
import os
import re
import runpy
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.constructor import SafeConstructor
from semver import VersionInfo
from tpu_training_components import preview as library_preview
from tpu_training_components.domain import wire_values
from tpu_training_components.library_internals import sdk_without_stack_traces

from infra.stack_config import OFFLINE_SECRET

REPO_ROOT = Path(__file__).resolve().parent.parent


class ProjectFileError(Exception):
    """Pulumi.yaml or a stack file is missing or malformed."""


# ---------------------------------------------------------------------------------------------
# Project and stack files
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    name: str
    root: Path
    program_dir: Path
    declarations: dict[str, Any]
    stack_config_dir: Optional[Path] = None
    """Where the stack files are (``stackConfigDir``); beside Pulumi.yaml when None."""

    def stack_file(self, stack: str) -> Path:
        """The stack's settings file, where the CLI looks for it: ``Pulumi.<stack>.yaml`` in
        ``stackConfigDir`` (relative to Pulumi.yaml's folder), or beside Pulumi.yaml; a stack
        named ``org/project/stack`` in ``Pulumi.org-project-stack.yaml`` (pulumi/pulumi
        ``sdk/go/common/workspace/paths.go``, ``ProjectStackPath`` and ``qnameFileName``)."""
        folder = self.stack_config_dir or self.root
        return folder / f"Pulumi.{stack.replace('/', '-')}.yaml"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder from ``start`` (default: the working directory) upwards that holds a
    Pulumi.yaml, as the CLI finds its project; this repository when there is none."""
    here = (start or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    return REPO_ROOT


def load_project(root: Path | None = None) -> Project:
    root = root or find_project_root()
    path = root / "Pulumi.yaml"
    document = _read_yaml(path)
    if not isinstance(document, dict) or not document.get("name"):
        raise ProjectFileError(f"{path}: not a Pulumi project file (no 'name')")
    problem = _runtime_problem(document.get("runtime")) or _version_range_problem(
        document.get("requiredPulumiVersion")
    )
    if problem:
        raise ProjectFileError(f"{path}: {problem}")
    main = document.get("main") or "."
    if not isinstance(main, str):
        raise ProjectFileError(f"{path}: 'main' must be the program's folder, not a {type(main).__name__}")
    program_dir = (root / main).absolute()
    if not (program_dir / "__main__.py").is_file():
        raise ProjectFileError(f"{path}: 'main' is {main!r}, but {program_dir} holds no __main__.py")
    # `config: <folder>` is the older spelling of `stackConfigDir`, which the CLI still takes,
    # but not both (pulumi/pulumi sdk/go/common/workspace/project.go,
    # RewriteConfigPathIntoStackConfigDir).
    declarations = document.get("config")
    stack_config_dir = document.get("stackConfigDir")
    if isinstance(declarations, str):
        if stack_config_dir is not None:
            raise ProjectFileError(
                f"{path}: Should not use both config and stackConfigDir to define the stack "
                f"directory. Use only stackConfigDir instead."
            )
        stack_config_dir, declarations = declarations, None
    if stack_config_dir is not None and not isinstance(stack_config_dir, str):
        raise ProjectFileError(
            f"{path}: 'stackConfigDir' must be a folder, not a {type(stack_config_dir).__name__}"
        )
    return Project(
        name=str(document["name"]),
        root=root,
        program_dir=program_dir,
        declarations=_mapping(path, "'config'", declarations),
        # Joined to Pulumi.yaml's folder, as the CLI's filepath.Join does (an absolute folder
        # included: Go's Join does not restart at one).
        stack_config_dir=root / stack_config_dir.lstrip("/") if stack_config_dir else None,
    )


def _runtime_problem(runtime: Any) -> Optional[str]:
    """Why ``runtime`` is not this project's (its program is Python: ``main``'s __main__.py)."""
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name == "python":
        return None
    shown = json.dumps(runtime, default=str)[:80]
    return (
        f"runtime = {shown}: this project's program is Python (infra/__main__.py, run by the Python "
        f"language host); allowed: python, or {{name: python, options: ...}}"
    )


# blang/semver v4 ``ParseRange``, which the CLI checks requiredPulumiVersion with (pulumi/pulumi
# sdk/go/common/resource/plugin/plugin.go ``ValidatePulumiVersionRange``): ranges joined by `||`,
# each of space-separated comparisons `OP VERSION` (a space after < > = is dropped), OP one of
# < <= > >= = == ! != or none, VERSION a whole semantic version or one with `x` wildcards.
_COMPARISON = re.compile(r"(<=|>=|<|>|==|=|!=|!)?(.+)")
_WILDCARD = re.compile(r"(0|[1-9][0-9]*)\.(x|(0|[1-9][0-9]*)\.x)")


def _version_range_problem(text: Any) -> Optional[str]:
    """Why ``requiredPulumiVersion`` is no version range the CLI can read (None: absent, or one)."""
    if text is None:
        return None
    allowed = 'a semantic version range such as ">=3.226.0" or ">=3.226.0 <4.0.0"'
    if not isinstance(text, str) or not text.strip():
        return f"requiredPulumiVersion = {json.dumps(text, default=str)[:80]}: allowed: {allowed}"
    for part in text.split("||"):
        comparisons = re.sub(r"([<>=])\s+", r"\1", part).split()
        for comparison in comparisons or [""]:
            match = _COMPARISON.fullmatch(comparison)
            version = match.group(2) if match else ""
            if not (VersionInfo.is_valid(version) or _WILDCARD.fullmatch(version)):
                return (
                    f"requiredPulumiVersion = {json.dumps(text)[:80]}: {comparison!r} is no comparison "
                    f"with a version; allowed: {allowed} (the CLI refuses any other)"
                )
    return None


class _TimestampsAsText(SafeConstructor):
    """The CLI (Go's yaml.v3) hands an unquoted `2025-12-01T00:00:00Z` to the program as the text
    it is; ruamel would make a datetime of it."""


_TimestampsAsText.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_str)


def _yaml_1_2() -> YAML:
    # The Pulumi CLI reads project and stack files with a YAML 1.2 parser that refuses duplicate
    # keys; PyYAML is YAML 1.1, where `12:30` is 750, `on` is true and a repeated key silently
    # wins. ruamel.yaml's safe loader is YAML 1.2 and refuses duplicate keys by default.
    loader = YAML(typ="safe", pure=True)
    loader.Constructor = _TimestampsAsText
    return loader


@functools.lru_cache(maxsize=64)
def _parsed_yaml_1_2(text: str) -> Any:
    return _yaml_1_2().load(text)


def _load_yaml_1_2(text: str) -> Any:
    """The single document in ``text``, as the Pulumi CLI reads it (see ``_yaml_1_2``). Parsed
    once per text (the pure-Python parser took about 20 ms of every plan, and a watch's rounds and
    repeated plans read the same files); each caller gets its own copy to change."""
    return copy.deepcopy(_parsed_yaml_1_2(text))


def _read_yaml(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProjectFileError(f"{path} does not exist") from None
    except OSError as exc:
        raise ProjectFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise ProjectFileError(
            f"{path} is UTF-16; Pulumi reads project and stack files as UTF-8: save it as UTF-8"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProjectFileError(
            f"{path}: line {line} is not UTF-8 (byte 0x{data[exc.start]:02x}); Pulumi reads project and "
            f"stack files as UTF-8: save it as UTF-8"
        ) from None
    try:
        document = _load_yaml_1_2(text)
    except YAMLError as exc:
        # ruamel adds a paragraph on how to switch its check off; the error itself is enough.
        reason = str(exc).split("\n\nTo suppress this check", 1)[0].strip()
        # ruamel shows a duplicate key's values as its parser's stand-ins ("{}" for any mapping),
        # and the text it read as "<unicode string>": name the file, and leave the values out.
        reason = re.sub(r' with value "[^"]*" \(original value: "[^"]*"\)', "", reason)
        reason = reason.replace('"<unicode string>"', f'"{path.name}"')
        raise ProjectFileError(f"{path} is not valid YAML 1.2 (as Pulumi reads it): {reason}") from None
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        # What ruamel's constructors raise on values they cannot build: `!!int abc`, an integer
        # of thousands of digits, nesting deeper than Python's stack.
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise ProjectFileError(f"{path} is not valid YAML 1.2 (as Pulumi reads it): {reason}") from None
    _check_size(path, document)
    return document


MAX_VALUES = 100_000
"""More values than any stack file needs: a file past it is an alias bomb (a few lines that
expand to billions of values), which the CLI's parser refuses too ("excessive aliasing")."""


def _check_size(path: Path, document: Any) -> None:
    pending, counted = [document], 0
    while pending:
        value = pending.pop()
        counted += 1
        if counted > MAX_VALUES:
            raise ProjectFileError(
                f"{path} expands to more than {MAX_VALUES} values (aliases that repeat aliases?); "
                f"Pulumi refuses such files too"
            )
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)


def _mapping(path: Path, what: str, value: Any) -> dict[str, Any]:
    """A mapping with string keys, as Pulumi's files hold; a clear error for anything else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProjectFileError(
            f"{path}: {what} must be a mapping of keys to values, not a {type(value).__name__}"
        )
    for key in value:
        if not isinstance(key, str):
            raise ProjectFileError(
                f"{path}: {what} has the key {key!r} ({type(key).__name__}); keys must be strings "
                f"such as 'tpu-training:tpuVms' (quote it)"
            )
    return dict(value)


# What a `secure:` value reads as offline, where there is no key to decrypt it. One literal with
# the stack config, which recognises it to leave out what it cannot plan without the real value.
SECRET_PLACEHOLDER = OFFLINE_SECRET


def _encode(value: Any) -> str:
    """How the CLI hands a config value to the program: plain text for scalars, JSON for
    objects and lists (which ``Config.get_object`` parses back), and an empty string for a
    top-level `null` (pulumi/pulumi sdk/go/common/workspace/loaders.go, since 3.173.0)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _encode_value(path: Path, key: str, value: Any, secrets_found: list[bool]) -> str:
    try:
        return _encode(_strip_secrets(value, secrets_found))
    except (TypeError, ValueError, RecursionError) as exc:
        # A key that is a list or a map (`? [a, b] : c`), or nesting too deep for JSON.
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise ProjectFileError(f"{path}: {key} cannot be handed to the program as JSON ({reason})") from None


def _strip_secrets(value: Any, found: list[bool]) -> Any:
    # Offline there is no key to decrypt `secure:` values; stand in a placeholder, remember it.
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            found.append(True)
            return SECRET_PLACEHOLDER
        return {k: _strip_secrets(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_secrets(v, found) for v in value]
    return value


def _qualify(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool) or v in ("true", "false"),
    "array": lambda v: isinstance(v, list),
}


def stack_config(project: Project, stack: str) -> tuple[dict[str, str], list[str], list[str]]:
    """The config map the CLI would give the program: (values, secret keys, warnings)."""
    path = project.stack_file(stack)
    document = _mapping(path, "the stack file", _read_yaml(path))
    stack_values = {
        _qualify(project.name, k): v for k, v in _mapping(path, "'config'", document.get("config")).items()
    }

    merged: dict[str, Any] = {}
    for key, declaration in project.declarations.items():
        qualified = _qualify(project.name, key)
        namespaced_by_project = qualified.startswith(project.name + ":")
        if not isinstance(declaration, dict):
            merged[qualified] = declaration  # shorthand: a default (or a value, other namespaces)
            continue
        if "default" in declaration or "value" in declaration:
            merged[qualified] = declaration.get("default", declaration.get("value"))
        elif namespaced_by_project and qualified not in stack_values:
            raise ProjectFileError(f"Stack '{stack}' is missing configuration value '{key}'")
        declared_type = declaration.get("type")
        if declared_type and qualified in stack_values:
            check = _TYPE_CHECKS.get(declared_type, lambda v: True)
            if not check(stack_values[qualified]):
                raise ProjectFileError(
                    f"Stack '{stack}' with configuration key '{key}' must be of type '{declared_type}'"
                )
    merged.update(stack_values)

    values: dict[str, str] = {}
    secret_keys: list[str] = []
    warnings: list[str] = []
    for key, value in merged.items():
        if value is None:
            # The CLI's own warning, word for word but for the key.
            warnings.append(
                f"No value for configuration key {key!r}. This is currently treated as an empty "
                f'string "", but will be treated as `null` in a future version of pulumi.'
            )
        found: list[bool] = []
        values[key] = _encode_value(path, key, value, found)
        if found:
            secret_keys.append(key)
            warnings.append(
                f"{key} holds a secret, which the offline plan cannot decrypt; "
                f"it reads {SECRET_PLACEHOLDER!r} in its place"
            )
    return values, secret_keys, warnings


# ---------------------------------------------------------------------------------------------
# Recording what the program registers
# ---------------------------------------------------------------------------------------------


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    options: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    provider: str = ""
    """The provider reference (``urn::id``) the resource was registered with, if any."""

    def to_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "inputs": self.inputs,
            "options": self.options,
        }


class PlanMocks(library_preview.PreviewMocks):
    """The library's offline-preview mocks: stand-ins for what the cloud computes, and the stack's
    outputs from its last update as what a read of them returns (none offline, unless a caller
    says otherwise)."""


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A mock monitor that also keeps what the engine would see: inputs, parents and options."""

    def __init__(self, mocks: pulumi_mocks.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: dict[str, Registration] = {}
        self.stack_outputs: dict[str, Any] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        options: dict[str, Any] = {
            "protect": request.protect if request.HasField("protect") else False,
            "deleteBeforeReplace": request.deleteBeforeReplace,
            "retainOnDelete": request.retainOnDelete if request.HasField("retainOnDelete") else False,
            "dependsOn": sorted(request.dependencies),
            "ignoreChanges": sorted(request.ignoreChanges),
            "replacementTrigger": (
                json_format.MessageToDict(request.replacement_trigger)
                if request.HasField("replacement_trigger")
                else None
            ),
            "replaceOnChanges": sorted(request.replaceOnChanges),
            # As the SDK sends them: {"urn": ...} or {"spec": {name, type, parentUrn, noParent, ...}}.
            "aliases": [json_format.MessageToDict(alias) for alias in request.aliases],
            # The provider reference's URN ("urn::id" without the id); "" for the default provider.
            "provider": request.provider.rsplit("::", 1)[0] if request.provider else "",
        }
        inputs = rpc.deserialize_properties(request.object)
        self.registrations[response.urn] = Registration(
            urn=response.urn,
            type=request.type,
            name=request.name,
            parent=request.parent,
            custom=request.custom,
            inputs=_plain(inputs),
            options=_plain(options),
            outputs=_plain(self.resources[response.urn].state),
            provider=request.provider,
        )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if "::pulumi:pulumi:Stack::" in request.urn:
            self.stack_outputs = _plain(rpc.deserialize_properties(request.outputs))
        return super().RegisterResourceOutputs(request)


def _plain(value: Any) -> Any:
    """Protobuf-free, JSON-ready copy (secrets are kept as their plain values offline)."""
    return wire_values.plain(value, _plain_asset_or_secret)


def _plain_asset_or_secret(value: Any) -> Any:
    if isinstance(value, pulumi.FileAsset):
        # The file, named from the project folder, so the plan reads the same on every machine,
        # and the SHA-256 of its contents: the engine compares an asset by that hash, so an edit of
        # the file is a change even where its path is the same (the trainer's code, uploaded).
        path = Path(os.path.abspath(value.path))
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
        return {"fileAsset": str(shown), "sha256": _file_sha256(path)}
    if rpc.is_rpc_secret(value):
        return _plain(rpc.unwrap_rpc_secret(value))
    return wire_values.KEEP


def _file_sha256(path: Path) -> str:
    try:
        seen = os.stat(path)
        version = (seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns)
        known = _DIGESTS.get(path)
        if known is not None and known[0] == version:
            return known[1]
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:  # the engine fails on it too; the plan names the file and why
        return f"unreadable: {error.strerror or error}"
    # Kept only once the file has been still for a while: a file written again within one tick of
    # the file system's clock, at the same size, would otherwise keep its old digest (git's
    # "racy clean" case). The trainer's files, read by every run of a process, are old.
    if time.time_ns() - max(seen.st_mtime_ns, seen.st_ctime_ns) > _SETTLED_NS:
        _DIGESTS[path] = (version, digest)
    return digest


_DIGESTS: dict[Path, tuple[tuple[int, int, int, int], str]] = {}
"""Each uploaded file's SHA-256 by path, with the file's identity when it was read (inode, size,
modification and change times): a process that plans again (``infra.recover``'s every round, a
test session's thousands of runs) reads a file again only when it changed."""
_SETTLED_NS = 2_000_000_000


# ---------------------------------------------------------------------------------------------
# Running a program
# ---------------------------------------------------------------------------------------------


@dataclass
class ProgramRun:
    project: str
    stack: str
    registrations: list[Registration]
    outputs: dict[str, Any]
    warnings: list[str]
    infos: list[str]

    def by_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str, name: str) -> Registration:
        matches = [r for r in self.registrations if r.type == type_ and r.name == name]
        if len(matches) != 1:
            raise KeyError(f"{len(matches)} registrations of {type_} named {name!r}")
        return matches[0]


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        (self.warnings if record.levelno >= logging.WARNING else self.infos).append(record.getMessage())


@contextlib.contextmanager
def _own_event_loops() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop of the run's own, current while the SDK is set up and the program runs;
    closed afterwards with every loop the mock monitor's worker threads made. Left open, Python
    finds them at exit and may print `Exception ignored in: <function BaseEventLoop.__del__>`
    after a successful run."""
    worker_loops: list[asyncio.AbstractEventLoop] = []

    def give_the_thread_a_loop() -> None:
        # The mock monitor runs in these threads and would make a loop in each, never closed.
        worker_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(worker_loop)
        worker_loops.append(worker_loop)

    # The loop's tasks, as it makes them: what is still pending at the end is cancelled. Not
    # asyncio.all_tasks(loop), which walks every task of the process not yet collected (some
    # 1,300 a run are left in reference cycles; a process that plans again and again, a watch
    # or a test session, held tens of thousands, and a run spent 7% of its time walking them).
    tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    def make_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        tasks.add(task)
        return task

    loop = asyncio.new_event_loop()
    loop.set_task_factory(make_task)
    executor = ThreadPoolExecutor(thread_name_prefix="offline-monitor", initializer=give_the_thread_a_loop)
    loop.set_default_executor(executor)
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        pending = [task for task in list(tasks) if not task.done()]
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        executor.shutdown(wait=True)
        for worker_loop in worker_loops:
            worker_loop.close()
        loop.close()
        asyncio.set_event_loop(None)


def run(
    body: Callable[[], Any],
    *,
    project: str,
    stack: str,
    config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
    preview: bool = False,
    previous_outputs: dict[str, Any] | None = None,
) -> ProgramRun:
    """Run ``body`` (a program, or a few component constructors) under recording mocks."""
    # The run's own logger, outside logging's registry: one made by getLogger(name) lives as long
    # as the process, with its collector and every message it collected, and every setLevel
    # anywhere walks all of them. A watch (infra.recover) runs the program every round.
    logger = logging.Logger(f"tpu-training.offline.{stack}", logging.INFO)
    logger.propagate = False
    collector = _Collector()
    logger.addHandler(collector)

    with _own_event_loops() as loop, sdk_without_stack_traces():
        # As Pulumi's Automation API runs an inline program (pulumi/automation/_server.py,
        # LanguageServer.Run): reset_options, set_all_config, then run_in_stack in its own loop,
        # which makes the root stack and registers its outputs when the program is done. With the
        # mock monitor in place of the engine's; not set_mocks, which makes a root stack of its
        # own and finishes it at once, so that the program's exports would never be registered.
        pulumi.runtime.reset_options(project=project, stack=stack, preview=preview)
        pulumi.runtime.set_all_config(dict(config or {}), list(secret_keys or []))
        monitor = RecordingMonitor(PlanMocks(previous_outputs))
        pulumi.runtime.configure(
            pulumi.runtime.Settings(
                project=project,
                stack=stack,
                monitor=monitor,
                engine=pulumi_mocks.MockEngine(logger),
                dry_run=preview,
            )
        )
        try:
            loop.run_until_complete(pulumi.runtime.run_in_stack(body))
        finally:
            pulumi.runtime.set_all_config({}, [])
    registrations = sorted(monitor.registrations.values(), key=lambda r: r.urn)
    return ProgramRun(
        project, stack, registrations, monitor.stack_outputs, collector.warnings, collector.infos
    )


def program_body(program_dir: Path) -> Callable[[], Any]:
    """The program as the language host runs it: its folder run as ``__main__``. For a directory
    ``main`` the engine runs the host in that folder with the entry point "." (pulumi/pulumi
    pkg/engine/project.go, ``getPwdMain``), and the executor calls ``runpy.run_path(".",
    run_name="__main__")`` (sdk/python/cmd/pulumi-language-python-exec): Python finds the folder's
    ``__main__.py`` as it finds a module, and loads it compiled from ``__pycache__``."""
    return lambda: runpy.run_path(str(program_dir), run_name="__main__")


def _share_config_module(program_dir: Path) -> None:
    """The program imports its config package as `stack_config` (the language host puts only its
    folder on sys.path); this package has loaded the same files as `infra.stack_config` already.
    One package, not a second copy whose pydantic models are built again (18 ms of the dev plan):
    the package and each of its loaded modules get their program-side name too."""
    loaded = sys.modules.get("infra.stack_config")
    source = getattr(loaded, "__file__", None)
    if loaded is None or source is None or "stack_config" in sys.modules:
        return
    if Path(source).resolve() == (program_dir / "stack_config" / "__init__.py").resolve():
        for name, module in list(sys.modules.items()):
            if name == "infra.stack_config" or name.startswith("infra.stack_config."):
                sys.modules[name.removeprefix("infra.")] = module


def run_program(
    project: Project,
    stack: str,
    preview: bool = False,
    previous_outputs: Optional[dict[str, Any]] = None,
) -> ProgramRun:
    """Run the project's program (``main`` in Pulumi.yaml) as the language host would: with the
    program directory first on ``sys.path`` and ``__name__ == "__main__"``. ``previous_outputs``
    are the stack's outputs from its last update (what its own stack reference reads)."""
    config, secret_keys, warnings = stack_config(project, stack)
    with _program_on_path(project.program_dir):
        _share_config_module(project.program_dir)
        result = run(
            program_body(project.program_dir),
            project=project.name,
            stack=stack,
            config=config,
            secret_keys=secret_keys,
            preview=preview,
            previous_outputs=previous_outputs,
        )
    result.warnings[:0] = warnings
    return result


@contextlib.contextmanager
def _program_on_path(program_dir: Path) -> Iterator[None]:
    """The program's folder first on ``sys.path`` while it runs, and its top-level imports (its
    `import stack_config`) its own folder's. A process that plans two projects in turn (a test,
    or an importer planning several copies of this project) would otherwise run the second
    program with the first one's `stack_config`, whose project folder is the first one's: the
    trainer's files would be read and uploaded from there. Afterwards ``sys.path`` and the
    modules under the program's names are as they were."""

    # The names the program's folder makes importable: its modules and packages (not __main__,
    # which runpy sets for the run itself, nor __init__ or __pycache__).
    names = {
        path.stem
        for path in program_dir.iterdir()
        if (path.suffix == ".py" or path.is_dir()) and not path.name.startswith("__")
    }

    def program_side(name: str) -> bool:
        return name.partition(".")[0] in names

    def from_program_dir(module: Any) -> bool:
        source = getattr(module, "__file__", None)
        return source is not None and Path(source).resolve().is_relative_to(program_dir.resolve())

    saved_path = list(sys.path)
    before = {name: module for name, module in sys.modules.items() if program_side(name)}
    # Another folder's modules under this program's names: set aside for the run.
    for name, module in before.items():
        if not from_program_dir(module):
            del sys.modules[name]
    sys.path.insert(0, str(program_dir))
    try:
        yield
    finally:
        sys.path[:] = saved_path
        for name in [name for name in sys.modules if program_side(name)]:
            del sys.modules[name]
        sys.modules.update(before)
