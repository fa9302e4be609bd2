"""What a planned stack costs per hour: the resources the program registers, priced by
``tpu_training_components.domain.cost_estimate`` (which ``preview`` uses too) from the pinned
table. A price the table lacks is unknown, and a total with an unknown part says so: never a 0.

    python -m infra.cost [--stack NAME] [--json]

prints the stack's cost section of ``python -m infra.plan`` alone (offline, as the plan runs the
program). Exit status: 0; 2 invalid configuration or project file; 64 invalid command line.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    # Run from inside infra/ (`python cost.py`, `python -m cost`), where `from infra import`
    # fails: run as `python -m infra.cost` from the project folder (infra/from_inside.py).
    import importlib

    importlib.import_module("from_inside").run_from_project("infra.cost")

import json
import os
import sys
from typing import Optional, Sequence

from tpu_training_components.domain import cost_estimate
from tpu_training_components.domain.cost_estimate import CostLine, Estimate, render

from infra import offline

__all__ = ["CostLine", "Estimate", "estimate", "main", "render"]


def estimate(result: offline.ProgramRun) -> Estimate:
    """The hourly cost of every resource the plan declares (``domain/cost_estimate.py``)."""
    return cost_estimate.estimate(result.registrations)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m infra.cost``: the stack's hourly cost, as the plan shows it, without the rest of
    the plan. Runs the program offline, as ``python -m infra.plan`` does (no cloud, no CLI)."""
    import pulumi

    from infra import plan  # the plan's own command-line rules (and SDK imports: only when run)

    parser = plan.CommandLineParser(
        prog="python -m infra.cost",
        description="Show what the stack costs per hour (list prices; docs/cost.md), offline.",
        epilog="Exit status: 0 shown; 2 invalid configuration; 64 invalid command line.",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON (the plan's `cost`)")
    args = parser.parse_args(argv)
    os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        stack, stack_project = plan.stack_name(args.stack)
        project = plan.load_project_for(args.stack, stack_project)
    except plan.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return plan.EXIT_USAGE
    except offline.ProjectFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return plan.EXIT_CONFIG_ERROR
    try:
        result = offline.run_program(project, stack)
    except (offline.ProjectFileError, pulumi.RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return plan.EXIT_CONFIG_ERROR
    found = estimate(result)
    if args.json:
        print(json.dumps(found.to_json(), indent=2, sort_keys=True))
    else:
        print(f"Stack {project.name}/{stack}")
        print(render(found))
    for message in result.warnings:
        print(f"warning: {message}", file=sys.stderr)
    return plan.EXIT_OK


if __name__ == "__main__":
    from infra.plan import exit_quickly

    exit_quickly(main())
