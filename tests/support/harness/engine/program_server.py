"""A fork server for the engine tier: the processes the real CLI starts for a command (the
program, and the plugin doubles: language host, ``gcp`` and ``kubernetes`` providers) are forked
from one warm process instead of started as new interpreters.

Why: every ``pulumi preview``, ``up`` and recovery round runs the program and three or four plugins,
and a new interpreter spends about two of the program's three CPU-seconds importing the SDK and
the providers' packages (pulumi_gcp.compute alone is 1.3 s), and a quarter of a second per plugin.

What a child is: a process of the same interpreter, in the caller's folder, with the caller's
environment, arguments and ``sys.path`` as ``python -u EXECUTOR ARGS`` (the program) or ``python
-m MODULE ARGS`` (a plugin) would have them, the caller's standard streams (passed over the
socket), its own default signal handlers, and the script or module run as ``__main__``. It ends
as the interpreter ends (threads joined, atexit handlers, streams flushed) but does not free its
objects one by one (``_end_child`` says why), and the caller reads its status as a subprocess's.

- The caller is an executable the CLI or the language host starts, which passes on the
  SIGINT/SIGTERM it receives and ends as the child ends; if it is killed, the server kills the
  child. Two kinds: a plugin double's executable (``python -S -m
  support.harness.engine.program_server plugin SOCKET MODULE ARGS``, ``run_plugin``), and the
  ``python`` of the engine project's virtualenv (``python-shim``, ``run_python``), which the real
  language host runs as ``python EXECUTOR ARGS`` (the program), ``python -m pip list`` and ``python
  -c SCRIPT`` (its dependency checks); anything else it execs the real interpreter for.

What it learns: when a child ends it reports the modules it imported after the fork; the server
imports the ones that live outside the caller's project folder (the SDK, the providers' packages,
this library, the doubles) before the next fork. Nothing of a project (its ``infra`` package, its
``stack_config``) is ever imported here, so each run imports its own project's modules, as a new
interpreter would. The first run of a server is a cold start.

What it does not prove, so the README test's deploy steps run without it
(``test_the_readme_deploy_steps_...``): that the program's imports work in a new interpreter, in
the order a new interpreter takes them.

Run: ``python -m support.harness.engine.program_server SOCKET_PATH``; it serves until its parent (the
pytest process that started it) is gone or it receives SIGTERM.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import warnings
from pathlib import Path
from typing import NoReturn, Optional

_STREAMS = 3
_MAX_REQUEST_BYTES = 4 * 1024 * 1024


def _receive_request(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request: a JSON line (argv, env, cwd) and the caller's standard streams."""
    data = b""
    fds: list[int] = []
    room = socket.CMSG_SPACE(_STREAMS * array.array("i").itemsize)
    while not data.endswith(b"\n"):
        chunk, ancillary, _, _ = connection.recvmsg(65536, room)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                fds.extend(received)
        if not chunk or len(data) > _MAX_REQUEST_BYTES:
            raise ConnectionError("the request ended before its last line")
        data += chunk
    return json.loads(data), fds


def _child_path(first: str, env: dict[str, str]) -> list[str]:
    """``sys.path`` as a new interpreter with ``env`` starts with it: ``first`` (the script's
    folder, or the working folder for ``-m``), then PYTHONPATH's entries, then this interpreter's
    own (standard library, site-packages)."""
    own_extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in own_extra]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *base]


def _run_child(request: dict, fds: list[int], report: Path) -> int:
    """In the forked child: become ``python -u EXECUTOR ARGS`` (or, for a plugin, ``python -m
    MODULE ARGS``) and run it; returns its status."""
    for target, fd in enumerate(fds[:_STREAMS]):
        os.dup2(fd, target)
    for fd in fds:
        os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)  # type: ignore[union-attr]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv: list[str] = request["argv"]
    module: Optional[str] = request.get("module")
    code: Optional[str] = request.get("code")
    # ``python -m`` puts the working folder first on sys.path, ``-c`` an empty entry (the working
    # folder), a script its own folder.
    if module:
        sys.argv, first = ["-m", *argv], os.getcwd()
    elif code is not None:
        sys.argv, first = ["-c", *argv], ""
    else:
        sys.argv, first = argv[:], os.path.dirname(os.path.abspath(argv[0]))
    sys.path[:] = _child_path(first, request["env"])
    root = os.path.realpath(request["cwd"])
    # What the server had imported is the server's already: only what this run imports after
    # the fork is news. (Each module's path is resolved to tell a project's own from the rest;
    # resolving the whole inherited sys.modules, some 1,500 paths, at every child's exit cost the
    # engine tier 9 of its 149 CPU-seconds at -n0.)
    inherited = set(sys.modules)

    def report_modules() -> None:
        # Registered first, so it runs after every handler the program registers.
        names = [
            name
            for name, loaded in list(sys.modules.items())
            if name not in inherited
            and name not in ("__main__", module)
            and not _from_folder(getattr(loaded, "__file__", None), root)
        ]
        report.write_text(json.dumps(names))

    atexit.register(report_modules)
    if module:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif code is not None:
        main = type(sys)("__main__")
        sys.modules["__main__"] = main
        exec(compile(code, "<string>", "exec"), main.__dict__)
    else:
        runpy.run_path(argv[0], run_name="__main__")
    return 0


