"""The startup and shutdown scripts, checked by shellcheck and run for real under bash, with a fake
trainer and a stand-in for the storage CLI on PATH."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tpu_training_components.domain.startup_script import (
    MAX_METADATA_TOTAL_BYTES,
    MAX_METADATA_VALUE_BYTES,
    RESERVED_ENV_NAMES,
    metadata_problem,
    render_shutdown_script,
    render_startup_script,
    user_env_problem,
)

CHECKPOINT_DIR = "gs://ckpt-bucket/checkpoints/demo-tpu"
SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")

# `gcloud storage ls|cp` over a local folder standing in for Cloud Storage.
FAKE_GCLOUD = r"""#!/bin/bash
set -eu
[ "$1" = storage ] || exit 2
path="$FAKE_GCS/${3#gs://}"
case "$2" in
  ls) [ -e "$path" ] ;;
  cp) target="$FAKE_GCS/${4#gs://}"; mkdir -p "$(dirname "$target")"; cat > "$target" ;;
  *) exit 2 ;;
esac
"""

# Resumes from its checkpoint, advances 10 steps and saves; fails on its first two attempts.
FAKE_TRAINER = r"""#!/bin/bash
set -eu
ckpt="$FAKE_GCS/${CHECKPOINT_DIR#gs://}/step"
mkdir -p "$(dirname "$ckpt")"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
echo "resume from step $step batch $GLOBAL_BATCH_SIZE" >> "$TRAINER_LOG"
echo $((step + 10)) > "$ckpt"
attempts=$(( $(cat "$TRAINER_LOG" | wc -l) ))
[ "$attempts" -ge 3 ]
"""

# Trains "forever"; on SIGTERM saves a final checkpoint and exits.
LONG_TRAINER = r"""#!/bin/bash
trap 'echo "final checkpoint saved" >> "$TRAINER_LOG"; exit 143' TERM
echo started >> "$TRAINER_LOG"
while true; do sleep 0.1; done
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def sandbox(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write(bin_dir / "gcloud", FAKE_GCLOUD)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_GCS=str(tmp_path / "gcs"),
        TRAINER_LOG=str(tmp_path / "trainer.log"),
        TPU_TRAINING_STATE_DIR=str(tmp_path / "state"),
        TPU_TRAINING_RETRY_DELAY="0",
    )
    return tmp_path, env


def _startup(trainer: Path, tmp_path: Path) -> Path:
    script = render_startup_script(
        vm_name="demo-tpu",
        checkpoint_dir=CHECKPOINT_DIR,
        train_command=f"{trainer} --flag 'with spaces'",
        environment={"GLOBAL_BATCH_SIZE": "1024", "QUOTED": "it's $HOME"},
        setup_command=f"echo setup >> {tmp_path / 'setup.log'}",
    )
    return _write(tmp_path / "startup.sh", script)


