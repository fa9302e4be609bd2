"""Draw run timelines (``domain.run_timeline``) with matplotlib, and write them as one
self-contained HTML page (`tpu-training status --html`) or as a PNG or SVG file (the goodput
and recovery-SLO benchmarks' ``--figure``).

One panel per run: the steps over time, each committed save, each interruption a line coloured
by its cause with the cause written beside it, and its recovery gap (until training resumed)
shaded in the same colour. The page embeds the figure as SVG with its text kept as text, so a
browser, a search or a test finds every cause in it; no script, no file beside it.

matplotlib is imported only when something is drawn (`tpu-training status` without ``--html`` never
loads it), with its Agg canvas and no pyplot: no display, no global figure state.
"""

from __future__ import annotations

import html
import io
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from tpu_training_components.domain.run_timeline import Interruption, RunTimeline

PANEL_INCHES = (10.0, 3.2)
"""Width and height of one run's panel."""
DPI = 100
STEP_COLOUR = "#1f77b4"
SAVE_COLOUR = "#2ca02c"
CAUSE_COLOURS = (
    "#d62728",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#393b79",
    "#843c39",
    "#637939",
    "#7b4173",
)
"""One colour per cause, in the order first seen, so a cause keeps its colour across the panels of
one figure: matplotlib's default cycle without the steps' blue and the saves' green, then four
dark ones of its tab20b map, so the recovery-SLO benchmark's nine causes never share one."""
GAP_ALPHA = 0.15
"""How strongly a recovery gap is shaded in its cause's colour."""
ANNOTATED_AT_MOST = 12
"""A panel with more interruptions names their causes in its legend only: written beside each
line, dozens of labels would cover one another."""
STATUS_SHADING = "shaded: from the interruption until training resumed"
FORMATS = ("png", "svg")
"""What ``--figure FILE`` may end in."""


class ReportError(Exception):
    """The report cannot be written where asked."""


def _colours(timelines: Sequence[RunTimeline]) -> dict[str, str]:
    causes = dict.fromkeys(cause for timeline in timelines for cause in timeline.causes)
    return {cause: CAUSE_COLOURS[index % len(CAUSE_COLOURS)] for index, cause in enumerate(causes)}


def _gap_end(interruption: Interruption, last: datetime) -> datetime:
    return interruption.resumed_at or last


def _segments(timeline: RunTimeline) -> list[list[tuple[datetime, int]]]:
    """The steps cut at each interruption: no line is drawn across a gap as if it trained."""
    cuts = sorted(interruption.at for interruption in timeline.interruptions)
    segments: list[list[tuple[datetime, int]]] = []
    previous = None
    for at, step in timeline.steps:
        if previous is None or any(previous <= cut < at for cut in cuts):
            segments.append([])
        segments[-1].append((at, step))
        previous = at
    return segments


def figure(timelines: Sequence[RunTimeline], *, title: str, shading: str = STATUS_SHADING) -> Any:
    """A matplotlib ``Figure`` of the timelines, one panel each (none is drawn empty: a run with
    nothing known says so in its panel); ``shading`` says under the time axis what a shaded gap
    spans."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    colours = _colours(timelines)
    count = max(1, len(timelines))
    drawing = Figure(figsize=(PANEL_INCHES[0], PANEL_INCHES[1] * count + 0.6), dpi=DPI, layout="constrained")
    drawing.suptitle(title)
    axes_list = drawing.subplots(count, 1, squeeze=False)[:, 0]
    for axes, timeline in zip(axes_list, timelines, strict=False):
        axes.set_title(timeline.name, loc="left")
        if timeline.steps:
            axes.set_ylabel("step")
        moments = [
            *(at for at, _ in timeline.steps),
            *(at for at, _ in timeline.saves),
            *(i.at for i in timeline.interruptions),
            *(i.resumed_at for i in timeline.interruptions if i.resumed_at is not None),
        ]
        if not moments:
            axes.text(0.5, 0.5, "nothing recorded", ha="center", va="center", transform=axes.transAxes)
            axes.set_xticks([])
            axes.set_yticks([])
            continue
        last = max(moments)
        for index, segment in enumerate(_segments(timeline)):
            axes.plot(
                [at for at, _ in segment],
                [step for _, step in segment],
                color=STEP_COLOUR,
                marker=".",
                markersize=3,
                linewidth=1.2,
                label="step" if index == 0 else None,
            )
        if timeline.saves:
            axes.plot(
                [at for at, _ in timeline.saves],
                [step for _, step in timeline.saves],
                linestyle="none",
                marker="v",
                color=SAVE_COLOUR,
                markersize=7,
                label="save (committed)",
            )
        shown: set[str] = set()
        annotated = len(timeline.interruptions) <= ANNOTATED_AT_MOST
        for interruption in timeline.interruptions:
            colour = colours[interruption.cause]
            label = None if interruption.cause in shown else f"interrupted: {interruption.cause}"
            shown.add(interruption.cause)
            axes.axvline(interruption.at, color=colour, linewidth=1.5, label=label)
            end = _gap_end(interruption, last)
            if end > interruption.at:
                axes.axvspan(interruption.at, end, color=colour, alpha=GAP_ALPHA, linewidth=0)
            if not annotated:
                continue
            axes.annotate(
                interruption.cause,
                xy=(interruption.at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -3),
                textcoords="offset points",
                va="top",
                fontsize=8,
                color=colour,
                rotation=90,
            )
        if not timeline.steps and not timeline.saves:
            axes.set_yticks([])
        locator = AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=timezone.utc))
        axes.grid(True, alpha=0.3)
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    # Under the whole figure, not the last panel: the legends beside the panels leave them narrower
    # than a long explanation.
    drawing.supxlabel(f"time (UTC); {shading}", fontsize=9)
    return drawing


def render(
    timelines: Sequence[RunTimeline], *, title: str, format: str, shading: str = STATUS_SHADING
) -> bytes:
    """The figure as ``png`` or ``svg`` bytes (SVG text stays text: causes are searchable)."""
    return save(figure(timelines, title=title, shading=shading), format=format)


def save(drawing: Any, *, format: str) -> bytes:
    """A ``figure`` as ``png`` or ``svg`` bytes, at ``DPI``."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tpu-training"}):
        drawing.savefig(buffer, format=format, dpi=DPI, metadata=_metadata(format))
    return buffer.getvalue()


