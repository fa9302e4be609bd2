"""`tpu-training status`: live state and decisions (the recover probe against loopback TPU and
Kubernetes APIs), the newest checkpoint from the bucket (google-cloud-storage against a loopback
Cloud Storage), progress at it, and the last recovery from the stack's outputs; what cannot be
read is said, per item, with exit 75."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote

import pytest
from support.fakes.fake_kube_api import FakeKubernetesApi, job
from support.fakes.fake_tpu_api import FakeTpuApi
from support.fakes.loopback_gcs import LoopbackGcs
from support.harness.program import REPO
from tpu_training_components.live import endpoints

from tpu_training.commands import status

ZONE = "europe-west4-a"
VM_BUCKET = "tpu-training-dev-dev-ckpt-europe-west4"
JOB_BUCKET = "tpu-training-dev-dev-ckpt-us-east5"
NOW = datetime(2026, 11, 26, 9, 0, 0, tzinfo=timezone.utc)
LAST_RECOVERIES = {
    "tpuVms": {
        "demo-tpu": {
            "action": "replace",
            "cause": "node is PREEMPTED",
            "generation": 20261126061500,
            "decidedAt": "2026-11-26T06:15:00Z",
        }
    },
    "jobs": {},
}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeTpuApi, LoopbackGcs, Path]]:
    """A working dev stack: its node READY, its Job running, demo-tpu's bucket holding step 40
    (complete) and step 50 (a save cut short), and the stack's outputs in a file."""
    with FakeTpuApi() as tpu, FakeKubernetesApi() as kube, LoopbackGcs(VM_BUCKET, JOB_BUCKET) as gcs:
        tpu.add(
            ZONE,
            "demo-tpu",
            "READY",
            labels={"recovery-generation": "20261126061500"},
            health="HEALTHY",
            createTime="2026-11-26T06:16:00Z",
        )
        kube.add("default", job("train-v6e", generation=1, active=4, ready=4))
        monkeypatch.setenv("TPU_API_ENDPOINT", tpu.endpoint)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig(tmp_path)))
        monkeypatch.setenv(endpoints.STORAGE_ENDPOINT_VARIABLE, gcs.endpoint)
        bucket = endpoints.storage_client("tpu-training-dev", gcs.endpoint).bucket(VM_BUCKET)
        for name in ("40/state/array", "40/commit_success.txt", "50/state/array"):
            bucket.blob(f"checkpoints/demo-tpu/{name}").upload_from_string(b"x")
        # The trainer's progress record (docs/trainer.md), its step last advanced 90 s ago.
        bucket.blob("checkpoints/demo-tpu/progress.process-0.json").upload_from_string(
            json.dumps(
                {
                    "format": "tpu-training-progress/1",
                    "process": 0,
                    "processes": 1,
                    "phase": "training",
                    "step": 47,
                    "started_at": "2026-11-26T06:20:00.000Z",
                    "advanced_at": "2026-11-26T08:58:30.000Z",
                    "written_at": "2026-11-26T08:59:50.000Z",
                }
            )
        )
        outputs = tmp_path / "outputs.json"
        outputs.write_text(
            json.dumps(
                {"recoveryGenerations": {"demo-tpu": 20261126061500}, "lastRecoveries": LAST_RECOVERIES}
            )
        )
        yield tpu, gcs, outputs


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = status.main(list(argv), now=NOW)
    return code, capsys.readouterr().out


