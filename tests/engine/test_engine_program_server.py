"""The engine tier's program server (tests/support/harness/engine/program_server.py) against what it
stands in for: a script, module or code run through its ``python`` sees what ``python SCRIPT ARGS``
(``-m MODULE``, ``-c CODE``) in a new interpreter sees, writes to the caller's streams, and ends
with the same status; anything else is the real interpreter's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.harness.engine.engine import REPO, program_server
from support.harness.engine.program_server import plugin_command, python_shim

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


def _shim(tmp_path: Path, socket_path: str) -> Path:
    shim = tmp_path / "venv" / "bin" / "python"
    shim.parent.mkdir(parents=True)
    shim.write_text(python_shim(socket_path))
    shim.chmod(0o755)
    return shim


def _run(python: str, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [python, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


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
    args = [str(script), str(status), "--flag"]
    with program_server() as socket_path:
        forked = _run(str(_shim(tmp_path, socket_path)), args, folder, env)
    fresh = _run(sys.executable, args, folder, env)
    assert forked == fresh
    assert forked[0] == status and json.loads(forked[1])["variable"] == "seen"
    assert json.loads(forked[1])["extra_on_path"]


def test_code_and_modules_run_through_the_server_as_in_a_new_interpreter(tmp_path: Path) -> None:
    """What the real language host runs besides the program: ``python -m pip list --format json``
    and ``python -c SCRIPT NAMES`` (its dependency checks), and ``python --version``, which is the
    real interpreter's."""
    code = "import json, sys; print(json.dumps([sys.argv, sys.path[0], __name__])); sys.exit(2)"
    calls = [["-c", code, "pulumi"], ["-m", "json.tool", "--help"], ["--version"], ["-u", "-c", code]]
    with program_server() as socket_path:
        shim = str(_shim(tmp_path, socket_path))
        forked = [_run(shim, args, tmp_path, dict(os.environ)) for args in calls]
    fresh = [_run(sys.executable, args, tmp_path, dict(os.environ)) for args in calls]
    assert forked == fresh
    assert forked[0][0] == 2 and json.loads(forked[0][1]) == [["-c", "pulumi"], "", "__main__"]


def test_a_program_killed_by_a_signal_reads_as_a_subprocess_killed_by_it(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    with program_server() as socket_path:
        assert _run(str(_shim(tmp_path, socket_path)), [str(script)], tmp_path, dict(os.environ))[0] == -15


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
