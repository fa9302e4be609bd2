"""`tpu-training`, the one command: its subcommands, their help, its completion scripts, its
exit statuses, and `init`'s starter stacks, run as a user runs them (the console script README
command 1 installs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from support.harness.program import REPO, TPU_TRAINING

from tpu_training import cli

SUBCOMMANDS = ("plan", "diff", "manifests", "cost", "preflight", "recover", "status", "docs", "init")
"""Every task issue 50 names, each one subcommand."""


def tpu_training(
    *args: str, cwd=REPO, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TPU_TRAINING, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout
    )


def test_the_help_lists_every_subcommand_and_loads_no_sdk():
    done = tpu_training("--help")
    assert done.returncode == 0, done.stderr
    for name in (*SUBCOMMANDS, "completion"):
        assert f"\n    {name}" in done.stdout, name
    assert set(cli.SUBCOMMANDS) == set(SUBCOMMANDS)
    # A fresh interpreter: the top-level help imports no command, no SDK and no client library.
    program = (
        "import sys, contextlib, io\n"
        "from tpu_training import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        cli.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'pulumi', 'google', 'kubernetes', 'grpc'}"
        " or m.startswith('tpu_training.commands.') or m.startswith('tpu_training.recovery')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_has_its_own_help_and_exit_statuses(name):
    done = tpu_training(name, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: tpu-training {name} ")
    assert "Exit status:" in done.stdout


@pytest.mark.parametrize(
    "args",
    [("bogus",), (), ("plan", "--bogus"), ("recover",), ("completion", "fish"), ("completion", "bash", "x")],
    ids=[
        "unknown-command",
        "no-command",
        "unknown-option",
        "missing-stack",
        "unknown-shell",
        "extra-argument",
    ],
)
def test_a_wrong_command_line_exits_64_with_one_line_and_no_traceback(args):
    done = tpu_training(*args)
    assert done.returncode == 64, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(("error:", "tpu-training")), done.stderr


def test_an_unknown_subcommand_names_the_ones_there_are():
    done = tpu_training("plna")
    assert "invalid choice: 'plna'" in done.stderr and "'plan'" in done.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_knows_every_subcommand_and_its_options(shell):
    done = tpu_training("completion", shell)
    assert done.returncode == 0, done.stderr
    for name in SUBCOMMANDS:
        assert name in done.stdout
    for option in ("--compare-to", "--watch", "--apply-pending", "--records", "--gcp-project", "--timeout"):
        assert option in done.stdout, option


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_bash_completion_script_completes_a_subcommand_and_an_option(tmp_path):
    script = tmp_path / "tpu-training.bash"
    script.write_text(tpu_training("completion", "bash").stdout)
    # bash's completion protocol by hand: COMP_WORDS and COMP_CWORD set, the function run.
    probe = (
        f"source {script}\n"
        "COMP_WORDS=(tpu-training rec); COMP_CWORD=1; COMP_LINE='tpu-training rec'; COMP_POINT=16\n"
        "_shtab_tpu_training; echo ${COMPREPLY[@]}\n"
        "COMP_WORDS=(tpu-training recover --app); COMP_CWORD=2; COMP_LINE='tpu-training recover --app'\n"
        "COMP_POINT=26; _shtab_tpu_training; echo ${COMPREPLY[@]}\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["recover", "--apply-pending"]


def test_diff_prints_the_comparison_alone_and_manifests_write_the_objects(tmp_path):
    base = tmp_path / "base.json"
    assert tpu_training("plan", "--json", str(base)).returncode == 0
    done = tpu_training("diff", str(base))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Changes against {base}")
    assert "0 to replace" in done.stdout and "Cost per hour" not in done.stdout
    folder = tmp_path / "manifests"
    done = tpu_training("manifests", str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert sorted(p.name for p in folder.iterdir()) == [
        "configmap_default_train-v6e-run-parameters.yaml",
        "job_default_train-v6e.yaml",
        "service_default_train-v6e.yaml",
        "serviceaccount_default_train-v6e.yaml",
    ]


# --- init ---------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path):
    """A copy of the project's files `init` reads: Pulumi.yaml, the program and the trainer."""
    for name in ("Pulumi.yaml", "infra", "trainer"):
        source = REPO / name
        if source.is_dir():
            # Not infra/.venv: a link to the project's virtualenv (pulumi/pulumi#7061), gigabytes if followed.
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
        else:
            shutil.copy(source, tmp_path / name)
    return tmp_path


