"""The whole stack program, the project files and the plan command."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from support.harness.in_process import run_plan
from support.harness.program import INFRA, REPO, TPU_TRAINING

from tpu_training import offline, plan_output, project_files, stack_config

GOLDEN = REPO / "tests" / "golden" / "dev.plan.json"


def test_dev_plan_matches_the_golden_file():
    """The dev stack's full plan (inputs as the engine receives them, and options). Regenerate
    after an intended change with: UPDATE_GOLDEN=1 pytest tests/project/test_program.py"""
    result = run_plan("--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    assert document == json.loads(GOLDEN.read_text())


def test_dev_stack_reproduces_seed_000_and_its_bucket():
    values, _, _ = project_files.stack_config(project_files.load_project(REPO), "dev")
    (vm,) = json.loads(values["tpu-training:tpuVms"])
    assert (vm["name"], vm["zone"], vm["acceleratorType"], vm["runtimeVersion"], vm["provisioning"]) == (
        "demo-tpu",
        "europe-west4-a",
        "v3-8",
        "tpu-vm-tf-2.16.1-pjrt",
        "preemptible",
    )
    document = json.loads(run_plan("--json", "-").stdout)
    buckets = [r for r in document["resources"] if r["type"] == "gcp:storage/bucket:Bucket"]
    # One bucket beside the TPU VM, one beside the GKE cluster (us-east5: v6e flex-start).
    assert [b["inputs"]["location"] for b in buckets] == ["EUROPE-WEST4", "US-EAST5"]
    env = document["outputs"]["trainingEnvironments"]["demo-tpu"]
    assert env["GLOBAL_BATCH_SIZE"] == "1024" and env["TRAIN_STEPS"] == "98"


def test_dev_stack_declares_seed_002_multi_host_flex_start_pool():
    """The issue's "done when": min 0 / max 4 / flex-start / no reservation / compact 4x4 /
    no auto-repair, in a zone Google lists for v6e flex-start."""
    document = json.loads(run_plan("--json", "-").stdout)
    (pool,) = [r for r in document["resources"] if r["name"] == "v6e-4x4-pool"]
    inputs = pool["inputs"]
    assert inputs["nodeConfig"]["machineType"] == "ct6e-standard-4t"
    assert inputs["nodeLocations"] == ["us-east5-a"]
    assert inputs["autoscaling"] == {"locationPolicy": "ANY", "minNodeCount": 0, "maxNodeCount": 4}
    assert inputs["initialNodeCount"] == 0
    assert inputs["nodeConfig"]["flexStart"] is True
    assert inputs["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    assert inputs["management"]["autoRepair"] is False
    (job,) = [r for r in document["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    assert (job["inputs"]["spec"]["completions"], job["inputs"]["spec"]["parallelism"]) == (4, 4)
    assert document["outputs"]["jobs"]["train-v6e"]["environment"]["GLOBAL_BATCH_SIZE"] == "2048"
    (component,) = [r for r in document["resources"] if r["type"] == "tpu-training:gke:TpuTrainingJob"]
    assert pool["urn"] in component["options"]["dependsOn"]  # Pods wait for their pool


def test_plan_writes_every_kubernetes_object_as_valid_yaml(tmp_path):
    import kubernetes_validate

    target = tmp_path / "manifests"
    target.mkdir()
    (target / "mine.yaml").write_text("kind: Mine\n")  # not ours: left alone
    (target / "job_default_gone.yaml").write_text(plan_output.MANIFEST_HEADER + "kind: Job\n")  # ours, stale
    result = run_plan("--manifests", str(target))
    assert result.returncode == 0, result.stderr
    # A notice, not the plan: standard output holds the plan alone.
    assert "4 Kubernetes manifests written to" in result.stderr
    written = sorted(p.name for p in target.glob("*.yaml"))
    assert written == [
        "configmap_default_train-v6e-run-parameters.yaml",
        "job_default_train-v6e.yaml",
        "mine.yaml",
        "service_default_train-v6e.yaml",
        "serviceaccount_default_train-v6e.yaml",
    ]
    for name in written:
        if name != "mine.yaml":
            manifest = yaml.safe_load((target / name).read_text())
            kubernetes_validate.validate(manifest, "1.33.0", strict=True)
    job = yaml.safe_load((target / "job_default_train-v6e.yaml").read_text())
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "tpu-training/node-pool": "v6e-4x4",
    }
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"google.com/tpu": 4}


def test_plan_prints_a_readable_tree():
    result = run_plan()
    assert result.returncode == 0, result.stderr
    assert "+ tpu-training:storage:CheckpointBucket  checkpoints-europe-west4" in result.stdout
    assert "    + gcp:storage/bucket:Bucket  checkpoints-europe-west4-bucket" in result.stdout
    assert "[options] protect=true, retainOnDelete=true" in result.stdout


def test_plan_json_to_a_file_has_the_documented_shape(tmp_path):
    target = tmp_path / "plan.json"
    assert run_plan("--json", str(target)).returncode == 0
    document = json.loads(target.read_text())
    assert set(document) == {"project", "stack", "resources", "outputs", "warnings", "cost"}
    resource = document["resources"][0]
    assert set(resource) == {"urn", "type", "name", "parent", "custom", "inputs", "options"}
    assert set(resource["options"]) == {
        "protect",
        "deleteBeforeReplace",
        "replacementTrigger",
        "retainOnDelete",
        "dependsOn",
        "ignoreChanges",
        "replaceOnChanges",
        "aliases",
        "provider",
    }


def test_config_error_exits_2_with_a_message_and_no_traceback(scratch_project):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    dev["config"]["tpu-training:tpuVms"][0]["acceleratorType"] = "v3-9"
    (scratch_project / "Pulumi.bad.yaml").write_text(yaml.safe_dump(dev))
    result = run_plan("--stack", "bad", cwd=scratch_project)
    assert result.returncode == 2
    assert "tpu-training:tpuVms[0].acceleratorType" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_missing_stack_file_exits_2(scratch_project):
    result = run_plan("--stack", "nope", cwd=scratch_project)
    assert result.returncode == 2
    assert "Pulumi.nope.yaml does not exist" in result.stderr


def test_secrets_are_replaced_and_reported(scratch_project):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    dev["config"]["gcp:project"] = {"secure": "v1:abc"}
    dev["config"]["tpu-training:labels"] = {"owner": {"secure": "v1:def"}}
    dev["config"]["tpu-training:training"] = {"secure": "v1:ghi"}  # a secret object
    (scratch_project / "Pulumi.sec.yaml").write_text(yaml.safe_dump(dev))
    result = run_plan("--stack", "sec", "--json", "-", cwd=scratch_project)
    # A secret is a warning offline, wherever it is: the stand-in is a valid project and label.
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    bucket = next(r for r in plan["resources"] if r["type"] == "gcp:storage/bucket:Bucket")
    assert bucket["inputs"]["project"] == project_files.SECRET_PLACEHOLDER
    assert bucket["inputs"]["labels"]["owner"] == project_files.SECRET_PLACEHOLDER
    warnings = "\n".join(plan["warnings"])
    for key in ("gcp:project", "tpu-training:labels"):
        assert f"{key} holds a secret, which the offline plan cannot decrypt" in warnings
    assert "tpu-training:training is a secret the offline plan cannot decrypt" in warnings
    assert "TRAIN_STEPS" not in json.dumps(plan["outputs"]["trainingEnvironments"])


def test_program_runs_as_the_language_host_runs_it():
    """Only infra/ on sys.path, working directory infra/, isolated from the repository root: the
    components must come from the installed package, exactly as after `pulumi install`."""
    config, _, _ = project_files.stack_config(project_files.load_project(REPO), "dev")
    script = textwrap.dedent(
        f"""
        import asyncio, runpy, sys
        sys.path.insert(0, {str(INFRA)!r})
        assert {str(REPO)!r} not in sys.path, sys.path
        import pulumi
        from pulumi.runtime import mocks

        registered = []
        class Mocks(mocks.Mocks):
            def new_resource(self, args):
                if args.typ == "pulumi:pulumi:StackReference":  # as the engine: no outputs yet
                    return args.name, {{"name": args.name, "outputs": {{}}}}
                registered.append(args.typ)
                return args.name + "-id", dict(args.inputs, url="gs://x")
            def call(self, args):  # the program reads its last outputs: as the engine, none yet
                return {{}}, []  # no check failures (the SDK's mock monitor cannot iterate None)

        # As the language host runs a program (see tpu_training/offline.py, run), the engine mocked.
        pulumi.runtime.reset_options(project="tpu-training", stack="dev", preview=False)
        pulumi.runtime.configure(pulumi.runtime.Settings(
            project="tpu-training", stack="dev", monitor=mocks.MockMonitor(Mocks()),
            engine=mocks.MockEngine(None), dry_run=False,
        ))
        program = lambda: runpy.run_path(".", run_name="__main__")  # the host's entry point "."
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(pulumi.runtime.run_in_stack(program))
        print(sorted(registered))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PULUMI_CONFIG"] = json.dumps(config)
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=INFRA, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "gcp:storage/bucket:Bucket" in result.stdout


