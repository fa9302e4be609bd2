"""Recover a stack by itself: read the live TPU nodes and training Jobs, and run
`pulumi up --refresh --yes`, targeted at them, only when some VM or Job must be created or
replaced.

    python -m infra.recover --stack NAME [--once | --watch SECONDS [--no-events]] [--dry-run] [--json]
                            [--up-timeout SECONDS] [--apply-pending]

Each round reads the stack's config the way `pulumi up` does (Pulumi.yaml and
Pulumi.<stack>.yaml), lists the live nodes (one Cloud TPU API call per zone, or TPU_API_ENDPOINT)
and Jobs (one Kubernetes call per namespace and kind: Jobs, JobSets, and the Kueue Workloads of
queued ones that are suspended; KUBECONFIG, or the GKE API), decides with the same
decision tables as the stack program, prints one line per decision, and runs `pulumi up` through
the Pulumi Automation API when something must be recovered. A round where everything works costs
those list calls and nothing more: no `pulumi up`, no stack lock.

A recovering round changes only what it decided: a `pulumi preview` says what else a full update
would change (an edit committed but not deployed), the round names those changes and leaves them
alone, and its `pulumi up --refresh` targets the recovered VMs and Jobs alone, never the root
stack (``infra.recovery_targets`` says why that is safe), and tells the program which they are
(``recovery_rounds.ROUND_ENV``), so the stack's outputs say what the state holds. A Job or JobSet
whose pool or run parameters have a pending edit is not recovered alone; one whose restart budget
is spent (``domain.restart_budget``) is not recovered at all. ``--apply-pending`` applies
everything.

Exit status (see EXIT_*): 0 nothing to recover or `pulumi up` succeeded (and after a --watch ends
by SIGINT/SIGTERM); 1 `pulumi up` failed, the round is blocked, or a restart budget is spent; 2
invalid configuration; 64 invalid command line; 69 the Pulumi CLI cannot be run or the stack does
not exist; 75 nothing was done because live state or the stack itself was unavailable (try again
later); 130 a Ctrl-C while it started.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    # Run from inside infra/ (`python recover.py`, `python -m recover`), where `from infra import`
    # fails: run as `python -m infra.recover` from the project folder (infra/from_inside.py).
    import importlib

    importlib.import_module("from_inside").run_from_project("infra.recover")

import signal
import sys

if __name__ == "__main__":
    # A Ctrl-C while the libraries below load (a second or more) ends the run as one later does,
    # with 130 and no traceback; main() installs the watch's own handlers.
    def _interrupted_at_start(number: int, frame: object) -> None:
        raise SystemExit(130)

    signal.signal(signal.SIGINT, _interrupted_at_start)

import argparse
import dataclasses
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import Any, Callable, Optional, Sequence, TextIO

import pulumi
from tpu_training_components.domain.capacity_ladder import (
    CreateFailure,
    LadderState,
    Rung,
    after_create,
    declare,
    failure_of,
    state_from_records,
    zone_to_judge,
)
from tpu_training_components.domain.recovery import (
    Cause,
    Decision,
    failure_summary,
    live_generation,
    utc_now,
)
from tpu_training_components.domain.recovery_records import RoundTimes, recovery_record
from tpu_training_components.domain.recovery_rounds import (
    ENDED_EARLY,
    Backoff,
    RecoveryRound,
    RoundOutcome,
    RoundPlan,
    next_round_in,
    plan_round,
)
from tpu_training_components.domain.restart_budget import (
    RESTARTS_OUTPUT,
    Recovery,
    RestartBudget,
    history_after_recovery,
    live_restarts,
    read_history,
    with_budget,
)
from tpu_training_components.live import endpoints
from tpu_training_components.live.cloud_logging import RecordLog
from tpu_training_components.live.kube_api import ClusterRef, LiveJobs, list_live_jobs
from tpu_training_components.live.tpu_api import LiveNodes, list_live_nodes
from tpu_training_components.resources import reconcile

from infra import offline, recovery_targets, stack_config
from infra.automation import (
    UP_TIMEOUT_SECONDS,
    AutomationUp,
    PendingChange,
    PulumiTryLater,
    PulumiUnavailable,
    UpResult,
    UpRunner,
    deployed_names,
)
from infra.interrupted_updates import Live, any_interrupted, interruptions, settle
from infra.maintenance import NoticeRound, NoticeStep
from infra.plan import CommandLineParser, UsageError, exit_quickly, load_project_for, stack_name
from infra.recover_events import ClusterEvents

EXIT_OK = 0
EXIT_UP_FAILED = 1
EXIT_CONFIG_ERROR = 2
EXIT_USAGE = 64
"""The command line is wrong (sysexits.h EX_USAGE): nothing was run."""
EXIT_UNAVAILABLE = 69
"""The Pulumi CLI cannot be run, or the stack does not exist (EX_UNAVAILABLE)."""
EXIT_TRY_LATER = 75
"""Nothing was done: live state unreadable, or another update held the stack (EX_TEMPFAIL)."""

MIN_WATCH_SECONDS = 10.0
"""Shorter rounds would only list the same nodes again: a node takes minutes to re-create."""
MAX_WATCH_SECONDS = 24 * 3600.0
"""Longer than a day between rounds is no watch; use --once on a schedule instead."""


def _seconds(what: str, least: float, most: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(seconds) or not least <= seconds <= most:
            raise argparse.ArgumentTypeError(f"{text!r}: give the seconds {what}, from {least:g} to {most:g}")
        return seconds

    return parse


_watch_seconds = _seconds("between rounds", MIN_WATCH_SECONDS, MAX_WATCH_SECONDS)


def _parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="python -m infra.recover",
        description="Read live TPU VMs and Jobs; run `pulumi up --refresh --yes` only when something "
        "must be created or replaced.",
        epilog="Exit status: 0 nothing to recover or recovered; 1 `pulumi up` failed, blocked, or a restart "
        "budget spent; 2 invalid configuration; 64 invalid command line; 69 Pulumi CLI or stack unavailable; "
        "75 live state or stack unavailable, nothing done (try later); 130 interrupted while starting.",
    )
    parser.add_argument(
        "--stack", required=True, help="stack: [ORG/[PROJECT/]]NAME; reads Pulumi.<NAME>.yaml"
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="run one round and exit (the default)")
    when.add_argument(
        "--watch",
        metavar="SECONDS",
        type=_watch_seconds,
        help=f"run a round every SECONDS ({MIN_WATCH_SECONDS:g} to {MAX_WATCH_SECONDS:g}) until SIGINT "
        "or SIGTERM",
    )
    parser.add_argument(
        "--no-events",
        action="store_true",
        help="with --watch: do not watch the cluster's Jobs, JobSets, Pods and Nodes to start a round as "
        "soon as one changes; rounds come every SECONDS only",
    )
    parser.add_argument(
        "--up-timeout",
        metavar="SECONDS",
        type=_seconds("a `pulumi up` may take", 60, 7 * 24 * 3600),
        default=UP_TIMEOUT_SECONDS,
        help=f"stop waiting for a `pulumi up` after SECONDS and count it failed "
        f"(default {UP_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and print, never run `pulumi up` (needs the Pulumi CLI only to decrypt secrets)",
    )
    parser.add_argument(
        "--apply-pending",
        action="store_true",
        help="also apply changes that recovery did not decide (edits not yet deployed): a full "
        "`pulumi up --refresh` instead of one targeted at the recovered VMs and Jobs",
    )
    parser.add_argument(
        "--records",
        metavar="FILE",
        help="append one JSON line per recovered VM or Job to FILE: its cause and how long the "
        "recovery took, for goodput accounting (docs/recovery-records.md)",
    )
    parser.add_argument(
        "--no-cloud-logging",
        action="store_true",
        help="do not send the recovery records to Cloud Logging (by default they go to the stack's "
        "project when Application Default Credentials are found, for its dashboard and alerts: "
        "docs/monitoring.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per round on standard output (the readable lines go to standard error)",
    )
    return parser


# ---------------------------------------------------------------------------------------------
# One round
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The stack a round recovers: its project, and its name as the CLI and the files know it."""

    project: offline.Project
    stack: str
    """The stack's name: ``Pulumi.<stack>.yaml``."""
    qualified: str
    """As given on the command line (``org/project/name`` or ``name``): what `pulumi up` selects."""


