"""A double of the Python language host (``pulumi-language-python``), for the engine tests.

The real host is a Go module (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3)
that the Go module proxy here does not serve (.ci/engine). What it does for the calls the CLI
makes is small and is done here the same way, read from its ``main.go`` (pulumi/pulumi,
1b5949891b, ``Run``, ``constructArguments``, ``RunPlugin``):

- ``Run``: the program's virtualenv's ``python`` runs ``pulumi-language-python-exec`` (the real
  executor script of the pinned SDK, which .ci/engine puts beside the CLI) with ``--monitor``,
  ``--engine``, ``--project``, ``--root_directory``, ``--stack``, ``--pwd``, ``--dry_run``,
  ``--parallel``, ``--organization``, the entry point and the program's arguments; the config in
  ``PULUMI_CONFIG`` and its secret keys in ``PULUMI_CONFIG_SECRET_KEYS`` (JSON); the program's
  output on the host's own streams; exit status 32 means "bail" (the program showed the user a
  message already), any other non-zero status "program exited with non-zero exit code: N";
- ``RunPlugin`` for a policy pack (kind ``analyzer``): the pack's virtualenv's ``python -u -m
  pulumi.policy ARGS... PACK_DIR``, its output streamed back, killed when the call ends;
- the rest (required packages and plugins, dependencies, About) answer "nothing needed": every
  plugin the tests use is an executable on PATH.

Not done: typecheckers, debuggers, toolchains other than pip, installing dependencies (the tests'
virtualenv is the README's, already installed).

Run as a plugin: ``python -m support.harness.engine.language_host ENGINE_ADDRESS``; the executor's path
comes from ``PULUMI_LANGUAGE_PYTHON_EXEC``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

import grpc
from google.protobuf import empty_pb2, json_format
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

from support.harness.engine.plugin_server import engine_address, serve
from support.harness.engine.program_server import SERVER_VARIABLE, run_program

EXEC_VARIABLE = "PULUMI_LANGUAGE_PYTHON_EXEC"
BAIL_EXIT_STATUS = 32
"""pythonProcessExitedAfterShowingUserActionableMessage in the real host."""
VERSION = "3.274.1"


def _options(info: Any) -> dict[str, Any]:
    return json_format.MessageToDict(info.options) if info.HasField("options") else {}


def _python(info: Any) -> str:
    """The interpreter of the virtualenv the project's runtime options name (relative to the
    project's root), or ``python3`` when none is named."""
    virtualenv = _options(info).get("virtualenv")
    if not virtualenv:
        return "python3"
    folder = Path(virtualenv)
    if not folder.is_absolute():
        folder = Path(info.root_directory) / folder
    return str(folder / "bin" / "python")


def _activated(python: str, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment with the virtualenv of ``python`` activated, as the host's pip toolchain
    does (its bin first on PATH, VIRTUAL_ENV set, no PYTHONHOME)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    venv = Path(python).parent.parent
    if (venv / "pyvenv.cfg").exists():
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env.update(extra or {})
    return env


def _run(command: list[str], cwd: str, env: dict[str, str]) -> int:
    """Run ``python -u EXECUTOR ARGS``: forked from the program server when one is running for
    this interpreter (program_server.py says what that changes), else as a new process."""
    server = os.environ.get(SERVER_VARIABLE)
    same_interpreter = Path(command[0]).parent.parent.resolve() == Path(sys.prefix).resolve()
    if server and same_interpreter:
        return run_program(server, command[2:], env, cwd)
    return subprocess.run(command, cwd=cwd, env=env, check=False).returncode


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.executor = os.environ[EXEC_VARIABLE]

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        return plugin_pb2.PluginInfo(version=VERSION)

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPackagesResponse()

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        return language_pb2.GetProgramDependenciesResponse()

    def InstallDependencies(self, request: Any, context: Any) -> Iterator[Any]:
        return iter(())

    def About(self, request: Any, context: Any) -> Any:
        return language_pb2.AboutResponse(executable=sys.executable, version=sys.version.split()[0])

    def Cancel(self, request: Any, context: Any) -> Any:
        return empty_pb2.Empty()

    def Run(self, request: Any, context: Any) -> Any:
        arguments = {
            "monitor": request.monitor_address,
            "engine": self.engine,
            "project": request.project,
            "root_directory": request.info.root_directory,
            "stack": request.stack,
            "pwd": request.pwd,
            "dry_run": "true" if request.dryRun else "false",
            "parallel": str(request.parallel),
            "organization": request.organization,
        }
        command = [_python(request.info), "-u", self.executor]
        for key, value in arguments.items():
            if value:
                command += [f"--{key}", value]
        command += [request.info.entry_point or request.program or ".", *request.args]
        env = _activated(
            command[0],
            {
                "PULUMI_CONFIG": json.dumps(dict(request.config)),
                "PULUMI_CONFIG_SECRET_KEYS": json.dumps(list(request.configSecretKeys)),
            },
        )
        status = _run(command, request.pwd or os.getcwd(), env)
        if status == 0:
            return language_pb2.RunResponse()
        if status == BAIL_EXIT_STATUS:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"program exited with non-zero exit code: {status}")

    def RunPlugin(self, request: Any, context: Any) -> Iterator[Any]:
        if request.kind != "analyzer":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"only policy packs run here, not {request.kind!r}")
        python = _python(request.info)
        command = [python, "-u", "-m", "pulumi.policy", *request.args, request.info.program_directory]
        extra = dict(item.split("=", 1) for item in request.env if "=" in item)
        process = subprocess.Popen(
            command,
            cwd=request.pwd or None,
            env=_activated(python, extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # As the real host starts it, with the call's context (exec.CommandContext; pulumi/pulumi
        # sdk/python/toolchain/pip.go v3.274.1, Command): when the call ends, done or cancelled
        # by the engine as it stops the plugin, the pack is killed. Left running, each policy run
        # left a pack of 50 MB behind, its parent gone.
        context.add_callback(process.kill)
        assert process.stdout is not None and process.stderr is not None
        errors: list[bytes] = []
        # Drained aside, so a pack that writes much to standard error never blocks.
        drain = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
        drain.start()
        # The pack prints its port first; the engine reads it from this stream, so each line is
        # passed on as it comes.
        for line in iter(process.stdout.readline, b""):
            yield language_pb2.RunPluginResponse(stdout=line)
        drain.join()
        if errors and errors[0]:
            yield language_pb2.RunPluginResponse(stderr=errors[0])
        yield language_pb2.RunPluginResponse(exitcode=process.wait())


def main() -> None:
    host = LanguageHost(engine_address(sys.argv[1:]))
    serve(lambda server: language_pb2_grpc.add_LanguageRuntimeServicer_to_server(host, server))


if __name__ == "__main__":
    main()
