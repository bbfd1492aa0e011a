"""What the plotting modules share: matplotlib on demand, one heatmap helper, and argument checks.

matplotlib is imported inside the functions (through ``pyplot()``), never at
module level, so that ``import selfattention`` does not load it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import as_float_array, check_finite

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.image import AxesImage

__all__: list[str] = []


def pyplot() -> ModuleType:
    """Return ``matplotlib.pyplot``, imported on the first figure drawn."""
    import matplotlib.pyplot as plt

    return plt


#: The most cells :func:`heatmap` writes a number in (a 32 x 32 matrix).
MAX_ANNOTATED_CELLS = 1024

# Figures must read on a phone. The course's pages show a figure at most as wide
# as the article, 343 CSS px on a 390 px phone, so a figure saved W inches wide
# (at any dpi) shows text of F points at F * 343 / (72 * W) CSS px there. The
# rule: no text smaller than MIN_TEXT_PX, so no text below SMALLEST_FONT_PT and
# no figure wider than MAX_FIGURE_WIDTH_IN (4.76 inches). tests/test_figure_scale.py
# checks every figure the chapters show against it.

#: The article's width on a 390 px phone, in CSS px: the narrowest a figure is shown.
PHONE_COLUMN_PX = 343
#: The smallest text a figure may show there, in CSS px (the font size).
MIN_TEXT_PX = 8
#: The smallest font size, in points, in any figure the package draws.
SMALLEST_FONT_PT = 8.0
#: The widest a figure may be, in inches, for SMALLEST_FONT_PT text to show MIN_TEXT_PX tall on the phone.
MAX_FIGURE_WIDTH_IN = SMALLEST_FONT_PT * PHONE_COLUMN_PX / (72 * MIN_TEXT_PX)
#: The width the package's figures are drawn at: the limit, less room for text that sticks out.
FIGURE_WIDTH_IN = 4.6


def axes_width_in(ax: Axes) -> float:
    """The width of ``ax`` in inches, as the figure's layout stands now."""
    return ax.get_position().width * ax.figure.get_figwidth()


def panel_width_in(ax: Axes) -> float:
    """The width a title over ``ax`` may take, in inches: the figure's, or beside other panels the axes' and more."""
    figure_width = ax.figure.get_figwidth()
    spec = ax.get_subplotspec()
    if spec is not None:  # the figure's grid, not the one a colour bar nests the axes in
        spec = spec.get_topmost_subplotspec()
    box = ax.get_position()
    centre = (box.x0 + box.x1) / 2 * figure_width  # a title is centred on its axes: it must not pass the figure's edge
    room = 2 * min(centre, figure_width - centre)
    if spec is not None and spec.get_gridspec().ncols == 1:  # alone in its row: as wide as the figure allows
        return room
    width = min(axes_width_in(ax) + 0.6, room)
    if spec is not None:  # no wider than its column: a neighbour's title is close
        span = spec.colspan.stop - spec.colspan.start
        width = min(width, figure_width * span / spec.get_gridspec().ncols)
    return width


def text_px_on_phone(font_pt: float, width_in: float, dpi: float = 100.0) -> float:
    """The CSS px height of ``font_pt`` text in a figure saved ``width_in`` inches wide, shown on the phone.

    The page shows the figure at its natural width (``width_in * dpi`` px) or
    scaled down to :data:`PHONE_COLUMN_PX`, whichever is smaller.
    """
    natural_px = width_in * dpi
    return font_pt * dpi / 72 * min(1.0, PHONE_COLUMN_PX / natural_px)


