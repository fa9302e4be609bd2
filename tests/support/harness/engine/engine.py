"""The real Pulumi CLI and Python language host, built by .ci/engine, run on a copy of this
project with a file backend and the provider doubles as its plugins (``support.harness.engine``).
One ``EngineProject`` is one project folder, one backend and one set of loopback fakes; its
``pulumi(...)`` runs a CLI command there as a user would, and ``recover(...)`` runs ``tpu-training
recover`` there."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import yaml
from tpu_training_components.live.endpoints import STORAGE_ENDPOINT_VARIABLE, TPU_ENDPOINT_VARIABLE

from support.harness.engine.program_server import plugin_command, python_shim

REPO = Path(__file__).resolve().parents[4]
ENGINE_BIN = REPO / ".engine" / "bin"
PASSPHRASE = "engine-tests"
COMMAND_TIMEOUT = 300
"""Seconds any one CLI command may take on a loaded two-core machine before the test fails."""


def engine_version() -> Optional[str]:
    """The version .ci/engine built, or None when the engine (the CLI and the Python language host)
    is not built here."""
    stamp = ENGINE_BIN / "VERSION"
    if not all((ENGINE_BIN / tool).is_file() for tool in ("pulumi", "pulumi-language-python", "VERSION")):
        return None
    return stamp.read_text().strip()


def plugin_executable(
    folder: Path, name: str, module: str, *args: str, programs: Optional[str] = None, pythonpath: bool = False
) -> None:
    """An executable ``name`` in ``folder`` that runs ``python -m module args... "$@"`` with this
    interpreter, as the engine starts a plugin found on PATH; with ``programs``, forked from that
    program server (program_server.py's ``plugin``) instead of a new interpreter. ``pythonpath``:
    it finds the doubles itself (tests/ and the repository first on PYTHONPATH), for a shell that
    does not set PYTHONPATH as the engine projects' environment does."""
    script = folder / name
    command = plugin_command(programs, module, *args) if programs else [sys.executable, "-m", module, *args]
    prefix = ""
    if pythonpath:
        own = os.pathsep.join(shlex.quote(str(part)) for part in (REPO / "tests", REPO))
        prefix = f"PYTHONPATH={own}${{PYTHONPATH:+{os.pathsep}$PYTHONPATH}} "
    script.write_text(f'#!/bin/sh\n{prefix}exec {" ".join(command)} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


SHARED_PROGRAM_SERVER = "TESTS_ENGINE_PROGRAM_SERVER"
"""The socket of the run's one program server, which tests/conftest.py starts before the workers
(the engine tier's ``programs`` fixture reads it)."""


@contextlib.contextmanager
def program_server() -> Iterator[str]:
    """A running program server (program_server.py) for this interpreter; yields its socket path.
    The server ends with this context, or with this process."""
    folder = Path(tempfile.mkdtemp(prefix="engine-programs-"))
    socket_path = folder / "server.sock"
    server = subprocess.Popen(
        [sys.executable, "-m", "support.harness.engine.program_server", str(socket_path)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])},
    )
    try:
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the program server did not start (exit status {server.poll()})")
            time.sleep(0.02)
        yield str(socket_path)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


