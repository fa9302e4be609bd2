"""Project and stack files are read as the Pulumi CLI reads them: YAML 1.2, duplicate keys refused,
UTF-8; anything else is a clear error naming the file, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.harness.in_process import run_plan
from support.harness.program import REPO

from tpu_training import project_files

DEV = (REPO / "Pulumi.dev.yaml").read_text()


def _values(project_dir: Path, stack_text: str | bytes) -> dict[str, str]:
    path = project_dir / "Pulumi.t.yaml"
    if isinstance(stack_text, bytes):
        path.write_bytes(stack_text)
    else:
        path.write_text(stack_text)
    values, _, _ = project_files.stack_config(project_files.load_project(project_dir), "t")
    return values


def _refused(project_dir: Path, stack_text: str | bytes) -> str:
    with pytest.raises(project_files.ProjectFileError) as err:
        _values(project_dir, stack_text)
    return str(err.value)


def test_yaml_1_2_scalars_as_the_cli_reads_them(scratch_project):
    """PyYAML (YAML 1.1) read `12:30` as 750, `on` as true and refused `1e-3` as a number."""
    values = _values(
        scratch_project,
        "config:\n  gcp:project: p\n  tpu-training:labels:\n    window: 12:30\n    switch: on\n"
        "  tpu-training:recovery:\n    maintenanceGraceMinutes: 1e-3\n",
    )
    assert json.loads(values["tpu-training:labels"]) == {"window": "12:30", "switch": "on"}
    assert json.loads(values["tpu-training:recovery"]) == {"maintenanceGraceMinutes": 0.001}


def test_timestamps_stay_text_as_the_cli_hands_them_over(scratch_project):
    values = _values(
        scratch_project,
        "config:\n  gcp:project: p\n"
        "  tpu-training:cluster:\n    upgradeExclusionStart: 2025-12-01T00:00:00Z\n"
        "  tpu-training:labels:\n    since: 2025-12-01\n",
    )
    assert json.loads(values["tpu-training:cluster"]) == {"upgradeExclusionStart": "2025-12-01T00:00:00Z"}
    assert json.loads(values["tpu-training:labels"]) == {"since": "2025-12-01"}


def test_a_duplicated_key_is_refused_not_silently_won(scratch_project):
    text = DEV + "  tpu-training:tpuVms: []\n"
    message = _refused(scratch_project, text)
    assert 'found duplicate key "tpu-training:tpuVms"' in message
    assert "To suppress this check" not in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("config:\n  - gcp:project: p\n", "'config' must be a mapping of keys to values, not a list"),
        ("config:\n  2024: x\n", "'config' has the key 2024 (int); keys must be strings"),
        ("- a\n- b\n", "the stack file must be a mapping of keys to values, not a list"),
        ("config: [\n", "is not valid YAML 1.2 (as Pulumi reads it)"),
    ],
)
def test_stack_files_of_the_wrong_shape_are_refused(scratch_project, text, message):
    assert message in _refused(scratch_project, text)


def test_encodings_other_than_utf_8_are_refused_with_the_reason(scratch_project):
    assert "is UTF-16" in _refused(scratch_project, DEV.encode("utf-16"))
    latin1 = DEV.replace("# The `dev` stack", "# Caf\u00e9 stack").encode("latin-1", errors="replace")
    assert "line 1 is not UTF-8 (byte 0xe9)" in _refused(scratch_project, latin1)
    # A UTF-8 byte-order mark is fine: editors on Windows write one.
    assert _values(scratch_project, b"\xef\xbb\xbf" + DEV.encode())["gcp:project"] == "tpu-training-dev"


def test_the_plan_exits_2_without_a_traceback_on_a_bad_stack_file(scratch_project):
    (scratch_project / "Pulumi.bad.yaml").write_bytes(DEV.encode("utf-16"))
    result = run_plan("--stack", "bad", cwd=scratch_project)
    assert result.returncode == 2
    assert "is UTF-16" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("!!int abc", "ValueError: invalid literal for int()"),
        ("!!float abc", "ValueError"),
        ("{? [a, b] : c}", "cannot be handed to the program as JSON"),
        ("9" * 5000, "Exceeds the limit (4300 digits)"),
        ("[" * 3000 + "]" * 3000, "RecursionError"),
    ],
)
def test_values_the_parser_cannot_build_are_config_errors(scratch_project, value, reason):
    (scratch_project / "Pulumi.odd.yaml").write_text(
        f"config:\n  gcp:project: tpu-training-dev\n  tpu-training:labels: {value}\n"
    )
    result = run_plan("--stack", "odd", cwd=scratch_project)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert reason in result.stderr


def test_an_alias_bomb_is_refused_at_once(scratch_project):
    lines = [
        "config:",
        "  gcp:project: tpu-training-dev",
        "  x:anchors:",
        "    a0: &a0 [x, x, x, x, x, x, x, x, x, x]",
    ]
    lines += [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    lines.append("  tpu-training:labels: *a9")  # 10**10 values once expanded
    (scratch_project / "Pulumi.bomb.yaml").write_text("\n".join(lines) + "\n")
    result = run_plan("--stack", "bomb", cwd=scratch_project)
    assert result.returncode == 2 and "expands to more than 100000 values" in result.stderr


@pytest.mark.parametrize(
    ("main", "reason"),
    [("[a, b]", "'main' must be the program's folder"), ("/nowhere/", "holds no __main__.py")],
)
def test_a_project_whose_main_is_no_program(scratch_project, main, reason):
    project = (scratch_project / "Pulumi.yaml").read_text()
    (scratch_project / "Pulumi.yaml").write_text(project.replace("main: infra/", f"main: {main}"))
    result = run_plan(cwd=scratch_project)
    assert result.returncode == 2 and reason in result.stderr and "Traceback" not in result.stderr
