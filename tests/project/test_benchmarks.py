"""The benchmarks, smallest case: smoke tests. Their timings are printed, never asserted; what is
asserted are facts that hold at any speed. benchmarks/plan_speed.py: every case ran, the offline
plan loads no client library, and a --live plan makes one call per zone and one per namespace.
benchmarks/recovery_slo.py: see its test; its --figure is the trials drawn as a timeline (each
cause's fault a line in its colour, the gaps until recovery acted shaded), checked as pixels."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.harness.program import REPO
from support.harness.timeline_png import TimelinePng

from tpu_training import timeline_figure


def smoke(script: str, figures: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/SCRIPT --smoke --json FIGURES [MORE]``, which must succeed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--smoke", "--json", str(figures), *more],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_the_plan_speed_benchmark_runs_every_section(tmp_path):
    figures = tmp_path / "figures.json"
    done = smoke("plan_speed.py", figures)
    out = done.stdout
    for section in ("P1 ", "P2 ", "P3 ", "Goals (docs/plan-speed.md)"):
        assert f"\n{section}" in out, section
    assert "xpk dry-run: skipped" in out  # --smoke never runs xpk
    assert "import floor (" in out and "not importable by name: 0" in out and "of which the SDK's (" in out
    assert (
        "client libraries the offline plan loads (google.cloud.tpu, google.cloud.container, kubernetes): none"
        in out
    )
    assert (
        "16 VMs, 4 pools, 4 Jobs:   4 TPU + 8 Kubernetes API calls; = zones + 2 x namespaces (4 + 2 x 4): yes"
        in out
    )

    document = json.loads(figures.read_text())
    assert set(document["cases"]) == {"dev", "floor", "sdk-floor", "vms-16", "live"}
    assert all(len(case["seconds"]) == 1 for case in document["cases"].values())
    assert document["cases"]["vms-16"]["resources"] > document["cases"]["dev"]["resources"]
    assert document["client_libraries_loaded"] == []
    assert document["live_calls"] == [{"vms": 16, "tpu": 4, "kubernetes": 8, "zones": 4, "namespaces": 4}]
    assert [goal["reached"] is None for goal in document["goals"]] == [True, False, True, True]


@pytest.mark.slow
def test_the_recovery_slo_benchmark_measures_every_cause_polling_and_watching(tmp_path):
    """benchmarks/recovery_slo.py --smoke: one trial per cause and mode. Timings are printed, not
    asserted; what holds at any speed is: every cause was injected in both modes and seen by a
    round, every cause that needs a `pulumi up` got one, no `pulumi up` came uncalled for, and
    the capacity ladder moved once per stockout trial and never for quota or permission."""
    figures = tmp_path / "slo.json"
    picture = tmp_path / "slo.png"
    done = smoke("recovery_slo.py", figures, "--figure", str(picture))
    assert "\nGoals (issue 27)\n" in done.stdout
    assert done.stdout.endswith(f"\nTimeline of the trials: {picture}\n")
    document = json.loads(figures.read_text())
    assert set(document["causes"]) == {
        "job-failed",
        "jobset-failed",
        "pod-evicted",
        "vm-preempted",
        "flex-start-expired",
        "job-hung",
        "maintenance",
        "vm-stockout",
        "vm-quota",
        "vm-permission",
    }
    for cause, modes in document["causes"].items():
        assert set(modes) == {"polling", "watching"}, cause
        for mode, row in modes.items():
            assert row["missed"] == 0 and row["falseDetections"] == 0, (cause, mode, row)
            assert row["detection"] is not None, (cause, mode)
            # A hung Job is replaced; a maintenance notice becomes a save request, read by the
            # trainer and saved for before the window.
            assert (row["up"] is None) is (cause == "pod-evicted"), (cause, mode)
            assert row["late"] == 0, (cause, mode)
            # The capacity ladder (issue 36): a stockout in the first zone moves the VM one rung
            # per trial; quota and permission refusals never move it.
            expected_moves = {"vm-stockout": row["trials"], "vm-quota": 0, "vm-permission": 0}.get(cause)
            assert row["moves"] == expected_moves, (cause, mode, row)

    # The figure: a panel per mode; ten causes, ten colours, each a line in both panels (a
    # panel high, less its labels), and every gap until recovery acted shaded in its colour
    # (the polling mode's gaps are at least a round each, so every cause has one).
    png = TimelinePng(picture)
    panel = timeline_figure.PANEL_INCHES[1] * timeline_figure.DPI
    assert png.size == (1000, round(2 * panel + 0.6 * timeline_figure.DPI))
    colours = timeline_figure.CAUSE_COLOURS[: len(document["causes"])]
    assert len(set(colours)) == 10
    lines = {colour: png.tallest_line(colour) for colour in colours}
    assert all(height > panel / 2 for height in lines.values()), lines
    shaded = {colour: png.shaded(colour) for colour in colours}
    assert sum(1 for pixels in shaded.values() if pixels > 200) >= 6, shaded


def test_the_recovery_slo_figure_must_be_png_or_svg_and_is_refused_before_the_trials(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "recovery_slo.py"),
            "--smoke",
            "--figure",
            str(tmp_path / "a.pdf"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.endswith(
        f"error: --figure {tmp_path / 'a.pdf'}: a figure file ends in .png or .svg; not '.pdf'\n"
    )


@pytest.mark.slow
def test_the_busy_suite_benchmark_counts_a_green_run_and_a_run_with_nothing_passed(tmp_path):
    """benchmarks/busy_suite.py --smoke: one fast module under one competing process. Green is
    a run with tests passed and none failed, skipped or in error; a run that selects nothing is
    not green, and the script then exits 1."""
    figures = tmp_path / "busy.json"
    done = smoke("busy_suite.py", figures)
    assert "1 CPU-bound process(es) competing" in done.stdout
    assert "every run green: yes" in done.stdout
    (run,) = json.loads(figures.read_text())["runs"]
    assert run["green"] and run["passed"] > 0 and run["failed"] == run["skipped"] == run["errors"] == 0

    nothing = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "busy_suite.py"),
            "--smoke",
            "--json",
            str(figures),
            "--",
            "tests/domain/test_catalogue.py",
            "-n0",
            "-k",
            "no_test_has_this_name",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert nothing.returncode == 1, nothing.stderr
    assert "run 1: RED: 0 passed" in nothing.stdout and "every run green: no" in nothing.stdout


def _ci_cpu(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/ci_cpu.py ARGUMENTS`` run in FOLDER, whatever its exit status."""
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ci_cpu.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=folder,
    )


