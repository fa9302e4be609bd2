"""`tpu-training plan` as a command: its arguments are checked before any work, its exit
statuses tell argument errors from config errors, and no output path ends in a traceback.

Its ``main`` runs in the test's process (support.harness.in_process) where a process adds nothing the test
checks; signals, pipes, closed streams and the interpreter's exit are tested on a real process."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml
from support.fakes.fake_kube_api import FakeKubernetesApi
from support.fakes.fake_tpu_api import FakeTpuApi
from support.harness.in_process import run_plan
from support.harness.program import REPO, run_stack

from tpu_training import command_line, exit_codes, json_file, plan_output


def assert_refused_before_any_work(
    result: subprocess.CompletedProcess[str], status: int, *words: str
) -> None:
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    # Nothing ran: the tree (which starts "Stack tpu-training/...") was never printed.
    assert result.stdout == ""
    for word in words:
        assert word in result.stderr


def test_json_into_a_missing_folder_is_refused_before_the_plan_runs(tmp_path):
    result = run_plan("--json", str(tmp_path / "missing" / "plan.json"))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--json", "does not exist")


def test_json_onto_a_folder_is_refused(tmp_path):
    result = run_plan("--json", str(tmp_path))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--json", "is a folder")


def test_manifests_onto_a_file_or_below_one_is_refused(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    for target, reason in ((a_file, "is a file, not a folder"), (a_file / "sub", f"{a_file} is a file")):
        result = run_plan("--manifests", str(target))
        assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--manifests", reason)
    assert a_file.read_text() == "mine\n"


def test_manifests_leave_alone_what_an_earlier_plan_did_not_write(tmp_path):
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "x.yaml").mkdir()  # a folder named like a manifest
    (folder / "broken.yaml").symlink_to(tmp_path / "nowhere")
    (folder / "latin1.yaml").write_bytes(b"# caf\xe9\n")
    os.mkfifo(folder / "pipe.yaml")  # opening it to read would wait for a writer forever
    (folder / "old.yaml").write_text(plan_output.MANIFEST_HEADER + "kind: Job\n")

    result = run_plan("--manifests", str(folder))

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    left = {p.name for p in folder.iterdir()}
    assert {"x.yaml", "broken.yaml", "latin1.yaml", "pipe.yaml"} <= left
    assert "old.yaml" not in left  # an earlier plan's file, for an object the stack no longer has
    assert "job_default_train-v6e.yaml" in left


def test_manifests_an_earlier_version_wrote_are_replaced_too(tmp_path):
    # `python -m infra.plan --manifests` wrote this header before the one command; its files are
    # the plan's, so the next run replaces them instead of refusing the folder.
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "job_default_train-v6e.yaml").write_text(plan_output.EARLIER_HEADERS[0] + "kind: Job\n")
    (folder / "job_default_gone.yaml").write_text(plan_output.EARLIER_HEADERS[0] + "kind: Job\n")
    result = run_plan("--manifests", str(folder))
    assert result.returncode == 0, result.stderr
    assert not (folder / "job_default_gone.yaml").exists()
    assert (folder / "job_default_train-v6e.yaml").read_text().startswith(plan_output.MANIFEST_HEADER)


def test_a_manifest_that_cannot_be_written_exits_73_and_names_the_file(tmp_path):
    folder = tmp_path / "manifests"
    (folder / "job_default_train-v6e.yaml").mkdir(parents=True)
    result = run_plan("--manifests", str(folder))
    assert result.returncode == exit_codes.EXIT_CANNOT_WRITE
    assert "Traceback" not in result.stderr
    assert "cannot write" in result.stderr and "job_default_train-v6e.yaml" in result.stderr


@pytest.mark.parametrize("stack", ["../evil", "", "a/b/c/d", "x" * 101, "dev eu", "org/"])
def test_stack_names_pulumi_refuses_are_argument_errors(stack):
    result = run_plan("--stack", stack)
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--stack", "1 to 100 letters")


@pytest.mark.parametrize("stack", ["org/dev", "org/tpu-training/dev"])
def test_stack_names_with_an_organisation_and_project_as_the_cli_takes_them(stack):
    assert run_plan("--stack", stack).returncode == 0


def test_a_stack_of_another_project_is_an_argument_error():
    result = run_plan("--stack", "org/other/dev")
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "names project 'other'")


@pytest.mark.parametrize(
    ("option", "reason"), [("--json", "give a file name"), ("--manifests", "give a folder")]
)
def test_empty_output_paths_are_argument_errors(option, reason):
    assert_refused_before_any_work(run_plan(option, ""), exit_codes.EXIT_USAGE, reason)


def test_an_output_path_the_system_refuses_is_an_argument_error(tmp_path):
    result = run_plan("--json", str(tmp_path / ("x" * 300)))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--json", "File name too long")


def test_unknown_options_exit_64_not_the_config_status():
    result = run_plan("--bogus")
    assert result.returncode == exit_codes.EXIT_USAGE != exit_codes.EXIT_CONFIG_ERROR
    assert "unrecognized arguments: --bogus" in result.stderr


def test_previous_outputs_are_the_generations_a_kept_node_and_job_stay_at(tmp_path):
    previous = tmp_path / "outputs.json"
    # The shape `pulumi stack output --json` prints: every output of the stack by name.
    previous.write_text(
        json.dumps(
            {
                "checkpointBuckets": {"europe-west4": "gs://b"},
                "recoveryGenerations": {"demo-tpu": 4},
                "jobRecoveryGenerations": {"train-v6e": 2},
            }
        )
    )
    result = run_plan("--previous-outputs", str(previous), "--json", "-")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["outputs"]["recoveryGenerations"] == {"demo-tpu": 4}
    assert document["outputs"]["jobRecoveryGenerations"] == {"train-v6e": 2}
    vm = next(r for r in document["resources"] if r["type"] == "gcp:tpu/v2Vm:V2Vm")
    assert vm["inputs"]["labels"]["recovery-generation"] == "4"

    without = json.loads(run_plan("--json", "-").stdout)
    assert without["outputs"]["recoveryGenerations"] == {"demo-tpu": 0}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "expected an object of stack outputs"),
        ('{"recoveryGenerations": [1]}', "recoveryGenerations must be an object"),
        ('{"recoveryGenerations": {"demo-tpu": -1}}', "recoveryGenerations.demo-tpu = -1"),
        ('{"jobRecoveryGenerations": {"train-v6e": "2"}}', 'jobRecoveryGenerations.train-v6e = "2"'),
        ('{"recoveryGenerations": {"demo-tpu": true}}', "recoveryGenerations.demo-tpu = true"),
        ('{"recoveryGenerations": {"demo-tpu": ' + "9" * 5000 + "}}", "cannot be read as JSON"),
        ("[" * 100_000 + "]" * 100_000, "cannot be read as JSON (RecursionError"),
    ],
)
def test_previous_outputs_of_the_wrong_shape_are_argument_errors(tmp_path, content, reason):
    previous = tmp_path / "outputs.json"
    previous.write_text(content)
    result = run_plan("--previous-outputs", str(previous))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--previous-outputs", reason)


def test_a_missing_previous_outputs_file_is_an_argument_error(tmp_path):
    result = run_plan("--previous-outputs", str(tmp_path / "none.json"))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "cannot be read")


def test_config_errors_keep_status_2_and_say_what_reads_secret(scratch_project):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    dev["config"]["tpu-training:labels"] = {"owner": {"secure": "v1:abc"}}
    dev["config"]["tpu-training:tpuVms"][0]["acceleratorType"] = "v3-9"
    (scratch_project / "Pulumi.sec.yaml").write_text(yaml.safe_dump(dev))
    result = run_plan("--stack", "sec", cwd=scratch_project)
    assert result.returncode == exit_codes.EXIT_CONFIG_ERROR
    assert "tpu-training:tpuVms[0].acceleratorType" in result.stderr
    assert (
        "warning: tpu-training:labels holds a secret, which the offline plan cannot decrypt" in result.stderr
    )


@pytest.mark.parametrize(
    ("place", "left_out"),
    [
        (("tpu-training:tpuVms", 0, "zone"), ["tpu-training:tpuVms[0]"]),
        (("tpu-training:nodePools", 0, "topology"), ["tpu-training:nodePools[0]", "tpu-training:jobs[0]"]),
        (("tpu-training:cluster", "location"), ["tpu-training:cluster", "tpu-training:nodePools"]),
    ],
)
def test_a_secret_the_plan_needs_the_value_of_leaves_its_item_out_with_a_warning(
    scratch_project, place, left_out
):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    node = dev["config"]
    for part in place[:-1]:
        node = node[part]
    node[place[-1]] = {"secure": "v1:abc"}
    (scratch_project / "Pulumi.sec.yaml").write_text(yaml.safe_dump(dev))
    result = run_plan("--stack", "sec", "--json", "-", cwd=scratch_project)
    assert result.returncode == 0, result.stderr
    warnings = "\n".join(json.loads(result.stdout)["warnings"])
    assert "is a secret the offline plan cannot decrypt, and the plan needs its value" in warnings
    for what in left_out:
        assert f"{what} " in warnings


def test_a_successful_run_leaves_no_event_loop_open():
    # Python reports loops still open at exit as a ResourceWarning (shown in development mode);
    # outside it, at shutdown, as "Exception ignored in: BaseEventLoop.__del__".
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "ignore::DeprecationWarning", "-m", "tpu_training", "plan"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "unclosed event loop" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_a_reader_that_is_gone_gets_no_traceback():
    # `true` exits at once, so the plan's first write meets a closed pipe.
    result = subprocess.run(
        # pipefail: the pipeline's status is the plan's, not that of `true`.
        ["bash", "-o", "pipefail", "-c", f"'{sys.executable}' -m tpu_training plan | true"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


# --- --compare-to: what `pulumi up` would do to what is deployed ------------------------------


def test_compare_to_a_deployed_plan_announces_replacements_and_next_boot_edits(scratch_project):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    (scratch_project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))
    base = scratch_project / "base.json"
    assert run_plan("--json", str(base), cwd=scratch_project).returncode == 0
    # Everyday edits on the running stack: a new image, a new training command.
    dev["config"]["tpu-training:jobs"][0]["image"] = "us-docker.pkg.dev/cloud-tpu-images/jax-ai-image/tpu:v2"
    dev["config"]["tpu-training:tpuVms"][0]["trainCommand"] = "python3 /opt/train.py --resume"
    (scratch_project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))

    result = run_plan("--compare-to", str(base), cwd=scratch_project)
    assert result.returncode == 0, result.stderr
    assert "train-v6e-job: replaced — training restarts from its checkpoint" in result.stdout
    assert "takes effect at the node's next boot" in result.stdout
    assert "bump restartGeneration of the tpuVms entry 'demo-tpu'" in result.stdout
    assert "0 to create, 1 to update in place, 1 to replace, 0 to delete" in result.stdout

    as_json = run_plan("--compare-to", str(base), "--json", "-", cwd=scratch_project)
    assert as_json.returncode == 0, as_json.stderr
    changes = json.loads(as_json.stdout)["changes"]  # standard output holds only the JSON
    assert {(c["name"], c["action"]) for c in changes["resources"]} == {
        ("train-v6e-job", "replace"),
        ("demo-tpu-vm", "update"),
    }
    assert changes["restartsTraining"] == ["train-v6e-job"]
    assert "train-v6e-job: replaced" in as_json.stderr


def test_without_compare_to_the_plan_json_has_no_changes_key():
    assert "changes" not in json.loads(run_plan("--json", "-").stdout)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("not json", "not JSON"),
        (b"\xff\xfe", "is not UTF-8 text"),
        ('{"outputs": {}}', "not a plan: expected an object with a 'resources' list"),
        ('{"resources": [1]}', "resources[0] is a int, not an object"),
        (
            '{"resources": [{"urn": "u", "type": "t"}]}',
            "resources[0].name = null; expected a non-empty string",
        ),
        (
            '{"resources": [{"urn": "u", "type": "t", "name": "n", "inputs": []}]}',
            "resources[0].inputs must be an object",
        ),
        ('{"stack": "prod", "resources": []}', "is a plan of stack 'prod', this plan is of 'dev'"),
        ("[" * 100_000 + "]" * 100_000, "cannot be read as JSON (RecursionError"),
    ],
)
def test_a_compare_to_file_that_is_no_plan_is_refused_before_any_work(tmp_path, content, reason):
    base = tmp_path / "base.json"
    if isinstance(content, bytes):
        base.write_bytes(content)
    else:
        base.write_text(content)
    result = run_plan("--compare-to", str(base))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--compare-to", reason)


def test_a_missing_compare_to_file_is_refused_before_any_work(tmp_path):
    result = run_plan("--compare-to", str(tmp_path / "none.json"))
    assert_refused_before_any_work(result, exit_codes.EXIT_USAGE, "--compare-to", "cannot be read")


# --- inputs that never end, signals and closed streams: a clear exit, never a hang --------------


def _plan_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpu_training", "plan", *args]


def _plan_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def test_previous_outputs_from_a_fifo_nobody_writes_to_is_refused_in_time(tmp_path):
    fifo = tmp_path / "outputs.json"
    os.mkfifo(fifo)
    try:
        with pytest.raises(command_line.UsageError, match="nothing came to read in 0.2 s"):
            plan_output.read_previous_outputs(str(fifo), seconds=0.2)
    finally:
        # The abandoned reader is blocked opening the FIFO: a writer that opens and closes it
        # lets it finish, so nothing outlives the test.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_previous_outputs_through_a_pipe_are_read():
    # `<(...)` hands the plan a pipe, not a file: the way to skip the temporary file.
    outputs = json.dumps({"recoveryGenerations": {"demo-tpu": 3}})
    command = (
        shlex.join(_plan_command("--json", "-", "--previous-outputs")) + f" <(echo {shlex.quote(outputs)})"
    )
    result = subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=_plan_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["outputs"]["recoveryGenerations"] == {"demo-tpu": 3}


def test_endless_or_huge_previous_outputs_are_refused_without_reading_them_whole(tmp_path):
    huge = tmp_path / "huge.json"
    with huge.open("wb") as file:
        file.truncate(json_file.MAX_BYTES + 1)  # sparse: no disk, read as zeros
    for source in ("/dev/zero", str(huge)):
        result = run_plan("--previous-outputs", source)
        assert_refused_before_any_work(
            result, exit_codes.EXIT_USAGE, f"--previous-outputs {source}: larger than 16777216 bytes"
        )


def test_sigint_while_waiting_for_previous_outputs_exits_130_with_one_line(tmp_path):
    fifo = tmp_path / "outputs.json"
    os.mkfifo(fifo)
    process = subprocess.Popen(
        _plan_command("--previous-outputs", str(fifo)),
        cwd=REPO,
        env=_plan_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Opening the FIFO for writing returns once the plan has opened it to read: it is then
    # waiting, in its start-up, for stack outputs that never come.
    writer = {}
    opened = threading.Event()

    def open_writer() -> None:
        writer["fd"] = os.open(fifo, os.O_WRONLY)
        opened.set()

    threading.Thread(target=open_writer, daemon=True).start()
    try:
        assert opened.wait(60), "the plan never opened --previous-outputs"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if "fd" in writer:
            os.close(writer["fd"])
        else:  # let the writer's open finish
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        process.kill()
    assert process.returncode == exit_codes.EXIT_INTERRUPTED == 130
    assert stderr == "interrupted\n" and stdout == ""


@pytest.mark.parametrize(
    ("args", "status", "stderr"), [((), 0, ""), (("--json", "-"), 64, "standard output is closed")]
)
def test_a_closed_standard_output_is_no_traceback(args, status, stderr):
    # `>&-` starts the plan with file descriptor 1 closed: Python's sys.stdout is then None.
    command = shlex.join(_plan_command(*args)) + " >&-"
    result = subprocess.run(
        ["bash", "-c", command], cwd=REPO, env=_plan_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr and stderr in result.stderr


def test_json_to_a_reader_that_takes_nothing_gets_no_traceback():
    command = shlex.join(_plan_command("--json", "-")) + " | head -c0"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=REPO,
        env=_plan_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


# --- output a person reads: the summary, warnings apart, --live that read nothing ---------------


def test_the_plan_ends_with_a_summary_of_kinds_and_decisions():
    result = run_plan()
    assert result.returncode == 0, result.stderr
    summary = result.stdout[result.stdout.index("Summary: ") :]
    assert "resources in the cloud or cluster (a first `pulumi up` creates them all" in summary
    header = result.stdout.splitlines()[0]
    counted = re.fullmatch(
        r"Stack tpu-training/dev: \d+ resources \((\d+) in the cloud or cluster, .*\)", header
    )
    assert counted, header
    assert f"Summary: {counted[1]} resources in the cloud or cluster" in summary
    assert "1 gcp:tpu/v2Vm:V2Vm" in summary and "2 gcp:storage/bucket:Bucket" in summary
    assert (
        "recovery (offline: live state not read, every one kept): TPU VM demo-tpu kept, Job train-v6e kept"
        in (summary)
    )


def test_warnings_go_to_standard_error_and_the_summary_counts_them(scratch_project):
    dev = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    dev["config"]["tpu-training:labels"] = {"owner": {"secure": "v1:abc"}}  # offline: a stand-in
    (scratch_project / "Pulumi.dev.yaml").write_text(yaml.safe_dump(dev))
    result = run_plan(cwd=scratch_project)
    assert result.returncode == 0, result.stderr
    assert "warning: " in result.stderr and "\nwarning: " not in result.stdout
    count = result.stderr.count("warning: ")
    assert f"  {count} warning(s), on standard error" in result.stdout


def test_live_that_reads_nothing_exits_75_and_says_so():
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.fail_with = 503
        kube.fail_with = 503
        with tempfile.TemporaryDirectory() as folder:
            env = {"TPU_API_ENDPOINT": tpu.endpoint, "KUBECONFIG": str(kube.kubeconfig(Path(folder)))}
            result = run_plan("--live", env=env)
    assert result.returncode == exit_codes.EXIT_TRY_LATER == 75, result.stderr
    assert "--live read no live state" in result.stderr
    assert "Summary: " in result.stdout  # the plan itself is still shown
    assert "recovery (live state unavailable: every one kept as last deployed)" in result.stdout


def test_live_that_reads_something_succeeds():
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube:
        tpu.add("europe-west4-a", "demo-tpu", "READY", labels={"recovery-generation": "3"})
        kube.fail_with = 503
        with tempfile.TemporaryDirectory() as folder:
            env = {"TPU_API_ENDPOINT": tpu.endpoint, "KUBECONFIG": str(kube.kubeconfig(Path(folder)))}
            result = run_plan("--live", env=env)
    assert result.returncode == 0, result.stderr
    assert "recovery (from live state): TPU VM demo-tpu kept, Job train-v6e kept" in result.stdout


def test_with_compare_to_the_summary_points_at_the_changes(tmp_path):
    base = tmp_path / "base.json"
    assert run_plan("--json", str(base)).returncode == 0
    result = run_plan("--compare-to", str(base))
    assert result.returncode == 0, result.stderr
    summary = result.stdout[result.stdout.index("Summary: ") :]
    assert "the changes above are what an `up` of the deployed stack does" in summary
    assert "a first `pulumi up` creates them all" not in summary


# --- --manifests: what it writes, and where it refuses to (issue 26 items 8 and 10) ----------------


def _multislice(config: dict) -> dict:
    """The dev stack with its Job spanning two slices: a JobSet, and the JobSet Helm release."""
    config = copy.deepcopy(config)
    config["tpu-training:nodePools"][0]["slices"] = 2
    config["tpu-training:jobs"][0]["slices"] = 2
    return config


def test_manifests_of_a_stack_that_installs_a_helm_release(config, tmp_path):
    # A Helm release has no kind of its own: the plan used to stop on KeyError: 'kind'.
    result = run_stack(_multislice(config))
    written = plan_output.write_manifests(result, tmp_path)
    kinds = sorted(yaml.safe_load(p.read_text())["kind"] for p in written)
    assert kinds == ["ConfigMap", "JobSet", "Service", "ServiceAccount"]
    assert plan_output.helm_releases(result) == ["jobset (oci://registry.k8s.io/jobset/charts/jobset 0.12.0)"]


def test_two_objects_never_share_a_manifest_file(config, tmp_path):
    # `x-train` in `ml` and `train` in `ml-x` were both job-ml-x-train.yaml: one overwrote the other.
    config = copy.deepcopy(config)
    first = config["tpu-training:jobs"][0]
    first.update({"name": "x-train", "namespace": "ml"})
    second = dict(first, name="train", namespace="ml-x")
    config["tpu-training:nodePools"][0]["slices"] = 2
    config["tpu-training:jobs"].append(second)
    written = plan_output.write_manifests(run_stack(config), tmp_path)
    jobs = [yaml.safe_load(p.read_text()) for p in written if p.name.startswith("job_")]
    assert sorted((j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs) == [
        ("ml", "x-train"),
        ("ml-x", "train"),
    ]


def test_manifests_are_never_written_through_a_link(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "job_default_train-v6e.yaml").symlink_to(outside)
    result = run_plan("--manifests", str(folder))
    assert result.returncode == exit_codes.EXIT_CANNOT_WRITE, result.stderr
    assert "Traceback" not in result.stderr
    assert "job_default_train-v6e.yaml is a symbolic link" in result.stderr
    assert outside.read_text() == "precious\n"
    assert [p.name for p in folder.iterdir()] == ["job_default_train-v6e.yaml"]  # nothing half-written


def test_a_hand_written_file_of_a_manifests_name_is_not_overwritten(tmp_path):
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "job_default_train-v6e.yaml").write_text("# my own edits\nkind: Job\n")
    (folder / "old.yaml").write_text(plan_output.MANIFEST_HEADER + "kind: Job\n")
    result = run_plan("--manifests", str(folder))
    assert result.returncode == exit_codes.EXIT_CANNOT_WRITE, result.stderr
    assert "no '# Generated by' header" in result.stderr and "Traceback" not in result.stderr
    assert (folder / "job_default_train-v6e.yaml").read_text() == "# my own edits\nkind: Job\n"
    assert (folder / "old.yaml").exists()  # refused before anything was removed or written