Decrypt = Callable[[str], dict[str, tuple[str, bool]]]
"""The stack's config with its secrets decrypted, as the Pulumi CLI gives it (``read_config``)."""


class SecretsNeedTheCli(Exception):
    """The stack file holds `secure:` values, and no Pulumi CLI is there to decrypt them."""


@dataclass(frozen=True)
class LoadedStack:
    settings: stack_config.StackConfig
    warnings: list[str]
    config: dict[str, str]
    """The config as the program reads it (secrets decrypted)."""
    secret_keys: list[str]


def load_settings(target: Target, decrypt: Optional[Decrypt] = None) -> LoadedStack:
    """The stack's validated config as `pulumi up` would read it, and the warnings on the way.

    A stack file with `secure:` values is read through the Pulumi CLI (``decrypt``), never with
    the offline plan's stand-ins: a stand-in where a name, a zone or a cluster goes would make the
    probe look for a resource that does not exist, and recover it every round. Raises
    ``offline.ProjectFileError``, ``stack_config.ConfigError`` or ``SecretsNeedTheCli``."""
    values, secret_keys, warnings = offline.stack_config(target.project, target.stack)
    if secret_keys:
        if decrypt is None:
            raise SecretsNeedTheCli(
                f"Pulumi.{target.stack}.yaml holds secrets ({', '.join(sorted(secret_keys))}); reading them "
                f"needs the Pulumi CLI and the stack's secrets provider, which this run has not got"
            )
        decrypted = decrypt(target.qualified)
        values.update({key: value for key, (value, _) in decrypted.items()})
        secret_keys = [key for key, (_, secret) in decrypted.items() if secret]
        warnings = [
            w for w in warnings if not w.endswith(f"reads {offline.SECRET_PLACEHOLDER!r} in its place")
        ]
    loaded: list[stack_config.StackConfig] = []
    run = offline.run(
        lambda: loaded.append(stack_config.load(target.stack)),
        project=target.project.name,
        stack=target.stack,
        config=values,
        secret_keys=secret_keys,
    )
    return LoadedStack(loaded[0], [*warnings, *loaded[0].warnings, *run.warnings], values, list(secret_keys))


@dataclass
class Probe:
    """Reads the live state and decides, with the stack program's own reconcile functions."""

    tpu_client: Any = None
    read_jobs: Callable[[ClusterRef, set[str]], LiveJobs] = list_live_jobs
    read_progress: Optional[reconcile.ReadProgress] = None
    """Reads a run's progress records (None: a Cloud Storage client of the stack's project)."""
    clock: Callable[[], datetime] = utc_now
    """Now, for the maintenance grace and hang limits."""
    tpu_nodes: Optional[LiveNodes] = field(default=None, init=False)
    """The TPU nodes the last call listed: their maintenance notices are read from them
    (``infra.maintenance``), with no call of their own."""

    def __call__(self, settings: stack_config.StackConfig) -> list[tuple[str, Decision]]:
        checks = stack_config.derived.hang_checks(settings)
        # One reader (one storage client, made when first needed) for the VMs' and the Jobs' records.
        read_progress = self.read_progress or reconcile.progress_reader(settings.gcp_project)
        now = self.clock()
        self.tpu_nodes = live = list_live_nodes(
            settings.gcp_project,
            {zone for vm in settings.tpu_vms for zone in vm.ladder_zones},
            client=self.tpu_client,
        )
        vms = reconcile.reconcile_tpu_vms(
            settings.gcp_project,
            # A VM with a capacity ladder is judged where it lives, on any of its rungs' zones.
            [
                (vm.name, zone_to_judge(vm.name, vm.ladder_zones, live.nodes, live.failures))
                for vm in settings.tpu_vms
            ],
            grace=timedelta(minutes=settings.recovery.maintenance_grace_minutes),
            live=self.tpu_nodes,
            hang_checks=checks,
            read_progress=read_progress,
            now=now,
        )
        jobs = (
            reconcile.reconcile_jobs(
                ClusterRef(settings.gcp_project, settings.cluster.location, settings.cluster.name),
                [(job.name, job.namespace, job.kind) for job in settings.jobs],
                read=self.read_jobs,
                queued={
                    job.name for job in settings.jobs if stack_config.derived.job_pool(settings, job).queued
                },
                hang_checks=checks,
                read_progress=read_progress,
                project=settings.gcp_project,
                now=now,
            )
            if settings.cluster
            else []
        )
        return [*(("tpuVm", d) for d in vms), *(("job", d) for d in jobs)]