def test_everything_read_shows_each_run_and_exits_0(world, capsys):
    _, gcs, outputs = world
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    assert code == status.EXIT_OK, text
    # The probe's hang check and the lines shown share one reading: each run's progress records
    # are listed once.
    listings = [
        r for r in gcs.requests if r.startswith("GET /storage/") and "progress.process-" in unquote(r)
    ]
    assert len(listings) == 2 and len({r.split("prefix=")[1] for r in listings}) == 2, listings
    lines = text.splitlines()
    assert lines[0] == "Status of stack dev (project tpu-training-dev), 2026-11-26T09:00:00Z:"
    vm = lines[lines.index("TPU VM demo-tpu (europe-west4-a)") + 1 : lines.index("Job train-v6e (default)")]
    # The probe judges the trainer's progress at the time the status is of (recovery's hang check).
    assert vm[0] == (
        "  live:          node is READY; progress: process 0 of 1 (training, step 47) advanced 1.5 min ago "
        "-> is kept (recovery generation 20261126061500)"
    )
    assert vm[1].startswith("  checkpoint:    step 40, saved 2026-")
    assert vm[1].endswith(f"in gs://{VM_BUCKET}/checkpoints/demo-tpu")
    assert vm[2] == "                 (newer, incomplete: step 50)"
    assert vm[3] == "  progress:      step 40 of 98 (41%) at that checkpoint"
    assert vm[4] == (
        "  training:      step 47 (training), 1 of 1 processes reporting; last advanced 90 s ago (process 0)"
    )
    assert vm[5] == (
        "  last recovery: replace decided 2026-11-26T06:15:00Z (generation 20261126061500): node is PREEMPTED"
    )
    job_lines = lines[lines.index("Job train-v6e (default)") + 1 :]
    assert job_lines[1] == f"  checkpoint:    none yet in gs://{JOB_BUCKET}/checkpoints/train-v6e"
    assert job_lines[2] == (
        "  training:      no progress published (not started yet, or a trainer that publishes none)"
    )
    assert job_lines[3] == "  last recovery: none recorded"


def test_json_says_the_same(world, capsys):
    _, _, outputs = world
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs), "--json")
    assert code == status.EXIT_OK
    document = json.loads(text)
    (vm, job_run) = document["runs"]
    assert vm["newestCheckpoint"]["step"] == 40 and vm["incompleteSteps"] == [50]
    assert vm["trainSteps"] == 98 and vm["trainingComplete"] is False
    assert vm["lastRecovery"] == LAST_RECOVERIES["tpuVms"]["demo-tpu"]
    assert vm["live"].startswith("node is READY; progress: process 0 of 1") and vm["unread"] == []
    assert job_run["newestCheckpoint"] is None and job_run["trainSteps"] == 49
    assert vm["processes"] == [
        {
            "process": 0,
            "phase": "training",
            "step": 47,
            "advancedAt": "2026-11-26T08:58:30Z",
            "writtenAt": "2026-11-26T08:59:50Z",
        }
    ]
    assert job_run["processes"] == []


def test_a_preempted_node_and_a_finished_run_read_as_such(world, capsys):
    tpu, gcs, outputs = world
    tpu.nodes[ZONE][0]["state"] = "PREEMPTED"
    endpoints.storage_client("p", gcs.endpoint).bucket(VM_BUCKET).blob(
        "checkpoints/demo-tpu/TRAINING_COMPLETE"
    ).upload_from_string(b"")
    _, text = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    assert "  live:          node is PREEMPTED -> will be replaced (a new recovery generation)" in text
    assert "  progress:      done (TRAINING_COMPLETE)" in text


def test_offline_it_says_what_it_could_not_read_and_exits_75(capsys, tmp_path, monkeypatch):
    # No endpoints, no credentials (conftest points ADC at a missing file), no Pulumi CLI.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for variable in (
        "TPU_API_ENDPOINT",
        "GKE_API_ENDPOINT",
        "KUBECONFIG",
        endpoints.STORAGE_ENDPOINT_VARIABLE,
    ):
        monkeypatch.delenv(variable, raising=False)
    code, text = run(capsys, "--stack", "dev")
    assert code == status.EXIT_UNREAD
    vm = text.split("TPU VM demo-tpu (europe-west4-a)\n", 1)[1].split("Job ", 1)[0].splitlines()
    assert vm[0].startswith("  not read:      live state: TPU API unavailable (DefaultCredentialsError: ")
    assert vm[1] == "  not read:      checkpoints: DefaultCredentialsError (as above)"
    assert vm[2] == (
        "  not read:      last recovery: no Pulumi CLI on PATH; pass --outputs FILE "
        "(`pulumi stack output --json > FILE`)"
    )
    # No credentials is one error: its text is said once, the other reads name it.
    assert text.count("DefaultCredentialsError: ") == 1, text
    # Nothing could be listed, so there is no knowing whether a notice stands: not "none".
    notices = text.split("Maintenance notices:", 1)[1].splitlines()
    assert notices[0] == " unknown (not every node could be listed)", text
    assert notices[1] == "  not read:      TPU nodes in europe-west4-a: DefaultCredentialsError (as above)"
    assert notices[2].startswith("  not read:      GKE nodes: ")
    assert "Maintenance notices: none" not in text


