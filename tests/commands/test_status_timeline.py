"""A run's timeline without a cloud: `tpu-training status --records FILE --html PAGE` reads a
recorded run (the reference trainer's real output with kubectl's timestamps, and recovery
records; tests/fixtures/recorded-run/README.md) into steps, saves, interruptions by cause and
recovery gaps (domain/run_timeline.py), and draws it with matplotlib (tpu_training/timeline_figure.py).
The drawing is checked as pixels of its PNG (its size, each cause's line in its colour where it
happened, each recovery gap shaded and nothing else, the steps and the saves) and as SVG text
(each cause written in it); bad input is a clear error with its own exit status; and matplotlib
is loaded only when something is drawn. (The stack-mode `--html` is in tests/commands/test_status.py.)"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import pytest
from support.harness.program import REPO
from tpu_training_components.domain.run_timeline import (
    STOPPED_CAUSE,
    UNKNOWN_CAUSE,
    TimelineError,
    timeline_from_lines,
)

from tpu_training import timeline_figure
from tpu_training.commands import status

RECORDED = REPO / "tests" / "fixtures" / "recorded-run"
TRAINER_LOG = RECORDED / "trainer.log"
RECOVERIES = RECORDED / "recovery.jsonl"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


@pytest.fixture(scope="module")
def recorded() -> list[str]:
    return [*TRAINER_LOG.read_text().splitlines(), *RECOVERIES.read_text().splitlines()]


def record(**changes: object) -> str:
    document = json.loads(RECOVERIES.read_text().splitlines()[0])
    document.update(changes)
    return json.dumps(document)


def test_the_recorded_run_reads_as_three_attempts_two_interruptions_with_their_causes(recorded):
    read = timeline_from_lines(recorded)
    timeline = read.timeline
    assert read.not_understood == [] and read.other_runs == []
    assert timeline.name == "demo-tpu"
    # The trainer's lines say when it stopped (SIGTERM, after saving step 15) and when the
    # SIGKILLed attempt last spoke (a step); the records, detected in each gap, say why.
    first, second = timeline.interruptions
    assert (first.cause, first.at, first.resumed_at) == (
        "maintenance",
        utc("2026-11-28T15:30:50.723684Z"),
        utc("2026-11-28T15:31:02.318127Z"),
    )
    assert (second.cause, second.at, second.resumed_at) == (
        "preempted",
        utc("2026-11-28T15:31:03.567764Z"),  # its step 25, its last line
        utc("2026-11-28T15:31:14.757295Z"),
    )
    assert [step for _, step in timeline.saves] == [15, 20, 40, 60, 80, 100, 120, 140, 150]
    steps = [step for _, step in timeline.steps]
    assert steps[0] == 0 and steps[-1] == 150
    # Each resume goes back to its checkpoint: 15 after the stop at 15, 20 after the kill at 25.
    assert (15, 15) in zip(steps, steps[1:], strict=False) and (25, 20) in zip(steps, steps[1:], strict=False)


def test_without_records_the_trainer_lines_alone_say_stopped_and_unknown():
    timeline = timeline_from_lines(TRAINER_LOG.read_text().splitlines()).timeline
    assert timeline.name == "run"
    assert [i.cause for i in timeline.interruptions] == [STOPPED_CAUSE, UNKNOWN_CAUSE]


def test_records_alone_are_interruptions_with_their_recovery_gap():
    hung = record(cause="hung", stalledSince="2026-11-28T15:20:00.000Z")
    timeline = timeline_from_lines([hung]).timeline
    (only,) = timeline.interruptions
    # A hang is drawn from when its training stopped, not from when it was found.
    assert only.cause == "hung" and only.at == utc("2026-11-28T15:20:00Z")
    assert only.resumed_at == utc("2026-11-28T15:30:55Z")  # its `pulumi up` ended


def test_records_of_several_runs_need_a_choice():
    lines = [record(), record(name="train-v6e", cause="failed")]
    with pytest.raises(TimelineError, match=r"name 2 runs \(demo-tpu, train-v6e\); choose one"):
        timeline_from_lines(lines)
    read = timeline_from_lines(lines, run="train-v6e")
    assert [i.cause for i in read.timeline.interruptions] == ["failed"] and read.other_runs == ["demo-tpu"]


def test_lines_that_are_neither_are_named_and_nothing_is_guessed():
    read = timeline_from_lines(
        [
            "tpu-trainer: step step=1 examples=0-8 loss=1 seconds=0.1",  # no time: not placeable
            '{"format": "something-else"}',
            "{broken",
            TRAINER_LOG.read_text().splitlines()[1],
        ]
    )
    assert read.not_understood == [
        "line 1: neither a recovery record nor a timed trainer line",
        "line 2: not a record of format 'tpu-training-recovery/1'",
        "line 3: not JSON",
    ]
    assert len(read.timeline.steps) == 1
    with pytest.raises(TimelineError, match="in an empty file"):
        timeline_from_lines(["", "  "])


RGB = tuple[int, int, int]


def rgb(hex_colour: str) -> RGB:
    return (int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16))


def tint(hex_colour: str) -> RGB:
    """``hex_colour`` at the gaps' alpha over the white background."""
    alpha = timeline_figure.GAP_ALPHA
    return tuple(round(255 * (1 - alpha) + c * alpha) for c in rgb(hex_colour))  # type: ignore[return-value]