_PROGRAM_FOLDERS = tuple(
    str(Path(__file__).resolve().parents[4] / part) + os.sep for part in ("infra", "trainer")
)
"""This repository's own program folders, which each engine project holds a copy of: a module from
either is a project's module wherever it was imported from."""


def _from_folder(file: Optional[str], root: str) -> bool:
    """Whether a module's file is a project's own (never imported by the server): it lives in the
    run's project folder, or in the program folders every project copies."""
    if not file:
        return False
    path = os.path.realpath(file)
    return path.startswith(root + os.sep) or path.startswith(_PROGRAM_FOLDERS)


def _preload(names: list[str]) -> int:
    """Import what a finished run imported, so the next fork has it already, in the order it did.

    A submodule is reached as code reaches it, through its package's attribute first: the SDKs
    import their subpackages lazily (importlib.util.LazyLoader), and importing a submodule of a
    lazy package by name first binds the submodule's name on the package, where the package's own
    ``from .CustomResource import *`` would bind the class (pulumi_kubernetes.apiextensions).
    Returns how many modules it imported."""
    before = len(sys.modules)
    for name in names:
        if name in sys.modules or name in _NOT_PRELOADED:
            continue
        package, _, leaf = name.rpartition(".")
        try:
            if package and package in sys.modules and hasattr(sys.modules[package], leaf):
                continue
            # A child that imported it said what it had to say already (pip's own imports warn
            # of pkg_resources' deprecation); here it would only print into the tests' output.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                __import__(name)
        except BaseException:  # noqa: BLE001
            # A module that cannot be imported by name here (one grpc imports half-way through
            # its own import; Cython's shared module): it stays each child's to import. Tried
            # once, said nowhere: the run's output is the tests'.
            _NOT_PRELOADED.add(name)
    return len(sys.modules) - before


_NOT_PRELOADED: set[str] = set()


def serve(path: str) -> None:
    """Serve requests on ``path`` until this server's parent is gone or it is told to stop. A child
    never returns from here: it runs its program and ends (``_end_child``)."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: whoever sees ``path`` can connect.
    listener.bind(f"{path}.binding")
    listener.listen(16)
    os.rename(f"{path}.binding", path)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    running: dict[int, socket.socket] = {}
    plugins: dict[socket.socket, int] = {}
    while not stopping and os.getppid() == parent:
        ready, _, _ = select.select([listener, *plugins], [], [], 0.05)
        for caller in [each for each in ready if each is not listener]:
            # A plugin's caller sends nothing after its request: readable means it is gone
            # (killed by the engine), and the plugin goes with it, as its process would.
            if not caller.recv(1):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(plugins.pop(caller), signal.SIGKILL)
        if listener in ready:
            connection, _ = listener.accept()
            try:
                request, fds = _receive_request(connection)
            except (ConnectionError, ValueError, OSError) as error:
                print(f"program server: a bad request: {error!r}", file=sys.stderr)
                connection.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                for other in running.values():
                    other.close()
                _end_child(_exit_status_of_child(request, fds, _report(path, os.getpid())))
            for fd in fds:
                os.close(fd)
            running[pid] = connection
            with contextlib.suppress(OSError):
                connection.sendall(f"started {pid}\n".encode())
            plugins[connection] = pid
        _reap(path, running, plugins)
    listener.close()
    Path(path).unlink(missing_ok=True)


def _report(path: str, pid: int) -> Path:
    """Where the child ``pid`` writes the names of the modules it imported."""
    return Path(f"{path}.{pid}.modules.json")


def _exit_status_of_child(request: dict, fds: list[int], report: Path) -> int:
    """Run the child's program; its exit status as the interpreter would give it."""
    try:
        return _run_child(request, fds, report)
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT  # the interpreter ends by the signal itself
    except BaseException:
        traceback.print_exc()
        return 1


