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
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_positive_int

__all__ = [
    "plot_attention",
    "plot_token_grid",
    "plot_mask",
    "plot_attention_heads",
    "plot_head_split",
    "plot_encoder_block",
    "plot_patch_grid",
    "plot_attention_overlay",
    "plot_block_traversal",
]

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
        If ``mask`` is not 2-D, or is a float mask with values other than 0
        and ``-inf``.

    Notes
    -----
    See chapter 3 (the causal mask).
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"mask must be a 2-D (T, S) matrix; got shape {mask.shape}")
    if mask.dtype == np.bool_:
        allowed = mask
    else:
        mask = as_float_array(mask, "mask")
        if not np.all((mask == 0) | np.isneginf(mask)):
            raise ValueError("a float mask to plot must hold only 0 (attend) and -inf (blocked)")
        allowed = mask == 0
    if ax is None:
        T, S = allowed.shape
        _, ax = plt.subplots(figsize=(min(2.5 + 0.35 * S, 7), min(2 + 0.35 * T, 6)))
    image = ax.imshow(allowed.astype(float), cmap=ListedColormap(["#3b3b3b", "#f2c14e"]), vmin=0, vmax=1)
    bar = ax.figure.colorbar(image, ax=ax, ticks=[0.25, 0.75])
    bar.ax.set_yticklabels(["blocked", "may attend"])
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    return ax