class EngineProject:
    """This project copied into ``folder`` (Pulumi.yaml, infra/, trainer/, the README's .venv), a
    file backend beside it, and the CLI's environment pointing at the fakes' endpoints (and, with
    ``programs``, at a program server)."""

    def __init__(
        self,
        folder: Path,
        endpoints: dict[str, str],
        programs: Optional[str] = None,
        kubernetes_provider: Optional[Path] = None,
    ) -> None:
        self.kubernetes_provider = kubernetes_provider
        """The real pulumi-kubernetes provider's executable, used instead of the double."""
        self.root = folder / "project"
        self.root.mkdir(parents=True)
        shutil.copy(REPO / "Pulumi.yaml", self.root / "Pulumi.yaml")
        # With their compiled bytecode: copied with their sources' times, it stays valid, and the
        # program does not compile infra/ anew in every project.
        # infra/.venv is a link to ../.venv, for dynamic providers (tests/project/test_layout.py):
        # copied as the link it is, never as the virtualenv it points at.
        for part in ("infra", "trainer"):
            shutil.copytree(REPO / part, self.root / part, symlinks=True)
        self.plugins = folder / "plugins"
        self.plugins.mkdir()
        (folder / "state").mkdir()
        self.env = {
            # The program reads the live state here (conftest's TPU_TRAINING_OFFLINE keeps the
            # other tests off it), from the fakes the endpoints below name.
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith("PULUMI_") and k != "TPU_TRAINING_OFFLINE"
            },
            "PATH": os.pathsep.join([str(self.plugins), str(ENGINE_BIN), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
            "PULUMI_HOME": str(folder / "home"),
            "PULUMI_BACKEND_URL": f"file://{folder / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            **endpoints,
        }
        self.fork_from(programs)

    def fork_from(self, programs: Optional[str]) -> None:
        """``programs``: a program server's socket, from which the plugin doubles, the program and
        ``python -m`` commands are forked warm from now on (program_server.py); None: each is a new
        interpreter, as the real CLI and language host start them.

        The language host is the real one (.engine/bin, on PATH after the doubles). It runs the
        program, its ``pip list`` and its ``-c`` scripts with the ``python`` of Pulumi.yaml's
        virtualenv, ``.venv``: without a server, the README's virtualenv itself (the stack's pins
        installed); with one, a virtualenv whose ``python`` asks the server to fork them from the
        README's interpreter (``python_shim``) and execs that interpreter for anything else."""
        self.programs = programs
        for name, module, *args in (
            ("pulumi-resource-gcp", "support.harness.engine.providers", "gcp"),
            ("pulumi-resource-kubernetes", "support.harness.engine.providers", "kubernetes"),
        ):
            plugin_executable(self.plugins, name, module, *args, programs=programs)
        if self.kubernetes_provider is not None:
            real = self.plugins / "pulumi-resource-kubernetes"
            real.unlink()
            real.symlink_to(self.kubernetes_provider)
        venv = self.root / ".venv"
        if venv.is_symlink() or venv.is_file():
            venv.unlink()
        elif venv.exists():
            shutil.rmtree(venv)
        readme_venv = Path(sys.executable).parent.parent
        if not programs:
            venv.symlink_to(readme_venv)
            return
        (venv / "bin").mkdir(parents=True)
        shutil.copy(readme_venv / "pyvenv.cfg", venv / "pyvenv.cfg")
        shim = venv / "bin" / "python"
        shim.write_text(python_shim(programs))
        shim.chmod(0o755)

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def pulumi(
        self, *args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess:
        """``pulumi ARGS --non-interactive`` in the project folder."""
        done = self._run([str(ENGINE_BIN / "pulumi"), *args, "--non-interactive"], timeout)
        if check and done.returncode != 0:
            raise AssertionError(
                f"`pulumi {' '.join(args)}` exited {done.returncode}:\n"
                f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
            )
        return done

    def deploy(self, stack: str) -> None:
        """``pulumi up --yes --skip-preview``: a deployment whose preview the test does not look at
        (the README's own `pulumi up` runs the program twice, preview and update; this runs it
        once, as `tpu-training recover`'s rounds do)."""
        self.pulumi("up", "--yes", "--skip-preview", "--stack", stack)

    def python(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
        """``python ARGS`` with the README's interpreter in the project folder (``-m tpu_training plan``)."""
        return self._run(self._python_command(args), timeout)

    def _python_command(self, args: Sequence[str]) -> list[str]:
        """``python -m MODULE ARGS``, forked from the program server when the project has one (an
        executable that passes signals on and ends as the module ends, as a plugin's does): the
        command's own start, which imports the SDK and the client libraries, is 1.3 of its 2.3
        CPU-seconds in a new interpreter. Anything else, and without a server: a new interpreter."""
        if self.programs and len(args) >= 2 and args[0] == "-m":
            return plugin_command(self.programs, args[1], *args[2:])
        return [sys.executable, *args]

    def json(self, *args: str) -> Any:
        return json.loads(self.pulumi(*args, "--json").stdout)

    def state(self, stack: str) -> Any:
        """The stack's state as `pulumi stack export` writes it (a versioned deployment)."""
        return json.loads(self.pulumi("stack", "export", "--stack", stack).stdout)

    def resources(self, stack: str) -> dict[str, Any]:
        """The resources in the stack's state, by URN."""
        return {r["urn"]: r for r in self.state(stack)["deployment"].get("resources", [])}

    def set_config(self, stack: str, key: str, value: Any) -> None:
        """An edit of the stack file, as a user makes one (no `pulumi up`)."""
        path = self.root / f"Pulumi.{stack}.yaml"
        document = yaml.safe_load(path.read_text()) or {}
        document.setdefault("config", {})[key] = value
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    def init(self, stack: str, config: dict[str, Any]) -> None:
        """``pulumi stack init`` and the stack's config as a user writes it: ``Pulumi.STACK.yaml``."""
        self.pulumi("stack", "init", stack)
        for key, value in config.items():
            self.set_config(stack, key, value)

    def recover(
        self, stack: str, *args: str, timeout: float = COMMAND_TIMEOUT
    ) -> subprocess.CompletedProcess:
        """``tpu-training recover --stack STACK --json ARGS`` in the project folder."""
        return self.python(
            "-m", "tpu_training", "recover", "--stack", stack, "--json", *args, timeout=timeout
        )

    def recover_round(self, stack: str, *args: str) -> dict[str, Any]:
        """``recover --once`` (with ``args``) that must exit 0: its one round, as --json prints it."""
        done = self.recover(stack, "--once", *args)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (round_,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return dict(round_)

    def updates(self, stack: str) -> int:
        """How many updates the stack's history holds."""
        return len(self.json("stack", "history", "--stack", stack))

    def last_update_changes(self, stack: str) -> dict[str, int]:
        """What the stack's last update changed, by step kind (``same`` left out)."""
        (last,) = self.json("stack", "history", "--stack", stack, "--page-size", "1")
        return {kind: count for kind, count in last["resourceChanges"].items() if kind != "same"}

    def set_secret(self, stack: str, path: str, value: str) -> None:
        """``pulumi config set --path --secret PATH VALUE``, as a user sets a secret."""
        self.pulumi("config", "set", "--stack", stack, "--path", "--secret", path, value)

    def start_recover(self, stack: str, *args: str) -> subprocess.Popen:
        """``recover`` started in the background; the caller waits for it."""
        return subprocess.Popen(
            self._python_command(["-m", "tpu_training", "recover", "--stack", stack, "--json", *args]),
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def steps(self, preview_json: Any) -> list[tuple[str, str]]:
        """(op, URN) of every step `preview --json` lists that changes something."""
        return [
            (step["op"], step["urn"])
            for step in preview_json.get("steps", [])
            if step["op"] not in ("same", "read", "refresh")
        ]


def endpoints(tpu: Any, storage: Any) -> dict[str, str]:
    """The variables that point the program's readers and the provider doubles at the fakes."""
    return {TPU_ENDPOINT_VARIABLE: tpu.endpoint, STORAGE_ENDPOINT_VARIABLE: storage.endpoint}
