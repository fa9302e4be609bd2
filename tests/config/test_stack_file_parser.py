"""Project and stack files are read as the Pulumi CLI reads them: YAML 1.2 (ruamel's safe loader),
so `on` stays text and `12:30` is not a number; timestamps are handed over as text; a repeated
key is refused with a message that names the file and the key."""

from __future__ import annotations

import pytest

from tpu_training import project_files


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("on", "on"),  # YAML 1.1: True
        ("off", "off"),
        ("yes", "yes"),
        ("No", "No"),
        ("y", "y"),
        ("12:30", "12:30"),  # YAML 1.1: 750 (base 60)
        ("1e-3", 0.001),  # YAML 1.1: a string
        ("1E3", 1000.0),
        (".5", 0.5),
        ("-.inf", float("-inf")),
        ("0o17", 15),
        ("0x1F", 31),
        ("true", True),
        ("False", False),
        ("~", None),
        ("", None),
        ("2025-12-01T00:00:00Z", "2025-12-01T00:00:00Z"),  # the CLI hands timestamps over as text
        ("2025-12-01", "2025-12-01"),
        ("'on'", "on"),
        ('"12:30"', "12:30"),
        ("[on, 1e-3, '7']", ["on", 0.001, "7"]),
        ("{a: yes, 'b': no}", {"a": "yes", "b": "no"}),
        ("a b\n    c", "a b c"),  # a plain scalar folded over two lines
    ],
)
def test_yaml_1_2_values(value, expected):
    text = f"config:\n  key: {value}\n"
    assert repr(project_files._load_yaml_1_2(text)) == repr({"config": {"key": expected}})


def test_a_duplicate_key_names_the_file_and_the_key_not_stand_in_values(tmp_path):
    stack_file = tmp_path / "Pulumi.mine.yaml"
    stack_file.write_text(
        "config:\n  tpu-training:labels:\n    team: a\n  tpu-training:labels:\n    team: b\n",
        encoding="utf-8",
    )
    with pytest.raises(project_files.ProjectFileError) as err:
        project_files._read_yaml(stack_file)
    message = str(err.value)
    assert 'found duplicate key "tpu-training:labels"' in message
    assert 'in "Pulumi.mine.yaml", line 4' in message
    assert "<unicode string>" not in message and "original value" not in message
