"""Write a starter stack file, ``Pulumi.<stack>.yaml``: one TPU VM, or one GKE cluster with a
flex-start TPU node pool and a training Job, each training the reference trainer (``trainer/``)
and resuming from its checkpoints.

    tpu-training init --stack NAME --gcp-project ID --tpu-vm ACCELERATOR_TYPE --zone ZONE
                      [--provisioning spot|preemptible|on-demand|reserved] [--runtime-version V]
    tpu-training init --stack NAME --gcp-project ID --gke MACHINE_TYPE --topology AxB --zone ZONE
    tpu-training init ... [--force] [--stdout]

The peers' `cluster create` moment: a few answers, and a stack `tpu-training plan --stack NAME`
shows and `pulumi up --stack NAME` deploys. What is missing from the command line is asked when
standard input is a terminal. The file is checked as `pulumi up` reads it (the offline plan's
config loader) before it is written; an invalid answer writes nothing.

Exit status: 0 written; 2 the answers make an invalid stack (each problem named), or the project
has no reference trainer (trainer/train.py) to train; 64 invalid command line (an option the
chosen shape does not take, no answer to a question, no Pulumi.yaml above the working directory),
or the file exists (give --force); 73 the file could not be written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml
from tpu_training_components.domain import catalogue
from tpu_training_components.domain.tpu_software import RECOMMENDED

from tpu_training import offline, project_files, stack_config
from tpu_training.command_line import CommandLineParser, UsageError, load_project_for, stack_name
from tpu_training.exit_codes import EXIT_CANNOT_WRITE, EXIT_CONFIG_ERROR, EXIT_OK, EXIT_USAGE

PROVISIONING = ("spot", "preemptible", "on-demand", "reserved")

TRAINER_FOLDER = "trainer"
"""The reference trainer's folder in the project: uploaded by the stack, run on every VM and Pod."""
VM_SETUP = (
    'mkdir -p /opt/trainer && gcloud storage cp "$TRAINER_CODE/*" /opt/trainer/ && pip install uv && '
    "uv venv --python 3.12 /opt/venv && uv pip install --python /opt/venv -r /opt/trainer/requirements.txt "
    '"jax[tpu]==0.10.2"'
)
"""As the dev stack's VM: JAX 0.10 needs Python 3.11 or later, newer than the TPU VM image's."""
VM_TRAIN = "/opt/venv/bin/python /opt/trainer/train.py"
JOB_IMAGE = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:latest"
JOB_COMMAND = [
    "bash",
    "-c",
    'mkdir -p /tmp/trainer && gcloud storage cp "$TRAINER_CODE/*" /tmp/trainer/ && '
    "pip install -q -r /tmp/trainer/requirements.txt && python3 /tmp/trainer/train.py",
]


def parser() -> argparse.ArgumentParser:
    """``tpu-training init``'s command line."""
    parser = CommandLineParser(
        prog="tpu-training init",
        description="Write a starter stack file, Pulumi.<stack>.yaml: one TPU VM (--tpu-vm), or a GKE "
        "cluster with a flex-start TPU node pool and a training Job (--gke).",
        epilog="Exit status: 0 written; 2 invalid answers or no trainer/train.py (nothing written); 64 "
        "invalid command line, no project here, or the file exists (give --force); 73 the file could not "
        "be written.",
    )
    parser.add_argument("--stack", help="the new stack's name: writes Pulumi.<stack>.yaml")
    parser.add_argument("--gcp-project", metavar="ID", help="the Google Cloud project to deploy in")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--tpu-vm", metavar="ACCELERATOR_TYPE", help="a TPU VM of this type, e.g. v5litepod-8")
    kind.add_argument(
        "--gke", metavar="MACHINE_TYPE", help="a GKE TPU node pool of this type, e.g. ct6e-standard-4t"
    )
    parser.add_argument(
        "--zone", help="the zone of the TPU VM, or of the node pool (its region holds the cluster)"
    )
    parser.add_argument("--topology", help="with --gke: the slice's topology, e.g. 2x2 or 4x4")
    parser.add_argument(
        "--provisioning",
        choices=PROVISIONING,
        help="with --tpu-vm: how it is bought (default spot)",
    )
    parser.add_argument(
        "--runtime-version",
        help="with --tpu-vm: its TPU software version (default: Google's JAX one for its generation)",
    )
    parser.add_argument("--force", action="store_true", help="replace Pulumi.<stack>.yaml if it exists")
    parser.add_argument("--stdout", action="store_true", help="print the file instead of writing it")
    return parser


Ask = Callable[[str], str]


def _answer(value: Optional[str], question: str, option: str, ask: Optional[Ask]) -> str:
    """The option's value, or the answer to ``question`` when it is missing and someone is there."""
    if value:
        return value
    if ask is None:
        raise UsageError(f"{option} is needed (standard input is not a terminal, so it cannot be asked)")
    try:
        answer = ask(f"{question}: ").strip()
    except EOFError:  # Ctrl-D, or the input ran out
        answer = ""
    if not answer:
        raise UsageError(f"{option} is needed: no answer given")
    return answer


class NoTrainer(Exception):
    """The project has no reference trainer for the starter stack to train."""


def _trainer_files(project: project_files.Project) -> list[str]:
    folder = project.root / TRAINER_FOLDER
    if not (folder / "train.py").is_file():
        raise NoTrainer(
            f"no {TRAINER_FOLDER}/train.py in the project ({project.root}): the starter stack trains the "
            f"reference trainer; copy trainer/ from this project's repository, or write the stack file "
            f"by hand (docs/configuration.md)"
        )
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" or p.name == "requirements.txt")


