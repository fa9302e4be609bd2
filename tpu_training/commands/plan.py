"""Show what `pulumi up` would create for a stack, without a cloud account or the Pulumi CLI.

    tpu-training plan [--stack NAME] [--json PATH|-] [--manifests DIR] [--live [--notices]]
                      [--previous-outputs FILE] [--compare-to BASE_JSON]
    tpu-training diff BASE_JSON [--stack NAME] [--json PATH|-] [--live] [--previous-outputs FILE]
    tpu-training manifests DIR [--stack NAME] [--live] [--previous-outputs FILE]

Runs the real stack program under the Pulumi SDK's mocks with the stack's config files and prints
every resource it registers. Touches no network, unless --live: then the program reads the live
TPU nodes through the Cloud TPU API (or the endpoint in TPU_API_ENDPOINT) and the live training
Jobs through the Kubernetes API (KUBECONFIG, or the GKE API and Application Default
Credentials) exactly as `pulumi up` does, and shows the recovery decisions; with --notices, also
the maintenance notices of the stack's VMs and pools (one more TPU API call per zone, one more
Kubernetes call; no save is asked: `tpu-training recover` does that). --manifests (or
`tpu-training manifests DIR`) writes every Kubernetes object as a YAML file, for reading or
`kubectl apply --dry-run=server -f DIR`. --previous-outputs takes what `pulumi stack output
--json` printed as the stack's last deployed state, so the plan shows the recovery generations
`pulumi up` would declare. --compare-to (or `tpu-training diff`, which prints the comparison
alone) takes a plan written with --json from the deployed commit and says per resource what
`pulumi up` does to it: create, update in place, REPLACE (and whether a training restarts),
delete.

Exit status (see tpu_training.exit_codes): 0 on success; 2 when the configuration or a project
file is invalid; 64 when the command line is (an unknown option, a stack name Pulumi refuses, an
output path that cannot be written, an unreadable, endless or never-written --previous-outputs
file, an unreadable --compare-to file, `--json -` with standard output closed), checked before
any work; 73 when an output could not be written after the plan ran; 75 when --live read no live
state; 130 when interrupted (Ctrl-C). The reason is always on stderr, on one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

import pulumi
from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.capacity_ladder import LADDERS_OUTPUT, render_prices

from tpu_training import offline, plan_compare, project_files
from tpu_training.command_line import (
    CommandLineParser,
    UsageError,
    check_json_target,
    check_manifest_folder,
    load_project_for,
    stack_name,
    stdout_failed,
)
from tpu_training.exit_codes import EXIT_CANNOT_WRITE, EXIT_CONFIG_ERROR, EXIT_OK, EXIT_TRY_LATER, EXIT_USAGE
from tpu_training.plan_output import (
    ManifestError,
    decisions,
    helm_releases,
    live_notices,
    plan_document,
    read_previous_outputs,
    render_summary,
    render_tree,
    write_manifests,
)

PLAN, DIFF, MANIFESTS = "plan", "diff", "manifests"
"""What a run prints: the whole plan; only its comparison with a base; nothing (manifests)."""

EXIT_STATUSES = (
    "Exit status: 0 success; 2 invalid configuration or project file; 64 invalid command line "
    "(nothing was run); 73 an output could not be written; 75 --live read no live state (try again "
    "later); 130 interrupted."
)


def _stack_and_live(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="read live TPU nodes (Cloud TPU API, or TPU_API_ENDPOINT) and training Jobs (KUBECONFIG, "
        "or the GKE API) to show recovery decisions",
    )
    parser.add_argument(
        "--previous-outputs",
        metavar="FILE",
        help="the stack's last deployed outputs, as `pulumi stack output --json > FILE` prints them: "
        "the recovery generations a kept node or Job stays at (default: none deployed yet)",
    )


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the plan as JSON to PATH ('-' for standard output, which then holds only the JSON)",
    )


def parser() -> argparse.ArgumentParser:
    """``tpu-training plan``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training plan",
        description="Show every resource `pulumi up` would register for a stack, offline.",
        epilog=EXIT_STATUSES,
    )
    _stack_and_live(parser)
    _json_option(parser)
    parser.add_argument(
        "--manifests",
        metavar="DIR",
        help="also write every Kubernetes object the stack would apply to DIR, one YAML file each",
    )
    parser.add_argument(
        "--notices",
        action="store_true",
        help="with --live: also name the maintenance notices of the stack's TPU VMs and GKE node pools "
        "(one more TPU API call per zone and one Kubernetes call); asks for no save",
    )
    parser.add_argument(
        "--compare-to",
        metavar="BASE_JSON",
        help="a plan written with --json from the deployed commit: say per resource whether "
        "`pulumi up` creates, updates in place, replaces or deletes it, and what restarts a training",
    )
    return parser


def diff_parser() -> argparse.ArgumentParser:
    """``tpu-training diff``'s command line: the plan's --compare-to, printing the comparison alone."""
    parser = CommandLineParser(
        prog="tpu-training diff",
        description="Say per resource what `pulumi up` does to a deployed stack: create, update in place, "
        "REPLACE (and whether a training restarts) or delete, by comparing the plan with one written by "
        "`tpu-training plan --json` from the deployed commit. Offline.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument(
        "compare_to", metavar="BASE_JSON", help="the plan of the deployed commit (`plan --json`)"
    )
    _stack_and_live(parser)
    _json_option(parser)
    parser.set_defaults(manifests=None, notices=False)
    return parser


