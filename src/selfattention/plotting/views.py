"""Reusable views: pictures of the arrays the package computes, for any chapter and any size.

Attention weights as a heatmap, one heatmap per head, a mask, one value per
patch on its grid, an image cut into patches, attention laid over an
image, a table of position vectors, and learning curves. Each draws on the
``Axes`` it is given (a new figure if none) and returns it;
``plot_attention_heads`` and ``plot_learning_curves`` make their own figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import (
    as_array,
    as_float_array,
    check_bool,
    check_finite,
    check_image_size,
    check_positive_int,
    check_real_scalar,
)
from ._common import (
    FIGURE_WIDTH_IN,
    MAX_ANNOTATED_CELLS,
    SMALLEST_FONT_PT,
    as_plottable,
    axes_for,
    check_cmap,
    check_image,
    check_labels,
    check_pair,
    check_text,
    heatmap,
    is_index,
    panel_width_in,
    pyplot,
    weight_scale,
    wrap_text,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "plot_attention",
    "plot_token_grid",
    "plot_mask",
    "plot_attention_heads",
    "plot_patch_grid",
    "plot_attention_overlay",
    "plot_position_table",
    "plot_learning_curves",
    "plot_similarity",
    "plot_head_scores",
]

# Up to this many rows and columns, the weights are written into the cells.
_ANNOTATE_UP_TO = 8
# The axis labels of every (T, S) matrix: a row per query, a column per key.
_KEY_QUERY = {"xlabel": "key", "ylabel": "query"}


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
        If ``weights`` is not a non-empty 2-D matrix of finite numbers, a
        label list has the wrong length, ``annotate`` is not a bool or None,
        ``title`` is not a string, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 1 (the 4x4 word weights) and chapter 3 (before and after the
    causal mask).
    """
    weights = as_plottable(weights, "weights", 2, "a 2-D (T, S) matrix")
    T, S = weights.shape
    check_labels(query_labels, T, "query_labels", "rows (T)")
    check_labels(key_labels, S, "key_labels", "columns (S)")
    check_text(title, "title")
    if annotate is None:
        annotate = T <= _ANNOTATE_UP_TO and S <= _ANNOTATE_UP_TO
    annotate = check_bool(annotate, "annotate")
    if annotate and T * S > MAX_ANNOTATED_CELLS:  # refused before a figure is made
        raise ValueError(
            f"annotate=True writes a number in each of the {T * S:,} cells, more than {MAX_ANNOTATED_CELLS:,}; "
            "pass annotate=False"
        )
    if annotate:  # square cells as wide as fit beside the labels and the colour bar, at most 0.9 inch
        cell = min(0.9, (FIGURE_WIDTH_IN - 1.8) / S)
        size = (min(FIGURE_WIDTH_IN, 1.8 + cell * S), min(6.0, 1.1 + cell * T))
    else:  # less wide: long token names stick out to the left
        size = (FIGURE_WIDTH_IN - 0.4, 4.0)
    ax = axes_for(ax, size)
    scale = weight_scale(weights, cmap)
    numbers = ".3f" if annotate else None
    heatmap(ax, weights, title=title, **_KEY_QUERY, colorbar="attention weight", annotate=numbers, **scale)
    if query_labels is not None:
        ax.set_yticks(range(T), labels=list(query_labels))
    if key_labels is not None:
        labels = [str(label) for label in key_labels]
        crowded = sum(len(label) + 1 for label in labels) > 30  # more characters than fit side by side
        ax.set_xticks(range(S), labels=labels, rotation=90 if crowded else 0)
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
        If ``grid_shape`` is not two positive integers, ``values`` is not a
        vector of ``rows * cols`` finite numbers, ``title`` or
        ``colorbar_label`` is not a string, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 2 (the class token's attention over 14 x 14 patches).
    """
    pair = check_pair(grid_shape, "grid_shape", "(rows, cols)")
    rows, cols = (check_positive_int(n, f"grid_shape[{i}]") for i, n in enumerate(pair))
    values = as_float_array(values, "values")
    if values.shape != (rows * cols,):
        raise ValueError(
            f"values must be a vector of rows*cols = {rows}*{cols} = {rows * cols} "
            f"patch values; got shape {values.shape}"
        )
    check_finite(values, "values", purpose="to plot")
    check_text(title, "title")
    check_text(colorbar_label, "colorbar_label")
    ax = axes_for(ax, (FIGURE_WIDTH_IN, 3.9))
    grid = values.reshape(rows, cols)  # row-major, as the patches were flattened
    heatmap(
        ax, grid, title=title, xlabel="patch column", ylabel="patch row", colorbar=colorbar_label, cmap=check_cmap(cmap)
    )
    return ax


def plot_mask(
    mask: ArrayLike,
    *,
    ax: Axes | None = None,
    title: str = "Attention mask",
) -> Axes:
    """Show which keys each query may attend to.

    Parameters
    ----------
    mask : array_like, shape (T, S)
        Boolean (True = may attend, the package's and
        ``F.scaled_dot_product_attention``'s convention) or additive float
        (0 = may attend, ``-inf`` = blocked).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        The axes title.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``mask`` is not a non-empty 2-D matrix, is a float mask with values
        other than 0 and ``-inf``, ``title`` is not a string, or ``ax`` is not
        an ``Axes``.

    Notes
    -----
    See chapter 3 (the causal mask, and where ``is_causal`` puts it when
    T < S).
    """
    mask = as_array(mask, "mask")
    if mask.ndim != 2 or mask.size == 0:
        raise ValueError(f"mask must be a 2-D (T, S) matrix; got shape {mask.shape}")
    if mask.dtype == np.bool_:
        allowed = mask
    elif np.issubdtype(mask.dtype, np.integer):  # as the attention functions refuse it
        raise ValueError(
            f"mask must be boolean (True = may attend) or floating (0 / -inf); got dtype {mask.dtype}. For a 0/1 "
            "mask, pass mask.astype(bool)"
        )
    else:
        mask = as_float_array(mask, "mask")
        allowed = mask == 0
        other = ~(allowed | np.isneginf(mask))
        if other.any():
            raise ValueError(
                "a float mask to plot must hold only 0 (attend) and -inf (blocked); "
                f"found {int(other.sum())} other value(s), e.g. {mask[other][0]:g} "
                "(for True = may attend, pass a boolean mask)"
            )
    check_text(title, "title")
    T, S = allowed.shape
    ax = axes_for(ax, (min(2.5 + 0.35 * S, FIGURE_WIDTH_IN), min(2 + 0.35 * T, 6)))
    from matplotlib.colors import ListedColormap

    scale = {"cmap": ListedColormap(["#3b3b3b", "#f2c14e"]), "vmin": 0, "vmax": 1}  # blocked, may attend
    ticks = {0.25: "blocked", 0.75: "may attend"}
    heatmap(ax, allowed.astype(float), title=title, **_KEY_QUERY, colorbar=True, colorbar_ticks=ticks, **scale)
    return ax


def plot_attention_heads(
    weights: ArrayLike,
    *,
    ncols: int | None = None,
    title: str = "Attention weights per head",
    titles: Sequence[str] | None = None,
    cmap: str = "viridis",
    labels: Sequence[str] | None = None,
) -> Figure:
    """One heatmap per head, on a shared colour scale.

    Parameters
    ----------
    weights : array_like, shape (H, T, S)
        Per-head weights, e.g. one batch entry of ``multihead_attention``'s
        second output.
    ncols : int, optional
        Panels per row. By default, as many as fit a phone's width (about
        three, two with token labels); more make a figure too wide to read
        there.
    title : str
        The figure title.
    titles : sequence of str, optional
        One title per panel; defaults to ``"head 0"``, ``"head 1"``, ...
    cmap : str
        A matplotlib colour map name.
    labels : sequence of str, optional
        The tokens of a self-attention map (T = S), written on both axes of
        every panel (chapter 13's word pieces).

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with one titled panel per head and one colour bar.

    Raises
    ------
    ValueError
        If ``weights`` is not a non-empty 3-D array of finite numbers,
        ``ncols`` is not a positive integer, ``title`` is not a string, or
        ``titles`` is not one string per panel, or ``labels`` is given for a
        map that is not square or is not one string per token.

    Notes
    -----
    See chapter 4 (each head's weights side by side) and chapter 13 (a
    pretrained model's heads).
    """
    weights = as_plottable(weights, "weights", 3, "a 3-D (H, T, S) array")
    if labels is not None:
        if weights.shape[1] != weights.shape[2]:
            raise ValueError(f"labels name the tokens of a square (H, T, T) map; got weights of shape {weights.shape}")
        check_labels(labels, weights.shape[1], "labels", "tokens (T)")
    if ncols is not None:
        ncols = check_positive_int(ncols, "ncols")
    check_text(title, "title")
    H, T = weights.shape[:2]
    check_labels(titles, H, "titles", "panel (H)")
    titles = [f"head {h}" for h in range(H)] if titles is None else list(titles)
    for h, panel_title in enumerate(titles):
        check_text(panel_title, f"titles[{h}]")
    # A panel needs room for its ticks (and, with labels, a token name per row); the first column
    # also holds the query label and the bar on the right its label.
    least = 1.25 if labels is None else max(1.4, 0.12 * T + 0.1)
    room = FIGURE_WIDTH_IN - 1.25 - (0.3 if labels is not None else 0.0)
    if ncols is None:
        ncols = min(H, max(1, int(room // least)))
        ncols = -(-H // -(-H // ncols))  # as even rows as that many columns allow
    ncols = min(ncols, H)
    nrows = -(-H // ncols)
    side = max(least, min(2.6, room / ncols))
    width = side * ncols + FIGURE_WIDTH_IN - room
    suptitle = wrap_text(title, width, 12)
    height = side * nrows + 0.45 * nrows + 0.25 * (suptitle.count("\n") + 1)
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained")
    scale = weight_scale(weights, cmap)  # one scale for all panels
    for h, ax in enumerate(axes.flat[:H]):
        bottom = h + ncols >= H  # no panel below: label the keys here (a label above would hit a title)
        xlabel = "key" if bottom else None
        panel_title = wrap_text(titles[h], side, 10)
        image = heatmap(ax, weights[h], xlabel=xlabel, ylabel=None if h % ncols else "query", **scale)
        ax.set_title(panel_title, fontsize=10)
        ax.tick_params(labelsize=SMALLEST_FONT_PT)
        if labels is not None:
            ax.set_xticks(range(T), labels=list(labels), rotation=90, fontsize=SMALLEST_FONT_PT)
            ax.set_yticks(range(T), labels=list(labels) if h % ncols == 0 else [""] * T, fontsize=SMALLEST_FONT_PT)
    for ax in axes.flat[H:]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    fig.suptitle(suptitle)
    return fig


def plot_patch_grid(image: ArrayLike, patch_size: int, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Show an image with the grid of its ``patch_size`` x ``patch_size`` patches.

    Parameters
    ----------
    image : array_like, shape (H, W, 3) or (H, W, 1)
        Channels last, values in [0, 1]; one channel is shown in grey.
    patch_size : int
        p; must divide H and W.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str, optional
        Defaults to "rows x cols patches of p x p pixels".

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If the image is not (H, W, 3) or (H, W, 1) with values in [0, 1], its
        size is not a multiple of ``patch_size``, ``title`` is not a string
        or None, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 6 (the image a ViT sees as 14 x 14 tokens).
    """
    image = check_image(image)
    p = check_positive_int(patch_size, "patch_size")
    H, W = image.shape[:2]
    check_image_size(H, W, p)
    check_text(title, "title", optional=True)
    ax = axes_for(ax, (FIGURE_WIDTH_IN, FIGURE_WIDTH_IN))
    if image.shape[-1] == 3:
        ax.imshow(image)
    else:
        ax.imshow(image[..., 0], cmap="gray", vmin=0, vmax=1)
    for edge in range(0, W + 1, p):
        ax.axvline(edge - 0.5, color="white", linewidth=0.8)
    for edge in range(0, H + 1, p):
        ax.axhline(edge - 0.5, color="white", linewidth=0.8)
    for count, set_ticks in ((W // p, ax.set_xticks), (H // p, ax.set_yticks)):
        every = max(1, count // 7)  # at most about 7 labelled patches per side
        set_ticks(np.arange(p / 2 - 0.5, count * p, p)[::every], labels=[str(i) for i in range(count)][::every])
    ax.set_xlabel("patch column")
    ax.set_ylabel("patch row")
    title = title or f"{H // p} x {W // p} patches of {p} x {p} pixels"
    ax.set_title(wrap_text(title, panel_width_in(ax), 12))
    return ax


def plot_attention_overlay(
    image: ArrayLike,
    weights: ArrayLike,
    *,
    ax: Axes | None = None,
    title: str = "Attention over the image",
    alpha: float = 0.6,
    marker: tuple[int, int] | None = None,
    colorbar: bool = True,
    vmax: float | None = None,
) -> Axes:
    """Overlay a grid of attention weights on the image it was computed from.

    Parameters
    ----------
    image : array_like, shape (H, W, 3) or (H, W, 1)
        Channels last, values in [0, 1]; shown in grey underneath.
    weights : array_like, shape (rows, cols)
        One weight per patch or feature-map position, stretched over the image.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        The axes title.
    alpha : float, default 0.6
        Opacity of the weights, in [0, 1].
    marker : (row, col), optional
        A grid cell to mark, e.g. the query position.
    colorbar : bool, default True
        Add a colour bar; turn it off to share one bar between panels.
    vmax : float, optional
        Top of the colour scale (bottom is 0), to give several panels one
        shared scale; defaults to the largest weight.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; ``ax.images[1]`` is the weights, e.g. for a colour
        bar shared by several panels.

    Raises
    ------
    ValueError
        If the image or weights have the wrong shape or values, ``alpha`` is
        not a number in [0, 1], ``marker`` is not a (row, col) cell of the
        weights, ``vmax`` is not a positive number or None, ``colorbar`` is
        not a bool, ``title`` is not a string, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 6 (where one pixel and the class token look).
    """
    image = check_image(image)
    weights = as_plottable(weights, "weights", 2, "a 2-D (rows, cols) grid")
    rows, cols = weights.shape
    alpha = check_real_scalar(alpha, "alpha")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    if marker is not None:
        r, c = check_pair(marker, "marker", "(row, col)")
        if not (is_index(r, rows) and is_index(c, cols)):
            raise ValueError(f"marker must be a (row, col) cell of the {rows} x {cols} weights; got {marker!r}")
    if vmax is not None:
        vmax = check_real_scalar(vmax, "vmax")
        if vmax <= 0:
            raise ValueError(f"vmax must be positive (the colour scale starts at 0); got {vmax}")
    colorbar = check_bool(colorbar, "colorbar")
    check_text(title, "title")
    ax = axes_for(ax, (FIGURE_WIDTH_IN, 4.0))
    H, W = image.shape[:2]
    ax.imshow(image.mean(axis=-1), cmap="gray", vmin=0, vmax=1)
    scale = {"cmap": "inferno", "vmin": 0.0, "vmax": vmax}
    extent = (-0.5, W - 0.5, H - 0.5, -0.5)  # the grid stretched over the image
    label = "attention weight" if colorbar else False
    heatmap(ax, weights, title=title, colorbar=label, alpha=alpha, extent=extent, interpolation="nearest", **scale)
    if marker is not None:
        ax.plot((c + 0.5) * W / cols - 0.5, (r + 0.5) * H / rows - 0.5, marker="x", color="cyan", markersize=10, mew=2)
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def plot_position_table(
    table: ArrayLike,
    *,
    ax: Axes | None = None,
    title: str = "Position vectors",
    cmap: str = "RdBu_r",
) -> Axes:
    """Heatmap of a ``(T, D)`` table of position vectors: a row per position, a column per feature.

    The colours are centred on 0 (blue below, red above) and span the table's
    largest magnitude, so a sinusoidal table and a learned one read the same way.

    Parameters
    ----------
    table : array_like, shape (T, D)
        One position vector per row, e.g. :func:`selfattention.sinusoidal_positions`
        or a learned ``position_embeddings`` weight.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        The axes title.
    cmap : str
        A matplotlib colour map name; a diverging one suits values around 0.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``table`` is not a non-empty 2-D array of finite numbers, ``title``
        is not a string, ``cmap`` is unknown, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 8 (sinusoidal and learned positions).
    """
    table = as_plottable(table, "table", 2, "a 2-D (T, D) table, one row per position")
    check_text(title, "title")
    cmap = check_cmap(cmap)
    ax = axes_for(ax, (FIGURE_WIDTH_IN, 3.4))
    limit = max(float(np.abs(table).max()), 1e-12)
    if limit > np.finfo(np.float64).max / 4:  # matplotlib's colour scale spans 2 * limit
        raise ValueError(f"table values must lie within ±{np.finfo(np.float64).max / 4:.3g} to plot; got {limit:.3g}")
    heatmap(
        ax,
        table,
        title=title,
        xlabel="feature",
        ylabel="position",
        colorbar="value",
        cmap=cmap,
        vmin=-limit,
        vmax=limit,
        aspect="auto",
        interpolation="nearest",
    )
    return ax


def _is_empty(values: Any) -> bool:
    """True for an empty list, tuple or array: an accuracy that was never measured."""
    try:
        return len(values) == 0
    except TypeError:
        return False


def plot_learning_curves(
    runs: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    title: str = "Training",
    chance: float | None = None,
    xlabel: str = "step",
    accuracy_label: str = "held-out token accuracy (%)",
) -> Figure:
    r"""The training loss and the held-out accuracy against the step, one line per run.

    Parameters
    ----------
    runs : mapping of str to mapping
        A label per run, each with equal-length sequences ``"step"``,
        ``"loss"`` (the training batch's loss) and ``"accuracy"`` (held-out,
        between 0 and 1), as chapter 11's training loop records them. An
        empty ``"accuracy"`` (a run with no held-out set, as
        :func:`~selfattention.vit_training.train_tiny_vit` records it) draws the loss alone.
    title : str
        The figure title.
    chance : float, optional
        The loss of guessing uniformly (:math:`\log V`), drawn as a dotted line.
    xlabel, accuracy_label : str
        The x-axis label of both panels ("epoch" for chapter 12), and the
        accuracy panel's y-axis label.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels, one above the other (a phone's width): the loss on a log
        scale, the accuracy in percent.

    Raises
    ------
    ValueError
        If ``runs`` is empty or not a mapping, a run lacks a key or its
        sequences differ in length or hold values that are not finite, a loss
        is not positive, or an accuracy lies outside [0, 1].

    Notes
    -----
    See chapters 11 and 12.
    """
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError(
            "runs must be a non-empty mapping of label -> {'step': [...], 'loss': [...], 'accuracy': [...]}; "
            f"got {type(runs).__name__}"
        )
    check_text(title, "title")
    check_text(xlabel, "xlabel")
    check_text(accuracy_label, "accuracy_label")
    if chance is not None:
        chance = check_real_scalar(chance, "chance", positive=True)
    curves = {}
    for label, run in runs.items():
        check_text(label, "runs' label")
        if not isinstance(run, Mapping) or not {"step", "loss", "accuracy"} <= set(run):
            raise ValueError(f"run {label!r} must be a mapping with the keys 'step', 'loss' and 'accuracy'")
        # an empty accuracy is a run without a held-out set (train_tiny_vit's history then): its loss alone
        keys = ("step", "loss") if _is_empty(run["accuracy"]) else ("step", "loss", "accuracy")
        columns = [as_plottable(run[key], f"the {key} of run {label!r}", 1, "a 1-D sequence") for key in keys]
        if len({len(c) for c in columns}) != 1:
            raise ValueError(
                f"run {label!r}: its {', '.join(keys)} must have the same length; got {[len(c) for c in columns]}"
            )
        step, loss, accuracy = (*columns, None) if len(columns) == 2 else columns
        if (loss <= 0).any():
            raise ValueError(f"run {label!r}: every loss must be positive to draw on a log scale; got {loss.min():.3g}")
        if accuracy is not None and ((accuracy < 0) | (accuracy > 1)).any():
            raise ValueError(
                f"run {label!r}: accuracy must lie between 0 and 1; got {accuracy.min():.3g} … {accuracy.max():.3g}"
            )
        curves[label] = (step, loss, accuracy)
    fig, (ax_loss, ax_acc) = pyplot().subplots(2, 1, figsize=(FIGURE_WIDTH_IN, 6.0), sharex=True)
    for label, (step, loss, accuracy) in curves.items():
        ax_loss.plot(step, loss, label=label)
        if accuracy is not None:
            ax_acc.plot(step, 100 * accuracy, label=label)
    if all(accuracy is None for _, _, accuracy in curves.values()):
        ax_acc.text(0.5, 0.5, "no held-out accuracy recorded", ha="center", va="center", transform=ax_acc.transAxes)
    if chance is not None:
        ax_loss.axhline(chance, color="grey", linestyle=":", label=f"guessing (log V = {chance:.2f})")
    ax_loss.set(yscale="log", ylabel="training loss", title="loss")
    ax_loss.tick_params(labelbottom=True)  # the shared step axis, labelled under both panels
    ax_acc.set(xlabel=xlabel, ylabel=accuracy_label, title="accuracy", ylim=(0, 102))
    ax_loss.legend(fontsize="small")
    if ax_acc.get_legend_handles_labels()[0]:
        ax_acc.legend(fontsize="small")
    fig.suptitle(wrap_text(title, FIGURE_WIDTH_IN, 12))
    fig.tight_layout()
    return fig


def plot_similarity(
    similarity: ArrayLike,
    labels: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str = "Cosine similarity",
    cmap: str = "magma",
) -> Axes:
    """Heatmap of an ``(N, N)`` similarity matrix, each cell annotated (up to 32 rows), rows and columns labelled.

    Parameters
    ----------
    similarity : array_like, shape (N, N)
        Values in [-1, 1], e.g. ``e @ e.T`` for unit sentence embeddings ``e``.
    labels : sequence of str
        One short name per row (and column).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str
        The axes title.
    cmap : str
        A matplotlib colour map name.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If ``similarity`` is not a square matrix of finite numbers in
        [-1, 1] (a little rounding allowed), ``labels`` is not one string per
        row, or another argument has the wrong type.

    Notes
    -----
    See chapter 13.
    """
    similarity = as_plottable(similarity, "similarity", 2, "a square (N, N) matrix")
    N = similarity.shape[0]
    if similarity.shape != (N, N):
        raise ValueError(f"similarity must be a square (N, N) matrix; got shape {similarity.shape}")
    if np.abs(similarity).max() > 1 + 1e-3:
        raise ValueError(
            f"similarity must lie in [-1, 1] (cosines of unit vectors); got values up to {np.abs(similarity).max():.3g}"
        )
    if labels is None:
        raise ValueError(f"labels must name the {N} rows; got None")
    check_labels(labels, N, "labels", "rows (N)")
    check_text(title, "title")
    cmap = check_cmap(cmap)
    numbers = ".2f" if N * N <= MAX_ANNOTATED_CELLS else None  # past 32 rows the numbers would not be legible
    cell = min(0.6, (FIGURE_WIDTH_IN - 2.3) / N)  # the labels and the colour bar take about 2.3 inches
    ax = axes_for(ax, (min(FIGURE_WIDTH_IN - 0.4, 1.9 + cell * N), 1.7 + cell * N))
    low = min(0.0, float(similarity.min()))
    heatmap(ax, similarity, title=title, colorbar="cosine similarity", annotate=numbers, cmap=cmap, vmin=low, vmax=1.0)
    ax.set_xticks(range(N), labels=list(labels), rotation=45, ha="right")
    ax.set_yticks(range(N), labels=list(labels))
    return ax


def plot_head_scores(
    scores: ArrayLike,
    names: Sequence[str],
    *,
    marks: Sequence[tuple[int, int, int]] = (),
    title: str = "What each head attends to",
    cmap: str = "viridis",
    colorbar_label: str = "mean attention weight",
) -> Figure:
    """One ``(layers, heads)`` grid per attention pattern: how much weight each head puts there.

    Parameters
    ----------
    scores : array_like, shape (P, L, H)
        For pattern p, the mean weight head h of layer l puts on it, in [0, 1].
    names : sequence of str
        The P pattern names ("previous token", "[CLS]", ...), one panel each.
    marks : sequence of (pattern, layer, head), optional
        Cells to outline: head ``head`` of layer ``layer`` in panel ``pattern``
        (the heads the text discusses, where it discusses them).
    title : str
        The figure title.
    cmap : str
        A matplotlib colour map name.
    colorbar_label : str
        What the colours measure, when the values are shares rather than weights.

    Returns
    -------
    matplotlib.figure.Figure
        P panels, as many per row as fit a phone's width (one to three, fewer
        for more heads), on one colour scale from 0 to 1, one colour bar.

    Raises
    ------
    ValueError
        If ``scores`` is not a 3-D array of numbers in [0, 1], ``names`` is not
        one string per pattern, a mark is not a (layer, head) pair inside the
        grid, or another argument has the wrong type.

    Notes
    -----
    See chapter 13.
    """
    scores = as_plottable(scores, "scores", 3, "a 3-D (patterns, layers, heads) array")
    P, L, H = scores.shape
    if scores.min() < -1e-6 or scores.max() > 1 + 1e-6:
        raise ValueError(
            f"scores must be mean attention weights in [0, 1]; got {scores.min():.3g} … {scores.max():.3g}"
        )
    if names is None:
        raise ValueError(f"names must name the {P} patterns; got None")
    check_labels(names, P, "names", "patterns (P)")
    for name in names:
        check_text(name, "each name")
    if isinstance(marks, (str, bytes)) or not isinstance(marks, Sequence):
        raise ValueError(f"marks must be a sequence of (pattern, layer, head) triples; got {type(marks).__name__}")
    for mark in marks:
        if not isinstance(mark, (tuple, list)) or len(mark) != 3:
            raise ValueError(f"each mark must be a (pattern, layer, head) triple; got {mark!r}")
        if not (is_index(mark[0], P) and is_index(mark[1], L) and is_index(mark[2], H)):
            raise ValueError(
                f"each mark must name a panel below {P}, a layer below {L} and a head below {H}; got {tuple(mark)!r}"
            )
    check_text(title, "title")
    check_text(colorbar_label, "colorbar_label")
    cmap = check_cmap(cmap)
    room = FIGURE_WIDTH_IN - 1.4  # the layer label and ticks on the left, the colour bar on the right
    least = max(1.0, 0.11 * H)  # a column per head, each wide enough to see
    ncols = min(P, 3, max(1, int(room // least)))
    ncols = -(-P // -(-P // ncols))  # as even rows as that many columns allow
    nrows = -(-P // ncols)
    side = room / ncols
    row_height = 1.8 if L <= 12 else 1.8 + 0.05 * (L - 12)  # a taller grid for a deep model
    suptitle = wrap_text(title, FIGURE_WIDTH_IN, 12)
    fig, axes = pyplot().subplots(
        nrows,
        ncols,
        figsize=(FIGURE_WIDTH_IN, (row_height + 0.5) * nrows + 0.25 * (suptitle.count("\n") + 1)),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[P:]:
        ax.set_visible(False)
    head_step = max(1, -(-H // max(2, int(side / 0.22))))  # a label every 0.22 inch at most
    for p, ax in enumerate(axes.flat[:P]):
        ylabel = None if p % ncols else "layer"
        image = heatmap(ax, scores[p], xlabel="head", ylabel=ylabel, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        ax.set_title(wrap_text(names[p], side + 0.2, 10), fontsize=10)
        ax.set_xticks(range(0, H, head_step))
        ax.set_yticks(range(0, L, 1 if L <= 12 else 5))  # every layer, or every fifth: labels must not overlap
        ax.tick_params(labelsize=SMALLEST_FONT_PT)
        for layer, head in [(mark[1], mark[2]) for mark in marks if mark[0] == p]:
            ax.add_patch(
                pyplot().Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5)
            )
    fig.colorbar(image, ax=axes.ravel().tolist(), label=colorbar_label, shrink=0.9)
    fig.suptitle(suptitle)
    return fig
