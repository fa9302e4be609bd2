"""The TPU VM's startup and shutdown scripts: train in a retry loop that resumes from checkpoints.

Pure Python: renders bash. The startup script runs at every boot on every host of the slice
(Compute Engine's ``startup-script`` metadata). It is meant to be read by a person who opens it on
the VM, so it is plain, commented bash; ``shellcheck`` passes on every rendering.
"""

from __future__ import annotations

import re
import shlex
from typing import Mapping, Optional

from .termination_grace import TPU_VM_SHUTDOWN_SECONDS

COMPLETION_MARKER = "TRAINING_COMPLETE"
CHECKPOINT_VARIABLE = "CHECKPOINT_DIR"
MAINTENANCE_URL_VARIABLE = "TRAINER_MAINTENANCE_URL"
NODE_NAME_VARIABLE = "TRAINER_NODE_NAME"
MAINTENANCE_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/upcoming-maintenance"
"""A TPU VM's own notice of upcoming maintenance, on its metadata server (Google's "View
maintenance notifications" for Cloud TPU): the same key the reference trainer's
``TRAINER_MAINTENANCE_URL`` names."""
"""The variable that tells the trainer where its run's checkpoints are (``gs://``)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


_CHANGES_HOW_BASH_RUNS = (
    "bash reads it to decide how to run commands, so it would change how the setup and training commands run"
)
_BASH_SETS_IT = (
    "bash sets it itself in the shell that runs the training command, so the trainer would not "
    "get the value given"
)
# The Bash Reference Manual's "Bourne Shell Variables" and "Bash Variables" (bash 5.2,
# https://www.gnu.org/software/bash/manual/html_node/Shell-Variables.html) that matter to
# `bash -c "$TRAIN_COMMAND"`. tests/domain/test_startup_script.py runs bash over every variable of those
# pages: each one is either listed here or reaches the trainer exactly as given.
_BASH_CHANGES = (
    "IFS",
    "BASH_ENV",  # a file every non-interactive bash sources first
    "ENV",  # the same, for bash in POSIX mode and sh
    "SHELLOPTS",
    "BASHOPTS",
    "CDPATH",
    "EXECIGNORE",  # commands bash will not run
    "GLOBIGNORE",  # file names globs skip (and it turns on dotglob)
    "GLOBSORT",
    "POSIXLY_CORRECT",  # POSIX mode
    "BASH_COMPAT",
    "FUNCNEST",
)
_BASH_SETS = (
    "_",
    "BASH",
    "BASHPID",
    "BASH_ARGV0",
    "BASH_COMMAND",
    "BASH_EXECUTION_STRING",
    "BASH_SUBSHELL",
    "BASH_VERSINFO",
    "BASH_VERSION",
    "COMP_WORDBREAKS",
    "EPOCHREALTIME",
    "EPOCHSECONDS",
    "HISTCMD",
    "LINENO",
    "OLDPWD",
    "OPTERR",
    "OPTIND",
    "PPID",
    "PS1",
    "PS2",
    "PS4",
    "PWD",
    "RANDOM",
    "SHLVL",
    "SRANDOM",
)
RESERVED_ENV_NAMES: Mapping[str, str] = {
    "CHECKPOINT_DIR": (
        "the stack sets it to the run's folder in its checkpoint bucket (tpu-training:bucket.name "
        "chooses the bucket)"
    ),
    "PATH": (
        "the startup script and the container find bash, gcloud, flock and the trainer through it; "
        "extend it inside the training command instead (PATH=/opt/bin:$PATH python3 ...)"
    ),
    **{name: _CHANGES_HOW_BASH_RUNS for name in _BASH_CHANGES},
    **{name: _BASH_SETS_IT for name in _BASH_SETS},
}
"""Variables a user's ``env`` may not set, and why: the stack sets them, setting them breaks
the commands that train (they would run, but not train), or bash replaces the value given."""


def env_name_problem(name: str) -> Optional[str]:
    """Why ``name`` is no environment variable name a shell or a container takes, or None."""
    if not _ENV_NAME.fullmatch(name):
        return (
            f"environment variable name {name!r} must be letters, digits and '_', not starting with a digit"
        )
    return None


SCRIPT_SETTINGS_PREFIX = "TPU_TRAINING_"
"""The startup and shutdown scripts' own settings (``TPU_TRAINING_STATE_DIR``, ...): both scripts
read them from the VM's environment, and the user's ``env`` reaches only the commands."""


def user_env_problem(name: str) -> Optional[str]:
    """Why a user's ``env`` cannot set ``name``, or None."""
    problem = env_name_problem(name)
    if problem is None and name in RESERVED_ENV_NAMES:
        problem = f"environment variable {name} cannot be set in env: {RESERVED_ENV_NAMES[name]}"
    if problem is None and name.startswith(SCRIPT_SETTINGS_PREFIX):
        problem = (
            f"environment variable {name} cannot be set in env: {SCRIPT_SETTINGS_PREFIX}* are the "
            f"startup and shutdown scripts' own settings, and the shutdown script would not see it"
        )
    return problem