def manifests_parser() -> argparse.ArgumentParser:
    """``tpu-training manifests``'s command line: the plan's --manifests, printing nothing else."""
    parser = CommandLineParser(
        prog="tpu-training manifests",
        description="Write every Kubernetes object the stack would apply to DIR, one YAML file each, for "
        "reading or `kubectl apply --dry-run=server -f DIR`. Offline.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument(
        "manifests", metavar="DIR", help="the folder to write (files an earlier run wrote are replaced)"
    )
    _stack_and_live(parser)
    parser.set_defaults(json=None, notices=False, compare_to=None)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tpu-training plan``."""
    return _plan(parser().parse_args(argv), PLAN)


def diff_main(argv: Optional[Sequence[str]] = None) -> int:
    """``tpu-training diff BASE_JSON``: the plan compared with a base, and only the comparison."""
    return _plan(diff_parser().parse_args(argv), DIFF)


def manifests_main(argv: Optional[Sequence[str]] = None) -> int:
    """``tpu-training manifests DIR``: the plan's Kubernetes objects written, and nothing printed."""
    return _plan(manifests_parser().parse_args(argv), MANIFESTS)


def _plan(args: argparse.Namespace, view: str) -> int:
    try:
        if args.json == "-" and sys.stdout is None:
            # Python sets sys.stdout to None when it starts with file descriptor 1 closed (`>&-`).
            raise UsageError("--json -: standard output is closed; give a file name")
        stack, stack_project = stack_name(args.stack)
        if args.notices and not args.live:
            raise UsageError("--notices reads live state: give --live too")
        if args.json is not None:
            check_json_target(args.json)
        if args.manifests is not None:
            check_manifest_folder(args.manifests)
        previous_outputs = read_previous_outputs(args.previous_outputs) if args.previous_outputs else None
        base = plan_compare.read_base(args.compare_to, stack) if args.compare_to is not None else None
    except (UsageError, plan_compare.CompareError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    if args.live:
        os.environ.pop("TPU_TRAINING_OFFLINE", None)
    else:
        os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        project = load_project_for(args.stack, stack_project)
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = offline.run_program(project, stack, previous_outputs=previous_outputs)
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except pulumi.RunError as exc:
        # Say why a value reads 'offline-secret' when that is what the program refused.
        for warning in project_files.stack_config(project, stack)[2]:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR

    document = plan_document(result)
    notices = live_notices(project, stack) if args.notices else None
    if notices is not None:
        # Only with --notices: the plan JSON keeps its shape (and its golden file), and a --live
        # plan its one call per zone and namespace (benchmarks/plan_speed.py).
        document = dict(document, notices=notices.to_json())
    changes = plan_compare.compare(base, document) if base is not None else None
    if changes is not None:
        # Only with --compare-to: the plan JSON keeps its shape otherwise.
        document = dict(document, changes=plan_compare.to_json(args.compare_to, changes))
    writing = args.manifests
    try:
        written = write_manifests(result, Path(args.manifests)) if args.manifests else []
        if args.json == "-":
            json.dump(document, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
            if changes is not None:  # standard output holds only the JSON
                print(plan_compare.render(args.compare_to, changes, document), file=sys.stderr)
            return EXIT_OK
        if view == DIFF and changes is not None:
            print(plan_compare.render(args.compare_to, changes, document))
        elif view == PLAN:
            print(render_tree(result))
            if changes is not None:
                print(plan_compare.render(args.compare_to, changes, document))
            print(cost_estimate.render(cost_estimate.estimate(result.registrations)))
            ladders = result.outputs.get(LADDERS_OUTPUT)
            if isinstance(ladders, dict) and ladders:
                print("Capacity ladders, per hour (docs/cost.md#capacity-ladders):")
                print("\n".join(render_prices(ladders)))
            print(render_summary(result, live=args.live, compared=changes is not None))
        if notices is not None:
            print("maintenance notices:" if notices.notices else "maintenance notices: none")
            for report in notices.notices:
                print(f"  {report.line()}")
        for message in [*result.warnings, *(notices.warnings if notices else [])]:
            print(f"warning: {message}", file=sys.stderr)
        if args.json:
            writing = args.json
            Path(args.json).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
            print(f"plan written to {args.json}", file=sys.stderr)
    except ManifestError as exc:
        print(f"error: cannot write the manifests: {exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        if exc.filename is None and writing is None:  # printing the plan failed: a full disk or pipe
            return stdout_failed(exc, "the plan")
        print(f"error: cannot write {exc.filename or writing}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    if args.manifests:
        print(f"{len(written)} Kubernetes manifests written to {args.manifests}", file=sys.stderr)
        for release in helm_releases(result):
            print(f"  not written: Helm release {release}, whose objects Helm renders", file=sys.stderr)
    made = decisions(result)
    if args.live and made and all(unknown for *_, unknown in made):
        print(
            "error: --live read no live state (every API unavailable): the plan shows what was last "
            "deployed, not what is live",
            file=sys.stderr,
        )
        return EXIT_TRY_LATER
    return EXIT_OK