def _end_child(status: int) -> NoReturn:
    """End a child as the interpreter ends, up to the point where it would free every object:
    non-daemon threads joined (with the hooks concurrent.futures registers for that), atexit
    handlers run, standard streams flushed. The freeing is skipped: in a child it touches every
    object inherited from the server (every module the server imported), which took 0.9 s
    per plugin, about a third of a ``pulumi preview``."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _end_by_signal(status)
    os._exit(status)


def _end_by_signal(status: int) -> None:
    """A status below zero (``-SIGNAL``, as ``subprocess`` reports a death by signal): end this
    process by that signal, as the process it stands for ended."""
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)


def _reap(path: str, running: dict[int, socket.socket], plugins: dict[socket.socket, int]) -> None:
    """Tell each caller whose child ended how it ended, then preload what the child imported."""
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = running.pop(pid, None)
        if connection is None:
            continue
        plugins.pop(connection, None)
        report = _report(path, pid)
        reported = report.read_text() if report.exists() else ""
        report.unlink(missing_ok=True)
        try:
            connection.sendall(f"ended {os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:
            pass  # the caller is gone; its child ended all the same
        connection.close()
        if reported and _preload(json.loads(reported)):
            # What is imported stays: out of the collector's sight (gc.freeze), a child's
            # collections neither walk it nor write to its pages (each write a page copied).
            gc.collect()
            gc.freeze()


def _request(path: str, request: dict) -> tuple[socket.socket, int]:
    """Send ``request`` with this process's standard streams; returns the connection and the pid
    of the child the server started for it."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    message = (json.dumps(request) + "\n").encode()
    streams = array.array("i", [0, 1, 2])
    connection.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams.tobytes())])
    return connection, int(_answer(connection, path, "started"))


def _answer(connection: socket.socket, path: str, word: str) -> str:
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = connection.recv(1)
        if not chunk:
            raise ConnectionError(f"the program server at {path} ended before the program did")
        answer += chunk
    said, _, value = answer.decode().strip().partition(" ")
    if said != word:
        raise ConnectionError(f"the program server at {path} answered {answer!r}, not {word!r}")
    return value


def run_plugin(path: str, module: str, argv: list[str]) -> None:
    """In a plugin executable (``python -S -m support.harness.engine.program_server plugin SOCKET
    MODULE ARGS``): run ``python -m MODULE ARGS`` forked from the server (``_run_forked``)."""
    _run_forked(path, {"module": module, "argv": argv})


_PASSED_THROUGH_FLAGS = {"-u", "-B", "-E", "-s"}
"""Interpreter flags a child of the server already behaves by (unbuffered streams, no bytecode
written matters nowhere here, the environment as given) or that change nothing here."""


def run_python(path: str, args: list[str]) -> None:
    """In the engine project's ``python`` (``python-shim``): run ``python ARGS`` forked from the
    server when ARGS run a script, a module or code (``SCRIPT ARGS``, ``-m MODULE ARGS``, ``-c CODE
    ARGS``, after any of ``_PASSED_THROUGH_FLAGS``); anything else (``--version``, unknown flags)
    is the real interpreter's, exec'd in this process's place."""
    rest = list(args)
    while rest and rest[0] in _PASSED_THROUGH_FLAGS:
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-m":
        _run_forked(path, {"module": rest[1], "argv": rest[2:]})
    if len(rest) >= 2 and rest[0] == "-c":
        _run_forked(path, {"code": rest[1], "argv": rest[2:]})
    if rest and not rest[0].startswith("-"):
        _run_forked(path, {"argv": rest})
    os.execv(sys.executable, [sys.executable, *args])


def _run_forked(path: str, request: dict) -> NoReturn:
    """Run ``request`` forked from the server with this process's environment, folder and standard
    streams, pass on the signals the engine or the host sends to stop it, and end as it ends. If
    this process is killed, the server kills the child."""
    # Handlers first: a signal that comes before the child is forked is passed on once it is.
    child: list[int] = []
    early: list[int] = []

    def pass_on(number: int, frame: object) -> None:
        if not child:
            early.append(number)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, pass_on)
    connection, pid = _request(path, {**request, "env": dict(os.environ), "cwd": os.getcwd()})
    child.append(pid)
    for number in early:
        pass_on(number, None)
    status = int(_answer(connection, path, "ended"))
    _end_by_signal(status)
    sys.exit(status)


def plugin_command(socket_path: str, module: str, *args: str) -> list[str]:
    """The command of a plugin executable whose plugin (``python -m MODULE ARGS``) is forked from
    the server at ``socket_path`` (``run_plugin``); ``-S``: it needs only the standard library."""
    return [
        sys.executable,
        "-S",
        "-m",
        "support.harness.engine.program_server",
        "plugin",
        socket_path,
        module,
        *args,
    ]


def python_shim(socket_path: str) -> str:
    """The text of a ``python`` executable whose scripts, modules and code run forked from the
    server at ``socket_path`` (``run_python``). It runs this file as a script, with ``-S``: it needs
    only the standard library, and it leaves PYTHONPATH and the rest of the environment as its
    caller set them, for the child."""
    return f'#!/bin/sh\nexec {sys.executable} -S {Path(__file__).resolve()} python {socket_path} "$@"\n'


def main() -> None:
    if sys.argv[1] == "plugin":
        run_plugin(sys.argv[2], sys.argv[3], sys.argv[4:])
    if sys.argv[1] == "python":
        run_python(sys.argv[2], sys.argv[3:])
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
