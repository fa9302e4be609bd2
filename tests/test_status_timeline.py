"""A run's timeline without a cloud: `python -m infra.status --records FILE --html PAGE` reads a
recorded run (the reference trainer's real output with kubectl's timestamps, and recovery
records; tests/fixtures/recorded-run/README.md) into steps, saves, interruptions by cause and
recovery gaps (domain/run_timeline.py), and draws it with matplotlib (infra/timeline_figure.py).
The drawing is checked as pixels (its size, how much is drawn, each cause's colour) and as SVG
text (each cause written in it); bad input is a clear error with its own exit status."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from support.program import REPO
from tpu_training_components.domain.run_timeline import (
    STOPPED_CAUSE,
    UNKNOWN_CAUSE,
    TimelineError,
    timeline_from_lines,
)

from infra import status, timeline_figure

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


def test_the_png_really_draws_the_run(recorded):
    from PIL import Image

    timeline = timeline_from_lines(recorded).timeline
    png = timeline_figure.render([timeline], title="Run demo-tpu", format="png")
    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    assert (width, height) == (
        int(timeline_figure.PANEL_INCHES[0] * timeline_figure.DPI),
        int((timeline_figure.PANEL_INCHES[1] + 0.6) * timeline_figure.DPI),
    )
    colours = image.getcolors(maxcolors=width * height)
    assert colours is not None
    counts = {colour: count for count, colour in colours}
    drawn = sum(count for colour, count in counts.items() if colour != (255, 255, 255))
    assert drawn > 0.05 * width * height, "next to nothing drawn"
    # The step line, the saves and each cause's line are there, in their own colours.
    for hex_colour in ("#1f77b4", "#2ca02c", "#d62728", "#ff7f0e"):
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert counts.get(rgb, 0) >= 20, hex_colour


def test_the_page_is_self_contained_with_every_cause_written(recorded, tmp_path, capsys):
    page = tmp_path / "report.html"
    code = status.main(["--records", str(TRAINER_LOG), "--records", str(RECOVERIES), "--html", str(page)])
    out = capsys.readouterr().out
    assert code == status.EXIT_OK
    assert out == (
        f"timeline of demo-tpu written to {page}: 35 step point(s), 9 save(s), 2 interruption(s) "
        "(maintenance, preempted)\n"
    )
    text = page.read_text()
    svg = text[text.index("<svg") : text.index("</svg>")]
    for cause in ("maintenance", "preempted"):
        assert f">{cause}<" in svg or f"> {cause}<" in svg or cause in svg, cause
        assert f"interrupted: {cause}" in svg
    assert "<script" not in text and "src=" not in text and 'href="http' not in text.replace(
        'href="http://www.w3.org', ""
    )
    assert "<td>2026-11-28 15:31:03Z</td><td>preempted</td><td>11 s</td>" in text


def test_bad_input_is_a_clear_error_never_a_traceback(tmp_path, capsys):
    page = tmp_path / "report.html"

    def run(*argv: str) -> tuple[int, str]:
        code = status.main(list(argv))
        return code, capsys.readouterr().err

    assert run("--records", str(tmp_path / "nope.log"), "--html", str(page)) == (
        status.EXIT_USAGE,
        f"error: --records {tmp_path / 'nope.log'}: no such file\n",
    )
    empty = tmp_path / "empty.log"
    empty.write_text("")
    code, err = run("--records", str(empty), "--html", str(page))
    assert code == status.EXIT_NO_RECORDS and err.startswith(f"error: --records {empty}: no recovery record")
    code, err = run("--records", str(TRAINER_LOG), "--html", str(tmp_path / "no-folder" / "r.html"))
    assert code == status.EXIT_CANNOT_WRITE
    assert err == f"error: --html {tmp_path / 'no-folder' / 'r.html'}: its folder {tmp_path / 'no-folder'} does not exist\n"
    code, err = run("--records", str(TRAINER_LOG), "--html", str(tmp_path))
    assert (code, err) == (status.EXIT_CANNOT_WRITE, f"error: --html {tmp_path} is a folder; give a file name\n")
    assert run("--records", str(TRAINER_LOG)) == (
        status.EXIT_USAGE,
        "error: --records draws a timeline: give --html FILE to write it to\n",
    )
    several = tmp_path / "several.jsonl"
    several.write_text(record() + "\n" + record(name="other") + "\n")
    code, err = run("--records", str(several), "--html", str(page))
    assert code == status.EXIT_NO_RECORDS and err.endswith("choose one with --run NAME\n")
    code, err = run("--records", str(several), "--html", str(page), "--run", "absent")
    assert code == status.EXIT_NO_RECORDS and "nothing of run 'absent'" in err
    assert not page.exists()