@dataclass
class RoundReport:
    stack: str
    number: int
    started: str
    decisions: list[tuple[str, Decision]] = field(default_factory=list)
    plan: Optional[RoundPlan] = None
    up: Optional[UpResult] = None
    """The round's `pulumi up`, once it came to one: run, or held back (dry run, stop, blocked)."""
    ended_early: Optional[tuple[RoundOutcome, str]] = None
    """How and why the round ended before it came to a `pulumi up`: an outcome of ``ENDED_EARLY``,
    and the message."""
    targets: tuple[str, ...] = ()
    """The URNs its `pulumi up` targeted (none: a full update, or no update)."""
    pending: tuple[PendingChange, ...] = ()
    """Changes a full update would make that recovery did not decide."""
    duration_seconds: float = 0.0
    notices: Optional[NoticeRound] = None
    """The maintenance notices the round read, and the save requests they became."""
    trigger: str = "first"
    """What started the round: "first", "interval", or "event: <the cluster change>"."""
    detected_at: Optional[datetime] = None
    """When the round had decided (its live state read)."""
    up_started_at: Optional[datetime] = None
    up_ended_at: Optional[datetime] = None
    rungs: dict[str, Rung] = field(default_factory=dict)
    """The rung of its capacity ladder each recovered TPU VM is declared on."""
    gcp_project: Optional[str] = None
    """The stack's Google Cloud project, once its config was read: where its records are logged."""
    create_failures: dict[str, CreateFailure] = field(default_factory=dict)
    """How the create of each recovered TPU VM failed, when its `pulumi up` failed."""
    stockout_moves: set[str] = field(default_factory=set)
    """TPU VMs this round declares one rung down (cause ``stockout``)."""
    ladder_moves: tuple[str, ...] = ()
    """TPU VMs whose next creation goes one rung down: the next round is a new attempt, not a
    retry, so a watch does not back off before it."""
    released_locks: list[str] = field(default_factory=list)
    """The locks of dead updates the round released, one line each: whose, and how it knew."""
    settled: list[str] = field(default_factory=list)
    """What the round did to settle the state interrupted updates left (``infra.interrupted_updates``)."""

    def recovery_records(self) -> list[dict[str, Any]]:
        """One record per VM or Job the round's `pulumi up` recovered (or tried to): its cause and
        how long the recovery took (``domain.recovery_records``); none when no up ran."""
        if self.plan is None or self.up is None or self.detected_at is None:
            return []
        times = RoundTimes(self.detected_at, self.up_started_at, self.up_ended_at, self.up.status.value)
        recovering = set(self.plan.recovering)
        records = []
        for kind, decision in self.decisions:
            if decision not in recovering:
                continue
            record = recovery_record(self.stack, kind, decision, times)
            if self.released_locks:
                record["releasedLocks"] = list(self.released_locks)
            if kind == "tpuVm" and decision.name in self.rungs:
                # Its rung, and how its create failed: what a later run counts stockouts from.
                record["rung"] = self.rungs[decision.name].to_json()
                failure = self.create_failures.get(decision.name)
                record["createFailure"] = failure.value if failure is not None else None
            records.append(record)
        return records

    @property
    def outcome(self) -> RoundOutcome:
        if self.ended_early is not None:
            return self.ended_early[0]
        return self.up.status if self.up is not None else RoundOutcome.NOT_RUN

    @property
    def reason(self) -> Optional[str]:
        """Why the round ended early; None when it did not."""
        return self.ended_early[1] if self.ended_early is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "round": self.number,
            "started": self.started,
            "durationSeconds": self.duration_seconds,
            "trigger": self.trigger,
            # "error", "unavailable", "tryLater": the reason under the key of its outcome.
            **{outcome.value: self.reason if self.outcome is outcome else None for outcome in ENDED_EARLY},
            "targets": list(self.targets),
            "releasedLocks": list(self.released_locks),
            "settled": list(self.settled),
            "pendingChanges": [{"urn": p.urn, "op": p.op, "keys": list(p.keys)} for p in self.pending],
            "decisions": [
                {
                    "kind": kind,
                    "name": d.name,
                    "action": d.action,
                    # A new one (create, replace) is stamped by the program when it declares it.
                    "generation": d.generation if d.action == "keep" else None,
                    "afterLastDeployed": d.after_last_deployed,
                    "reason": d.reason,
                    # One word (domain.recovery.Cause) for a create or replace; null for a keep.
                    "cause": d.cause.value if d.cause is not None else None,
                    "warn": d.warn,
                    "unavailable": d.unavailable,
                    "restarts": d.restarts,
                    "overBudget": d.over_budget,
                    "resumed": d.resumed,
                }
                for kind, d in self.decisions
            ],
            "notices": self.notices.to_json() if self.notices else [],
            "upNeeded": bool(self.plan and self.plan.run_up),
            "up": {
                "status": (self.up.status if self.up else RoundOutcome.NOT_RUN).value,
                "message": self.up.message if self.up else None,
                "durationSeconds": self.up.duration_seconds if self.up else 0.0,
                "changes": self.up.changes if self.up else {},
            },
        }


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Recoverer:
    """Runs rounds for one stack and says what each did; the CLI wraps it."""

    def __init__(
        self,
        target: Target,
        *,
        probe: Callable[[stack_config.StackConfig], list[tuple[str, Decision]]],
        up: Optional[UpRunner],
        say: Callable[[str], None],
        decrypt: Optional[Decrypt] = None,
        stopping: Callable[[], bool] = lambda: False,
        apply_pending: bool = False,
        notices: Optional[Callable[[stack_config.StackConfig, datetime], NoticeRound]] = None,
        clock: Callable[[], datetime] = utc_now,
        records: Optional[str] = None,
    ) -> None:
        self.target = target
        self.clock = clock
        """Now: when a round decided, and when its `pulumi up` started and ended."""
        self.probe = probe
        self.up = up
        """None for a dry run: decide and say, never run `pulumi up`."""
        self.say = say
        self.decrypt = decrypt
        """Reads the decrypted config through the Pulumi CLI; None when there is no CLI."""
        self.stopping = stopping
        """True once a stop was asked: a round then decides, but starts no `pulumi up`."""
        self.apply_pending = apply_pending
        """Run a full `pulumi up`, edits not yet deployed included, instead of a targeted one."""
        self.notices = notices
        """Reads the maintenance notices and asks for saves (``infra.maintenance``); None: not read."""
        self.rounds = 0
        self.ladders: dict[str, LadderState] = {}
        """Each TPU VM's place on its capacity ladder: its rung and its stockouts in a row there,
        kept between the rounds of a watch (domain/capacity_ladder.py)."""
        self.records = records
        """The ``--records`` file: where a run that has not seen a VM yet reads its stockouts."""
        self.unsettled = True
        """Whether the state may hold what an interrupted update left: true for the first round
        of a run (the last one may have been killed) and after an update that did not succeed;
        such a round reads the state even when it recovers nothing."""
        self.failed_causes: dict[str, Cause] = {}
        """VM or Job -> the cause of a recovery whose update failed: what the round that carries
        it on records, instead of "missing"."""

    def run_round(self) -> RoundReport:
        self.rounds += 1
        started = time.monotonic()
        report = RoundReport(self.target.qualified, self.rounds, _now())
        try:
            self._run_round(report)
        except PulumiUnavailable as exc:
            report.ended_early = (RoundOutcome.UNAVAILABLE, str(exc))
            self.say(f"error: {exc}")
        except PulumiTryLater as exc:
            report.ended_early = (RoundOutcome.TRY_LATER, str(exc))
            self.say(f"error: {exc}; nothing was changed, a later round tries again")
        report.duration_seconds = round(time.monotonic() - started, 3)
        return report

    def _run_round(self, report: RoundReport) -> None:
        try:
            loaded = load_settings(self.target, self.decrypt)
        except SecretsNeedTheCli as exc:
            raise PulumiUnavailable(str(exc)) from None
        except (offline.ProjectFileError, pulumi.RunError) as exc:
            report.ended_early = (RoundOutcome.CONFIG_ERROR, str(exc))
            self.say(f"error: {exc}")
            return
        settings = loaded.settings
        report.gcp_project = settings.gcp_project
        for warning in loaded.warnings:
            self.say(f"warning: {warning}")
        if not settings.recovery.read_live_state:
            message = (
                f"{stack_config.PROJECT}:recovery.readLiveState is false: the stack reads no live "
                f"state, so there is nothing to recover by"
            )
            report.ended_early = (RoundOutcome.CONFIG_ERROR, message)
            self.say(f"error: {message}")
            return

        decisions = self._carry_failed(self._settle(loaded, self.probe(settings), report))
        outputs: Optional[dict[str, Any]] = None
        if plan_round([d for _, d in decisions]).run_up and self.up is not None:
            # Which VMs and Jobs the stack deployed, and each Job's recoveries: one CLI call, made
            # only by a round that would recover something.
            outputs = self.up.stack_outputs(self.target.qualified)
        history = self._history(outputs)
        now = self.clock()
        budget = settings.recovery.restart_budget.budget
        report.decisions = [
            (kind, with_budget(d, history.get(d.name, ()) if outputs is not None else None, budget, now))
            if kind == "job"
            else (kind, self._on_ladder(settings, d, report))
            for kind, d in decisions
        ]
        for kind, decision in report.decisions:
            level = "warning" if decision.warn else "info"
            self.say(f"{level}: {'TPU VM' if kind == 'tpuVm' else 'Job'} {decision.message}")
        self._notices(report, settings, now)
        report.plan = plan_round([d for _, d in report.decisions])
        report.detected_at = now
        self.say(f"{self.target.qualified}: {report.plan.summary}")
        if not report.plan.run_up:
            return
        report.up = self._recover(report, loaded, outputs or {}, history, now)
        if report.up_started_at is not None:
            report.up_ended_at = self.clock()
        self._released(report, report.up.released_locks)
        self.say(f"{self.target.qualified}: pulumi up {report.up.status}: {report.up.message}")
        self._remember(report)
        self._after_creates(settings, report)

    def _settle(
        self, loaded: LoadedStack, decisions: list[tuple[str, Decision]], report: RoundReport
    ) -> list[tuple[str, Decision]]:
        """Settle what an interrupted update left for the recovered VMs and Jobs, from the live
        state just read (``infra.interrupted_updates``), before deciding on it: the decisions,
        with the recovery each interrupted update began carried on (``Decision.resumed``)."""
        if self.up is None or not (self.unsettled or plan_round([d for _, d in decisions]).run_up):
            return decisions
        stack = self.target.qualified
        state = self.up.export_state(stack)
        if not any_interrupted(state):
            self.unsettled = False
            return decisions
        try:
            urns = self._targets(loaded, decisions).urns
        except Exception as exc:  # noqa: BLE001 - the program, run offline, refused: leave the state be
            self.say(f"warning: the state was not settled: its resources could not be found: {exc}")
            return decisions
        named = {urn: name for name, urn in urns.items()}
        found = interruptions(state, named)
        if not found:
            self.unsettled = False
            return decisions
        by_name = {d.name: d for _, d in decisions}
        live = {urn: _live(by_name[named[urn]]) for urn in found}
        settlement = settle(state, found, live, loaded.settings.gcp_project or "")
        if settlement.unknown:
            names = ", ".join(named[urn] for urn in settlement.unknown)
            raise PulumiTryLater(
                f"an interrupted update left {names} half-done, and the live state to settle it by "
                f"could not be read; the stack's state is left as it is"
            )
        # Written back under the stack's lock (`pulumi stack import` takes it, and a live update's
        # refuses it), and only if nothing wrote the state since it was read: an update that was
        # still running then, and ended since, must not be overwritten with what it left.
        if settlement.state != state:
            if self.up.export_state(stack) != state:
                raise PulumiTryLater(
                    "the stack's state changed while the round settled what an interrupted update "
                    "left: an update is running; it is left to finish"
                )
            self._released(report, self.up.import_state(stack, settlement.state))
        for line in settlement.lines:
            report.settled.append(line)
            self.say(f"info: settled: {line}")
        if settlement.adopted:
            # Its outputs read now: the round's own update may run without --refresh (a create
            # among its targets), and until a refresh they are its inputs (``_unread``).
            self._released(report, self.up.refresh(stack, sorted(settlement.adopted)))
        self.unsettled = False
        settled = []
        for kind, decision in decisions:
            urn = urns.get(decision.name)
            if urn in settlement.adopted and decision.action == "keep" and not decision.unavailable:
                cause = settlement.adopted[urn]
                decision = _resuming(
                    decision,
                    cause,
                    f"an interrupted update made it, and this round records that recovery "
                    f"({cause or 'cause not recorded'})",
                )
            elif urn in found and decision.action != "keep" and decision.cause is Cause.MISSING:
                cause = settlement.resumed.get(urn) or self._failed_cause(decision.name)
                if cause is not None:
                    decision = _resuming(
                        decision, cause, f"carries on the recovery ({cause}) an interrupted update began"
                    )
            settled.append((kind, decision))
        return settled

    def _carry_failed(self, decisions: list[tuple[str, Decision]]) -> list[tuple[str, Decision]]:
        """A VM or Job this run's last update failed to re-create, now found missing: created with
        the cause of the recovery that update began, not "missing"."""
        carried = []
        for kind, decision in decisions:
            if decision.action == "keep" and not decision.unavailable:
                self.failed_causes.pop(decision.name, None)  # it runs: that recovery is over
            cause = self.failed_causes.get(decision.name)
            if cause is not None and decision.action == "create" and decision.cause is Cause.MISSING:
                decision = _resuming(
                    decision, cause, f"carries on the recovery ({cause}) whose update failed"
                )
            carried.append((kind, decision))
        return carried

    def _failed_cause(self, name: str) -> Optional[Cause]:
        """The cause of ``name``'s last recovery whose update failed: this run's, or the last
        record of it in ``--records`` when that one did not succeed."""
        if name in self.failed_causes:
            return self.failed_causes[name]
        records = self._read_records()
        if records is None:
            return None
        mine = [r for r in records if r.get("name") == name]
        if not mine or mine[-1].get("upStatus") == RoundOutcome.SUCCEEDED.value:
            return None
        cause = mine[-1].get("cause")
        return Cause(cause) if cause in {c.value for c in Cause} and cause != Cause.MISSING else None

    def _remember(self, report: RoundReport) -> None:
        """After an update: whether the state may hold an interruption, and each failed recovery's cause."""
        if report.up is None or report.plan is None:
            return
        if report.up.status is RoundOutcome.SUCCEEDED:
            for decision in report.plan.recovering:
                self.failed_causes.pop(decision.name, None)
        elif report.up.status in (RoundOutcome.FAILED, RoundOutcome.BUSY):
            self.unsettled = True
            for decision in report.plan.recovering:
                if decision.cause is not None and decision.cause is not Cause.MISSING:
                    self.failed_causes[decision.name] = decision.cause

    def _on_ladder(
        self, settings: stack_config.StackConfig, decision: Decision, report: RoundReport
    ) -> Decision:
        """A TPU VM that recovery creates or replaces, declared on a rung of its capacity ladder:
        the preferred one, the same one after a stockout, or the next one after
        ``recovery.ladder.attempts`` stockouts in a row (then its cause is ``stockout``)."""
        vm = next((vm for vm in settings.tpu_vms if vm.name == decision.name), None)
        if vm is None or decision.action == "keep":
            return decision
        state = self.ladders.get(vm.name) or self._recorded(vm.name, vm.ladder)
        declared = declare(vm.ladder, state, settings.recovery.ladder.attempts)
        self.ladders[vm.name] = declared.state
        report.rungs[vm.name] = declared.state.rung
        if len(vm.ladder) == 1:
            return decision
        if declared.moved:
            report.stockout_moves.add(vm.name)
            return dataclasses.replace(
                decision, reason=f"{decision.reason}; {declared.line}", cause=Cause.STOCKOUT
            )
        return dataclasses.replace(decision, reason=f"{decision.reason}; {declared.line}")

    def _recorded(self, name: str, ladder: Sequence[Rung]) -> Optional[LadderState]:
        records = self._read_records(unread="stockouts count from this run")
        return state_from_records(ladder, name, records) if records is not None else None

    def _read_records(self, *, unread: Optional[str] = None) -> Optional[list[dict[str, Any]]]:
        """The ``--records`` file's records; None when there is none, or it cannot be read (then,
        with ``unread``, a warning saying what follows from that)."""
        if self.records is None:
            return None
        try:
            with open(self.records, encoding="utf-8") as lines:
                records = [json.loads(line) for line in lines if line.strip()]
        except (OSError, ValueError) as exc:
            if unread is not None:
                self.say(f"warning: --records {self.records}: not read ({exc}); {unread}")
            return None
        return [r for r in records if isinstance(r, dict)]

    def _targets(
        self, loaded: LoadedStack, decisions: Sequence[tuple[str, Decision]]
    ) -> recovery_targets.RecoveryTargets:
        """The URNs of the VMs and Jobs of ``decisions``, from the stack program run offline."""
        return recovery_targets.find_targets(
            self.target.project,
            self.target.stack,
            loaded.config,
            loaded.secret_keys,
            [(kind, d.name) for kind, d in decisions],
        )

    def _released(self, report: RoundReport, lines: Sequence[str]) -> None:
        """Says and reports the dead updates' locks a CLI call released."""
        for line in lines:
            report.released_locks.append(line)
            self.say(f"info: {line}")

    def _after_creates(self, settings: stack_config.StackConfig, report: RoundReport) -> None:
        """Count what the update's creates met: a stockout brings the VM nearer its next rung;
        a quota, permission or invalid error is said, with what to fix, and moves nothing."""
        if report.up is None or report.up.status not in (RoundOutcome.SUCCEEDED, RoundOutcome.FAILED):
            return
        attempts = settings.recovery.ladder.attempts
        recovered = (
            [name for name in report.rungs if name in {d.name for d in report.plan.recovering}]
            if report.plan
            else []
        )
        for vm in settings.tpu_vms:
            if vm.name not in recovered or vm.name not in self.ladders:
                continue
            failure = (
                failure_of(vm.name, report.up.message, recovered)
                if report.up.status is RoundOutcome.FAILED
                else None
            )
            if failure is not None:
                report.create_failures[vm.name] = failure
            self.ladders[vm.name], line = after_create(vm.ladder, self.ladders[vm.name], failure)
            if failure is not None:
                self.say(f"warning: TPU VM {vm.name}: {line}")
            if (
                failure is CreateFailure.STOCKOUT
                and declare(vm.ladder, self.ladders[vm.name], attempts).moved
            ):
                report.ladder_moves += (vm.name,)

    def _notices(self, report: RoundReport, settings: stack_config.StackConfig, now: datetime) -> None:
        """Maintenance notices, after the decisions and apart from them: a notice never changes
        one. What they ask (a save before the window) is written whatever the round does next."""
        if self.notices is None:
            return
        try:
            report.notices = self.notices(settings, now)
        except Exception as exc:  # noqa: BLE001 - notices never stop a round
            self.say(f"warning: maintenance notices not read: {failure_summary(exc)}")
            return
        for warning in report.notices.warnings:
            self.say(f"warning: {warning}")
        for notice in report.notices.notices:
            self.say(f"info: maintenance notice: {notice.line()}")

    def _history(self, outputs: Optional[dict[str, Any]]) -> dict[str, tuple[Recovery, ...]]:
        if outputs is None:
            return {}
        history, problems = read_history(outputs.get(RESTARTS_OUTPUT))
        for problem in problems:
            self.say(f"warning: {problem}")
        return history

    def _recover(
        self,
        report: RoundReport,
        loaded: LoadedStack,
        outputs: dict[str, Any],
        history: dict[str, tuple[Recovery, ...]],
        now: datetime,
    ) -> UpResult:
        assert report.plan is not None
        recovering = [(kind, d) for kind, d in report.decisions if d in report.plan.recovering]
        try:
            targets = self._targets(loaded, recovering)
        except recovery_targets.TargetsNotFound as exc:
            return UpResult(RoundOutcome.FAILED, str(exc), 0.0)
        except Exception as exc:  # noqa: BLE001 - the program, run offline, refused its config
            return UpResult(
                RoundOutcome.FAILED, f"the stack program could not be run to find the targets: {exc}", 0.0
            )
        shown = " ".join(f"--target {urn}" for urn in targets.urns.values())
        if self.up is None:
            return UpResult(
                RoundOutcome.DRY_RUN, f"dry run: `pulumi up --refresh --yes {shown}` not run", 0.0
            )
        if self.stopping():
            # A stop asked while the round read live state: an update can take an hour; not now.
            return UpResult(RoundOutcome.STOPPED, "a stop was asked before `pulumi up` started; not run", 0.0)
        pending = self.up.pending_changes(self.target.qualified)
        chosen = recovery_targets.set_against(
            targets, pending, deployed_names(outputs), apply_pending=self.apply_pending
        )
        report.pending = chosen.beside
        budget = loaded.settings.recovery.restart_budget.budget
        if self.apply_pending:
            for change in chosen.beside:
                self.say(f"warning: --apply-pending: applied too: {change.shown}")
            told = _recovery_round(
                recovering, None, history, budget, now, report.rungs, frozenset(report.stockout_moves)
            )
            report.up_started_at = self.clock()
            return self.up(self.target.qualified, recovery_round=told)
        for line in recovery_targets.describe(chosen):
            self.say(f"warning: {line}")
        if not chosen.targets:
            return UpResult(
                RoundOutcome.BLOCKED,
                "nothing can be recovered without pending changes; `pulumi up` not run",
                0.0,
            )
        if self.stopping():
            return UpResult(RoundOutcome.STOPPED, "a stop was asked before `pulumi up` started; not run", 0.0)
        report.targets = chosen.targets
        recovered = [(kind, d) for kind, d in recovering if targets.urns[d.name] in chosen.targets]
        told = _recovery_round(
            recovered, chosen.targets, history, budget, now, report.rungs, frozenset(report.stockout_moves)
        )
        report.up_started_at = self.clock()
        return self.up(
            self.target.qualified, list(chosen.targets), refresh=chosen.refresh, recovery_round=told
        )


