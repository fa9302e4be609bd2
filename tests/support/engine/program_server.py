"""A fork server for the programs the engine tier's CLI runs: the language-host double asks it to
start the real executor (``pulumi-language-python-exec``) instead of starting a new interpreter.

Why: every ``pulumi preview``, ``up`` and recovery round runs the program, and a new interpreter
spends about two of its three CPU-seconds importing the SDK and the providers' packages
(pulumi_gcp.compute alone is 1.3 s). This server keeps those packages imported and forks a child
per run, so the engine tier costs about half as much CPU.

What the child is: a process of the same interpreter, in the run's folder, with the run's
environment (``PULUMI_CONFIG``, the fakes' endpoints, ...), arguments and ``sys.path`` as
``python -u EXECUTOR ARGS`` would have them, the language host's standard streams (passed over the
socket), its own default signal handlers, and the executor run as ``__main__``. It exits as that
interpreter would (interpreter shutdown, atexit, threads joined) and the host reads its status as
it reads a subprocess's.

What it learns: when a child ends it reports the modules it had imported; the server imports the
ones that live outside the run's project folder (the SDK, the providers' packages, this library)
before the next fork. Nothing of a project (its ``infra`` package, its ``stack_config``) is ever
imported here, so each run imports its own project's modules, as a new interpreter would. The
first run of a server is a cold start.

What it does not prove, so one engine test runs without it (``test_the_readme_deploy_steps_...``):
that the program's imports work in a new interpreter, in the order a new interpreter takes them.

Run: ``python -m support.engine.program_server SOCKET_PATH``; it serves until its parent (the
pytest process that started it) is gone or it receives SIGTERM.
"""

from __future__ import annotations

import array
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Optional

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


def _child_path(executor: str, env: dict[str, str]) -> list[str]:
    """``sys.path`` as ``python -u EXECUTOR`` with ``env`` starts with it: the executor's folder,
    then PYTHONPATH's entries, then this interpreter's own (standard library, site-packages)."""
    own_extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in own_extra]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [os.path.dirname(os.path.abspath(executor)), *extra, *base]


def _run_child(request: dict, fds: list[int], report: Path) -> int:
    """In the forked child: become ``python -u EXECUTOR ARGS`` and run it; returns its status."""
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
    sys.argv = argv[:]
    sys.path[:] = _child_path(argv[0], request["env"])
    root = os.path.realpath(request["cwd"])

    def report_modules() -> None:
        # Registered first, so it runs after every handler the program registers.
        names = [
            name
            for name, module in list(sys.modules.items())
            if name != "__main__" and not _from_folder(getattr(module, "__file__", None), root)
        ]
        report.write_text(json.dumps(names))

    import atexit
    import runpy

    atexit.register(report_modules)
    runpy.run_path(argv[0], run_name="__main__")
    return 0


def _from_folder(file: Optional[str], root: str) -> bool:
    """Whether a module's file lives in the run's project folder (never imported by the server)."""
    return bool(file) and os.path.realpath(file).startswith(root + os.sep)  # type: ignore[arg-type]


def _preload(names: list[str]) -> None:
    """Import what a finished run imported, so the next fork has it already, in the order it did.

    A submodule is reached as code reaches it, through its package's attribute first: the SDKs
    import their subpackages lazily (importlib.util.LazyLoader), and importing a submodule of a
    lazy package by name first binds the submodule's name on the package, where the package's own
    ``from .CustomResource import *`` would bind the class (pulumi_kubernetes.apiextensions)."""
    for name in names:
        if name in sys.modules:
            continue
        package, _, leaf = name.rpartition(".")
        try:
            if package and package in sys.modules and hasattr(sys.modules[package], leaf):
                continue
            __import__(name)
        except BaseException as error:  # noqa: BLE001 - a module that cannot load here stays the child's
            print(f"program server: not preloaded {name}: {error!r}", file=sys.stderr)


def serve(path: str) -> Optional[int]:
    """Serve requests on ``path``; returns None in the server when it ends, and the status to exit
    with in a child."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    running: dict[int, socket.socket] = {}
    while not stopping and os.getppid() == parent:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
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
                return _exit_status_of_child(request, fds, _report(path, os.getpid()))
            for fd in fds:
                os.close(fd)
            running[pid] = connection
        _reap(path, running)
    listener.close()
    Path(path).unlink(missing_ok=True)
    return None


def _report(path: str, pid: int) -> Path:
    """Where the child ``pid`` writes the names of the modules it imported."""
    return Path(f"{path}.{pid}.modules.json")


def _exit_status_of_child(request: dict, fds: list[int], report: Path) -> int:
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


def _reap(path: str, running: dict[int, socket.socket]) -> None:
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
        report = _report(path, pid)
        reported = report.read_text() if report.exists() else ""
        report.unlink(missing_ok=True)
        try:
            connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        except OSError:
            pass  # the caller is gone; its child ended all the same
        connection.close()
        if reported:
            _preload(json.loads(reported))


def run_program(path: str, argv: list[str], env: dict[str, str], cwd: str) -> int:
    """In the language host: run ``python -u ARGV`` through the server at ``path`` with this
    process's standard streams; returns its exit status as ``subprocess`` would."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        message = (json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n").encode()
        streams = array.array("i", [0, 1, 2])
        connection.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams.tobytes())])
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = connection.recv(64)
            if not chunk:
                raise ConnectionError(f"the program server at {path} ended before the program did")
            answer += chunk
    return int(answer)


def main() -> None:
    status = serve(sys.argv[1])
    if status is not None:
        # In a child: end as the interpreter running the executor would.
        sys.exit(status)


if __name__ == "__main__":
    main()
