"""The documentation cannot rot: the configuration reference is what the config model accepts, and
every relative link in README.md and docs/ leads to a file and heading that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support.harness.in_process import run_plan
from support.harness.program import REPO

from tpu_training.commands import config_docs

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


# --- the configuration reference ----------------------------------------------------------------


def test_the_configuration_reference_is_what_the_model_generates():
    page = config_docs.PAGE.read_text(encoding="utf-8")
    generated, missing = config_docs.generate(page)
    assert missing == [], "keys without a meaning in docs/configuration.md"
    assert generated == page, "stale: run tpu-training docs"
    assert config_docs.main(["--check"]) == 0


def test_every_key_of_the_model_has_a_row():
    page = config_docs.PAGE.read_text(encoding="utf-8")
    for section in config_docs.sections()[1:]:
        for name, field in section.model.model_fields.items():
            assert f"| `{field.alias or name}` |" in page, (section.heading, name)


def test_a_changed_default_makes_the_reference_stale():
    page = config_docs.PAGE.read_text(encoding="utf-8")
    edited = page.replace(
        "| `maintenanceGraceMinutes` | integer, ≥ 0 and ≤ 10080 | `30` |",
        "| `maintenanceGraceMinutes` | integer | `45` |",
    )
    assert edited != page
    generated, _ = config_docs.generate(edited)
    assert generated == page  # the model's type and default come back; the meaning is kept


def test_a_key_without_a_meaning_is_reported():
    page = config_docs.PAGE.read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `restartGeneration` |"))
    edited = page.replace(row, "| `restartGeneration` | integer | `0` |  |")
    _, missing = config_docs.generate(edited)
    assert missing == ["tpuVms[]: `restartGeneration`"]


def test_a_page_without_its_markers_is_refused():
    with pytest.raises(config_docs.ReferenceError, match="marker lines"):
        config_docs.generate("# Configuration\n")


def test_top_level_defaults_are_the_ones_pulumi_yaml_declares():
    page = config_docs.PAGE.read_text(encoding="utf-8")
    assert "| `tpu-training:tpuVms` | list of objects ([`tpuVms[]`](#tpuvms)) | `[]` |" in page
    assert "| `gcp:project` | string | required |" in page


# --- links -----------------------------------------------------------------------------------------

_FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE = re.compile(r"\]\(([^)\s]+)\)")
_REFERENCE = re.compile(r"^\[[^\]]+\]:\s*(\S+)", flags=re.M)


def _prose(text: str) -> str:
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors for a page, a repeated heading numbered -1, -2, ..."""
    seen: Counter[str] = Counter()
    anchors = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6} (.*)", line)
        if heading:
            slug = config_docs.anchor(heading.group(1).strip())
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return anchors


def _links(page: Path) -> list[str]:
    text = _prose(page.read_text(encoding="utf-8"))
    return _INLINE.findall(text) + _REFERENCE.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page):
    broken = []
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):
            continue  # https:, mailto:: not ours to check offline
        target, _, fragment = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in _anchors(path):
            broken.append(f"{link}: no heading with that anchor")
    assert broken == []


def test_the_link_check_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere) `[code](x.md)`\n")
    links = _links(page)
    assert links == ["#title", "missing.md", "#nowhere"]
    assert _anchors(page) == {"title"}


def test_google_documents_are_named_by_title_not_by_internal_numbers():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bseed 00\d|\bissue #\d", text, flags=re.I), page.name


# --- paths named in the text -------------------------------------------------------------------

# A repository path in backticks: a folder of the repository, then more path, ending in a file.
_NAMED_PATH = re.compile(
    r"`((?:components|infra|tpu_training|policy|tests|trainer|benchmarks|docs|provider|\.ci|\.github)/[\w./-]*\.\w+)`"
)


def named_paths(text: str) -> list[str]:
    # pulumi-kubernetes' own provider/pkg/... (cited for its diff rules) is not a path of ours.
    return [path for path in _NAMED_PATH.findall(text) if not path.startswith("provider/pkg/")]