def plot_attention_heads(
    weights: ArrayLike,
    *,
    ncols: int = 4,
    title: str = "Attention weights per head",
    titles: Sequence[str] | None = None,
    cmap: str = "viridis",
) -> Figure:
    """One heatmap per head, on a shared colour scale.

    Parameters
    ----------
    weights : array_like, shape (H, T, S)
        Per-head weights, e.g. one batch entry of ``multihead_attention``'s
        second output.
    ncols : int, default 4
        Panels per row.
    title : str
        The figure title.
    titles : sequence of str, optional
        One title per panel; defaults to ``"head 0"``, ``"head 1"``, ...
    cmap : str
        A matplotlib colour map name.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with one titled panel per head and one colour bar.

    Raises
    ------
    ValueError
        If ``weights`` is not 3-D or not finite, ``ncols`` is not a positive
        integer, or ``titles`` does not have one title per panel.

    Notes
    -----
    See chapter 4 (each head's weights side by side).
    """
    weights = as_float_array(weights, "weights")
    if weights.ndim != 3:
        raise ValueError(f"weights must have shape (H, T, S); got shape {weights.shape}")
    if not np.isfinite(weights).all():
        raise ValueError("weights must be finite to plot; found NaN or infinite values")
    ncols = check_positive_int(ncols, "ncols")
    H = weights.shape[0]
    _check_labels(titles, H, "titles", "panel (H)")
    titles = [f"head {h}" for h in range(H)] if titles is None else list(titles)
    ncols = min(ncols, H)
    nrows = -(-H // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols + 1.0, 2.6 * nrows + 0.4), squeeze=False)
    vmax = max(float(weights.max()), 1e-12)
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_visible(False)
            continue
        image = ax.imshow(weights[h], cmap=cmap, vmin=0.0, vmax=vmax)
        ax.set_title(titles[h])
        ax.set_xlabel("key")
        if h % ncols == 0:
            ax.set_ylabel("query")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    fig.suptitle(title)
    return fig


def plot_head_split(q: ArrayLike, num_heads: int, *, title: str = "How the columns of Q are dealt out to the heads") -> Figure:
    """Show Q's columns split into H consecutive blocks, one per head.

    The top panel is the whole ``(T, D)`` matrix with the head boundaries
    marked; below it, each head's ``(T, Dh)`` block is drawn on its own, on the
    same colour scale.

    Parameters
    ----------
    q : array_like, shape (T, D)
        Queries (or keys or values) of one sequence.
    num_heads : int
        H; must divide D.
    title : str
        The figure title.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If ``q`` is not 2-D or not finite, or D is not divisible by ``num_heads``.

    Notes
    -----
    See chapter 4 (split and merge heads).
    """
    q = as_float_array(q, "q")
    if q.ndim != 2:
        raise ValueError(f"q must be a 2-D (T, D) matrix; got shape {q.shape}")
    if not np.isfinite(q).all():
        raise ValueError("q must be finite to plot; found NaN or infinite values")
    H = check_positive_int(num_heads, "num_heads")
    T, D = q.shape
    if D % H:
        raise ValueError(f"the model width D={D} is not divisible by num_heads={H}")
    Dh = D // H
    limit = float(np.abs(q).max()) or 1.0
    colours = plt.get_cmap("tab10")
    fig = plt.figure(figsize=(10, 5.2))
    grid = fig.add_gridspec(2, H, height_ratios=[1, 1.1], hspace=0.55)
    top = fig.add_subplot(grid[0, :])
    top.imshow(q, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    for h in range(H):
        top.axvspan(h * Dh - 0.5, (h + 1) * Dh - 0.5, ymin=1.0, ymax=1.06, color=colours(h % 10), clip_on=False)
        top.text((h + 0.5) * Dh - 0.5, -0.09 * T - 0.5, f"head {h}", ha="center", va="bottom", fontsize=9)
        if h:
            top.axvline(h * Dh - 0.5, color="black", linewidth=1.5)
    top.set_xlabel(f"column of Q (D = {D})")
    top.set_ylabel("token")
    for h in range(H):
        ax = fig.add_subplot(grid[1, h])
        image = ax.imshow(q[:, h * Dh : (h + 1) * Dh], cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        for side in ax.spines.values():
            side.set_color(colours(h % 10))
            side.set_linewidth(2.5)
        ax.set_title(f"head {h}: columns {h * Dh}-{(h + 1) * Dh - 1}", fontsize=9)
        ax.set_xlabel(f"Dh = {Dh}")
        if h == 0:
            ax.set_ylabel("token")
    fig.colorbar(image, ax=fig.axes, label="value", shrink=0.8)
    fig.suptitle(title)
    return fig


_BLOCK_COLOURS = {"io": "#ffffff", "attn": "#f6d29b", "ff": "#a9d3f2", "norm": "#c9e7b8", "add": "#ffffff"}


def plot_encoder_block(
    norm_first: bool = False,
    activation: str = "relu",
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw the encoder block as a flow diagram, with its two residual connections.

    Parameters
    ----------
    norm_first : bool, default False
        Draw the pre-norm block (LayerNorm inside each residual branch)
        instead of the post-norm block (LayerNorm after each addition).
    activation : {"relu", "gelu"}
        The feed-forward nonlinearity to label.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str, optional
        Defaults to "Post-norm encoder block" or "Pre-norm encoder block".

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; each box is a text artist with its label.

    Raises
    ------
    ValueError
        If ``norm_first`` is not a bool or ``activation`` is unknown.

    Notes
    -----
    See chapter 5 (the encoder block).
    """
    if not isinstance(norm_first, (bool, np.bool_)):
        raise ValueError(f"norm_first must be True or False; got {norm_first!r}")
    if activation not in ("relu", "gelu"):
        raise ValueError(f"activation must be one of ['gelu', 'relu']; got {activation!r}")
    ff_label = f"Feed-forward\nLinear D\u2192F, {'ReLU' if activation == 'relu' else 'GELU'}, Linear F\u2192D"
    attention = ("attn", "Multi-head self-attention\n(optional mask)")
    if norm_first:
        steps = [("io", "x  (..., T, D)"), ("norm", "LayerNorm 1"), attention, ("add", "+"),
                 ("norm", "LayerNorm 2"), ("ff", ff_label), ("add", "+"), ("io", "y  (..., T, D)")]
        skips = [(0, 3), (3, 6)]
    else:
        steps = [("io", "x  (..., T, D)"), attention, ("add", "+"), ("norm", "LayerNorm 1"),
                 ("ff", ff_label), ("add", "+"), ("norm", "LayerNorm 2"), ("io", "y  (..., T, D)")]
        skips = [(0, 2), (3, 5)]
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 7.5))
    ys = [len(steps) - 1 - i for i in range(len(steps))]  # top to bottom
    for (kind, label), y in zip(steps, ys):
        if kind == "add":
            circle = dict(boxstyle="circle,pad=0.25", facecolor="white", edgecolor="black", linewidth=1.2)
            ax.text(0.5, y, "+", ha="center", va="center", fontsize=13, fontweight="bold", bbox=circle)
            continue
        box = dict(boxstyle="round,pad=0.45", facecolor=_BLOCK_COLOURS[kind], edgecolor="none" if kind == "io" else "black")
        ax.text(0.5, y, label, ha="center", va="center", fontsize=9.5, bbox=box)
    arrow = dict(arrowstyle="-|>", color="black", linewidth=1.1, shrinkA=13, shrinkB=13)
    for y_from, y_to in zip(ys, ys[1:]):
        ax.annotate("", xy=(0.5, y_to), xytext=(0.5, y_from), arrowprops=arrow)
    for start, add in skips:
        y_split, y_add = ys[start] - 0.5, ys[add]
        ax.plot([0.5, 1.05, 1.05], [y_split, y_split, y_add], color="#7a7a7a", linewidth=1.3)
        ax.annotate("", xy=(0.56, y_add), xytext=(1.05, y_add),
                    arrowprops=dict(arrowstyle="-|>", color="#7a7a7a", linewidth=1.3))
        ax.text(1.08, (y_split + y_add) / 2, "residual", rotation=90, va="center", fontsize=8, color="#555555")
    ax.set_xlim(-0.25, 1.3)
    ax.set_ylim(-0.6, len(steps) - 0.4)
    ax.axis("off")
    ax.set_title(title or ("Pre-norm encoder block" if norm_first else "Post-norm encoder block"))
    return ax


def _check_image(image: ArrayLike) -> np.ndarray:
    image = as_float_array(image, "image")
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(f"image must have shape (H, W, 3) or (H, W, 1), channels last; got shape {image.shape}")
    if not np.isfinite(image).all() or image.min() < 0 or image.max() > 1:
        raise ValueError("image values must lie in [0, 1]")
    return image


def plot_patch_grid(image: ArrayLike, patch_size: int, *, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Show an image with the grid of its ``patch_size`` x ``patch_size`` patches.

    Parameters
    ----------
    image : array_like, shape (H, W, 3)
        Channels last, values in [0, 1].
    patch_size : int
        p; must divide H and W.
    ax : matplotlib.axes.Axes, optional
    title : str, optional
        Defaults to "rows x cols patches of p x p pixels".

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If the image is not (H, W, 3) in [0, 1] or its size is not a multiple
        of ``patch_size``.

    Notes
    -----
    See chapter 6.
    """
    image = _check_image(image)
    p = check_positive_int(patch_size, "patch_size")
    H, W = image.shape[:2]
    if H % p or W % p:
        raise ValueError(f"the image size {H}x{W} is not a multiple of patch_size={p}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    ax.imshow(image)
    for edge in range(0, W + 1, p):
        ax.axvline(edge - 0.5, color="white", linewidth=0.8)
    for edge in range(0, H + 1, p):
        ax.axhline(edge - 0.5, color="white", linewidth=0.8)
    ax.set_xticks(np.arange(p / 2 - 0.5, W, p)[:: max(1, W // p // 7)])
    ax.set_xticklabels([str(i) for i in range(W // p)][:: max(1, W // p // 7)])
    ax.set_yticks(np.arange(p / 2 - 0.5, H, p)[:: max(1, H // p // 7)])
    ax.set_yticklabels([str(i) for i in range(H // p)][:: max(1, H // p // 7)])
    ax.set_xlabel("patch column")
    ax.set_ylabel("patch row")
    ax.set_title(title or f"{H // p} x {W // p} patches of {p} x {p} pixels")
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
    image : array_like, shape (H, W, 3)
        Channels last, values in [0, 1]; shown in grey underneath.
    weights : array_like, shape (rows, cols)
        One weight per patch or feature-map position, stretched over the image.
    ax : matplotlib.axes.Axes, optional
    title : str
    alpha : float, default 0.6
        Opacity of the weights.
    marker : (row, col), optional
        A grid cell to mark, e.g. the query position.
    colorbar : bool, default True
    vmax : float, optional
        Top of the colour scale (bottom is 0), to give several panels one
        shared scale; defaults to the largest weight.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If the image or weights have the wrong shape or values, or ``alpha``
        is outside [0, 1].

    Notes
    -----
    See chapter 6.
    """
    image = _check_image(image)
    weights = as_float_array(weights, "weights")
    if weights.ndim != 2 or not np.isfinite(weights).all():
        raise ValueError(f"weights must be a finite 2-D (rows, cols) grid; got shape {weights.shape}")
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.4))
    H, W = image.shape[:2]
    rows, cols = weights.shape
    ax.imshow(image.mean(axis=-1), cmap="gray", vmin=0, vmax=1)
    overlay = ax.imshow(weights, cmap="inferno", alpha=alpha, extent=(-0.5, W - 0.5, H - 0.5, -0.5),
                        interpolation="nearest", vmin=0.0, vmax=vmax)
    if marker is not None:
        r, c = marker
        ax.plot((c + 0.5) * W / cols - 0.5, (r + 0.5) * H / rows - 0.5, marker="x", color="cyan", markersize=10, mew=2)
    if colorbar:
        ax.figure.colorbar(overlay, ax=ax, label="attention weight")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title)
    return ax


def plot_block_traversal(num_blocks: int, steps: Sequence[int] | None = None) -> Figure:
    """Show which tiles of the (T, S) score matrix exist at each step of blocked attention.

    One panel per step: the current block of keys (its scores are in memory),
    the blocks already folded into the running max, sum and output (gone), and
    the blocks still to come (not yet computed).

    Parameters
    ----------
    num_blocks : int
        How many key blocks S is cut into.
    steps : sequence of int, optional
        Which steps to draw (0-based); defaults to the first, second and last.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If ``num_blocks`` is not a positive integer or a step is out of range.

    Notes
    -----
    See chapter 7 (memory-efficient attention).
    """
    n = check_positive_int(num_blocks, "num_blocks")
    steps = [0, min(1, n - 1), n - 1] if steps is None else list(steps)
    for step in steps:
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)) or not 0 <= step < n:
            raise ValueError(f"steps must be integers in [0, {n - 1}]; got {step!r}")
    colours = ListedColormap(["#d9d9d9", "#1f77b4", "#ffffff"])  # done, current, to come
    fig, axes = plt.subplots(1, len(steps), figsize=(3.3 * len(steps), 3.4), squeeze=False)
    for ax, step in zip(axes[0], steps):
        state = np.where(np.arange(n) < step, 0, np.where(np.arange(n) == step, 1, 2))
        ax.imshow(np.tile(state, (n, 1)), cmap=colours, vmin=0, vmax=2, aspect="auto")
        ax.set_xticks(np.arange(-0.5, n, 1), minor=True)
        ax.grid(which="minor", axis="x", color="black", linewidth=0.6)
        ax.set_xticks(range(n), labels=[str(b) for b in range(n)])
        ax.set_yticks([])
        ax.set_xlabel("key block")
        ax.set_ylabel("all T queries")
        ax.set_title(f"step {step + 1} of {n}")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black") for c in ("#1f77b4", "#d9d9d9", "#ffffff")]
    fig.legend(handles, ["scores in memory now", "folded into m, l, o (freed)", "not computed yet"],
               loc="lower center", ncol=3, frameon=False)
    fig.suptitle("Blocked attention holds one (T, block) tile of the (T, S) scores at a time")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _check_labels(labels: Sequence[str] | None, expected: int, name: str, what: str) -> None:
    if labels is None:
        return
    if isinstance(labels, str) or not hasattr(labels, "__len__"):
        raise ValueError(f"{name} must be a sequence of labels, one per {what}; got {labels!r}")
    if len(labels) != expected:
        raise ValueError(f"{name} must have one label per {what}: expected {expected}, got {len(labels)}")