def _resuming(decision: Decision, cause: Optional[Cause], why: str) -> Decision:
    """``decision`` carrying on an interrupted recovery, with that recovery's cause."""
    return dataclasses.replace(decision, resumed=True, cause=cause, reason=f"{decision.reason}; {why}")


def _live(decision: Decision) -> Live:
    """What a round's decision says of its object's live state."""
    if decision.unavailable:
        return Live(None)
    if decision.action == "create":
        return Live(False)
    return Live(True, live_generation(decision))


def _recovery_round(
    recovered: Sequence[tuple[str, Decision]],
    targets: Optional[Sequence[str]],
    history: dict[str, tuple[Recovery, ...]],
    budget: RestartBudget,
    now: datetime,
    rungs: Optional[dict[str, Rung]] = None,
    stockouts: frozenset[str] = frozenset(),
) -> RecoveryRound:
    """What the round's `pulumi up` tells the program: what it recovers, and each recovered Job's
    history with this recovery in it."""
    jobs = {d.name: d for kind, d in recovered if kind == "job"}
    vms = {d.name for kind, d in recovered if kind == "tpuVm"}
    return RecoveryRound(
        targeted=targets is not None,
        tpu_vms=frozenset(d.name for kind, d in recovered if kind == "tpuVm"),
        jobs=frozenset(jobs),
        restarts={
            name: history_after_recovery(
                history.get(name, ()), live_restarts(d.restarts, d.created, budget, now), budget, now
            )
            for name, d in jobs.items()
        },
        rungs={name: rung for name, rung in (rungs or {}).items() if name in vms},
        stockouts=frozenset(name for name in stockouts if name in vms),
        resumed={d.name: d.cause.value for _, d in recovered if d.resumed and d.cause is not None},
    )