def test_notices_none_only_when_every_listing_was_read(world, capsys):
    _, _, outputs = world
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    assert code == status.EXIT_OK, text
    assert "\nMaintenance notices: none\n" in text + "\n"
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs), "--json")
    assert json.loads(text)["noticesUnread"] == []


def test_the_tpu_listing_failing_makes_the_notices_unknown(world, capsys, monkeypatch):
    _, _, outputs = world
    monkeypatch.setenv("TPU_API_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    assert code == status.EXIT_UNREAD
    assert "Maintenance notices: unknown (not every node could be listed)" in text
    assert "  not read:      TPU nodes in europe-west4-a: " in text
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs), "--json")
    (unread,) = json.loads(text)["noticesUnread"]
    assert unread.startswith("TPU nodes in europe-west4-a: ")


def test_a_jobset_is_shown_as_a_jobset(world, capsys, scratch_project, monkeypatch):
    """A jobs entry declared as a JobSet (workload: jobset) is shown as one."""
    _, _, outputs = world
    dev = (REPO / "Pulumi.dev.yaml").read_text()
    (scratch_project / "Pulumi.dev.yaml").write_text(
        dev.replace("nodePool: v6e-4x4\n", "nodePool: v6e-4x4\n      workload: jobset\n")
    )
    monkeypatch.chdir(scratch_project)
    code = status.main(["--stack", "dev", "--outputs", str(outputs)], now=NOW)
    captured = capsys.readouterr()
    text = captured.out
    assert code in (status.EXIT_OK, status.EXIT_UNREAD), captured.err
    assert "\nJobSet train-v6e (default)\n" in text, text
    assert "\nJob train-v6e" not in text
    _, text = run(capsys, "--stack", "dev", "--outputs", str(outputs), "--json")
    kinds = [(r["kind"], r["name"]) for r in json.loads(text)["runs"]]
    assert kinds == [("tpuVm", "demo-tpu"), ("jobset", "train-v6e")]


def test_bad_input_exits_2_or_64(world, capsys, scratch_project, monkeypatch):
    assert status.main(["--stack", "a/b/c/d"]) == status.EXIT_USAGE
    _, _, outputs = world
    outputs.write_text("[1, 2]")
    assert status.main(["--stack", "dev", "--outputs", str(outputs)]) == status.EXIT_USAGE
    (scratch_project / "Pulumi.broken.yaml").write_text("config:\n  tpu-training:tpuVms: 5\n")
    monkeypatch.chdir(scratch_project)
    assert (
        status.main(["--stack", "broken", "--outputs", str(tmp_outputs(scratch_project))])
        == status.EXIT_CONFIG_ERROR
    )
    assert "tpu-training:tpuVms" in capsys.readouterr().err


def tmp_outputs(folder: Path) -> Path:
    path = folder / "outputs.json"
    path.write_text("{}")
    return path


def test_a_progress_record_that_is_not_one_is_named_and_the_rest_shown(world, capsys):
    _, gcs, outputs = world
    endpoints.storage_client("p", gcs.endpoint).bucket(JOB_BUCKET).blob(
        "checkpoints/train-v6e/progress.process-0.json"
    ).upload_from_string(b"{garbage")
    code, text = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    assert code == status.EXIT_UNREAD, text
    assert (
        f"  not read:      progress: gs://{JOB_BUCKET}/checkpoints/train-v6e/progress.process-0.json: "
        "not JSON" in text
    )
    assert "  training:      step 47 (training)" in text  # demo-tpu's, still shown