def near(pixel: RGB, colour: RGB, slack: int = 3) -> bool:
    return all(abs(a - b) <= slack for a, b in zip(pixel, colour, strict=True))


class Drawn:
    """The recorded run drawn to PNG, read back as pixels, with the figure's own transforms to
    find where a moment and a step are on it."""

    def __init__(self, timeline: Any) -> None:
        from matplotlib.dates import date2num
        from PIL import Image

        self.timeline = timeline
        self.drawing = timeline_figure.figure([timeline], title="Run demo-tpu")
        png = timeline_figure.save(self.drawing, format="png")
        self.image = Image.open(io.BytesIO(png)).convert("RGB")
        (self.axes,) = self.drawing.axes
        self.box = self.axes.get_window_extent()
        self._date2num = date2num

    def x(self, moment: datetime) -> int:
        return round(self.axes.transData.transform((self._date2num(moment), 0))[0])

    def xy(self, moment: datetime, step: int) -> tuple[int, int]:
        x, y = self.axes.transData.transform((self._date2num(moment), step))
        return round(x), round(self.image.height - y)

    def column(self, x: int) -> list[RGB]:
        """The pixels of column ``x`` inside the axes, their frame left out."""
        top = round(self.image.height - self.box.y1) + 3
        bottom = round(self.image.height - self.box.y0) - 3
        return [self.image.getpixel((x, row)) for row in range(top, bottom)]  # type: ignore[misc]

    def share(self, x: int, colour: RGB) -> float:
        pixels = self.column(x)
        return sum(near(pixel, colour) for pixel in pixels) / len(pixels)


@pytest.fixture(scope="module")
def drawn(recorded) -> Drawn:
    return Drawn(timeline_from_lines(recorded).timeline)


def test_the_png_has_the_size_of_one_panel(drawn):
    assert drawn.image.size == (
        int(timeline_figure.PANEL_INCHES[0] * timeline_figure.DPI),
        int((timeline_figure.PANEL_INCHES[1] + 0.6) * timeline_figure.DPI),
    )


def test_each_interruption_is_a_line_in_its_causes_colour_where_it_happened(drawn):
    colours = {"maintenance": timeline_figure.CAUSE_COLOURS[0], "preempted": timeline_figure.CAUSE_COLOURS[1]}
    assert drawn.timeline.causes == tuple(colours)
    for interruption in drawn.timeline.interruptions:
        colour = rgb(colours[interruption.cause])
        x = drawn.x(interruption.at)
        # The line is about two pixels wide: one of the columns at its moment is the cause's
        # colour from top to bottom (but where the cause is written over it).
        best = max(drawn.share(column, colour) for column in (x - 1, x, x + 1))
        assert best > 0.6, (interruption.cause, best)


