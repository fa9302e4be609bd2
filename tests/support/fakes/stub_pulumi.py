"""A stand-in `pulumi` executable for tests of the Automation API path: there is no Pulumi CLI on
these machines. ``install(folder)`` writes it; put the folder first on PATH.

It records every call's arguments (one JSON list a line in ``calls.jsonl``) and answers exactly
the commands the Automation API issues for ``select_stack(...).up(refresh=True)``, with the
output formats of Pulumi CLI 3.x; any other command fails loudly, so a test sees an unexpected
call. ``behaviour.json`` in the folder chooses what `up` does:

- ``{"up": "succeed"}``: prints an update's lines, exits 0;
- ``{"up": "fail"}``: a provider error (a TPU stockout), exits 255;
- ``{"up": "busy"}``: the Pulumi Cloud conflict error, exits 255;
- ``{"up": "locked"}``: the self-managed backend's lock error, exits 255;
- ``{"up": "succeed", "hold": true}``: writes ``up-started`` and waits until ``release`` exists;
- ``{"stack_missing": true}``: `stack select` says the stack does not exist;
- ``{"version": "3.200.0"}``: what `pulumi version` reports (default: ``VERSION``);
- ``{"hang": "config"}``: the command whose first word this is never answers;
  ``{"hang_ignoring_sigint": "config"}``: nor stops on SIGINT;
- ``{"select_output": "...", "select_exit": 255}``: what `stack select` prints on both streams
  (bytes as latin-1) and its exit status;
- ``{"linger": 30}``: every command leaves a process behind that holds its pipes for 30 s;
- ``{"outputs": {...}}``: what `pulumi stack output --json` prints (default ``{}``);
- ``{"config": {...}}``: what `pulumi config --show-secrets --json` prints (default: ``{}``);
- ``{"history": "[]"}``: what `pulumi stack history --json` prints instead of one update;
- ``{"pending": [step, ...]}``: steps `pulumi preview --json` adds to demo-tpu's replacement;
  ``{"preview": "fail"}`` or ``"garbage"``: a failing preview, or one that prints no digest;
- ``{"version_output": "..."}``: what `pulumi version` prints, verbatim (bytes as latin-1).
- ``{"state": [{"urn": ..., "parent": ...}, ...]}``: the resources in the stack's state. A
  targeted `up` then answers as the engine does for a pending ``delete`` step (pulumi/pulumi
  1b5949891b, pkg/resource/deploy/step_generator.go): the targets and everything below them in
  the state are allowed deletes (``getTargetDependents``, ~l.2543, children included), and a
  delete of one that is not itself a target fails the update with the engine's error 2014
  (``GenerateDeletes``, ~l.2510-2535; sdk/go/common/diag/errors.go). Each `up` also writes the
  ``TPU_TRAINING_RECOVERY_ROUND`` it was given to ``up-env.jsonl`` (null when unset);
  `pulumi stack export` prints them as the state;
- ``{"pending_operations": [...]}``: the pending operations `pulumi stack export` prints;
  `pulumi stack import --file F` copies F to ``imported.json``; `cancel` and `refresh` succeed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

VERSION = "3.272.0"
"""The CLI version the stub reports: the one matching the pinned SDK."""

_SCRIPT = r"""#!{python}
import json, os, sys, time
from pathlib import Path

HERE = Path(__file__).resolve().parent
args = sys.argv[1:]
with open(HERE / "calls.jsonl", "a") as log:
    log.write(json.dumps(args) + "\n")
behaviour = json.loads((HERE / "behaviour.json").read_text()) if (HERE / "behaviour.json").exists() else {{}}
if args and args[0] == "--non-interactive":
    args = args[1:]
stack = args[args.index("--stack") + 1] if "--stack" in args else None

if args and args[0] == behaviour.get("hang"):
    time.sleep(3600)  # a CLI that never answers this command
if args and args[0] == behaviour.get("hang_ignoring_sigint"):
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # nor stops when asked: only SIGKILL ends it
    time.sleep(3600)
if behaviour.get("linger"):
    # Leaves a process behind, in a session of its own, that holds stdout and stderr open.
    import subprocess
    subprocess.Popen(["sleep", str(behaviour["linger"])], start_new_session=True)
if args == ["version"]:
    if "version_output" in behaviour:
        sys.stdout.buffer.write(behaviour["version_output"].encode("latin-1"))
        sys.exit(0)
    print("v" + behaviour.get("version", "{version}"))
elif args[:3] == ["config", "--show-secrets", "--json"]:
    print(json.dumps(behaviour.get("config", {{}})))
elif args[:2] == ["stack", "select"]:
    if "select_output" in behaviour:
        garbage = behaviour["select_output"].encode("latin-1")
        sys.stdout.buffer.write(garbage)
        sys.stderr.buffer.write(garbage)
        sys.exit(behaviour.get("select_exit", 0))
    if behaviour.get("stack_missing"):
        print(f"error: no stack named '{{stack}}' found", file=sys.stderr)
        sys.exit(255)