def _accounting_line(command: str, cpu_ticks: int, elapsed_ticks: int, started: float) -> str:
    """One line as dump-acct prints a v3 record (its start in local time, the day space-padded)."""
    start = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(started))
    return (
        f"{command:<16}|v3|{cpu_ticks:9.2f}|{0:9.2f}|{elapsed_ticks:9.2f}|     0|     0| 15336.00|"
        f"     0.00|     1|     1|     |       0|__      |{start}"
    )


def test_the_ci_cpu_benchmark_gives_go_tools_to_the_build_and_the_rest_to_the_step_they_started_in(tmp_path):
    """benchmarks/ci_cpu.py --analyse: a compile that starts while the tests run is the build's;
    a python that starts in a step is that step's, the last one started by then; the build's end
    is its last Go process's."""
    started = float(int(time.time()) - 3600)
    log = tmp_path / "ci.log"
    log.write_text(
        "== README command 1: set up, and the offline plan of the dev stack (at 0 s)\n"
        "== types (at 100 s)\n"
        "== README command 2: tests (at 300 s)\n"
        "3572 passed\n"
        "== the engine tier (at 1000 s)\n"
        "== done (at 1400 s)\n"
    )
    dump = tmp_path / "dump.txt"
    dump.write_text(
        "\n".join(
            [
                _accounting_line("pip", 5000, 6000, started + 10),
                _accounting_line("python", 2000, 2500, started + 100),
                _accounting_line("compile", 9000, 9000, started + 350),  # beside command 2
                _accounting_line("link", 1000, 1500, started + 950),  # ends at 965 s
                _accounting_line("python", 30000, 60000, started + 301),
                _accounting_line("pulumi", 4000, 4000, started + 1010),
            ]
        )
        + "\n"
    )
    figures = tmp_path / "figures.json"
    done = _ci_cpu(
        tmp_path, "--analyse", str(dump), "--log", str(log), "--started", str(started), "--json", str(figures)
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(figures.read_text())
    shares = {share["name"]: (share["cpu_seconds"], share["processes"]) for share in document["shares"]}
    assert shares == {
        "README command 1: set up, and the offline plan of the dev stack": (50.0, 1),
        "types": (20.0, 1),
        "README command 2: tests": (300.0, 1),
        "the engine tier": (40.0, 1),
        "done": (0.0, 0),
        "the engine's Go build": (100.0, 2),
    }
    assert document["buildEnded"] == 965 and document["wall"] == 1400
    assert done.stdout.splitlines()[-1].startswith("all: 510 CPU-s in 1400 s")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--analyse", "dump.txt"], "--analyse needs --log LOG and --started EPOCH too"),
        (["--analyse", "missing.txt", "--log", "ci.log", "--started", "0"], "missing.txt: no such file"),
    ],
)
def test_the_ci_cpu_benchmark_refuses_an_analysis_it_lacks_files_for(tmp_path, arguments, message):
    (tmp_path / "dump.txt").write_text("")
    (tmp_path / "ci.log").write_text("== lint (at 0 s)\n")
    done = _ci_cpu(tmp_path, *arguments)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.rstrip().endswith(f"error: {message}")


def test_the_ci_cpu_benchmark_names_the_line_of_a_dump_it_cannot_read(tmp_path):
    (tmp_path / "dump.txt").write_text(
        "compile |v3| 1.00| 0.00| 2.00| 0| 0| 1.00| 0.00| 1| 1| | 0|__ |yesterday\n"
    )
    (tmp_path / "ci.log").write_text("== lint (at 0 s)\n")
    done = _ci_cpu(tmp_path, "--analyse", "dump.txt", "--log", "ci.log", "--started", "0")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: dump-acct's output cannot be read: line 1: time data 'yesterday'")
