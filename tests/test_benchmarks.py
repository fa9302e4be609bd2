"""The benchmarks, smallest case: smoke tests. Their timings are printed, never asserted; what is
asserted are facts that hold at any speed. benchmarks/plan_speed.py: every case ran, the offline
plan loads no client library, and a --live plan makes one call per zone and one per namespace.
benchmarks/recovery_slo.py: see its test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.program import REPO


def smoke(script: str, figures: Path) -> subprocess.CompletedProcess[str]:
    """``benchmarks/SCRIPT --smoke --json FIGURES``, which must succeed."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--smoke", "--json", str(figures)],
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
    done = smoke("recovery_slo.py", figures)
    assert "\nGoals (issue 27)\n" in done.stdout
    document = json.loads(figures.read_text())
    assert set(document["causes"]) == {
        "job-failed",
        "jobset-failed",
        "pod-evicted",
        "vm-preempted",
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
