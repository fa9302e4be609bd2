"""Show how a stack's training is doing, in one place.

    tpu-training status --stack NAME [--json] [--outputs FILE] [--html PAGE] [--figure FILE]
    tpu-training status --records FILE [--records FILE ...] [--run NAME] [--html PAGE]
        [--figure FILE]

For each TPU VM and Job of the stack:

- live state and the recovery decision `pulumi up` would take now: the same probe as
  `tpu-training recover` (one Cloud TPU API call per zone, one Kubernetes call per namespace and kind);
- the newest complete checkpoint in its ``CHECKPOINT_DIR`` (step, and when it was saved), read
  from the bucket, and progress at it: that step of the run's ``TRAIN_STEPS``, or done when the
  trainer wrote ``TRAINING_COMPLETE``;
- the last recovery (create or replace) and its cause: the stack output ``lastRecoveries``, read
  with ``pulumi stack output --json``, or from ``--outputs FILE`` (what that command printed).

Then the maintenance notices of the stack's TPU VMs and GKE node pools (``tpu_training.recovery.maintenance``:
from the probe's own TPU listing, and one Kubernetes call for the pools' nodes), each with the
training it affects and whether its save request stands; status reads, it writes none (a
recover round does). A notice that cannot be read is a warning, not an unread item; when a
listing could not be read the notices are "unknown", never "none", and the listing is named.

Whatever cannot be read (offline, no credentials, no Pulumi CLI, an API down) is said, per item,
and the rest is still shown. Endpoints: TPU_API_ENDPOINT, GKE_API_ENDPOINT, KUBECONFIG and
STORAGE_API_ENDPOINT replace Google's (``live/endpoints.py``).

``--html PAGE`` also writes each run's timeline (steps, saves, interruptions by cause, recovery
gaps) as one self-contained HTML page, ``--figure FILE`` the same drawing as a PNG or SVG file;
``--records FILE`` draws it from recover's records and the trainer's timed log lines alone, with
no stack read (``domain/run_timeline.py``, ``tpu_training/timeline_figure.py``; docs/status.md).

Exit status (see EXIT_*): 0 everything was read; 2 invalid configuration or project file; 64
invalid command line; 65 ``--records`` hold no timeline; 66 a ``--records`` file cannot be read;
73 ``--html`` or ``--figure`` cannot be written; 75 something could not be read (each named in the
output): try again, or read the rest.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tpu_training_components.domain.recovery import UNKNOWN_KEPT, Decision, zoned_time
from tpu_training_components.domain.run_timeline import (
    UNKNOWN_CAUSE,
    Interruption,
    RunTimeline,
    TimelineError,
    timeline_from_lines,
)
from tpu_training_components.live import endpoints
from tpu_training_components.live.progress_records import ProgressReading, read_progress

from tpu_training import project_files, stack_config, timeline_figure
from tpu_training.command_line import (
    CommandLineParser,
    UsageError,
    load_project_for,
    stack_name,
)
from tpu_training.exit_codes import EXIT_CANNOT_WRITE, EXIT_CONFIG_ERROR, EXIT_OK, EXIT_USAGE
from tpu_training.recovery.maintenance import NoticeRound, unread_warning
from tpu_training.recovery.stack_probe import Probe, Target, load_settings, notice_step
from tpu_training.run_status import (
    READ_SECONDS,
    RunStatus,
    SecretsUnreadable,
    decrypted_config,
    gather,
    stack_outputs,
    utc_text,
)

EXIT_NO_RECORDS = 65
"""``--records`` files hold no timeline (sysexits.h EX_DATAERR)."""
EXIT_NO_INPUT = 66
"""A ``--records`` file does not exist or cannot be read (sysexits.h EX_NOINPUT)."""
EXIT_UNREAD = 75
"""Something could not be read; the rest was shown (sysexits.h EX_TEMPFAIL)."""


def _ago(then: datetime, now: datetime) -> str:
    minutes = int((now - then).total_seconds() // 60)
    if minutes < 120:
        return f"{minutes} min ago"
    return f"{minutes // 60} h ago" if minutes < 48 * 60 else f"{minutes // (24 * 60)} days ago"


def _training(progress: ProgressReading, now: datetime) -> str:
    """The trainer's own account, from its slowest process: recovery judges hangs by the same."""
    if not progress.records:
        return "no progress published (not started yet, or a trainer that publishes none)"
    slowest = min(progress.records, key=lambda record: record.advanced_at)
    steps = sorted({record.step for record in progress.records if record.step is not None})
    at = (
        f"step {steps[0]}"
        if len(steps) == 1
        else (f"steps {steps[0]}-{steps[-1]}" if steps else "no step yet")
    )
    seconds = max(0, int((now - slowest.advanced_at).total_seconds()))
    return (
        f"{at} ({slowest.phase}), {len(progress.records)} of {slowest.processes} processes reporting; "
        f"last advanced {seconds} s ago (process {slowest.process})"
    )