def test_components_import_alone_without_infra_or_config(tmp_path):
    """Other repositories `pip install` this one and import the library; no stack involved."""
    script = (
        "import tpu_training_components as t, sys; print(t.CheckpointBucket.__name__); "
        "print(any('infra' in m or m == 'stack_config' for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CheckpointBucket", "False"]


def test_components_know_nothing_of_stack_config():
    for path in (REPO / "components").rglob("*.py"):
        text = path.read_text()
        assert "pulumi.Config(" not in text, path
        assert "stack_config" not in text and "import infra" not in text, path


def test_pulumi_yaml_declares_and_describes_every_project_key():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == stack_config.PROJECT
    assert project["main"] == "infra/"
    assert project["runtime"]["name"] == "python"
    declared = project["config"]
    assert set(declared) == set(stack_config.PROJECT_KEYS)
    for key, declaration in declared.items():
        assert declaration["description"].strip(), key
        # Pulumi demands a stack value for any project key without a default.
        assert "default" in declaration, key
        # Pulumi's schema types only string/integer/boolean/array: objects stay untyped.
        assert declaration.get("type") in (None, "string", "integer", "boolean", "array"), key


def test_infra_requirements_install_the_pins_and_the_library():
    lines = [
        line.strip()
        for line in (INFRA / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["-r ../requirements.txt", "-e .."]
    pins = [
        line
        for line in Path(REPO / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert pins and all("==" in line for line in pins), pins


def test_pulumi_yaml_refuses_clis_that_drop_replacement_triggers():
    """`replacement_trigger` exists from CLI 3.208 and handles Output-valued triggers from 3.226;
    an older engine ignores it and recovery silently does nothing. `requiredPulumiVersion`
    (pulumi/pulumi CHANGELOG 3.219.0, PR #21627) makes newer CLIs refuse to run outside it."""
    import semver

    required = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["requiredPulumiVersion"]
    assert required == ">=3.226.0"
    accepts = {
        v: semver.Version.parse(v).match(required) for v in ("3.208.0", "3.225.9", "3.226.0", "3.272.0")
    }
    assert accepts == {"3.208.0": False, "3.225.9": False, "3.226.0": True, "3.272.0": True}
    # The SDK this repository pins is one such CLI's own version line, or newer.
    assert semver.Version.parse(pulumi_sdk_version()).match(required)


def pulumi_sdk_version() -> str:
    from importlib.metadata import version

    return version("pulumi")


def test_running_the_program_outside_pulumi_names_the_commands_instead():
    """`python -m infra` is the Pulumi program run by hand: a message and the usage status, not
    the traceback of a program that needs the engine."""
    done = subprocess.run(
        [sys.executable, "-m", "infra"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 64
    assert "Traceback" not in done.stderr
    assert "Pulumi program" in done.stderr
    for command in ("tpu-training plan", "tpu-training cost", "tpu-training status"):
        assert command in done.stderr


def test_a_command_run_from_inside_infra_runs_for_the_project_above():
    """`tpu-training` finds the project from the working directory upwards, as the Pulumi CLI
    does: run inside infra/, it plans the project above, with the same answer."""
    done = subprocess.run(
        [TPU_TRAINING, "cost", "--json"], cwd=INFRA, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["alwaysOn"]["usdPerHour"] == 0.2404
    done = subprocess.run(
        [TPU_TRAINING, "plan", "--stack", "a/b/c/d"], cwd=INFRA, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 64, done.stderr
    assert "Traceback" not in done.stderr and "error: --stack 'a/b/c/d'" in done.stderr


def test_a_torn_checkpoint_read_of_the_stacks_own_outputs_is_tried_again_and_other_failures_are_not(
    monkeypatch,
):
    # The engine tier saw it (Pulumi v3.274.1, file backend, `up --skip-preview`): the program's
    # read of its own stack's outputs failed with "failed to load checkpoint: EOF" while the
    # engine wrote the checkpoint.
    from tpu_training.program import last_update

    torn = Exception("invoke of pulumi:pulumi:readStackOutputs failed: failed to load checkpoint: EOF")
    answers: list = [torn, torn, "outputs"]
    monkeypatch.setattr(last_update.time, "sleep", lambda seconds: None)

    def invoke(token, args):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(last_update.pulumi.runtime, "invoke", invoke)
    assert last_update.read_stack_outputs("org/project/stack") == "outputs"
    assert answers == []

    answers[:] = [torn] * last_update.CHECKPOINT_READ_ATTEMPTS + ["never read"]
    with pytest.raises(Exception, match="failed to load checkpoint"):
        last_update.read_stack_outputs("org/project/stack")
    assert answers == ["never read"], "it gives up after its attempts"

    other = Exception("invoke of pulumi:pulumi:readStackOutputs failed: unknown stack")
    answers[:] = [other, "never read"]
    with pytest.raises(Exception, match="unknown stack"):
        last_update.read_stack_outputs("org/project/stack")
    assert answers == ["never read"], "any other failure is not tried again"


def test_a_run_keeps_no_logger_behind_and_still_collects_the_programs_warnings():
    """Each run logs through a logger of its own, outside logging's registry: `tpu-training recover`
    runs the program every round, and a logger got by name lives as long as the process, with
    every message its collector held (and every `setLevel` anywhere walks all of them)."""
    import pulumi

    registered = set(logging.Logger.manager.loggerDict)

    def warn(message: str) -> offline.ProgramRun:
        return offline.run(lambda: pulumi.log.warn(message), project="p", stack="s")

    runs = [warn("round 1"), warn("round 2")]
    assert [run.warnings for run in runs] == [["round 1"], ["round 2"]]
    assert set(logging.Logger.manager.loggerDict) == registered


def test_an_uploaded_files_digest_follows_its_contents_and_is_read_again_only_when_it_changed(
    tmp_path, monkeypatch
):
    """The plan's `sha256` of a file asset: read once while the file stays as it was (a watch plans
    every round); a file changed just now is always read again, so a rewrite of the same size
    within one tick of the file system's clock is seen; a settled file rewritten is seen by its
    change time even when its size and modification time are put back."""
    path = tmp_path / "model.py"
    sha = {text: hashlib.sha256(text.encode()).hexdigest() for text in ("aaaa", "bbbb", "cccc")}
    path.write_text("aaaa")
    assert offline._file_sha256(path) == sha["aaaa"]
    assert path not in offline._DIGESTS  # changed too recently to be trusted later
    path.write_text("bbbb")
    assert offline._file_sha256(path) == sha["bbbb"]

    # Settled: older than the settling time (here, any age), as the repository's own files are.
    monkeypatch.setattr(offline, "_SETTLED_NS", -1)
    assert offline._file_sha256(path) == sha["bbbb"]
    offline._DIGESTS[path] = (offline._DIGESTS[path][0], "kept")
    assert offline._file_sha256(path) == "kept"  # not read again: the kept digest is returned
    seen = os.stat(path)
    path.write_text("cccc")
    os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert os.stat(path).st_size == seen.st_size
    assert offline._file_sha256(path) == sha["cccc"]
    assert offline._file_sha256(tmp_path / "gone.py").startswith("unreadable: ")


def test_a_task_the_program_leaves_pending_is_cancelled_when_the_run_ends():
    """The run's loop ends with nothing of it still pending (left so, Python warns at exit that a
    pending task was destroyed); the tasks are those the loop made, however many runs before it
    left theirs to the garbage collector."""
    import asyncio

    left: list[asyncio.Task[None]] = []

    def body() -> None:
        left.append(asyncio.get_event_loop().create_task(asyncio.sleep(3600)))

    offline.run(body, project="p", stack="s")
    [task] = left
    assert task.cancelled()