EXIT_STATUSES = {
    RoundOutcome.SUCCEEDED: EXIT_OK,
    RoundOutcome.FAILED: EXIT_UP_FAILED,
    RoundOutcome.BUSY: EXIT_TRY_LATER,
    RoundOutcome.NOT_RUN: EXIT_OK,
    RoundOutcome.DRY_RUN: EXIT_OK,
    RoundOutcome.STOPPED: EXIT_TRY_LATER,
    RoundOutcome.BLOCKED: EXIT_UP_FAILED,
    RoundOutcome.CONFIG_ERROR: EXIT_CONFIG_ERROR,
    RoundOutcome.UNAVAILABLE: EXIT_UNAVAILABLE,
    RoundOutcome.TRY_LATER: EXIT_TRY_LATER,
}
"""The status of a one-round run by its outcome, but for the two cases of ``exit_status``."""


def exit_status(report: RoundReport) -> int:
    """The status of a one-round run (``--once``)."""
    outcome = report.outcome
    if outcome not in ENDED_EARLY and report.plan is not None:
        if report.plan.over_budget:
            return EXIT_UP_FAILED
        if outcome is RoundOutcome.NOT_RUN and report.plan.unavailable:
            return EXIT_TRY_LATER
    return EXIT_STATUSES[outcome]


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


