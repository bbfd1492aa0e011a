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
    if title is not None:
        ax.set_title(title)
    if annotate is not None:
        if data.size > MAX_ANNOTATED_CELLS:  # one text per cell: thousands are unreadable and take a minute
            raise ValueError(
                f"a heatmap writes its number in at most {MAX_ANNOTATED_CELLS:,} cells; this one has {data.size:,} "
                f"(shape {data.shape}): turn the numbers off or show fewer rows"
            )
        threshold = 0.6 * data.max()
        for (i, j), value in np.ndenumerate(data):
            colour = "black" if value > threshold else "white"
            ax.text(j, i, format(value, annotate), ha="center", va="center", color=colour, fontsize=9)
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
