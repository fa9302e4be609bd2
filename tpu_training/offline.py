"""Run the real stack program without the cloud or the Pulumi CLI, and record what it declares.

Used by ``tpu-training plan`` and by the tests. It reads ``Pulumi.yaml`` and
``Pulumi.<stack>.yaml`` the way the CLI does (project defaults, namespacing, value encoding), runs
``infra/__main__.py`` under the Pulumi SDK's mocks, and records every resource registration with
its inputs exactly as the engine would receive them and its resource options.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
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
from tpu_training_components import preview as library_preview
from tpu_training_components.domain import wire_values
from tpu_training_components.library_internals import sdk_without_stack_traces

from tpu_training.project_files import REPO_ROOT, Project, stack_config

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
modification and change times): a process that plans again (`tpu-training recover`'s every round, a
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
    # anywhere walks all of them. A watch (tpu-training recover) runs the program every round.
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
    """The program's folder first on ``sys.path`` while it runs, and its top-level imports (a
    module beside its ``__main__.py``) its own folder's. A process that plans two projects in
    turn (a test, or an importer planning several copies of a project) would otherwise run the
    second program with the first one's modules. Afterwards ``sys.path`` and the modules under
    the program's names are as they were."""

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