WAKE_DEBOUNCE_SECONDS = 0.25
"""A change wakes the next round this long after it: a burst (a slice's Pods failing together)
makes one round."""
MIN_SECONDS_BETWEEN_ROUNDS = 1.0
"""A woken round starts at least this long after the last one ended: a cluster that keeps
changing costs a list per second at most, never a loop."""


class StopSignal:
    """SIGINT and SIGTERM ask the watch to stop; it does so between rounds, never during a
    `pulumi up`. A cluster change (``wake``) ends the wait between rounds early."""

    def __init__(
        self,
        say: Callable[[str], None],
        *,
        debounce_seconds: float = WAKE_DEBOUNCE_SECONDS,
        gap_seconds: float = MIN_SECONDS_BETWEEN_ROUNDS,
    ) -> None:
        self.event = threading.Event()
        self._say = say
        self._debounce, self._gap = debounce_seconds, gap_seconds
        self._poked = threading.Event()
        """Set by a stop or a wake: what ends a wait early."""
        self._lock = threading.Lock()
        self._reasons: list[str] = []

    def install(self) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, self._handle)

    def _handle(self, number: int, frame: Optional[FrameType]) -> None:
        if not self.event.is_set():
            self._say(f"{signal.Signals(number).name}: stopping after this round")
        self.request_stop()

    def request_stop(self) -> None:
        self.event.set()
        self._poked.set()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def wake(self, reason: str) -> None:
        """Start the next round soon (from any thread): something in the cluster changed."""
        with self._lock:
            self._reasons.append(reason)
            self._poked.set()

    def _take(self) -> Optional[str]:
        with self._lock:
            reasons, self._reasons = self._reasons, []
            self._poked.clear()
        if not reasons:
            return None
        return reasons[0] + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "")

    def sleep(self, seconds: float, *, wakeable: bool = True) -> Optional[str]:
        """Wait ``seconds``, until a stop is asked, or (``wakeable``) until a wake: then its
        reason, once the burst settled. None when the time passed or a stop came; the wakes of
        the wait are then dropped (the next round reads everything anyway)."""
        started = time.monotonic()
        ends = started + seconds
        while not self.stopped and time.monotonic() < ends:
            if not wakeable:
                self.event.wait(ends - time.monotonic())
                continue
            self._poked.wait(ends - time.monotonic())
            with self._lock:
                woken = bool(self._reasons)
            if woken and not self.stopped:
                settle = max(self._debounce, started + self._gap - time.monotonic())
                self.event.wait(max(0.0, min(settle, ends - time.monotonic())))
                return None if self.stopped else self._take()
        self._take()
        return None