elif args[:1] == ["up"]:
    if "--yes" not in args or "--skip-preview" not in args:
        print("error: --yes must be passed in to proceed when running in non-interactive mode",
              file=sys.stderr)
        sys.exit(255)
    with open(HERE / "up-env.jsonl", "a") as log:
        log.write(json.dumps(os.environ.get("TPU_TRAINING_RECOVERY_ROUND")) + "\n")
    mode = behaviour.get("up", "succeed")
    print(f"Updating ({{stack}})")
    targets = [args[i + 1] for i, word in enumerate(args) if word == "--target"]
    if targets and "state" in behaviour:
        children = {{}}
        for resource in behaviour["state"]:
            children.setdefault(resource.get("parent"), []).append(resource["urn"])
        allowed, frontier = set(), [r["urn"] for r in behaviour["state"] if r["urn"] in targets]
        while frontier:
            urn = frontier.pop()
            if urn not in allowed:
                allowed.add(urn)
                frontier += children.get(urn, [])
        refused = [step["urn"] for step in behaviour.get("pending", [])
                   if step["op"] == "delete" and step["urn"] in allowed and step["urn"] not in targets]
        for urn in refused:
            print(f"error: Resource '{{urn}}' will be destroyed but was not specified in --target list.\n"
                  f"Either include resource in --target list or pass --target-dependents to proceed.",
                  file=sys.stderr)
        if refused:
            sys.exit(255)
    if behaviour.get("hold"):
        (HERE / "up-started").write_text("")
        while not (HERE / "release").exists():
            time.sleep(0.02)
    if mode == "busy":
        print("error: [409] Conflict: Another update is currently in progress.", file=sys.stderr)
        sys.exit(255)
    if mode == "locked":
        print("error: the stack is currently locked by 1 lock(s). Either wait for the other "
              "process(es) to end or delete the lock file with `pulumi cancel`.", file=sys.stderr)
        sys.exit(255)
    if mode == "fail":
        print(" +  gcp:tpu/v2Vm:V2Vm demo-tpu-vm creating (0s) error: googleapi: Error 429: "
              "There is no more capacity in the zone \"europe-west4-a\"")
        print("error: update failed", file=sys.stderr)
        sys.exit(255)
    print(" +- gcp:tpu/v2Vm:V2Vm demo-tpu-vm replaced (95s)")
    print("Resources:\n    +-1 replaced\n    36 unchanged")
elif args[:2] == ["preview", "--json"]:
    # `pulumi preview --json`: the PreviewDigest of pkg/display/json.go. By default the stack is
    # deployed and only demo-tpu's recovery changes; "pending" adds steps a full update would take.
    project = "tpu-training"
    stack_urn = f"urn:pulumi:{{stack}}::{{project}}::pulumi:pulumi:Stack::{{project}}-{{stack}}"
    vm_urn = (f"urn:pulumi:{{stack}}::{{project}}::tpu-training:compute:PreemptibleTpuVm$gcp:tpu/v2Vm:V2Vm"
              f"::demo-tpu-vm")
    if behaviour.get("preview") == "fail":
        print("error: preview failed", file=sys.stderr)
        sys.exit(255)
    if behaviour.get("preview") == "garbage":
        sys.stdout.buffer.write(b"\xff\xfe not json\n")
        sys.exit(0)
    steps = [{{"op": "same", "urn": stack_urn}},
             {{"op": "replace", "urn": vm_urn, "replaceReasons": []}}] + behaviour.get("pending", [])
    print(json.dumps({{"steps": steps, "changeSummary": {{"replace": 1}}, "duration": 1}}))
elif args[:2] == ["stack", "export"]:
    # `pulumi stack export`: the state ("state" gives its resources; "pending_operations" what an
    # interrupted update left), in the apitype.UntypedDeployment shape, version 3.
    deployment = {{"resources": behaviour.get("state", [])}}
    if behaviour.get("pending_operations"):
        deployment["pending_operations"] = behaviour["pending_operations"]
    print(json.dumps({{"version": 3, "deployment": deployment}}))
elif args[:2] == ["stack", "import"]:
    source = args[args.index("--file") + 1]
    (HERE / "imported.json").write_text(Path(source).read_text())
elif args[:1] in (["cancel"], ["refresh"]):
    print(f"stub pulumi: {{args[0]}} done")
elif args[:3] == ["stack", "output", "--json"]:
    print(json.dumps(behaviour.get("outputs", {{}})))
elif args[:3] == ["stack", "history", "--json"] and "history" in behaviour:
    print(behaviour["history"])
elif args[:3] == ["stack", "history", "--json"]:
    print(json.dumps([{{
        "kind": "update", "startTime": "2026-11-21T10:00:00.000Z", "endTime": "2026-11-21T10:01:35.000Z",
        "message": "", "environment": {{}}, "config": {{}}, "result": "succeeded", "version": 7,
        "resourceChanges": {{"replace": 1, "same": 36}},
    }}]))
else:
    print(f"stub pulumi: unexpected command {{args}}", file=sys.stderr)
    sys.exit(2)
"""


def install(folder: Path, **behaviour: Any) -> Path:
    """Write the stub as ``folder/pulumi`` (executable) with ``behaviour``; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pulumi"
    script.write_text(_SCRIPT.format(python=sys.executable, version=VERSION))
    script.chmod(0o755)
    (folder / "behaviour.json").write_text(json.dumps(behaviour))
    return folder


def calls(folder: Path) -> list[list[str]]:
    """Every command line the stub received, in order."""
    log = folder / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def on_path(folder: Path) -> dict[str, str]:
    """An environment with the stub first on PATH."""
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def up_rounds(folder: Path) -> list[Any]:
    """What each `up` was told in ``TPU_TRAINING_RECOVERY_ROUND`` (decoded; None when unset)."""
    log = folder / "up-env.jsonl"
    if not log.exists():
        return []
    return [None if raw is None else json.loads(raw) for raw in map(json.loads, log.read_text().splitlines())]


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the stub with ``args``, as the Automation API would."""
    return subprocess.run([str(folder / "pulumi"), *args], capture_output=True, text=True, timeout=30)