def test_init_writes_a_tpu_vm_stack_the_plan_reads(project):
    done = tpu_training(
        "init",
        "--stack",
        "mine",
        "--gcp-project",
        "my-project-1",
        "--tpu-vm",
        "v5litepod-8",
        "--zone",
        "us-west4-a",
        cwd=project,
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((project / "Pulumi.mine.yaml").read_text())["config"]
    (vm,) = config["tpu-training:tpuVms"]
    # Google's TPU software versions page: JAX on v5e runs v2-alpha-tpuv5-lite.
    assert (vm["acceleratorType"], vm["runtimeVersion"], vm["provisioning"]) == (
        "v5litepod-8",
        "v2-alpha-tpuv5-lite",
        "spot",
    )
    plan = tpu_training("plan", "--stack", "mine", "--json", "-", cwd=project)
    assert plan.returncode == 0, plan.stderr
    types = [r["type"] for r in json.loads(plan.stdout)["resources"]]
    assert types.count("gcp:tpu/v2Vm:V2Vm") == 1


def test_init_writes_a_gke_stack_with_a_flex_start_pool_and_a_job(project):
    done = tpu_training(
        "init", "--stack", "gke", "--gcp-project", "my-project-1", "--gke", "ct6e-standard-4t",
        "--topology", "4x4", "--zone", "us-east5-a", cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = tpu_training("plan", "--stack", "gke", "--json", "-", cwd=project)
    assert plan.returncode == 0, plan.stderr
    resources = json.loads(plan.stdout)["resources"]
    pools = {r["inputs"]["name"]: r for r in resources if r["type"] == "gcp:container/nodePool:NodePool"}
    pool = pools["gke-pool"]
    assert pool["inputs"]["autoscaling"]["maxNodeCount"] == 4  # 16 chips, 4 per VM
    assert [r["type"] for r in resources].count("kubernetes:batch/v1:Job") == 1


def test_init_asks_what_is_missing_and_refuses_to_overwrite(project):
    from tpu_training.commands import init

    answers = iter(["asked", "my-project-1", "v5litepod-8", "us-west4-a"])
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        assert init.main([], ask=lambda question: next(answers)) == 0
    assert (project / "Pulumi.asked.yaml").is_file()
    again = tpu_training(
        "init", "--stack", "asked", "--gcp-project", "p-1", "--tpu-vm", "v3-8", "--zone", "x", cwd=project
    )
    assert again.returncode == 64
    assert "Pulumi.asked.yaml exists; give --force to replace it" in again.stderr


@pytest.mark.parametrize(
    "args, status, said",
    [
        (["--tpu-vm", "v5litepod-7", "--zone", "us-west4-a"], 2, "not a valid v5litepod size"),
        (["--tpu-vm", "v5litepod-8", "--zone", "nowhere"], 2, "is not a Compute Engine zone"),
        (["--tpu-vm", "v5litepod-8"], 64, "--zone is needed"),
        (["--gke", "ct6e-standard-4t", "--topology", "3x3", "--zone", "us-east5-a"], 2, "topology"),
    ],
    ids=["accelerator-size", "zone", "missing-zone", "topology"],
)
def test_init_refuses_bad_answers_and_writes_nothing(project, args, status, said):
    done = tpu_training(
        "init", "--stack", "bad", "--gcp-project", "my-project-1", *args, cwd=project, stdin=""
    )
    assert done.returncode == status, done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / "Pulumi.bad.yaml").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--tpu-vm", "v5litepod-8", "--zone", "us-west4-a", "--topology", "2x2"],
            "--topology is for a GKE slice",
        ),
        (
            [
                "--gke",
                "ct6e-standard-4t",
                "--topology",
                "4x4",
                "--zone",
                "us-east5-a",
                "--provisioning",
                "spot",
            ],
            "--provisioning and --runtime-version are for a TPU VM",
        ),
    ],
    ids=["topology-on-a-vm", "provisioning-on-gke"],
)
def test_init_refuses_an_option_the_shape_does_not_take(project, args, said):
    done = tpu_training(
        "init", "--stack", "bad", "--gcp-project", "my-project-1", *args, cwd=project, stdin=""
    )
    assert done.returncode == 64 and said in done.stderr, done.stderr
    assert not (project / "Pulumi.bad.yaml").exists()


def test_init_without_a_project_or_a_trainer_or_an_answer_writes_nothing(project, tmp_path_factory):
    from tpu_training.commands import init

    elsewhere = tmp_path_factory.mktemp("no-project")
    done = tpu_training(
        "init", "--stack", "s", "--gcp-project", "p-1", "--tpu-vm", "v3-8", "--zone", "x-y1-a", cwd=elsewhere
    )
    assert done.returncode == 64 and "no Pulumi.yaml in" in done.stderr
    assert list(elsewhere.iterdir()) == []
    shutil.rmtree(project / "trainer")
    done = tpu_training(
        "init",
        "--stack",
        "s",
        "--gcp-project",
        "p-1",
        "--tpu-vm",
        "v3-8",
        "--zone",
        "europe-west4-a",
        cwd=project,
    )
    assert done.returncode == 2 and "no trainer/train.py in the project" in done.stderr

    def end_of_input(question: str) -> str:
        raise EOFError

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        assert init.main(["--stack", "s"], ask=end_of_input) == 64
    assert not (project / "Pulumi.s.yaml").exists()