def watch(
    recoverer: Recoverer,
    *,
    interval_seconds: Optional[float],
    stop: StopSignal,
    emit: Callable[[RoundReport], None],
    backoff: Optional[Backoff] = None,
    events: Optional[ClusterEvents] = None,
) -> int:
    """Run rounds: one (``interval_seconds`` None), or one every interval until ``stop``; with
    ``events``, a relevant change in the cluster starts the next round early (not while a failed
    `pulumi up` backs off), and the interval stays the backstop."""
    try:
        return _rounds(recoverer, interval_seconds, stop, emit, backoff or Backoff(), events)
    finally:
        if events is not None:
            events.close()


def _rounds(
    recoverer: Recoverer,
    interval_seconds: Optional[float],
    stop: StopSignal,
    emit: Callable[[RoundReport], None],
    backoff: Backoff,
    events: Optional[ClusterEvents],
) -> int:
    trigger = "first"
    while True:
        report = recoverer.run_round()
        report.trigger = trigger
        emit(report)
        outcome = report.outcome
        if interval_seconds is None or outcome is RoundOutcome.UNAVAILABLE:
            return exit_status(report)
        if recoverer.rounds == 1 and outcome is RoundOutcome.CONFIG_ERROR:
            return EXIT_CONFIG_ERROR  # a stack that never loads: say so at once, not every round
        nothing_to_recover = (
            outcome is RoundOutcome.NOT_RUN and report.plan is not None and not report.plan.unavailable
        )
        if report.up is not None or nothing_to_recover:
            # An up's outcome counts; so does nothing to recover: the capacity problem is over. A
            # round that could not read live state, or ended early, says nothing.
            backoff.record(outcome)
        delay = next_round_in(interval_seconds, backoff, outcome)
        if report.ladder_moves:
            delay = interval_seconds  # the next rung is a first attempt there, not a retry
        if outcome is RoundOutcome.FAILED:
            recoverer.say(
                f"{recoverer.target.qualified}: `pulumi up` failed {backoff.failures} time(s) in a row; "
                f"next round in {delay:.0f} s"
            )
        if stop.stopped:
            return EXIT_OK
        if events is not None:
            events.follow()  # the scope of the round just read: started, or moved, or stopped
        woken = stop.sleep(delay, wakeable=events is not None and outcome is not RoundOutcome.FAILED)
        if stop.stopped:
            return EXIT_OK
        trigger = f"event: {woken}" if woken else "interval"


