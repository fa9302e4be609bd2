"""Show what `pulumi up` would create for a stack, without a cloud account or the Pulumi CLI.

    python -m infra.plan [--stack NAME] [--json PATH|-] [--live]

Runs the real stack program under the Pulumi SDK's mocks with the stack's config files and prints
every resource it registers. Touches no network, unless --live: then the program reads the live
TPU nodes through the Cloud TPU API (or the endpoint in TPU_API_ENDPOINT) exactly as `pulumi up`
does, and shows the recovery decisions. Exit status: 0 on success, 2 when the
configuration (or a project file) is invalid, with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

import pulumi

from infra import offline

EXIT_CONFIG_ERROR = 2
_SHORT = 72


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra.plan",
        description="Show every resource `pulumi up` would register for a stack, offline.",
    )
    parser.add_argument("--stack", default="dev", help="stack name: reads Pulumi.<stack>.yaml (default: dev)")
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write the plan as JSON to PATH ('-' for standard output, which then holds only the JSON)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="read live TPU node state (Cloud TPU API, or TPU_API_ENDPOINT) to show recovery decisions",
    )
    return parser


def plan_document(result: offline.ProgramRun) -> dict[str, Any]:
    """The plan as a JSON-ready document (the shape ``--json`` writes)."""
    return {
        "project": result.project,
        "stack": result.stack,
        "resources": [r.to_json() for r in result.registrations],
        "outputs": result.outputs,
        "warnings": result.warnings,
    }


def _short(value: Any) -> Optional[str]:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if "\n" in text:
        return f"<{text.count(chr(10)) + 1} lines>"
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _is_default(value: Any) -> bool:
    return value is None or value is False or value == [] or value == {}


def render_tree(result: offline.ProgramRun) -> str:
    """A readable tree: each resource under its parent, with its inputs and non-default options."""
    children: dict[str, list[offline.Registration]] = {}
    known = {r.urn for r in result.registrations}
    for r in result.registrations:
        parent = r.parent if r.parent in known else ""
        children.setdefault(parent, []).append(r)

    lines = [f"Stack {result.project}/{result.stack}: {len(result.registrations)} resources"]

    def walk(parent: str, depth: int) -> None:
        for r in children.get(parent, []):
            pad = "  " * depth
            lines.append(f"{pad}+ {r.type}  {r.name}")
            for key, value in r.inputs.items():
                if isinstance(value, dict) and len(_short(value) or "") >= _SHORT:
                    # Show long maps (metadata, labels) one entry a line.
                    for sub_key, sub_value in value.items():
                        lines.append(f"{pad}    {key}.{sub_key}: {_short(sub_value)}")
                else:
                    lines.append(f"{pad}    {key}: {_short(value)}")
            flags = [f"{k}={_short(v)}" for k, v in r.options.items() if not _is_default(v)]
            if flags:
                lines.append(f"{pad}    [options] {', '.join(flags)}")
            walk(r.urn, depth + 1)

    walk("", 1)
    if result.outputs:
        lines.append("Outputs:")
        for key, value in result.outputs.items():
            lines.append(f"  {key}: {json.dumps(value, sort_keys=True)}")
    for message in result.infos:
        lines.append(f"info: {message}")
    for message in result.warnings:
        lines.append(f"warning: {message}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.live:
        os.environ.pop("TPU_TRAINING_OFFLINE", None)
    else:
        os.environ["TPU_TRAINING_OFFLINE"] = "1"
    try:
        project = offline.load_project()
        result = offline.run_program(project, args.stack)
    except (offline.ProjectFileError, pulumi.RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR

    if args.json == "-":
        json.dump(plan_document(result), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(render_tree(result))
    if args.json:
        Path(args.json).write_text(json.dumps(plan_document(result), indent=2, sort_keys=True) + "\n")
        print(f"plan written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