_SHOWN_KIND = {"tpuVm": "TPU VM", "job": "Job", "jobset": "JobSet"}

# A failure as ``failure_summary`` words it ("DefaultCredentialsError: Your default ..."), in an
# unread item: after its topic, or in a probe's "... unavailable (...); nothing is replaced ...".
_FAILURE = re.compile(
    r"(?:^\s*[^:]+: |unavailable \()([A-Z][A-Za-z0-9_.]*: .+?)(?:\); " + re.escape(UNKNOWN_KEPT) + "|$)"
)


def _said_once(lines: list[str]) -> list[str]:
    """The lines with each failure's full text kept where it first appears and named by its type
    after that: no credentials is one error, said once, not once per VM, Job and read."""
    said: set[str] = set()
    folded = []
    for line in lines:
        for failure in _FAILURE.findall(line.split(":", 1)[1] if line.startswith("  not read:") else line):
            if failure in said:
                line = line.replace(failure, f"{failure.split(':', 1)[0]} (as above)")
            said.add(failure)
        folded.append(line)
    return folded


def render(
    stack: str, project: str, runs: Sequence[RunStatus], now: datetime, notices: Optional[NoticeRound] = None
) -> str:
    lines = [f"Status of stack {stack} (project {project}), {utc_text(now)}:"]
    for run in runs:
        lines.append(f"{_SHOWN_KIND[run.kind]} {run.name} ({run.where})")
        if run.decision is not None and not run.decision.unavailable:
            lines.append(f"  live:          {run.decision.message.split(': ', 1)[1]}")
        checkpoint = run.checkpoints
        if checkpoint is not None:
            if checkpoint.step is None:
                lines.append(f"  checkpoint:    none yet in {run.checkpoint_dir}")
            else:
                saved = (
                    f", saved {utc_text(checkpoint.saved_at)} ({_ago(checkpoint.saved_at, now)})"
                    if checkpoint.saved_at
                    else ""
                )
                lines.append(f"  checkpoint:    step {checkpoint.step}{saved} in {run.checkpoint_dir}")
            if checkpoint.incomplete_steps:
                lines.append(
                    "                 (newer, incomplete: step "
                    + ", ".join(map(str, checkpoint.incomplete_steps))
                    + ")"
                )
            if checkpoint.complete:
                lines.append("  progress:      done (TRAINING_COMPLETE)")
            elif checkpoint.step is not None and run.train_steps:
                share = min(100.0, 100.0 * checkpoint.step / run.train_steps)
                lines.append(
                    f"  progress:      step {checkpoint.step} of {run.train_steps} ({share:.0f}%) "
                    f"at that checkpoint"
                )
        if run.progress is not None:
            lines.append(f"  training:      {_training(run.progress, now)}")
        if run.last_recovery is not None:
            last = run.last_recovery
            # Since causes were words, "reason" says why in full; before, "cause" did.
            why = f"{last['cause']}: {last['reason']}" if "reason" in last else last.get("cause")
            lines.append(
                f"  last recovery: {last.get('action')} decided {last.get('decidedAt')} "
                f"(generation {last.get('generation')}): {why}"
            )
        elif not any(u.startswith("last recovery") for u in run.unread):
            lines.append("  last recovery: none recorded")
        lines.extend(f"  not read:      {unread}" for unread in run.unread)
    if not runs:
        lines.append("  the stack declares no TPU VM and no Job")
    if notices is not None:
        # Nothing found is "none" only when every listing was read; otherwise it is not known.
        header = "Maintenance notices:" if notices.notices else "Maintenance notices: none"
        if notices.unread and not notices.notices:
            header = "Maintenance notices: unknown (not every node could be listed)"
        lines.append(header)
        lines.extend(f"  {report.line()}" for report in notices.notices)
        lines.extend(f"  not read:      {what}: {why}" for what, why in notices.unread)
        said = {unread_warning(what, why) for what, why in notices.unread}
        lines.extend(f"  warning: {warning}" for warning in notices.warnings if warning not in said)
    return "\n".join(_said_once(lines))


