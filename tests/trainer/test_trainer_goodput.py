"""benchmarks/goodput_measured.py, smallest case: a smoke test. It runs the real trainer under the
real startup script, a calibration then each case a quarter of a mean gap's work with one
interruption half-way through it; the figures are printed, never asserted. What is asserted holds
at any speed: both cases ran to completion through a kill and a restart, every figure the
docs quote is printed and consistent with the others, and --figure drew both runs as timelines
(each kill a line, shaded until the restart, the steps and saves)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.harness.program import REPO
from support.harness.timeline_png import TimelinePng

from tpu_training import timeline_figure

pytestmark = pytest.mark.usefixtures("jax_compilation_cache")


def test_the_goodput_benchmark_runs_both_cases(tmp_path):
    figures = tmp_path / "goodput.json"
    picture = tmp_path / "goodput.png"
    script = str(REPO / "benchmarks" / "goodput_measured.py")
    done = subprocess.run(
        [sys.executable, script, "--smoke", "--json", str(figures), "--figure", str(picture)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in (
        "\ncalibration: save C = ",
        "\nyoung: checkpoint every ",
        "\nhourly: checkpoint every ",
        "  per interruption   detect ",
        "measured lost, 1 - useful / wall:",
        "predicted, (C/T + (T/2 + c)/M + R/M) / (1 + R/M):",
        "Young's C/T + T/(2M) (no restarts, no lag):",
        "\nGoals (docs/trainer.md, 'The goodput model measured')\n",
        "measured within 10% of predicted at Young's interval: ",
        "Young's at least as good as hourly (the table says hourly / Young's = 2.07x without restarts): ",
    ):
        assert line in out, line

    document = json.loads(figures.read_text())
    calibration = document["calibration"]
    assert 0 < calibration["save_seconds"] <= calibration["commit_seconds"]
    assert calibration["restart_seconds"] > 0 and calibration["step_seconds"] > 0
    cases = {case["name"]: case for case in document["cases"]}
    assert set(cases) == {"young", "hourly"}
    young, hourly = cases["young"], cases["hourly"]
    # The scaled hour is longer than Young's interval for this row (2 h, 60 s): 930 s vs 3600 s.
    assert hourly["interval_seconds"] > young["interval_seconds"] > 0
    for case in cases.values():
        assert case["interruptions"] == 1 and case["attempts"] == 2
        assert case["checkpoints"] >= 1 and case["redone_steps"] >= 0
        assert case["detect_seconds"] > 0 and case["restart_seconds"] > 0
        assert case["measured_lost"] == 1 - case["useful_seconds"] / case["wall_seconds"]
        assert 0 < case["predicted_young"] < case["predicted"] < 1

    # The figure: a panel per case, each with its one kill a line a panel high and the restart
    # after it shaded, both in the first cause's colour; the steps' line and the saves' markers.
    assert done.stdout.endswith(f"\nTimeline of the cases: {picture}\n")
    png = TimelinePng(picture)
    panel = timeline_figure.PANEL_INCHES[1] * timeline_figure.DPI
    assert png.size == (1000, round(2 * panel + 0.6 * timeline_figure.DPI))
    killed = timeline_figure.CAUSE_COLOURS[0]
    assert png.tallest_line(killed) > panel / 2
    assert png.shaded(killed) > 1000
    assert (
        png.tallest_line(timeline_figure.STEP_COLOUR) >= 3
        and png.tallest_line(timeline_figure.SAVE_COLOUR) >= 3
    )
    assert png.tallest_line(timeline_figure.CAUSE_COLOURS[1]) == 0  # one cause only