@pytest.mark.parametrize(
    "page",
    [*PAGES, REPO / "policy" / "README.md", *sorted((REPO / "tests" / "fixtures").glob("*/README.md"))],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_file_the_docs_name_exists(page):
    # Moves (the layout, the test fakes) must take the prose along.
    missing = [path for path in named_paths(page.read_text(encoding="utf-8")) if not (REPO / path).exists()]
    assert missing == [], f"{page.relative_to(REPO)} names files that do not exist"


def test_the_path_check_sees_a_moved_file():
    assert named_paths("see `tests/fake_tpu_api.py` and `tpu_training/stack_config/loading.py`") == [
        "tests/fake_tpu_api.py",
        "tpu_training/stack_config/loading.py",
    ]
    assert not (REPO / "tests" / "fake_tpu_api.py").exists()


# --- the README's plan excerpt is the plan -------------------------------------------------------


def test_the_readme_plan_excerpt_is_what_the_plan_prints():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index("  + tpu-training:compute:PreemptibleTpuVm  demo-tpu")
    excerpt = [
        line.rstrip() for line in readme[start : readme.index("```", start)].splitlines() if line.strip()
    ]
    result = run_plan()
    assert result.returncode == 0, result.stderr
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    # The excerpt shortens a long value as `[...]`; every other character is the plan's.
    patterns = [re.compile(re.escape(line).replace(re.escape("[...]"), ".*")) for line in excerpt]
    assert [p.pattern for p in patterns if not any(p.fullmatch(line) for line in printed)] == []
    count = readme[readme.index("`Stack tpu-training/dev: ") + 1 :].split("`")[0].replace("\n", " ")
    assert " ".join(count.split()) == result.stdout.splitlines()[0]


# --- the README's command 1 checks the Python version first -------------------------------------


def _readme_version_check() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = readme.split("# 1. ", 1)[1].splitlines()[1]
    first = command.split(" && ", 1)[0]
    assert first.startswith("python3 -c '") and first.endswith("'"), first
    return first[len("python3 -c '") : -1]


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ((3, 10, 13), "Python 3.11 or later is needed; python3 is 3.10.13"),
        ((3, 9, 18), "Python 3.11 or later is needed; python3 is 3.9.18"),
        ((3, 11, 0), None),
        ((3, 13, 1), None),
    ],
)
def test_readme_command_1_stops_with_a_clear_message_before_python_3_11(version, message):
    # (On a real Python 3.10 the command prints the message and exits 1 before pip runs: checked
    # by hand with pyenv's 3.10.13, which this machine may not have.)
    shown = ".".join(map(str, version)) + " (main, Jan  1 2026, 00:00:00) [GCC 12.2.0]"

    class FakeSys:
        version_info = version

        @staticmethod
        def exit(code: object) -> None:
            raise SystemExit(code)

    FakeSys.version = shown  # type: ignore[attr-defined]
    code = _readme_version_check().replace("import sys; ", "")
    with pytest.raises(SystemExit) as exited:
        exec(code, {"sys": FakeSys})  # noqa: S102 - the README's own one-liner
    # sys.exit(False) is status 0; sys.exit("text") prints the text and exits 1.
    assert (exited.value.code or None) == message


def test_the_systemd_unit_in_the_docs_is_one_systemd_reads():
    page = (REPO / "docs" / "hands-free-recovery.md").read_text(encoding="utf-8")
    (unit,) = re.findall(r"```ini\n(.*?)```", page, re.S)
    sections = re.findall(r"^\[(\w+)\]$", unit, re.M)
    # [Install] is what `systemctl enable` reads: without it the unit cannot be enabled.
    assert sections == ["Unit", "Service", "Install"]
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            # systemd has no comments after a value: `Environment=A=b  # note` sets A to "b  # note".
            assert "#" not in line, line


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_itself_verifies_the_unit(tmp_path):
    page = (REPO / "docs" / "hands-free-recovery.md").read_text(encoding="utf-8")
    (unit,) = re.findall(r"```ini\n(.*?)```", page, re.S)
    path = tmp_path / "tpu-recover@prod.service"
    path.write_text(unit)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    # The one complaint allowed: the program it starts is not installed on this machine.
    problems = [line for line in done.stderr.splitlines() if line.strip() and "is not executable" not in line]
    assert problems == []
