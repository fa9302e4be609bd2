"""What a timeline figure (tpu_training/timeline_figure.py) drew, read back from its PNG: for the
benchmarks' figures, drawn in another process, where only the pixels are left to check."""

from __future__ import annotations

from pathlib import Path

from tpu_training import timeline_figure


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return (int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16))


class TimelinePng:
    def __init__(self, path: Path) -> None:
        import numpy
        from PIL import Image

        with Image.open(path) as image:
            assert image.format == "PNG", image.format
            self.size = image.size
            self.pixels = numpy.asarray(image.convert("RGB"), dtype=numpy.int16)

    def _matches(self, hex_colour: str, slack: int = 3) -> object:
        import numpy

        return numpy.all(numpy.abs(self.pixels - numpy.array(_rgb(hex_colour))) <= slack, axis=2)

    def tallest_line(self, hex_colour: str) -> int:
        """The most pixels of ``hex_colour`` in one column: an interruption's vertical line is
        a panel high; a legend's sample or a label is a few pixels."""
        return int(self._matches(hex_colour).sum(axis=0).max())  # type: ignore[attr-defined]

    def shaded(self, hex_colour: str) -> int:
        """Pixels of ``hex_colour`` shaded at the gaps' alpha over white: its recovery gaps."""
        alpha = timeline_figure.GAP_ALPHA
        tint = "#" + "".join(f"{round(255 * (1 - alpha) + c * alpha):02x}" for c in _rgb(hex_colour))
        return int(self._matches(tint).sum())  # type: ignore[attr-defined]

    def drawn(self) -> float:
        """The share of pixels that are not the white background."""
        import numpy

        return float(numpy.any(self.pixels != 255, axis=2).mean())