def wrap_text(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken at spaces into lines about ``width_in`` inches long at ``fontsize`` points.

    An average character is taken as 0.6 em wide (DejaVu Sans, matplotlib's default font). Text holding mathtext
    (``$``) is returned unchanged, as are its existing line breaks.
    """
    import textwrap

    if "$" in text:
        return text
    chars = max(8, int(width_in * 72 / (0.6 * fontsize)))
    lines = text.split("\n")
    return "\n".join(textwrap.fill(line, chars, break_long_words=False, break_on_hyphens=False) for line in lines)


def heatmap(
    ax: Axes,
    data: np.ndarray,
    *,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    colorbar: bool | str = False,
    colorbar_ticks: Mapping[float, str] | None = None,
    annotate: str | None = None,
    **imshow: Any,
) -> AxesImage:
    """Draw ``data`` as an image on ``ax``, with an optional colour bar, axis labels and title.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw.
    data : numpy.ndarray, shape (rows, cols)
        The values, one per cell.
    title, xlabel, ylabel : str, optional
        Set on ``ax`` when given; left alone when None.
    colorbar : bool or str, default False
        Add a colour bar beside ``ax``; a string is its label.
    colorbar_ticks : mapping of float to str, optional
        Colour bar tick positions and their labels.
    annotate : str, optional
        A format spec (e.g. ``".3f"``): write each value in its cell, black on
        cells above 60% of the largest value and white on the others.
    **imshow
        Passed to ``ax.imshow`` (``cmap``, ``vmin``, ``vmax``, ``aspect``, ...).

    Returns
    -------
    matplotlib.image.AxesImage
        The image, e.g. for a colour bar shared by several panels.
    """
    image = ax.imshow(data, **imshow)
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis):  # rows and columns are whole numbers: no tick at 2.5
        axis.set_major_locator(MaxNLocator(integer=True))
    if colorbar is not False:  # "" is a colour bar without a label
        options: dict[str, Any] = {"label": colorbar} if isinstance(colorbar, str) else {}
        if colorbar_ticks is not None:
            options["ticks"] = list(colorbar_ticks)
        bar = ax.figure.colorbar(image, ax=ax, **options)
        if colorbar_ticks is not None:
            bar.ax.set_yticklabels(list(colorbar_ticks.values()))
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:  # long titles break into lines as wide as the panel's share of the figure
        ax.set_title(wrap_text(title, panel_width_in(ax), 12))
    if annotate is not None:
        if data.size > MAX_ANNOTATED_CELLS:  # one text per cell: thousands are unreadable and take a minute
            raise ValueError(
                f"a heatmap writes its number in at most {MAX_ANNOTATED_CELLS:,} cells; this one has {data.size:,} "
                f"(shape {data.shape}): turn the numbers off or show fewer rows"
            )
        threshold = 0.6 * data.max()
        for (i, j), value in np.ndenumerate(data):
            colour = "black" if value > threshold else "white"
            size = 9 if data.shape[1] <= 6 else SMALLEST_FONT_PT  # eight numbers a row fit a phone at 8 pt
            ax.text(j, i, format(value, annotate), ha="center", va="center", color=colour, fontsize=size)
    return image


def weight_scale(weights: np.ndarray, cmap: Any) -> dict[str, Any]:
    """``imshow`` options for attention weights: ``cmap``, from 0 to the largest weight (above 0 if all are 0)."""
    return {"cmap": check_cmap(cmap), "vmin": 0.0, "vmax": max(float(weights.max()), 1e-12)}


def check_cmap(cmap: Any) -> Any:
    """Return ``cmap`` if it names one of matplotlib's colour maps or is a ``Colormap``; raise otherwise."""
    from matplotlib import colormaps
    from matplotlib.colors import Colormap

    if isinstance(cmap, Colormap) or (isinstance(cmap, str) and cmap in colormaps):
        return cmap
    raise ValueError(
        f"cmap must be the name of a matplotlib colour map (for example 'viridis', 'magma' or 'Blues') "
        f"or a Colormap; got {cmap!r}"
    )


def axes_for(ax: Any, figsize: tuple[float, float]) -> Axes:
    """Return ``ax`` once checked, or the axes of a new ``figsize`` figure when it is None."""
    if ax is None:
        _, ax = pyplot().subplots(figsize=figsize)
        return ax
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        hint = " (pick one panel, e.g. axes[0])" if isinstance(ax, np.ndarray) else ""
        raise ValueError(f"ax must be a matplotlib Axes or None; got {type(ax).__name__}{hint}")
    return ax


def check_text(value: Any, name: str, *, optional: bool = False) -> None:
    """Raise unless ``value`` is a string matplotlib can draw (or None, when ``optional``): a title or a label."""
    if not isinstance(value, str) and not (optional and value is None):
        expected = "a string or None" if optional else "a string"
        raise ValueError(f"{name} must be {expected}; got {value!r} of type {type(value).__name__}")
    if value is not None:
        check_drawable(value, name)


def check_drawable(text: str, name: str) -> None:
    """Raise unless matplotlib can draw ``text``: no lone surrogate, and any mathtext between ``$`` signs parses.

    Matplotlib reads a string with an even, non-zero number of unescaped ``$`` as
    mathtext and fails only when the figure is drawn, far from the call that
    passed it; a lone surrogate (half of a UTF-16 pair) fails inside its text
    engine. Both are caught here, where the argument can still be named.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} must be text that can be drawn; got {text!r}, which holds a lone surrogate "
            f"({text[error.start]!r} at index {error.start}): decode the text that produced it with errors='replace'"
        ) from None
    dollars = text.count("$") - text.count(r"\$")
    if dollars > 0 and dollars % 2 == 0:
        from matplotlib.mathtext import MathTextParser

        try:
            MathTextParser("path").parse(text)
        except ValueError as error:
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else "it does not parse"
            raise ValueError(
                f"{name} must be text matplotlib can draw; got {text!r}: matplotlib reads the part between '$' "
                f"signs as mathtext, and it does not parse ({reason}); write a literal dollar sign as '\\$'"
            ) from None


def check_labels(labels: Any, expected: int, name: str, what: str) -> None:
    """Raise unless ``labels`` is None or a sequence of ``expected`` labels, one per ``what``."""
    if labels is None:
        return
    if isinstance(labels, (str, bytes, Mapping, AbstractSet)) or not hasattr(labels, "__len__"):
        kind = "an unordered set" if isinstance(labels, AbstractSet) else repr(labels)[:60]
        raise ValueError(f"{name} must be a sequence of labels (a list or tuple), one per {what}; got {kind}")
    if isinstance(labels, np.ndarray) and labels.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D sequence of labels, one per {what}; got an array of shape {labels.shape}"
        )
    if len(labels) != expected:
        raise ValueError(f"{name} must have one label per {what}: expected {expected}, got {len(labels)}")
    for i, label in enumerate(labels):
        if isinstance(label, (bool, np.bool_)) or not isinstance(label, (str, numbers.Real)):
            raise ValueError(f"{name}[{i}] must be a string (or a number); got {label!r}")
        if isinstance(label, str):
            check_drawable(label, f"{name}[{i}]")


def is_index(value: Any, stop: int) -> bool:
    """Whether ``value`` is an integer (not a bool) in ``[0, stop - 1]``."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Integral) and 0 <= value < stop


def check_pair(value: Any, name: str, meaning: str) -> tuple[Any, Any]:
    """Return ``value`` as a 2-tuple, raising unless it is a tuple or list of two items."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a {meaning} pair; got {value!r}")
    return value[0], value[1]


def as_plottable(x: ArrayLike, name: str, ndim: int, what: str) -> np.ndarray:
    """Return ``x`` as a float array with ``ndim`` axes, not empty, finite; ``what`` describes it."""
    arr = as_float_array(x, name)
    if arr.ndim != ndim or arr.size == 0:
        raise ValueError(f"{name} must be {what}; got shape {arr.shape}")
    check_finite(arr, name, purpose="to plot")
    return arr


def check_image(image: ArrayLike) -> np.ndarray:
    """Return ``image`` as a float ``(H, W, 3)`` or ``(H, W, 1)`` array with values in [0, 1]."""
    image = as_float_array(image, "image")
    if image.ndim != 3 or image.shape[-1] not in (1, 3) or image.size == 0:
        raise ValueError(f"image must have shape (H, W, 3) or (H, W, 1), channels last; got shape {image.shape}")
    check_finite(image, "image", purpose="to plot")
    if image.min() < 0 or image.max() > 1:
        raise ValueError(f"image values must lie in [0, 1]; got values from {image.min():g} to {image.max():g}")
    return image
