"""What is known of each run of a stack (``gather``): the live decision for its VM or Job (the
recovery probe), its newest checkpoint, its trainers' progress, its last recovery from the stack's
outputs, and the maintenance notices it is affected by. ``commands/status.py`` shows it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Optional

from tpu_training_components.domain.recovery import Decision, failure_summary
from tpu_training_components.live.checkpoints import CheckpointState, read_checkpoints
from tpu_training_components.live.progress_records import ProgressReading
from tpu_training_components.resources.reconcile import RECOVERIES_OUTPUT

from tpu_training import stack_config
from tpu_training.plan_output import read_previous_outputs

OUTPUTS_SECONDS = 60.0
"""How long `pulumi stack output` may take: it reads the backend, and answers in seconds."""


READ_SECONDS = 15.0
"""Each Cloud Storage request's timeout; ``read_checkpoints``' deadline bounds each run's reads."""


@dataclass
class RunStatus:
    """What is known of one TPU VM or Job."""

    kind: str
    """``tpuVm``, ``job`` or ``jobset`` (a Job entry declared as a JobSet)."""
    name: str
    where: str
    checkpoint_dir: str
    train_steps: Optional[int]
    decision: Optional[Decision] = None
    checkpoints: Optional[CheckpointState] = None
    progress: Optional[ProgressReading] = None
    """The trainer's progress records (docs/trainer.md), one per process."""
    last_recovery: Optional[dict[str, Any]] = None
    unread: list[str] = field(default_factory=list)

    @property
    def probe_kind(self) -> str:
        """The kind the probe and the stack outputs file it under: a JobSet is a ``jobs`` entry."""
        return "tpuVm" if self.kind == "tpuVm" else "job"

    def to_json(self) -> dict[str, Any]:
        checkpoint = self.checkpoints
        return {
            "kind": self.kind,
            "name": self.name,
            "where": self.where,
            "live": None if self.decision is None or self.decision.unavailable else self.decision.reason,
            "decision": None if self.decision is None else self.decision.message,
            "checkpointDir": self.checkpoint_dir,
            "newestCheckpoint": (
                None
                if checkpoint is None or checkpoint.step is None
                else {
                    "step": checkpoint.step,
                    "savedAt": checkpoint.saved_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                    if checkpoint.saved_at
                    else None,
                }
            ),
            "incompleteSteps": list(checkpoint.incomplete_steps) if checkpoint else [],
            "trainingComplete": checkpoint.complete if checkpoint else None,
            "trainSteps": self.train_steps,
            "processes": (
                None
                if self.progress is None
                else [
                    {
                        "process": record.process,
                        "phase": record.phase,
                        "step": record.step,
                        "advancedAt": utc_text(record.advanced_at),
                        "writtenAt": utc_text(record.written_at),
                    }
                    for record in self.progress.records
                ]
            ),
            "lastRecovery": self.last_recovery,
            "unread": self.unread,
        }


def runs_of(settings: stack_config.StackConfig) -> list[RunStatus]:
    """Every TPU VM and Job of the stack, with where its checkpoints are and how long it runs."""

    def steps(environment: dict[str, str]) -> Optional[int]:
        value = environment.get("TRAIN_STEPS")
        return int(value) if value and value.isdigit() else None

    derived = stack_config.derived
    entries = [
        *(
            (
                "tpuVm",
                vm.name,
                ", ".join(vm.ladder_zones),
                derived.vm_checkpoint_dir(settings, vm),
                derived.vm_environment(settings, vm),
            )
            for vm in settings.tpu_vms
        ),
        *(
            (
                job.kind.lower(),
                job.name,
                job.namespace,
                derived.job_checkpoint_dir(settings, job),
                derived.job_environment(settings, job),
            )
            for job in settings.jobs
        ),
    ]
    return [
        RunStatus(kind, name, where, folder, steps(environment))
        for kind, name, where, folder, environment in entries
    ]


def stack_outputs(stack: str, outputs_file: Optional[str]) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """The stack's outputs (from the file, or `pulumi stack output --json`), or why not."""
    if outputs_file is not None:
        return read_previous_outputs(outputs_file), None
    document, why = _cli_json(["stack", "output", "--json", "--stack", stack], "stack output")
    if why == NO_CLI:
        return None, f"{why}; pass --outputs FILE (`pulumi stack output --json > FILE`)"
    if why is not None:
        return None, why
    return (document if isinstance(document, dict) else {}), None