MAX_METADATA_VALUE_BYTES = 256 * 1024
MAX_METADATA_TOTAL_BYTES = 512 * 1024
"""Compute Engine's ``Metadata`` (the TPU VM's ``metadata`` is the VM's): a value's "size must be
less than or equal to 262144 bytes (256 KiB)"; "The total size of all keys and values must be
less than 512 KB" (https://cloud.google.com/compute/docs/reference/rest/v1/Metadata)."""


def metadata_problem(metadata: Mapping[str, str]) -> Optional[str]:
    """Why Compute Engine would refuse this metadata (a value or the whole too large), or None."""
    total = 0
    for key, value in metadata.items():
        size = len(value.encode("utf-8"))
        if size > MAX_METADATA_VALUE_BYTES:
            return (
                f"the {key} would be {size} bytes, above Compute Engine's limit of "
                f"{MAX_METADATA_VALUE_BYTES} bytes (256 KiB) per metadata value; shorten the training "
                f"or setup command or the environment (keep large files in Cloud Storage)"
            )
        total += len(key.encode("utf-8")) + size
    if total >= MAX_METADATA_TOTAL_BYTES:
        return (
            f"the startup and shutdown scripts would be {total} bytes together, not below Compute "
            f"Engine's limit of {MAX_METADATA_TOTAL_BYTES} bytes (512 KiB) for all metadata; shorten "
            f"the training or setup command or the environment"
        )
    return None


def render_startup_script(
    *,
    vm_name: str,
    checkpoint_dir: str,
    train_command: str,
    environment: Mapping[str, str],
    setup_command: Optional[str] = None,
    max_backoff_seconds: int = 300,
) -> str:
    """The ``startup-script``: export the run's environment, set up once per boot, then run
    ``train_command`` until it exits 0 and leave a completion marker next to the checkpoints."""
    for name in environment:
        problem = env_name_problem(name)
        if problem:
            raise ValueError(problem)
    for what, text in (
        ("checkpoint_dir", checkpoint_dir),
        ("train_command", train_command),
        ("setup_command", setup_command or ""),
        *((f"environment {name}", value) for name, value in environment.items()),
    ):
        if "\x00" in text:
            # Bash drops a NUL byte, and no environment can hold one.
            raise ValueError(f"{what} {text!r} contains a NUL byte (\\x00)")
    # The trainer reads the VM's upcoming maintenance from its metadata server and saves before
    # the window (docs/trainer.md); a user's env may point it elsewhere, or turn it off with "".
    # Its node name, so a notice the trainer reads and recovery's request for the same window
    # carry one id, and the run saves once for both (domain.maintenance_notices.request_id).
    run_environment = {
        "CHECKPOINT_DIR": checkpoint_dir,
        MAINTENANCE_URL_VARIABLE: MAINTENANCE_METADATA_URL,
        NODE_NAME_VARIABLE: vm_name,
        **environment,
    }
    assignments = "\n".join(
        f"  {shlex.quote(f'{name}={value}')}" for name, value in sorted(run_environment.items())
    )
    return f"""#!/bin/bash
# Startup script of TPU VM {vm_name}, generated by tpu-training (Pulumi). Do not edit on the VM:
# `pulumi up` owns it. It runs at every boot on every host: it trains until the training command
# exits 0, each attempt resuming from the latest checkpoint in $CHECKPOINT_DIR, then leaves
# $CHECKPOINT_DIR/{COMPLETION_MARKER} so a re-created VM does not train again.
set -uo pipefail

# The run's environment: where to checkpoint, the scale of the run, the user's variables. Only
# the setup and training commands get it (through env), so each variable reaches them exactly as
# written, whatever its name, and none changes how this script runs.
# Values are literal on purpose: single-quoted so nothing in them expands.
# shellcheck disable=SC2016
RUN_ENVIRONMENT=(
{assignments}
)

# Where the completion marker goes; the policy pack reads the run's bucket from this line.
export CHECKPOINT_DIR={shlex.quote(checkpoint_dir)}
TRAIN_COMMAND={shlex.quote(train_command)}
SETUP_COMMAND={shlex.quote(setup_command or "")}
MARKER="${{CHECKPOINT_DIR%/}}/{COMPLETION_MARKER}"
STATE_DIR="${{TPU_TRAINING_STATE_DIR:-/run/tpu-training}}"
RETRY_DELAY="${{TPU_TRAINING_RETRY_DELAY:-1}}"
MAX_BACKOFF={int(max_backoff_seconds)}

log() {{
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) tpu-training[{vm_name}]: $*"
}}

mkdir -p "$STATE_DIR"
# One copy per boot, even if the agent runs the script twice.
exec 9>"$STATE_DIR/lock"
if ! flock -n 9; then
  log "another copy of this script is running; leaving it to finish"
  exit 0
fi
rm -f "$STATE_DIR/stopping" "$STATE_DIR/trainer.pid"

if gcloud storage ls "$MARKER" >/dev/null 2>&1; then
  log "training already completed ($MARKER exists); nothing to do"
  exit 0
fi

if [ -n "$SETUP_COMMAND" ]; then
  for setup_attempt in 1 2 3 4 5; do
    log "setup attempt $setup_attempt: $SETUP_COMMAND"
    if env "${{RUN_ENVIRONMENT[@]}}" bash -c "$SETUP_COMMAND"; then
      break
    fi
    if [ "$setup_attempt" -eq 5 ]; then
      log "setup failed 5 times; not training. Fix setupCommand and run pulumi up, or reboot the VM"
      exit 1
    fi
    sleep "$RETRY_DELAY"
  done
fi

# Seed 001: retry the training command until it completes; every attempt resumes from the
# latest checkpoint because the trainer reads $CHECKPOINT_DIR. The back-off doubles, capped.
attempt=0
delay="$RETRY_DELAY"
while true; do
  attempt=$((attempt + 1))
  log "training attempt $attempt: $TRAIN_COMMAND"
  # Its own session, so the shutdown script can signal the trainer and all its children.
  setsid env "${{RUN_ENVIRONMENT[@]}}" bash -c "$TRAIN_COMMAND" &
  trainer=$!
  echo "$trainer" >"$STATE_DIR/trainer.pid"
  if wait "$trainer"; then status=0; else status=$?; fi
  rm -f "$STATE_DIR/trainer.pid"
  if [ "$status" -eq 0 ]; then
    break
  fi
  if [ -e "$STATE_DIR/stopping" ]; then
    log "attempt $attempt ended with status $status while the VM shuts down; the next boot resumes"
    exit 0
  fi
  log "attempt $attempt failed with status $status; retrying in ${{delay}}s from the latest checkpoint"
  sleep "$delay"
  delay=$((delay * 2))
  if [ "$delay" -gt "$MAX_BACKOFF" ]; then delay="$MAX_BACKOFF"; fi
done

log "training completed after $attempt attempt(s); writing $MARKER"
finished="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf 'completed at %s after %s attempt(s) on %s\\n' "$finished" "$attempt" "$(hostname)" |
  gcloud storage cp - "$MARKER"
"""