def starter_config(
    args: argparse.Namespace, project: project_files.Project, ask: Optional[Ask]
) -> dict[str, Any]:
    """The stack file's ``config:`` for the answers. Raises ``UsageError`` for a missing answer."""
    if args.tpu_vm and args.topology:
        raise UsageError("--topology is for a GKE slice (--gke); a TPU VM's size is in its accelerator type")
    if args.gke and (args.provisioning or args.runtime_version):
        raise UsageError(
            "--provisioning and --runtime-version are for a TPU VM (--tpu-vm); a --gke pool starts as "
            "flex-start, and its image holds the software"
        )
    gcp_project = _answer(args.gcp_project, "Google Cloud project ID", "--gcp-project", ask)
    if not args.tpu_vm and not args.gke:
        answer = _answer(
            None,
            "a TPU VM type (v5litepod-8) or a GKE machine type (ct6e-standard-4t)",
            "--tpu-vm or --gke",
            ask,
        )
        if answer.startswith("ct"):
            args.gke = answer
        else:
            args.tpu_vm = answer
    zone = _answer(args.zone, "zone (europe-west4-a)", "--zone", ask)
    code = {"folder": TRAINER_FOLDER, "files": _trainer_files(project)}
    config: dict[str, Any] = {"gcp:project": gcp_project}
    name = args.stack.lower().replace("_", "-").replace(".", "-")
    if args.tpu_vm:
        generation = catalogue.accelerator_type(args.tpu_vm).family.generation
        config[f"{stack_config.PROJECT}:tpuVms"] = [
            {
                "name": f"{name}-tpu",
                "zone": zone,
                "acceleratorType": args.tpu_vm,
                "runtimeVersion": args.runtime_version or RECOMMENDED.get(generation, "tpu-ubuntu2204-base"),
                "provisioning": args.provisioning or "spot",
                "setupCommand": VM_SETUP,
                "trainCommand": VM_TRAIN,
            }
        ]
    else:
        topology = _answer(args.topology, "slice topology (2x2, 4x4)", "--topology", ask)
        pool = f"{name}-pool"
        config[f"{stack_config.PROJECT}:cluster"] = {
            "name": f"{name}-gke",
            "location": catalogue.region_of_zone(zone),
        }
        config[f"{stack_config.PROJECT}:nodePools"] = [
            {"name": pool, "machineType": args.gke, "topology": topology, "nodeLocations": [zone]}
        ]
        config[f"{stack_config.PROJECT}:jobs"] = [
            {"name": f"{name}-train", "nodePool": pool, "image": JOB_IMAGE, "command": JOB_COMMAND}
        ]
    config[f"{stack_config.PROJECT}:trainerCode"] = code
    return config


def problems_of(project: project_files.Project, stack: str, config: dict[str, Any]) -> Optional[str]:
    """Why ``config`` is no valid stack, as `pulumi up` would say it; None when it is one."""
    encoded = {key: value if isinstance(value, str) else _json(value) for key, value in config.items()}
    try:
        offline.run(
            lambda: stack_config.load(stack, project_root=project.root),
            project=project.name,
            stack=stack,
            config=encoded,
        )
    except stack_config.ConfigError as exc:
        return str(exc)
    except catalogue.CatalogueError as exc:  # an accelerator or machine type the catalogue refuses
        return str(exc)
    return None


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def render(stack: str, config: dict[str, Any]) -> str:
    header = (
        f"# The `{stack}` stack, written by `tpu-training init`. See what it declares with\n"
        f"# `tpu-training plan --stack {stack}`; every key is in docs/configuration.md.\n"
    )
    return header + yaml.safe_dump({"config": config}, sort_keys=False, width=100)


def _ask_on_stderr(question: str) -> str:
    """A question on standard error, so that `init --stdout > FILE` keeps the file the YAML alone."""
    print(question, end="", file=sys.stderr, flush=True)
    return input()


def main(argv: Optional[Sequence[str]] = None, *, ask: Optional[Ask] = None) -> int:
    args = parser().parse_args(argv)
    if ask is None and sys.stdin is not None and sys.stdin.isatty():
        ask = _ask_on_stderr
    try:
        stack = _answer(args.stack, "stack name (dev, prod)", "--stack", ask)
        name, stack_project = stack_name(stack)
        args.stack = name
        if not any((folder / "Pulumi.yaml").is_file() for folder in (Path.cwd(), *Path.cwd().parents)):
            raise UsageError(
                f"no Pulumi.yaml in {Path.cwd()} or above: run init in the project folder, where the "
                f"stack file goes beside Pulumi.yaml"
            )
        project = load_project_for(stack, stack_project)
        target = project.stack_file(name)
        if target.exists() and not args.force and not args.stdout:
            raise UsageError(f"{target} exists; give --force to replace it")
        config = starter_config(args, project, ask)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (project_files.ProjectFileError, NoTrainer) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except catalogue.CatalogueError as exc:  # a type or zone the catalogue refuses
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    problems = problems_of(project, name, config)
    if problems is not None:
        print(f"error: {problems}", file=sys.stderr)
        print("nothing written", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    text = render(name, config)
    if args.stdout:
        print(text, end="")
        return EXIT_OK
    try:
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, target)
    except OSError as exc:
        print(f"error: cannot write {target}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    print(f"wrote {target}; next: tpu-training plan --stack {name}")
    return EXIT_OK
