"""The engine tier's program server (tests/support/harness/engine/program_server.py) against what it
stands in for: a script run through it sees what ``python -u SCRIPT ARGS`` in a new interpreter
sees, writes to the caller's streams, and ends with the same status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.harness.engine.engine import REPO, program_server
from support.harness.engine.program_server import plugin_command, run_program

SCRIPT = """\
import json, os, signal, sys
print(json.dumps({
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "variable": os.environ.get("PROGRAM_SERVER_PROBE"),
    "path0": sys.path[0],
    "extra_on_path": os.environ["EXTRA"] in sys.path,
    "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    "main": __name__,
    "file": __file__,
}))
sys.stderr.write("to standard error\\n")
sys.exit(int(sys.argv[1]))
"""


def _capture(run, tmp_path: Path, name: str) -> tuple[int, dict, str]:
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        saved = os.dup(1), os.dup(2)
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
        try:
            status = run()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return status, json.loads(out.read_text()), err.read_text()


@pytest.mark.parametrize("status", [0, 3])
def test_a_script_run_through_the_server_sees_what_a_new_interpreter_sees(
    tmp_path: Path, status: int
) -> None:
    script = tmp_path / "bin" / "probe.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    folder = tmp_path / "run"
    folder.mkdir()
    extra = tmp_path / "extra"
    env = {
        **os.environ,
        "PROGRAM_SERVER_PROBE": "seen",
        "EXTRA": str(extra),
        "PYTHONPATH": os.pathsep.join([str(extra), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [str(script), str(status), "--flag"]

    def fresh() -> int:
        return subprocess.run(
            [sys.executable, "-u", *argv], cwd=folder, env=env, check=False, timeout=60
        ).returncode

    with program_server() as socket_path:
        forked = _capture(lambda: run_program(socket_path, argv, env, str(folder)), tmp_path, "forked")
    assert forked == _capture(fresh, tmp_path, "fresh")
    assert forked[0] == status and forked[1]["variable"] == "seen" and forked[1]["extra_on_path"]


def test_a_program_killed_by_a_signal_reads_as_a_subprocess_killed_by_it(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    with program_server() as socket_path:
        assert run_program(socket_path, [str(script)], dict(os.environ), str(tmp_path)) == -15


def test_a_plugin_run_through_the_server_ends_by_the_signal_the_engine_sends(tmp_path: Path) -> None:
    """As the engine stops a plugin: SIGINT to the plugin executable's process group. The plugin
    (here a script that waits for it) gets it, and its executable ends as the plugin ends."""
    waiter = tmp_path / "waiter"
    waiter.mkdir()
    (waiter / "waits.py").write_text(
        "import signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])\n"
        "print('ready', flush=True)\n"
        "signal.sigwait([signal.SIGINT])\n"
        "print('stopped', flush=True)\n"
        "sys.exit(4)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(waiter), str(REPO / "tests")])}
    with program_server() as socket_path:
        plugin = subprocess.Popen(
            plugin_command(socket_path, "waits"),
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert plugin.stdout is not None
        assert plugin.stdout.readline() == "ready\n"
        os.killpg(plugin.pid, signal.SIGINT)
        assert plugin.wait(timeout=30) == 4
        assert plugin.stdout.read() == "stopped\n"