def render_shutdown_script(*, vm_name: str, grace_seconds: int = TPU_VM_SHUTDOWN_SECONDS) -> str:
    """The ``shutdown-script``: on preemption or maintenance, send the trainer SIGTERM so it can
    save a final checkpoint in the ~30 s a preempted VM has, and stop the retry loop."""
    return f"""#!/bin/bash
# Shutdown script of TPU VM {vm_name}, generated by tpu-training (Pulumi). On preemption or
# shutdown it asks the trainer to stop (SIGTERM) so it can save a last checkpoint, and tells the
# startup script's retry loop not to start another attempt.
set -uo pipefail
STATE_DIR="${{TPU_TRAINING_STATE_DIR:-/run/tpu-training}}"
GRACE={int(grace_seconds)}

echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) tpu-training[{vm_name}]: shutting down; signalling the trainer"
mkdir -p "$STATE_DIR"
touch "$STATE_DIR/stopping"
if [ -f "$STATE_DIR/trainer.pid" ]; then
  trainer=$(cat "$STATE_DIR/trainer.pid")
  # The trainer runs in its own session: signal the whole group.
  kill -TERM -- "-$trainer" 2>/dev/null || kill -TERM "$trainer" 2>/dev/null || true
  for _ in $(seq "$GRACE"); do
    kill -0 "$trainer" 2>/dev/null || break
    sleep 1
  done
fi
"""


def vm_metadata(
    *,
    vm_name: str,
    checkpoint_dir: str,
    train_command: str,
    environment: Mapping[str, str],
    setup_command: Optional[str] = None,
) -> dict[str, str]:
    """A TPU VM's ``metadata``: its startup and shutdown scripts. ``CHECKPOINT_DIR`` in
    ``environment`` is left to the script, which sets it from ``checkpoint_dir``."""
    return {
        "startup-script": render_startup_script(
            vm_name=vm_name,
            checkpoint_dir=checkpoint_dir,
            train_command=train_command,
            environment={k: v for k, v in environment.items() if k != "CHECKPOINT_DIR"},
            setup_command=setup_command,
        ),
        "shutdown-script": render_shutdown_script(vm_name=vm_name),
    }