def timeline_of(run: RunStatus) -> RunTimeline:
    """What status read of a run, as a timeline: the newest checkpoint a save, each process's
    latest step a point (when it last advanced), the last recovery an interruption at the time
    it was decided, resumed when a process of the run started after it (unknown otherwise)."""
    steps = sorted(
        (record.advanced_at, record.step)
        for record in (run.progress.records if run.progress else [])
        if record.step is not None
    )
    checkpoint = run.checkpoints
    saves = (
        ((checkpoint.saved_at, checkpoint.step),)
        if checkpoint is not None and checkpoint.step is not None and checkpoint.saved_at is not None
        else ()
    )
    interruptions: tuple[Interruption, ...] = ()
    last = run.last_recovery or {}
    decided = zoned_time(last.get("decidedAt"))
    if decided is not None:
        starts = [
            r.started_at for r in (run.progress.records if run.progress else []) if r.started_at > decided
        ]
        interruptions = (
            Interruption(
                decided,
                str(last.get("cause") or UNKNOWN_CAUSE),
                resumed_at=min(starts) if starts else None,
                detail=f"{last.get('action')} at generation {last.get('generation')}",
            ),
        )
    return RunTimeline(
        f"{_SHOWN_KIND[run.kind]} {run.name} ({run.where})", tuple(steps), saves, interruptions
    )


def _write_timelines(
    timelines: Sequence[RunTimeline],
    *,
    title: str,
    notes: Sequence[str],
    html: Optional[Path],
    figure: Optional[Path],
) -> bool:
    """The page (``--html``) and the figure (``--figure``) asked for; False, said, when one
    could not be written."""
    option = "--html"
    try:
        if html is not None:
            timeline_figure.write(html, timeline_figure.html_page(timelines, title=title, notes=notes))
        option = "--figure"
        if figure is not None:
            timeline_figure.write_figure(figure, timelines, title=title)
    except timeline_figure.ReportError as exc:
        print(f"error: {option} {exc}", file=sys.stderr)
        return False
    return True