def test_scripts_pass_shellcheck(tmp_path):
    startup = _startup(tmp_path / "train", tmp_path)
    shutdown = _write(tmp_path / "shutdown.sh", render_shutdown_script(vm_name="demo-tpu"))
    result = subprocess.run([SHELLCHECK, str(startup), str(shutdown)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_retries_resume_mark_completion_then_do_nothing(sandbox):
    tmp_path, env = sandbox
    startup = _startup(_write(tmp_path / "train", FAKE_TRAINER), tmp_path)

    first = subprocess.run(["bash", str(startup)], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "trainer.log").read_text().splitlines() == [
        "resume from step 0 batch 1024",
        "resume from step 10 batch 1024",
        "resume from step 20 batch 1024",
    ]
    assert "attempt 1 failed with status 1; retrying" in first.stdout
    assert "attempt 2 failed with status 1; retrying" in first.stdout
    assert "training completed after 3 attempt(s)" in first.stdout
    marker = tmp_path / "gcs" / "ckpt-bucket/checkpoints/demo-tpu/TRAINING_COMPLETE"
    assert "after 3 attempt(s)" in marker.read_text()
    assert (tmp_path / "setup.log").read_text() == "setup\n"

    # Next boot (or a re-created VM): the marker is there, so nothing trains and nothing is set up.
    second = subprocess.run(["bash", str(startup)], env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0
    assert "training already completed" in second.stdout
    assert len((tmp_path / "trainer.log").read_text().splitlines()) == 3
    assert (tmp_path / "setup.log").read_text() == "setup\n"


def test_shutdown_signals_the_trainer_and_stops_the_loop(sandbox):
    tmp_path, env = sandbox
    startup = _startup(_write(tmp_path / "train", LONG_TRAINER), tmp_path)
    shutdown = _write(tmp_path / "shutdown.sh", render_shutdown_script(vm_name="demo-tpu", grace_seconds=5))
    running = subprocess.Popen(["bash", str(startup)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while "started" not in _read(tmp_path / "trainer.log") and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["bash", str(shutdown)], env=env, check=True, timeout=30)
        out, _ = running.communicate(timeout=30)
    finally:
        if running.poll() is None:
            running.send_signal(signal.SIGKILL)
    assert running.returncode == 0
    assert "final checkpoint saved" in _read(tmp_path / "trainer.log")
    assert "while the VM shuts down; the next boot resumes" in out
    assert not (tmp_path / "gcs" / "ckpt-bucket/checkpoints/demo-tpu/TRAINING_COMPLETE").exists()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_bad_environment_names_are_refused():
    with pytest.raises(ValueError, match="environment variable name '1BAD'"):
        render_startup_script(
            vm_name="x", checkpoint_dir=CHECKPOINT_DIR, train_command="t", environment={"1BAD": "v"}
        )


# Every variable of the Bash Reference Manual's "Bourne Shell Variables" and "Bash Variables"
# (bash 5.2, https://www.gnu.org/software/bash/manual/html_node/Shell-Variables.html).
BASH_VARIABLES = """
CDPATH HOME IFS MAIL MAILPATH OPTARG OPTIND PATH PS1 PS2 _ BASH BASHOPTS BASHPID BASH_ALIASES
BASH_ARGC BASH_ARGV BASH_ARGV0 BASH_CMDS BASH_COMMAND BASH_COMPAT BASH_ENV BASH_EXECUTION_STRING
BASH_LINENO BASH_LOADABLES_PATH BASH_MONOSECONDS BASH_REMATCH BASH_SOURCE BASH_SUBSHELL
BASH_TRAPSIG BASH_VERSINFO BASH_VERSION BASH_XTRACEFD CHILD_MAX COLUMNS COMP_CWORD COMP_LINE
COMP_POINT COMP_TYPE COMP_KEY COMP_WORDBREAKS COMP_WORDS COMPREPLY COPROC DIRSTACK EMACS ENV
EPOCHREALTIME EPOCHSECONDS EUID EXECIGNORE FCEDIT FIGNORE FUNCNAME FUNCNEST GLOBIGNORE GLOBSORT
GROUPS histchars HISTCMD HISTCONTROL HISTFILE HISTFILESIZE HISTIGNORE HISTSIZE HISTTIMEFORMAT
HOSTFILE HOSTNAME HOSTTYPE IGNOREEOF INPUTRC INSIDE_EMACS LANG LC_ALL LC_COLLATE LC_CTYPE
LC_MESSAGES LC_NUMERIC LC_TIME LINENO LINES MACHTYPE MAILCHECK MAPFILE OLDPWD OPTERR OSTYPE
PIPESTATUS POSIXLY_CORRECT PPID PROMPT_COMMAND PROMPT_DIRTRIM PS0 PS3 PS4 PWD RANDOM
READLINE_ARGUMENT READLINE_LINE READLINE_MARK READLINE_POINT REPLY SECONDS SHELL SHELLOPTS SHLVL
SRANDOM TIMEFORMAT TMOUT TMPDIR UID
""".split()

DUMP_ENVIRONMENT = r"""#!/bin/bash
/usr/bin/env -0 > "$ENV_DUMP"
"""


def _script_variables(script: str) -> set[str]:
    """The variables the startup script assigns itself (`NAME=`, `for NAME in`)."""
    assigned = re.findall(r"(?:^|[\s;])([A-Za-z_][A-Za-z0-9_]*)=", script, flags=re.MULTILINE)
    looped = re.findall(r"\bfor ([A-Za-z_][A-Za-z0-9_]*) in\b", script)
    return set(assigned) | set(looped)


def _environment_seen(sandbox, environment: dict[str, str]) -> dict[str, str]:
    """Run the startup script with ``environment`` and a trainer that writes down the environment
    it got; what it got."""
    tmp_path, env = sandbox
    dump = tmp_path / "env.dump"
    trainer = _write(tmp_path / "train", DUMP_ENVIRONMENT)
    script = render_startup_script(
        vm_name="demo-tpu", checkpoint_dir=CHECKPOINT_DIR, train_command=str(trainer), environment=environment
    )
    startup = _write(tmp_path / "startup.sh", script)
    done = subprocess.run(
        ["bash", str(startup)], env=dict(env, ENV_DUMP=str(dump)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "training completed after 1 attempt(s)" in done.stdout
    return dict(entry.split("=", 1) for entry in dump.read_text().split("\0") if entry)


def test_every_name_the_shell_or_the_script_uses_is_refused_or_reaches_the_trainer_exactly(sandbox):
    """Item 18.6: a name bash or the script itself uses (EXECIGNORE, TRAIN_COMMAND, attempt, ...)
    is either refused with a reason or given to the trainer exactly as written."""
    script = render_startup_script(
        vm_name="demo-tpu", checkpoint_dir=CHECKPOINT_DIR, train_command="t", environment={}
    )
    own = _script_variables(script)
    assert {"TRAIN_COMMAND", "MARKER", "attempt", "delay", "status", "setup_attempt"} <= own
    names = (set(BASH_VARIABLES) | own) - {"CHECKPOINT_DIR"}
    allowed = sorted(name for name in names if user_env_problem(name) is None)
    assert "EXECIGNORE" not in allowed and "TRAIN_COMMAND" in allowed
    environment = {name: f"value of {name}: 'quoted' $HOME \"x\"\nsecond line" for name in allowed}
    seen = _environment_seen(sandbox, environment)
    assert {name: seen.get(name) for name in allowed} == environment
    assert seen["CHECKPOINT_DIR"] == CHECKPOINT_DIR


def test_what_bash_sets_itself_is_refused_because_it_would_not_arrive(sandbox):
    # The other way round: each name refused as "bash sets it" really does not arrive as given,
    # so the list refuses nothing a trainer could have had.
    bash_sets = [name for name, reason in RESERVED_ENV_NAMES.items() if reason.startswith("bash sets it")]
    assert "SHLVL" in bash_sets and "PWD" in bash_sets
    environment = {name: "7" for name in bash_sets}
    seen = _environment_seen(sandbox, environment)
    assert [name for name in bash_sets if seen.get(name) == "7"] == []


@pytest.mark.parametrize("name", ["EXECIGNORE", "GLOBIGNORE", "BASH_ENV", "POSIXLY_CORRECT", "SHLVL", "_"])
def test_names_that_change_or_replace_what_bash_does_are_refused(name):
    assert f"environment variable {name} cannot be set in env" in (user_env_problem(name) or "")


def test_a_nul_byte_is_refused():
    with pytest.raises(ValueError, match="NUL byte"):
        render_startup_script(
            vm_name="x", checkpoint_dir=CHECKPOINT_DIR, train_command="t", environment={"A": "a\0b"}
        )


def test_metadata_over_compute_engines_limits():
    # Compute Engine Metadata: a value at most 262144 bytes, all keys and values below 512 KB.
    assert metadata_problem({"startup-script": "x" * MAX_METADATA_VALUE_BYTES}) is None
    assert "above Compute Engine's limit of 262144 bytes" in (
        metadata_problem({"startup-script": "x" * (MAX_METADATA_VALUE_BYTES + 1)}) or ""
    )
    # Bytes, not characters: 'é' is two bytes in UTF-8.
    assert metadata_problem({"startup-script": "é" * (MAX_METADATA_VALUE_BYTES // 2 + 1)})
    half = MAX_METADATA_TOTAL_BYTES // 2
    together = {"startup-script": "x" * (half - 14), "shutdown-script": "x" * (half - 15)}
    assert "512 KiB" in (metadata_problem(together) or "")
    together["shutdown-script"] = together["shutdown-script"][:-1]
    assert metadata_problem(together) is None
