"""Figures the chapters draw: attention heatmaps and per-patch maps.

Every helper draws on a matplotlib ``Axes`` (a new figure if none is given),
labels its axes, adds a colour bar and a title, and returns the ``Axes``.
Chapters end the cell with ``plt.show()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_positive_int

__all__ = ["plot_attention", "plot_token_grid"]

# Up to this many rows and columns, the weights are written into the cells.
_ANNOTATE_UP_TO = 8


def plot_attention(
    weights: ArrayLike,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str = "Attention weights",
    annotate: bool | None = None,
    cmap: str = "viridis",
) -> Axes:
    """Heatmap of a ``(T, S)`` attention-weight matrix, one row per query.

    Parameters
    ----------
    weights : array_like, shape (T, S)
        Weights to show; row ``i`` is what query ``i`` attends to.
    query_labels, key_labels : sequence of str, optional
        Tick labels for the rows (length T) and the columns (length S).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        The axes title.
    annotate : bool, optional
        Write each weight in its cell. Defaults to True when both T and S are
        at most 8.
    cmap : str
        A matplotlib colour map name.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``weights`` is not 2-D or holds NaN or infinities, or a label list
        has the wrong length.

    Notes
    -----
    See chapter 1 (the 4x4 word weights).
    """
    weights = as_float_array(weights, "weights")
    if weights.ndim != 2:
        raise ValueError(f"weights must be a 2-D (T, S) matrix; got shape {weights.shape}")
    if not np.isfinite(weights).all():
        raise ValueError("weights must be finite to plot; found NaN or infinite values")
    T, S = weights.shape
    _check_labels(query_labels, T, "query_labels", "rows (T)")
    _check_labels(key_labels, S, "key_labels", "columns (S)")
    if annotate is None:
        annotate = T <= _ANNOTATE_UP_TO and S <= _ANNOTATE_UP_TO

    if ax is None:
        _, ax = plt.subplots(figsize=(1.8 + 0.9 * S, 0.8 + 0.8 * T) if annotate else (6, 5))
    image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=max(float(weights.max()), 1e-12))
    ax.figure.colorbar(image, ax=ax, label="attention weight")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    if query_labels is not None:
        ax.set_yticks(range(T), labels=list(query_labels))
    if key_labels is not None:
        ax.set_xticks(range(S), labels=list(key_labels))
    if annotate:
        threshold = 0.6 * weights.max()
        for i in range(T):
            for j in range(S):
                colour = "black" if weights[i, j] > threshold else "white"
                ax.text(j, i, f"{weights[i, j]:.3f}", ha="center", va="center", color=colour, fontsize=9)
    return ax


def plot_token_grid(
    values: ArrayLike,
    grid_shape: tuple[int, int],
    *,
    ax: Axes | None = None,
    title: str = "Attention over patches",
    cmap: str = "magma",
    colorbar_label: str = "attention weight",
) -> Axes:
    """Show one value per patch token on the patch grid it came from.

    A ViT cuts an image into ``rows x cols`` patches and flattens them row by
    row into ``rows * cols`` tokens; this helper undoes that flattening.

    Parameters
    ----------
    values : array_like, shape (rows * cols,)
        One number per patch token (for example, the class token's weights
        with the class token's own column removed).
    grid_shape : tuple of int
        ``(rows, cols)`` of the patch grid, e.g. ``(14, 14)``.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title, cmap, colorbar_label : str
        Title, colour map and colour bar label.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``grid_shape`` is not two positive integers, or ``values`` is not a
        vector of ``rows * cols`` finite numbers.

    Notes
    -----
    See chapter 2 (the class token's attention over 14 x 14 patches).
    """
    if not isinstance(grid_shape, (tuple, list)) or len(grid_shape) != 2:
        raise ValueError(f"grid_shape must be a (rows, cols) pair; got {grid_shape!r}")
    rows = check_positive_int(grid_shape[0], "grid_shape[0]")
    cols = check_positive_int(grid_shape[1], "grid_shape[1]")
    values = as_float_array(values, "values")
    if values.shape != (rows * cols,):
        raise ValueError(
            f"values must be a vector of rows*cols = {rows}*{cols} = {rows * cols} "
            f"patch values; got shape {values.shape}"
        )
    if not np.isfinite(values).all():
        raise ValueError("values must be finite to plot; found NaN or infinite values")

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.2))
    grid = values.reshape(rows, cols)  # row-major, as the patches were flattened
    image = ax.imshow(grid, cmap=cmap)
    ax.figure.colorbar(image, ax=ax, label=colorbar_label)
    ax.set_xlabel("patch column")
    ax.set_ylabel("patch row")
    ax.set_title(title)
    return ax


def _check_labels(labels: Sequence[str] | None, expected: int, name: str, what: str) -> None:
    if labels is None:
        return
    if isinstance(labels, str) or not hasattr(labels, "__len__"):
        raise ValueError(f"{name} must be a sequence of labels, one per {what}; got {labels!r}")
    if len(labels) != expected:
        raise ValueError(f"{name} must have one label per {what}: expected {expected}, got {len(labels)}")