def _metadata(format: str) -> dict[str, Any]:
    # No creation date or software version in the file: the same timeline renders the same bytes.
    return {"Date": None} if format == "svg" else {"Software": None}


def _seconds(start: datetime, end: datetime | None) -> str:
    return "open" if end is None else f"{(end - start).total_seconds():,.0f} s"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def html_page(timelines: Sequence[RunTimeline], *, title: str, notes: Sequence[str] = ()) -> str:
    """One self-contained page: the figure as inline SVG, then per run its interruptions as a
    table, then the notes (what was not read or not understood)."""
    svg = render(timelines, title=title, format="svg").decode("utf-8")
    svg = svg[svg.index("<svg") :]  # the XML prolog and doctype do not belong inside HTML
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
        "svg{max-width:100%;height:auto}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        svg,
    ]
    for timeline in timelines:
        parts.append(f"<h2>{html.escape(timeline.name)}</h2>")
        first = (
            f"step {timeline.steps[0][1]} at {_stamp(timeline.steps[0][0])}" if timeline.steps else "no step"
        )
        newest = (
            f"step {timeline.steps[-1][1]} at {_stamp(timeline.steps[-1][0])}"
            if len(timeline.steps) > 1
            else ""
        )
        parts.append(
            f"<p>{html.escape(first)}{' to ' + html.escape(newest) if newest else ''}; "
            f"{len(timeline.saves)} save(s); {len(timeline.interruptions)} interruption(s)</p>"
        )
        if timeline.interruptions:
            parts.append(
                "<table><tr><th>interrupted</th><th>cause</th><th>until resumed</th><th>detail</th></tr>"
            )
            for interruption in timeline.interruptions:
                cells = (
                    _stamp(interruption.at),
                    interruption.cause,
                    _seconds(interruption.at, interruption.resumed_at),
                    interruption.detail,
                )
                parts.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
            parts.append("</table>")
    if notes:
        parts.append("<h2>Notes</h2><ul>")
        parts.extend(f"<li>{html.escape(note)}</li>" for note in notes)
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def figure_format(path: Path) -> str:
    """The format ``path`` asks for by its suffix; ``ReportError`` unless one of ``FORMATS``."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        allowed = " or ".join(f".{name}" for name in FORMATS)
        given = f"not {path.suffix!r}" if path.suffix else "this one has no suffix"
        raise ReportError(f"{path}: a figure file ends in {allowed}; {given}")
    return suffix


def write_figure(
    path: Path, timelines: Sequence[RunTimeline], *, title: str, shading: str = STATUS_SHADING
) -> None:
    """The timelines drawn into ``path``, PNG or SVG by its suffix (the benchmarks' ``--figure``)."""
    write(path, render(timelines, title=title, format=figure_format(path), shading=shading))


def check_writable(path: Path) -> None:
    """Raise ``ReportError`` now, before anything is read, when ``path`` cannot be written."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ReportError(f"{path} is a folder; give a file name")
    if not folder.is_dir():
        raise ReportError(f"{path}: its folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ReportError(f"{path}: not writable here (permission denied)")


def write(path: Path, content: str | bytes) -> None:
    """Write the whole report at once (a temporary file beside it, renamed): a failure leaves no
    half-written page."""
    temporary = path.with_name(f".{path.name}.partial")
    try:
        if isinstance(content, str):
            temporary.write_text(content, encoding="utf-8")
        else:
            temporary.write_bytes(content)
        temporary.replace(path)
    except OSError as exc:
        if temporary.is_file():  # what this call wrote; anything else there is not its to remove
            temporary.unlink()
        raise ReportError(f"{path}: cannot be written ({exc.strerror or exc})") from None