def publish_records(
    report: RoundReport, path: Optional[str], record_log: Optional[RecordLog], say: Callable[[str], None]
) -> None:
    """A round's recovery records: appended to ``path`` (``--records``) and sent to Cloud Logging
    (``record_log``; none with ``--no-cloud-logging`` or in a dry run), each when given."""
    records = report.recovery_records()
    if path:
        append_records(path, records, say)
    if record_log is not None:
        record_log.write(report.gcp_project, records)


def append_records(path: str, records: Sequence[dict[str, Any]], say: Callable[[str], None]) -> None:
    """Append the records as JSON lines, one write each; a file that cannot be written is a
    warning, never the end of the watch (recovery matters more than its accounting)."""
    if not records:
        return
    try:
        with open(path, "a", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError as exc:
        say(f"warning: --records {path}: not written ({exc.strerror or exc}); the recovery itself went on")


def _printer(stream: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        _write(stream, line)

    return say


def _write(stream: TextIO, line: str) -> None:
    """Print a line; a reader that went away (a closed pipe) stops the printing, never the
    recovery: the round still decides and recovers, and its exit status still tells."""
    try:
        print(line, file=stream, flush=True)
    except (BrokenPipeError, ValueError):
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError):
            pass


def notice_step(probe: Callable[..., Any], *, write: bool) -> NoticeStep:
    """The notices of the nodes ``probe`` lists (a ``Probe``; another lists none of its own),
    with save requests written when ``write`` (not in a dry run)."""
    return NoticeStep(
        tpu_nodes=lambda: probe.tpu_nodes if isinstance(probe, Probe) else None,
        storage=lambda settings: endpoints.storage_client(settings.gcp_project),
        write=write,
    )


def main(argv: Optional[Sequence[str]] = None, *, probe: Optional[Probe] = None) -> int:
    args = _parser().parse_args(argv)
    say = _printer(sys.stderr if args.json else sys.stdout)
    stop = StopSignal(say)
    stop.install()
    try:
        stack, stack_project = stack_name(args.stack)
        project = load_project_for(args.stack, stack_project)
    except UsageError as exc:
        _write(sys.stderr, f"error: {exc}")
        return EXIT_USAGE
    except offline.ProjectFileError as exc:
        _write(sys.stderr, f"error: {exc}")
        return EXIT_CONFIG_ERROR

    def start_cli() -> AutomationUp:
        return AutomationUp(project.root, lambda line: say(f"  | {line}"), up_timeout_seconds=args.up_timeout)

    cli: Optional[AutomationUp] = None
    if not args.dry_run:
        try:
            cli = start_cli()
        except PulumiUnavailable as exc:
            _write(sys.stderr, f"error: {exc}")
            return EXIT_UNAVAILABLE

    def decrypt(qualified: str) -> dict[str, tuple[str, bool]]:
        # A dry run starts the CLI only here: when the stack file holds secrets.
        return (cli or start_cli()).read_config(qualified)

    record_log = None if args.no_cloud_logging or args.dry_run else RecordLog(say)

    def emit(report: RoundReport) -> None:
        if args.json:
            _write(sys.stdout, json.dumps(report.to_json(), sort_keys=True))
        publish_records(report, args.records, record_log, say)

    reads = probe or Probe()
    events = None if args.watch is None or args.no_events else ClusterEvents(stop.wake, say)

    def probing(settings: stack_config.StackConfig) -> list[tuple[str, Decision]]:
        if events is not None:
            events.note(settings)  # what the round read is what the watcher watches
        return reads(settings)

    recoverer = Recoverer(
        Target(project, stack, args.stack),
        probe=probing,
        up=cli,
        say=say,
        decrypt=decrypt,
        stopping=lambda: stop.stopped,
        apply_pending=args.apply_pending,
        notices=notice_step(reads, write=not args.dry_run),
        records=args.records,
    )
    return watch(recoverer, interval_seconds=args.watch, stop=stop, emit=emit, events=events)


def _run() -> int:
    try:
        return main()
    except KeyboardInterrupt:  # before the handlers are installed, at start-up
        return 130


if __name__ == "__main__":
    exit_quickly(_run())