def _timeline_from_records(
    files: Sequence[Path], html: Optional[Path], figure: Optional[Path], run: Optional[str]
) -> int:
    """``--records``: the timeline from the files alone, no stack read, no cloud."""
    if html is None and figure is None:
        print(
            "error: --records draws a timeline: give --html PAGE or --figure FILE.png|FILE.svg "
            "to write it to",
            file=sys.stderr,
        )
        return EXIT_USAGE
    lines: list[str] = []
    for path in files:
        try:
            lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        except FileNotFoundError:
            print(f"error: --records {path}: no such file", file=sys.stderr)
            return EXIT_NO_INPUT
        except OSError as exc:
            print(f"error: --records {path}: cannot be read ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_NO_INPUT
    named = ", ".join(map(str, files))
    try:
        read = timeline_from_lines(lines, run=run)
    except TimelineError as exc:
        print(
            f"error: --records {named}: {exc}" + (" with --run NAME" if "choose" in str(exc) else ""),
            file=sys.stderr,
        )
        return EXIT_NO_RECORDS
    if read.timeline.empty:
        print(
            f"error: --records {named}: nothing of run {read.timeline.name!r} "
            f"(the records name {', '.join(read.other_runs)})",
            file=sys.stderr,
        )
        return EXIT_NO_RECORDS
    notes = [
        *(f"not understood: {line}" for line in read.not_understood[:20]),
        *([f"... and {len(read.not_understood) - 20} more"] if len(read.not_understood) > 20 else []),
        *([f"records of other runs left out: {', '.join(read.other_runs)}"] if read.other_runs else []),
    ]
    title = f"Run {read.timeline.name} from {named}"
    if not _write_timelines([read.timeline], title=title, notes=notes, html=html, figure=figure):
        return EXIT_CANNOT_WRITE
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    timeline = read.timeline
    written = " and ".join(str(path) for path in (html, figure) if path is not None)
    print(
        f"timeline of {timeline.name} written to {written}: {len(timeline.steps)} step point(s), "
        f"{len(timeline.saves)} save(s), {len(timeline.interruptions)} interruption(s)"
        + (f" ({', '.join(timeline.causes)})" if timeline.causes else "")
    )
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    """``tpu-training status``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training status",
        description="Show each TPU VM's and Job's live state, recovery decision, newest checkpoint, "
        "progress and last recovery.",
        epilog="Exit status: 0 everything read; 2 invalid configuration; 64 invalid command line; "
        "65 --records hold no timeline; 66 a --records file cannot be read; 73 --html or --figure "
        "cannot be written; 75 something could not be read (named in the output).",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--html",
        metavar="FILE",
        type=Path,
        help="also write each run's timeline (steps, saves, interruptions by cause, recovery gaps) "
        "as one self-contained HTML page",
    )
    parser.add_argument(
        "--figure",
        metavar="FILE",
        type=Path,
        help="also draw each run's timeline into this .png or .svg file (the page's figure alone)",
    )
    parser.add_argument(
        "--records",
        metavar="FILE",
        type=Path,
        action="append",
        help="draw the timeline from this file alone, no stack read (with --html or --figure; repeatable): "
        "recovery records (`tpu-training recover --records`) and timed trainer lines "
        "(`kubectl logs --timestamps`)",
    )
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="with --records: the run to draw when the records name several",
    )
    parser.add_argument(
        "--outputs",
        metavar="FILE",
        help="the stack's outputs as `pulumi stack output --json > FILE` printed them "
        "(default: ask the Pulumi CLI)",
    )
    return parser


def main(
    argv: Optional[Sequence[str]] = None,
    *,
    probe: Optional[Callable[[stack_config.StackConfig], list[tuple[str, Decision]]]] = None,
    now: Optional[datetime] = None,
) -> int:
    args = parser().parse_args(argv)
    if args.figure is not None:
        try:
            timeline_figure.figure_format(args.figure)
        except timeline_figure.ReportError as exc:
            print(f"error: --figure {exc}", file=sys.stderr)
            return EXIT_USAGE
    # Before anything is read: a page or figure that cannot be written is said at once.
    for option, path in (("--html", args.html), ("--figure", args.figure)):
        if path is None:
            continue
        try:
            timeline_figure.check_writable(path)
        except timeline_figure.ReportError as exc:
            print(f"error: {option} {exc}", file=sys.stderr)
            return EXIT_CANNOT_WRITE
    if args.records:
        return _timeline_from_records(args.records, args.html, args.figure, args.run)
    if args.run is not None:
        print("error: --run chooses among the runs of --records FILE; give --records", file=sys.stderr)
        return EXIT_USAGE
    try:
        stack, stack_project = stack_name(args.stack)
        project = load_project_for(args.stack, stack_project)
        outputs, outputs_unread = stack_outputs(args.stack, args.outputs)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        # A stack file with secrets is read decrypted through the CLI, as `recover` reads it.
        loaded = load_settings(Target(project, stack, args.stack), decrypt=decrypted_config)
    except SecretsUnreadable as exc:
        print(f"error: Pulumi.{stack}.yaml holds secrets, which need the Pulumi CLI: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except (project_files.ProjectFileError, stack_config.ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    settings = loaded.settings
    now = now or datetime.now(timezone.utc)
    clients: list[Any] = []

    def storage() -> Any:
        if not clients:
            clients.append(endpoints.storage_client(settings.gcp_project))
        return clients[0]

    # One reading per run for the probe's hang check and the lines shown (a failed one is not
    # kept: the second asks again).
    progress = functools.cache(lambda folder: read_progress(storage(), folder, timeout=READ_SECONDS))
    # Hangs judged at the time the status is of.
    probe = probe or Probe(clock=lambda: now, read_progress=progress)
    runs = gather(settings, outputs, outputs_unread, probe=probe, storage=storage, progress=progress)
    notices = notice_step(probe, write=False)(settings, now)
    if args.json:
        document = {
            "stack": stack,
            "project": settings.gcp_project,
            "at": utc_text(now),
            "runs": [run.to_json() for run in runs],
            "notices": notices.to_json(),
            "noticeWarnings": notices.warnings,
            "noticesUnread": [f"{what}: {why}" for what, why in notices.unread],
        }
        print(json.dumps(document, indent=2))
    else:
        print(render(stack, settings.gcp_project, runs, now, notices))
    if args.html is not None or args.figure is not None:
        written = _write_timelines(
            [timeline_of(run) for run in runs],
            title=f"Stack {stack} (project {settings.gcp_project}), {utc_text(now)}",
            notes=[
                "Drawn from what status reads: each run's newest checkpoint, each process's latest "
                "step and the last recovery. For the whole history give the records alone: "
                "`--records FILE` (recover's records, the trainer's timed log lines).",
                *(f"{run.name}: not read: {unread}" for run in runs for unread in run.unread),
            ],
            html=args.html,
            figure=args.figure,
        )
        if not written:
            return EXIT_CANNOT_WRITE
        targets = " and ".join(str(path) for path in (args.html, args.figure) if path is not None)
        print(f"timeline written to {targets}", file=sys.stderr)
    return EXIT_UNREAD if any(run.unread for run in runs) else EXIT_OK
