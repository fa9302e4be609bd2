"""The fast path for project and stack files: libyaml parses, ruamel's YAML 1.2 resolver and
constructor build the values. It must read every file exactly as ruamel alone does, or leave the
file to ruamel: never a different value, never a value where ruamel reports an error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.program import REPO

from infra import offline


def _ruamel(text: str) -> Any:
    return offline._yaml_1_2().load(text)


def test_the_dev_stack_file_takes_the_fast_path():
    text = (REPO / "Pulumi.dev.yaml").read_text()
    fast = offline._load_with_libyaml(text)
    assert fast is not offline._UNSURE
    assert repr(fast) == repr(_ruamel(text))


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
def test_yaml_1_2_values_on_the_fast_path(value, expected):
    text = f"config:\n  key: {value}\n"
    fast = offline._load_with_libyaml(text)
    assert fast is not offline._UNSURE
    assert repr(fast) == repr(_ruamel(text)) == repr({"config": {"key": expected}})


@pytest.mark.parametrize(
    "text",
    [
        "%YAML 1.1\n---\na: on\n",  # a directive changes the rules
        "a: !!str 1\n",  # an explicit tag
        "a: &x 1\nb: *x\n",  # anchors and aliases
        "a: 1\na: 2\n",  # a repeated key: ruamel reports it
        'a: "x\\/y"\n',  # an escape (YAML 1.2 only)
        "a:\tb\n",  # a tab
        "a: x\x85b\n",  # NEL, a line break in YAML 1.1 only
        "a: |\n  x\n",  # a block scalar
        "- a\n",  # not a mapping
        "a: 1\n---\nb: 2\n",  # two documents
        "a: 1\n...\n",  # a document end marker
        "a: [\n",  # not YAML
        "",  # no document
        # Found by review (differential fuzzing against ruamel alone):
        "# c\r%YAML 1.1\r---\ra: on\rb: 012\rc: 12:30\r",  # a directive after a lone CR
        "a: b\r...\r...\r",  # document end markers after lone CRs
        "a: [?, :, b]\n",  # libyaml drops the token after an empty `?` key
        "a: [?]]\n",  # ... and accepts the extra `]` ruamel refuses
        'a: ["k":v]\n',  # a `:` right after a quoted flow key: ruamel refuses it
        "a: [[k]:v]\n",
        "notes: " + "[" * 490 + "]" * 490 + "\n",  # deeper than ruamel's composer can go
    ],
)
def test_what_libyaml_may_read_otherwise_is_left_to_ruamel(text):
    assert offline._load_with_libyaml(text) is offline._UNSURE
    try:
        expected = repr(_ruamel(text))
    except Exception as exc:  # noqa: BLE001 - the same error, whatever it is
        with pytest.raises(type(exc)):
            offline._load_yaml_1_2(text)
    else:
        assert repr(offline._load_yaml_1_2(text)) == expected


# --- made-up documents ------------------------------------------------------------------------

_WORDS = [
    "on", "off", "yes", "NO", "true", "Null", "~", "", "12:30", "1e-3", "0o17", "017", "0x1F",
    "0b101", "1_000", "+1", "-.5", "1.", ".inf", ".NaN", "2025-12-01T00:00:00Z", "<<", "=", "a b",
    "a:b", "a: b", "a #b", "-", "?", "'", '"', "[a]", "{a: b}", "a\nb", " a ", "#c", "&x", "*x",
    "!t", "|", ">", "%", "@", "v3-8", "europe-west4-a", "\u00e9t\u00e9", "\U0001f600",
]  # fmt: skip
_text = st.one_of(st.sampled_from(_WORDS), st.text(alphabet="ab1:.-_ #'\"{}[],&*!|>?%@~=\n\r", max_size=6))


def _scalar(text: str, style: str) -> str:
    if style == "single":
        return "'" + text.replace("'", "''") + "'"
    if style == "double":
        return json.dumps(text, ensure_ascii=False)
    return text  # plain: often not YAML at all, which ruamel must then be the one to say


_scalars = st.one_of(
    st.builds(_scalar, _text, st.sampled_from(["plain", "single", "double"])),
    st.sampled_from(["a", "v3-8", "1", "on", "12:30", "1e-3", "a b", "~"]),  # plain and valid
)
_trees = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.lists(st.tuples(_scalars, inner), max_size=3).map(dict)
    ),
    max_leaves=8,
)


def _flow(tree: Any) -> str:
    if isinstance(tree, list):
        return "[" + ", ".join(_flow(item) for item in tree) + "]"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{key}: {_flow(value)}" for key, value in tree.items()) + "}"
    return tree


def _block(tree: Any, indent: str, flow: Any) -> list[str]:
    """``tree`` in block style, or flow style where ``flow`` draws True."""
    if not isinstance(tree, (list, dict)) or not tree or flow():
        return [_flow(tree)]
    lines = []
    for key, value in tree.items() if isinstance(tree, dict) else (("-", item) for item in tree):
        inner = _block(value, indent + "  ", flow)
        if len(inner) > 1:
            lines += [f"{indent}{key}{':' if key != '-' else ''}", *inner]
        else:
            lines.append(f"{indent}{key}{':' if key != '-' else ''} {inner[0]}")
    return lines


@st.composite
def _documents(draw: st.DrawFn) -> str:
    top = draw(st.lists(st.tuples(_scalars, _trees), min_size=1, max_size=4).map(dict))
    text = "\n".join(_block(top, "", lambda: draw(st.booleans()))) + "\n"
    text = (
        draw(st.sampled_from(["", "---\n", "# c\n"])) + text + draw(st.sampled_from(["", "# end\n", "\n\n"]))
    )
    return text.replace("\n", draw(st.sampled_from(["\n", "\r\n", " # c\n", "  \n"])))


# Made-up anchors repeat; ruamel warns about each (and uses the later one), which is not the point.
@pytest.mark.filterwarnings("ignore::ruamel.yaml.error.ReusedAnchorWarning")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents())
def test_made_up_documents_read_the_same_or_go_to_ruamel(text):
    fast = offline._load_with_libyaml(text)
    try:
        expected = _ruamel(text)
    except Exception:  # noqa: BLE001 - ruamel refuses it: so must the fast path
        assert fast is offline._UNSURE
        return
    if fast is not offline._UNSURE:
        assert repr(fast) == repr(expected)


def test_a_duplicate_key_names_the_file_and_the_key_not_stand_in_values(tmp_path):
    stack_file = tmp_path / "Pulumi.mine.yaml"
    stack_file.write_text(
        "config:\n  tpu-training:labels:\n    team: a\n  tpu-training:labels:\n    team: b\n",
        encoding="utf-8",
    )
    with pytest.raises(offline.ProjectFileError) as err:
        offline._read_yaml(stack_file)
    message = str(err.value)
    assert 'found duplicate key "tpu-training:labels"' in message
    assert 'in "Pulumi.mine.yaml", line 4' in message
    assert "<unicode string>" not in message and "original value" not in message
