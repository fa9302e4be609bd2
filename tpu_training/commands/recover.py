"""Recover a stack by itself: read the live TPU nodes and training Jobs, and run
`pulumi up --refresh --yes`, targeted at them, only when some VM or Job must be created or
replaced.

    tpu-training recover --stack NAME [--once | --watch SECONDS [--no-events]] [--dry-run] [--json]
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
stack (``tpu_training.recovery.recovery_targets`` says why that is safe), and tells the program which they are
(``recovery_rounds.ROUND_ENV``), so the stack's outputs say what the state holds. A Job or JobSet
whose pool or run parameters have a pending edit is not recovered alone; one whose restart budget
is spent (``domain.restart_budget``) is not recovered at all. ``--apply-pending`` applies
everything.

Exit status (``tpu_training.exit_codes``, ``round_report.EXIT_UP_FAILED``): 0 nothing to recover or
`pulumi up` succeeded (and after a --watch ends by SIGINT/SIGTERM); 1 `pulumi up` failed, the round
is blocked, or a restart budget is spent; 2 invalid configuration; 64 invalid command line; 69 the
Pulumi CLI cannot be run or the stack does not exist; 75 nothing was done because live state or the
stack itself was unavailable (try again later); 130 a Ctrl-C while it started.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Optional, Sequence, TextIO

from tpu_training_components.domain.recovery import (
    Decision,
)
from tpu_training_components.live.cloud_logging import RecordLog

from tpu_training import project_files, stack_config
from tpu_training.command_line import (
    CommandLineParser,
    UsageError,
    load_project_for,
    seconds,
    stack_name,
)
from tpu_training.exit_codes import EXIT_CONFIG_ERROR, EXIT_UNAVAILABLE, EXIT_USAGE
from tpu_training.recovery.automation import AutomationUp
from tpu_training.recovery.pulumi_process import UP_TIMEOUT_SECONDS, PulumiUnavailable
from tpu_training.recovery.recover_events import ClusterEvents
from tpu_training.recovery.recovery_round import Recoverer
from tpu_training.recovery.round_report import RoundReport
from tpu_training.recovery.stack_probe import Probe, Target, notice_step
from tpu_training.recovery.watch_loop import StopSignal, publish_records, watch

MIN_WATCH_SECONDS = 10.0
"""Shorter rounds would only list the same nodes again: a node takes minutes to re-create."""
MAX_WATCH_SECONDS = 24 * 3600.0
"""Longer than a day between rounds is no watch; use --once on a schedule instead."""


_watch_seconds = seconds("between rounds", MIN_WATCH_SECONDS, MAX_WATCH_SECONDS)


def parser() -> argparse.ArgumentParser:
    """``tpu-training recover``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training recover",
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
        type=seconds("a `pulumi up` may take", 60, 7 * 24 * 3600),
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


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


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


def main(argv: Optional[Sequence[str]] = None, *, probe: Optional[Probe] = None) -> int:
    args = parser().parse_args(argv)
    say = _printer(sys.stderr if args.json else sys.stdout)
    stop = StopSignal(say)
    stop.install()
    try:
        stack, stack_project = stack_name(args.stack)
        project = load_project_for(args.stack, stack_project)
    except UsageError as exc:
        _write(sys.stderr, f"error: {exc}")
        return EXIT_USAGE
    except project_files.ProjectFileError as exc:
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
