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

- The program's caller is the language-host double (``run_program``), which waits for it.
- A plugin's caller is the plugin executable the CLI starts (``python -S -m
  support.harness.engine.program_server plugin SOCKET MODULE ARGS``, ``run_plugin``): it passes on the
  SIGINT/SIGTERM the engine sends to stop the plugin and ends as the plugin ends; if the engine
  kills it, the server kills the plugin.

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
from pathlib import Path
from typing import NoReturn, Optional

SERVER_VARIABLE = "ENGINE_PROGRAM_SERVER"
"""The socket path of a running server; the language-host double uses it when it is set."""
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
    # ``python -m`` puts the working folder first on sys.path, a script its own folder.
    sys.argv = ["-m", *argv] if module else argv[:]
    sys.path[:] = _child_path(
        os.getcwd() if module else os.path.dirname(os.path.abspath(argv[0])), request["env"]
    )
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
            if request.get("module"):
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


def run_program(path: str, argv: list[str], env: dict[str, str], cwd: str) -> int:
    """In the language host: run ``python -u ARGV`` through the server at ``path`` with this
    process's standard streams; returns its exit status as ``subprocess`` would."""
    connection, _ = _request(path, {"argv": argv, "env": env, "cwd": cwd})
    with connection:
        return int(_answer(connection, path, "ended"))


def run_plugin(path: str, module: str, argv: list[str]) -> None:
    """In a plugin executable (``python -S -m support.harness.engine.program_server plugin SOCKET MODULE
    ARGS``): run ``python -m MODULE ARGS`` forked from the server, pass on the signals the engine
    sends to stop it, and end as it ends. If this process is killed, the server kills the plugin."""
    # Handlers first: a signal that comes before the plugin is forked is passed on once it is.
    plugin: list[int] = []
    early: list[int] = []

    def pass_on(number: int, frame: object) -> None:
        if not plugin:
            early.append(number)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(plugin[0], number)

    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, pass_on)
    connection, pid = _request(
        path, {"module": module, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    )
    plugin.append(pid)
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


def main() -> None:
    if sys.argv[1] == "plugin":
        run_plugin(sys.argv[2], sys.argv[3], sys.argv[4:])
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