def test_html_draws_what_status_read_of_each_run(world, capsys, tmp_path):
    """`--html` beside the stack's status: each run a panel, drawn from what status read (its
    newest checkpoint a save, each process's latest step, the last recovery an interruption
    until the run's process started after it); the text on stdout is unchanged."""
    _, _, outputs = world
    page = tmp_path / "report.html"
    _, plain = run(capsys, "--stack", "dev", "--outputs", str(outputs))
    code = status.main(["--stack", "dev", "--outputs", str(outputs), "--html", str(page)], now=NOW)
    captured = capsys.readouterr()
    assert code == status.EXIT_OK, captured.err
    assert captured.out == plain and captured.err == f"timeline written to {page}\n"
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    svg = text[text.index("<svg") : text.index("</svg>")]
    assert "TPU VM demo-tpu (europe-west4-a)" in svg and "Job train-v6e (default)" in svg
    assert "interrupted: node is PREEMPTED" in svg
    # Decided 06:15, its trainer started 06:20 (the progress record's started_at): a 300 s gap.
    assert "<td>2026-11-26 06:15:00Z</td><td>node is PREEMPTED</td><td>300 s</td>" in text
    assert "<h2>TPU VM demo-tpu (europe-west4-a)</h2>\n<p>step 47 at 2026-11-26 08:58:30Z; 1 save(s)" in text
    assert "<h2>Job train-v6e (default)</h2>\n<p>no step; 0 save(s); 0 interruption(s)</p>" in text


def test_html_and_figure_with_json_keep_stdout_json(world, capsys, tmp_path):
    _, _, outputs = world
    page, picture = tmp_path / "report.html", tmp_path / "timeline.png"
    argv = [
        "--stack",
        "dev",
        "--outputs",
        str(outputs),
        "--json",
        "--html",
        str(page),
        "--figure",
        str(picture),
    ]
    code = status.main(argv, now=NOW)
    captured = capsys.readouterr()
    assert code == status.EXIT_OK
    assert [r["name"] for r in json.loads(captured.out)["runs"]] == ["demo-tpu", "train-v6e"]
    assert captured.err == f"timeline written to {page} and {picture}\n"
    assert page.is_file()
    from PIL import Image

    with Image.open(picture) as image:  # a panel per run
        assert image.format == "PNG" and image.size == (1000, round((2 * 3.2 + 0.6) * 100))


def test_html_that_cannot_be_written_exits_73_after_the_status(world, capsys, tmp_path):
    """The page is checked before the stack is read; if its write still fails (here its temporary
    name is taken), the status is shown and the exit says the page was not written."""
    _, _, outputs = world
    page = tmp_path / "report.html"
    (tmp_path / ".report.html.partial").mkdir()
    code = status.main(["--stack", "dev", "--outputs", str(outputs), "--html", str(page)], now=NOW)
    captured = capsys.readouterr()
    assert code == status.EXIT_CANNOT_WRITE
    assert captured.out.startswith("Status of stack dev ")
    assert captured.err == f"error: --html {page}: cannot be written (Is a directory)\n"
    assert not page.exists()
    assert (
        status.main(["--stack", "dev", "--html", str(tmp_path / "none" / "r.html")])
        == status.EXIT_CANNOT_WRITE
    )
    assert capsys.readouterr().out == ""  # nothing read: the stack's status is not shown


def test_a_stack_with_secrets_and_no_cli_says_the_cli_reads_them(
    capsys, scratch_project, monkeypatch, tmp_path
):
    # With the CLI: tests/engine/test_engine_rounds.py (the config read decrypted through it).
    (scratch_project / "Pulumi.secret.yaml").write_text(
        "config:\n  gcp:project: p\n  tpu-training:tpuVms:\n    secure: AAABAHhlbmNyeXB0ZWQ=\n"
    )
    monkeypatch.chdir(scratch_project)
    monkeypatch.setenv("PATH", str(tmp_path / "no-cli-here"))
    code = status.main(["--stack", "secret", "--outputs", str(tmp_outputs(scratch_project))])
    assert code == status.EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert "error: Pulumi.secret.yaml holds secrets, which need the Pulumi CLI: no Pulumi CLI on PATH" in err
    assert "Traceback" not in err
