"""Every figure the chapters show reads on a phone: a static check of the committed notebooks' PNG outputs.

The rule (src/selfattention/plotting/_common.py): a figure is shown at most
343 CSS px wide (the article on a 390 px phone), so text of F points in a
figure W inches wide shows F * 343 / (72 * W) CSS px tall there, or
F * dpi / 72 px when the figure is narrower than the column. No figure may
show its smallest text (the package's SMALLEST_FONT_PT) below MIN_TEXT_PX:
with 8 pt and 8 px, no figure wider than 4.76 inches. W and the dpi come
from each PNG's header and its pHYs block (which matplotlib writes). The
figures' code may not ask for a smaller font either, and each figure must be
opaque: the site's dark theme shows images on a dark page, where a
transparent figure's black text would vanish.

The interactive figures' fallback images (PNGs inside a widget's HTML, shown
only without scripts) are not checked here: the widgets are HTML.
"""

from __future__ import annotations

import base64
import io
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from selfattention.plotting._common import MAX_FIGURE_WIDTH_IN, MIN_TEXT_PX, SMALLEST_FONT_PT, text_px_on_phone

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
#: The tallest a figure may be, in inches (at 100 dpi, 1,000 px: a laptop's screen).
MAX_FIGURE_HEIGHT_IN = 10.0
#: matplotlib's named font sizes, as multiples of the default 10 pt.
NAMED_SIZES = {"xx-small": 5.79, "x-small": 6.94, "small": 8.33, "medium": 10.0}


@dataclass(frozen=True)
class Figure:
    notebook: str
    cell: str
    width_px: int
    height_px: int
    dpi: float | None
    alpha_min: int
    source: str

    def __str__(self) -> str:
        return f"{self.notebook}, cell {self.cell}"


def png_size_and_dpi(data: bytes) -> tuple[int, int, float | None]:
    """Width and height in pixels from the IHDR block; the dpi from pHYs (None if absent or not per metre)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"expected a PNG file (signature 89 50 4E 47 ...); got {data[:8]!r}")
    pos, size, dpi = 8, None, None
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"pHYs":
            per_x, _, unit = struct.unpack(">IIB", body)
            dpi = per_x * 0.0254 if unit == 1 else None
        elif kind == b"IDAT":
            break
        pos += 12 + length
    if size is None:
        raise ValueError("a PNG must start with an IHDR block; found none")
    return size[0], size[1], dpi


def chapter_figures(paths=CHAPTERS) -> list[Figure]:
    figures = []
    for path in paths:
        notebook = json.loads(path.read_text())
        for index, cell in enumerate(notebook["cells"]):
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                if png is None:
                    continue
                data = base64.b64decode(png if isinstance(png, str) else "".join(png))
                width, height, dpi = png_size_and_dpi(data)
                image = Image.open(io.BytesIO(data))
                alpha = image.getchannel("A").getextrema()[0] if "A" in image.getbands() else 255
                source = "".join(cell["source"])
                figures.append(Figure(path.name, cell.get("id", str(index)), width, height, dpi, alpha, source))
    return figures


def problems(figure: Figure) -> list[str]:
    """What makes ``figure`` unreadable on a phone or in the dark theme; empty if nothing."""
    found = []
    if figure.dpi is None:
        return ["its PNG has no pHYs block, so its size in inches is unknown (matplotlib writes one)"]
    width_in, height_in = figure.width_px / figure.dpi, figure.height_px / figure.dpi
    shown = text_px_on_phone(SMALLEST_FONT_PT, width_in, figure.dpi)
    if shown < MIN_TEXT_PX - 1e-9:
        found.append(
            f"it is {figure.width_px} px = {width_in:.2f} inches wide at {figure.dpi:.0f} dpi, so {SMALLEST_FONT_PT:g} pt "
            f"text shows {shown:.1f} CSS px tall on a phone (at least {MIN_TEXT_PX} needed): make it at most "
            f"{MAX_FIGURE_WIDTH_IN:.2f} inches wide as saved (figsize, fewer panels side by side, shorter titles)"
        )
    if height_in > MAX_FIGURE_HEIGHT_IN:
        found.append(f"it is {height_in:.1f} inches tall, more than {MAX_FIGURE_HEIGHT_IN:g}: split it")
    sizes = r"(?:(?<![\w.])(?:fontsize|labelsize|size)\s*=\s*|set_fontsize\(\s*)([0-9.]+|\"[a-z-]+\"|'[a-z-]+')"
    for value in re.findall(sizes, figure.source):
        points = NAMED_SIZES.get(value.strip("\"'"), None) if value[0] in "\"'" else float(value)
        if points is not None and points < SMALLEST_FONT_PT:
            found.append(f"its code asks for text of {value} ({points:g} pt), below {SMALLEST_FONT_PT:g} pt")
    if figure.alpha_min < 255:
        found.append("it is partly transparent: on the dark theme's page its dark text would vanish")
    return found


FIGURES = chapter_figures()


def test_the_chapters_show_figures_to_check():
    assert len(FIGURES) >= 40, f"found only {len(FIGURES)} PNG figures in {len(CHAPTERS)} chapters"


@pytest.mark.parametrize("figure", FIGURES, ids=str)
def test_every_chapter_figure_reads_on_a_phone(figure):
    found = problems(figure)
    assert not found, f"{figure}: " + "; ".join(found)


def _png(width: int, height: int, dpi: float | None, alpha: int = 255) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGBA", (width, height), (255, 255, 255, alpha))
    image.save(buffer, format="PNG", **({"dpi": (dpi, dpi)} if dpi else {}))
    return buffer.getvalue()


def _figure(data: bytes, source: str = "plt.show()") -> Figure:
    path = Path("/nonexistent")
    width, height, dpi = png_size_and_dpi(data)
    alpha = Image.open(io.BytesIO(data)).getchannel("A").getextrema()[0]
    return Figure(path.name, "c", width, height, dpi, alpha, source)


def test_the_check_passes_a_phone_figure_and_fails_the_old_ones():
    assert problems(_figure(_png(470, 400, 100))) == []
    assert problems(_figure(_png(300, 300, 200))) == []  # 1.5 inches wide: shown full size
    wide = problems(_figure(_png(983, 413, 100)))  # chapter 2's two panels side by side, before
    assert len(wide) == 1 and "9.83 inches wide" in wide[0] and "3.9 CSS px" in wide[0]
    assert "no pHYs block" in problems(_figure(_png(470, 400, None)))[0]
    assert "taller" not in " ".join(problems(_figure(_png(470, 1000, 100))))
    assert "inches tall" in problems(_figure(_png(470, 1100, 100)))[0]
    assert "transparent" in problems(_figure(_png(470, 400, 100, alpha=0)))[0]
    code = (
        'ax.text(0, 0, "a", fontsize=7)\nax.legend(fontsize="x-small")\nax.title.set_fontsize(6)\nax.plot(markersize=3)'
    )
    small = problems(_figure(_png(470, 400, 100), code))
    assert len(small) == 3 and "7 (7 pt)" in small[0] and "x-small" in small[1] and "6 (6 pt)" in small[2]
    assert problems(_figure(_png(470, 400, 100), 'ax.legend(fontsize="small"); ax.text(0, 0, "", fontsize=8)')) == []


def test_png_sizes_are_read_from_the_header():
    assert png_size_and_dpi(_png(12, 34, 150)) == (12, 34, pytest.approx(150, abs=0.1))
    with pytest.raises(ValueError, match="expected a PNG file"):
        png_size_and_dpi(b"GIF89a")