def test_each_recovery_gap_is_shaded_in_its_causes_colour_and_training_is_not(drawn):
    first, second = drawn.timeline.interruptions
    for interruption, hex_colour in zip(
        drawn.timeline.interruptions, timeline_figure.CAUSE_COLOURS, strict=False
    ):
        assert interruption.resumed_at is not None
        middle = interruption.at + (interruption.resumed_at - interruption.at) / 2
        assert drawn.share(drawn.x(middle), tint(hex_colour)) > 0.9, interruption.cause
    # While it trained (before the first stop, and after the last resume) nothing is shaded.
    for moment in (
        drawn.timeline.steps[0][0] + (first.at - drawn.timeline.steps[0][0]) / 2,
        drawn.timeline.steps[-1][0] - (drawn.timeline.steps[-1][0] - second.resumed_at) / 2,  # type: ignore[operator]
    ):
        shaded = [drawn.share(drawn.x(moment), tint(colour)) for colour in timeline_figure.CAUSE_COLOURS[:2]]
        assert shaded == [0.0, 0.0], moment


def test_the_steps_are_a_line_and_each_save_a_marker_where_it_was_committed(drawn):
    blue, green = rgb(timeline_figure.STEP_COLOUR), rgb(timeline_figure.SAVE_COLOUR)

    def around(at: datetime, step: int) -> list[RGB]:
        x, y = drawn.xy(at, step)
        return [drawn.image.getpixel((x + dx, y + dy)) for dx in range(-2, 3) for dy in range(-2, 3)]  # type: ignore[misc]

    saved = {drawn.xy(at, step) for at, step in drawn.timeline.saves}
    stops = {drawn.x(interruption.at) for interruption in drawn.timeline.interruptions}
    points = [
        (at, step)
        for at, step in drawn.timeline.steps
        if all(abs(x - sx) + abs(y - sy) > 12 for x, y in [drawn.xy(at, step)] for sx, sy in saved)
        and all(abs(drawn.x(at) - stop) > 3 for stop in stops)
    ]
    assert len(points) > 20
    # Each step seen is a dot of the step line (where no save and no interruption covers it).
    for at, step in points:
        assert any(near(pixel, blue) for pixel in around(at, step)), (at, step)
    for at, step in drawn.timeline.saves:
        assert any(near(pixel, green) for pixel in around(at, step)), (at, step)