NO_CLI = "no Pulumi CLI on PATH"


def _cli_json(args: list[str], what: str) -> tuple[Any, Optional[str]]:
    """`pulumi ARGS` (JSON out, ARGS ending in `--stack NAME`) with the outputs' deadline: its
    document, or why there is none (``NO_CLI`` when there is no CLI to run)."""
    try:
        done = subprocess.run(["pulumi", *args], capture_output=True, text=True, timeout=OUTPUTS_SECONDS)
    except FileNotFoundError:
        return None, NO_CLI
    except subprocess.TimeoutExpired:
        return None, f"`pulumi {what}` took longer than {OUTPUTS_SECONDS:g} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"`pulumi {' '.join(args)}` failed: {last}"
    try:
        return json.loads(done.stdout), None
    except ValueError:
        return None, f"`pulumi {' '.join(args[:-2])}` printed no JSON"


def decrypted_config(stack: str) -> dict[str, tuple[str, bool]]:
    """The stack's config with its secrets decrypted, as `pulumi up` hands it to the program:
    ``{key: (value, secret)}`` from `pulumi config --show-secrets --json` (the same reading
    `recover` makes through the Automation API). Raises ``SecretsUnreadable`` with why not."""
    document, why = _cli_json(["config", "--show-secrets", "--json", "--stack", stack], "config")
    if why is not None or not isinstance(document, dict):
        raise SecretsUnreadable(why or "`pulumi config --json` printed no object")
    return {
        str(key): (str(entry.get("value", "")), bool(entry.get("secret")))
        for key, entry in document.items()
        if isinstance(entry, dict)
    }


class SecretsUnreadable(Exception):
    """The Pulumi CLI could not give the stack's decrypted config."""


def gather(
    settings: stack_config.StackConfig,
    outputs: Optional[dict[str, Any]],
    outputs_unread: Optional[str],
    *,
    probe: Callable[[stack_config.StackConfig], list[tuple[str, Decision]]],
    storage: Callable[[], Any],
    progress: Callable[[str], ProgressReading],
) -> list[RunStatus]:
    """Everything status shows, read once: the probe, the buckets, the outputs. ``progress``
    reads a run's progress records (the probe judges hangs by the same reader, which keeps what
    it read: one listing per run)."""
    runs = runs_of(settings)
    decisions = {(kind, d.name): d for kind, d in probe(settings)}
    recoveries = (outputs or {}).get(RECOVERIES_OUTPUT)
    client: Any = None
    client_error: Optional[str] = None
    try:
        client = storage()
    except Exception as exc:  # noqa: BLE001 - no credentials: the buckets cannot be read
        client_error = failure_summary(exc)
    for run in runs:
        run.decision = decisions.get((run.probe_kind, run.name))
        if run.decision is None or run.decision.unavailable:
            why = run.decision.reason if run.decision else "not probed"
            run.unread.append(f"live state: {why}")
        if client is None:
            run.unread.append(f"checkpoints: {client_error}")
        else:
            try:
                run.checkpoints = read_checkpoints(client, run.checkpoint_dir, timeout=READ_SECONDS)
            except Exception as exc:  # noqa: BLE001 - reported per run
                run.unread.append(f"checkpoints: {failure_summary(exc)}")
            try:
                reading = progress(run.checkpoint_dir)
                run.progress = reading
                run.unread.extend(f"progress: {problem}" for problem in reading.problems)
            except Exception as exc:  # noqa: BLE001 - reported per run
                run.unread.append(f"progress: {failure_summary(exc)}")
        if outputs is None:
            run.unread.append(f"last recovery: {outputs_unread}")
        else:
            by_kind = (
                recoveries.get("tpuVms" if run.probe_kind == "tpuVm" else "jobs")
                if isinstance(recoveries, dict)
                else None
            )
            found = by_kind.get(run.name) if isinstance(by_kind, dict) else None
            run.last_recovery = found if isinstance(found, dict) else None
    return runs


def utc_text(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
