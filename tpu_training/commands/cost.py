"""What a planned stack costs per hour: the resources the program registers, priced by
``tpu_training_components.domain.cost_estimate`` (which ``preview`` uses too) from the pinned
table. A price the table lacks is unknown, and a total with an unknown part says so: never a 0.

    tpu-training cost [--stack NAME] [--json]

prints the stack's cost section of ``tpu-training plan`` alone (offline, as the plan runs the
program). Exit status: 0; 2 invalid configuration or project file; 64 invalid command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.cost_estimate import CostLine, Estimate, render

from tpu_training import offline, project_files
from tpu_training.command_line import CommandLineParser, UsageError, load_project_for, stack_name
from tpu_training.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK, EXIT_USAGE

__all__ = ["CostLine", "Estimate", "estimate", "main", "parser", "render"]


def estimate(result: offline.ProgramRun) -> Estimate:
    """The hourly cost of every resource the plan declares (``domain/cost_estimate.py``)."""
    return cost_estimate.estimate(result.registrations)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tpu-training cost``: the stack's hourly cost, as the plan shows it, without the rest of
    the plan. Runs the program offline, as ``tpu-training plan`` does (no cloud, no CLI)."""
    import pulumi  # (and the SDKs: only when run)

    args = parser().parse_args(argv)
    os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        stack, stack_project = stack_name(args.stack)
        project = load_project_for(args.stack, stack_project)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except project_files.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        result = offline.run_program(project, stack)
    except (project_files.ProjectFileError, pulumi.RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    found = estimate(result)
    if args.json:
        print(json.dumps(found.to_json(), indent=2, sort_keys=True))
    else:
        print(f"Stack {project.name}/{stack}")
        print(render(found))
    for message in result.warnings:
        print(f"warning: {message}", file=sys.stderr)
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    """``tpu-training cost``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training cost",
        description="Show what the stack costs per hour (list prices; docs/cost.md), offline.",
        epilog="Exit status: 0 shown; 2 invalid configuration; 64 invalid command line.",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON (the plan's `cost`)")
    return parser