def test_matplotlib_is_loaded_only_when_something_is_drawn():
    """The stack program, `tpu-training status` and `tpu-training plan` never load matplotlib (a second of
    imports); drawing does. A fresh interpreter: this one has drawn already."""
    program = (
        "import sys\n"
        "import tpu_training_components, tpu_training.stack_config\n"
        "import tpu_training.commands.plan, tpu_training.commands.status\n"
        "import tpu_training.timeline_figure\n"
        "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'numpy', 'PIL'})\n"
        "print(heavy())\n"
        "from tpu_training_components.domain.run_timeline import RunTimeline\n"
        "tpu_training.timeline_figure.render([RunTimeline('r')], title='t', format='svg')\n"
        "print(heavy())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "['PIL', 'matplotlib', 'numpy']"]


def test_the_page_is_self_contained_with_every_cause_written(recorded, tmp_path, capsys):
    page = tmp_path / "report.html"
    code = status.main(["--records", str(TRAINER_LOG), "--records", str(RECOVERIES), "--html", str(page)])
    out = capsys.readouterr().out
    assert code == status.EXIT_OK
    assert out == (
        f"timeline of demo-tpu written to {page}: 45 step point(s), 9 save(s), 2 interruption(s) "
        "(maintenance, preempted)\n"
    )
    text = page.read_text()
    svg = text[text.index("<svg") : text.index("</svg>")]
    for cause in ("maintenance", "preempted"):
        assert f">{cause}<" in svg or f"> {cause}<" in svg or cause in svg, cause
        assert f"interrupted: {cause}" in svg
    assert (
        "<script" not in text
        and "src=" not in text
        and 'href="http' not in text.replace('href="http://www.w3.org', "")
    )
    assert "<td>2026-11-28 15:31:03Z</td><td>preempted</td><td>11 s</td>" in text


@pytest.fixture
def run_status(capsys):
    def run(*argv: str) -> tuple[int, str]:
        code = status.main(list(argv))
        captured = capsys.readouterr()
        assert captured.out == "", captured.out  # an error writes nothing but its message
        return code, captured.err

    return run


def test_records_that_cannot_be_read_exit_66(run_status, tmp_path):
    page = tmp_path / "report.html"
    missing = tmp_path / "nope.log"
    assert run_status("--records", str(missing), "--html", str(page)) == (
        status.EXIT_NO_INPUT,
        f"error: --records {missing}: no such file\n",
    )
    assert run_status("--records", str(tmp_path), "--html", str(page)) == (
        status.EXIT_NO_INPUT,
        f"error: --records {tmp_path}: cannot be read (Is a directory)\n",
    )
    assert not page.exists()


def test_records_with_no_timeline_in_them_exit_65(run_status, tmp_path):
    page = tmp_path / "report.html"
    empty = tmp_path / "empty.log"
    empty.write_text("")
    code, err = run_status("--records", str(empty), "--html", str(page))
    assert code == status.EXIT_NO_RECORDS
    assert err.startswith(f"error: --records {empty}: no recovery record (`tpu-training recover --records`)")
    assert err.endswith("in an empty file\n")
    several = tmp_path / "several.jsonl"
    several.write_text(record() + "\n" + record(name="other") + "\n")
    code, err = run_status("--records", str(several), "--html", str(page))
    assert code == status.EXIT_NO_RECORDS
    assert err == (
        f"error: --records {several}: the recovery records name 2 runs (demo-tpu, other); "
        "choose one with --run NAME\n"
    )
    code, err = run_status("--records", str(several), "--html", str(page), "--run", "absent")
    assert (code, err) == (
        status.EXIT_NO_RECORDS,
        f"error: --records {several}: nothing of run 'absent' (the records name demo-tpu, other)\n",
    )
    assert not page.exists()


def test_a_page_that_cannot_be_written_exits_73_before_anything_is_read(run_status, tmp_path, monkeypatch):
    missing = tmp_path / "nope.log"  # never read: the page is checked first
    no_folder = tmp_path / "no-folder" / "r.html"
    assert run_status("--records", str(missing), "--html", str(no_folder)) == (
        status.EXIT_CANNOT_WRITE,
        f"error: --html {no_folder}: its folder {no_folder.parent} does not exist\n",
    )
    assert run_status("--records", str(missing), "--html", str(tmp_path)) == (
        status.EXIT_CANNOT_WRITE,
        f"error: --html {tmp_path} is a folder; give a file name\n",
    )
    # (As root every folder is writable: the permission check is fed a refusal.)
    monkeypatch.setattr(timeline_figure.os, "access", lambda path, mode: False)
    assert run_status("--records", str(missing), "--html", str(tmp_path / "r.html")) == (
        status.EXIT_CANNOT_WRITE,
        f"error: --html {tmp_path / 'r.html'}: not writable here (permission denied)\n",
    )


def test_a_page_whose_write_fails_exits_73_and_leaves_nothing_half_written(tmp_path, capsys):
    page = tmp_path / "report.html"
    # The write's temporary file cannot be made: a folder holds its name.
    (tmp_path / ".report.html.partial").mkdir()
    code = status.main(["--records", str(TRAINER_LOG), "--html", str(page)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (status.EXIT_CANNOT_WRITE, "")
    assert captured.err == f"error: --html {page}: cannot be written (Is a directory)\n"
    assert not page.exists() and (tmp_path / ".report.html.partial").is_dir()


def test_options_that_need_another_are_a_usage_error(run_status):
    assert run_status("--records", str(TRAINER_LOG)) == (
        status.EXIT_USAGE,
        "error: --records draws a timeline: give --html PAGE or --figure FILE.png|FILE.svg to write it to\n",
    )
    assert run_status("--run", "demo-tpu") == (
        status.EXIT_USAGE,
        "error: --run chooses among the runs of --records FILE; give --records\n",
    )


def test_a_figure_file_is_png_or_svg_by_its_name(tmp_path):
    assert timeline_figure.figure_format(tmp_path / "a.PNG") == "png"
    assert timeline_figure.figure_format(tmp_path / "a.svg") == "svg"
    with pytest.raises(
        timeline_figure.ReportError, match=r"a.pdf: a figure file ends in .png or .svg; not '.pdf'"
    ):
        timeline_figure.figure_format(tmp_path / "a.pdf")
    with pytest.raises(
        timeline_figure.ReportError,
        match="figure: a figure file ends in .png or .svg; this one has no suffix",
    ):
        timeline_figure.figure_format(tmp_path / "figure")


DOCS_PICTURE = REPO / "docs" / "images" / "recorded-run-timeline.png"
DOCS_COMMAND = [
    "--records",
    "tests/fixtures/recorded-run/trainer.log",
    "--records",
    "tests/fixtures/recorded-run/recovery.jsonl",
    "--figure",
]


def test_the_picture_in_the_docs_is_what_the_command_draws(tmp_path, capsys, monkeypatch):
    """docs/status.md shows the recorded run's timeline and the command that drew it: it still
    draws exactly that (else run the command in the docs again, and look at the picture)."""
    from PIL import Image, ImageChops

    monkeypatch.chdir(REPO)  # the command as the docs give it, from the project folder
    drawn = tmp_path / "timeline.png"
    assert status.main([*DOCS_COMMAND, str(drawn)]) == status.EXIT_OK
    assert capsys.readouterr().out.startswith(f"timeline of demo-tpu written to {drawn}: 45 step point(s)")
    docs = (REPO / "docs" / "status.md").read_text()
    command = " ".join(["tpu-training status", *DOCS_COMMAND, str(DOCS_PICTURE.relative_to(REPO))])
    assert command in docs and "](images/recorded-run-timeline.png)" in docs
    assert DOCS_PICTURE.stat().st_size < 150_000
    with Image.open(drawn) as fresh, Image.open(DOCS_PICTURE) as committed:
        assert fresh.size == committed.size
        assert ImageChops.difference(fresh.convert("RGB"), committed.convert("RGB")).getbbox() is None


def test_figure_alone_or_beside_the_page(tmp_path, capsys):
    page, picture = tmp_path / "report.html", tmp_path / "timeline.svg"
    argv = ["--records", str(TRAINER_LOG), "--records", str(RECOVERIES)]
    assert status.main([*argv, "--html", str(page), "--figure", str(picture)]) == status.EXIT_OK
    assert capsys.readouterr().out.startswith(f"timeline of demo-tpu written to {page} and {picture}: ")
    svg = picture.read_text()
    assert svg.startswith("<?xml") and "interrupted: maintenance" in svg and "interrupted: preempted" in svg
    assert "<svg" in page.read_text()


def test_a_figure_that_is_not_png_or_svg_is_a_usage_error(run_status, tmp_path):
    assert run_status("--records", str(TRAINER_LOG), "--figure", str(tmp_path / "t.pdf")) == (
        status.EXIT_USAGE,
        f"error: --figure {tmp_path / 't.pdf'}: a figure file ends in .png or .svg; not '.pdf'\n",
    )
    assert run_status("--records", str(TRAINER_LOG), "--figure", str(tmp_path / "none" / "t.png")) == (
        status.EXIT_CANNOT_WRITE,
        f"error: --figure {tmp_path / 'none' / 't.png'}: its folder {tmp_path / 'none'} does not exist\n",
    )
