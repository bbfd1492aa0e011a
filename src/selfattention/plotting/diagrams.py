"""One-chapter diagrams: pictures of one chapter's idea, not of any array a learner passes.

How the columns of Q are dealt out to the heads (chapter 4), the encoder block
and its residual connections (chapter 5), the tiles of the score matrix
that blocked attention holds step by step, and the roofline (chapter 7). They live here rather
than in their chapter because their drawing code would bury the chapter's
point and because the tests check what they draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import check_bool, check_choice, check_head_split, check_positive_int, check_real_scalar
from ._common import (
    FIGURE_WIDTH_IN,
    SMALLEST_FONT_PT,
    as_plottable,
    axes_for,
    check_drawable,
    check_text,
    heatmap,
    is_index,
    panel_width_in,
    pyplot,
    wrap_text,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_head_split", "plot_encoder_block", "plot_block_traversal", "plot_roofline"]


#: The most panels a diagram draws side by side (steps of a traversal, heads of a split).
MAX_PANELS = 16


def plot_head_split(
    q: ArrayLike, num_heads: int, *, title: str = "How the columns of Q are dealt out to the heads"
) -> Figure:
    """Show Q's columns split into H consecutive blocks, one per head.

    The top panel is the whole ``(T, D)`` matrix with the head boundaries
    marked; below it, each head's ``(T, Dh)`` block is drawn on its own, on the
    same colour scale, up to four to a row.

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
        The figure: the whole matrix on top, one panel per head below.

    Raises
    ------
    ValueError
        If ``q`` is not a non-empty 2-D matrix of finite numbers, ``num_heads``
        is not a positive integer dividing D, or ``title`` is not a string.

    Notes
    -----
    See chapter 4 (split and merge heads).
    """
    q = as_plottable(q, "q", 2, "a 2-D (T, D) matrix")
    T, D = q.shape
    Dh = check_head_split(D, num_heads)
    H = D // Dh
    if H > MAX_PANELS:
        raise ValueError(f"the figure draws one panel per head, at most {MAX_PANELS}; got num_heads={H}")
    check_text(title, "title")
    plt = pyplot()
    limit = float(np.abs(q).max()) or 1.0
    scale = {"cmap": "RdBu_r", "vmin": -limit, "vmax": limit, "aspect": "auto"}
    colours = plt.get_cmap("tab10")
    per_row = min(H, 4)
    rows = -(-H // per_row)
    suptitle = wrap_text(title, FIGURE_WIDTH_IN, 12)
    height = 2.2 + 1.9 * rows + 0.25 * suptitle.count("\n")
    fig = plt.figure(figsize=(FIGURE_WIDTH_IN, height), layout="constrained")
    grid = fig.add_gridspec(1 + rows, per_row, height_ratios=[1.15] + [1] * rows)
    top = fig.add_subplot(grid[0, :])
    heatmap(top, q, xlabel=f"column of Q (D = {D})", ylabel="token", **scale)
    from matplotlib.ticker import MaxNLocator

    for axis in (top.xaxis, top.yaxis):  # columns and tokens are whole numbers
        axis.set_major_locator(MaxNLocator(integer=True))
    named = H <= 8  # "head h" over each block while it fits; the number alone past that
    for h in range(H):
        top.axvspan(h * Dh - 0.5, (h + 1) * Dh - 0.5, ymin=1.0, ymax=1.06, color=colours(h % 10), clip_on=False)
        label = f"head {h}" if named else str(h)
        top.text((h + 0.5) * Dh - 0.5, -0.09 * T - 0.5, label, ha="center", va="bottom", fontsize=SMALLEST_FONT_PT)
        if h:
            top.axvline(h * Dh - 0.5, color="black", linewidth=1.5)
    for h in range(H):
        ax = fig.add_subplot(grid[1 + h // per_row, h % per_row])
        first = h % per_row == 0
        image = heatmap(
            ax, q[:, h * Dh : (h + 1) * Dh], xlabel=f"Dh = {Dh}", ylabel="token" if first else None, **scale
        )
        for side in ax.spines.values():
            side.set_color(colours(h % 10))
            side.set_linewidth(2.5)
        ax.set_title(f"head {h}\ncolumns {h * Dh}-{(h + 1) * Dh - 1}", fontsize=SMALLEST_FONT_PT)
        ax.set_xticks([])  # the columns are numbered on the whole matrix above
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=SMALLEST_FONT_PT, labelleft=first)
    fig.colorbar(image, ax=fig.axes, label="value", shrink=0.8)
    fig.suptitle(suptitle)
    return fig


_BLOCK_COLOURS = {"io": "#ffffff", "attn": "#f6d29b", "ff": "#a9d3f2", "norm": "#c9e7b8"}


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
        If ``norm_first`` is not a bool, ``activation`` is unknown, ``title``
        is not a string or None, or ``ax`` is not an ``Axes``.

    Notes
    -----
    See chapter 5 (the encoder block).
    """
    norm_first = check_bool(norm_first, "norm_first")
    activation = check_choice(activation, ("relu", "gelu"), "activation")
    check_text(title, "title", optional=True)
    ax = axes_for(ax, (2.8, 6.8))  # narrow labels: two blocks side by side fit a phone
    x, y, add = ("io", "x  (..., T, D)"), ("io", "y  (..., T, D)"), ("add", "+")
    norm1, norm2 = ("norm", "LayerNorm 1"), ("norm", "LayerNorm 2")
    attention = ("attn", "Multi-head\nself-attention\n(optional mask)")
    ff = ("ff", f"Feed-forward:\nLinear D\u2192F, {'ReLU' if activation == 'relu' else 'GELU'},\nLinear F\u2192D")
    if norm_first:
        steps, skips = [x, norm1, attention, add, norm2, ff, add, y], [(0, 3), (3, 6)]
    else:
        steps, skips = [x, attention, add, norm1, ff, add, norm2, y], [(0, 2), (3, 5)]
    ys = [len(steps) - 1 - i for i in range(len(steps))]  # top to bottom
    for (kind, label), height in zip(steps, ys, strict=True):
        if kind == "add":
            circle = dict(boxstyle="circle,pad=0.25", facecolor="white", edgecolor="black", linewidth=1.2)
            ax.text(0.5, height, "+", ha="center", va="center", fontsize=13, fontweight="bold", bbox=circle)
            continue
        edge = "none" if kind == "io" else "black"
        box = dict(boxstyle="round,pad=0.45", facecolor=_BLOCK_COLOURS[kind], edgecolor=edge)
        ax.text(0.5, height, label, ha="center", va="center", fontsize=9, bbox=box)
    arrow = dict(arrowstyle="-|>", color="black", linewidth=1.1, shrinkA=13, shrinkB=13)
    for y_from, y_to in pairwise(ys):
        ax.annotate("", xy=(0.5, y_to), xytext=(0.5, y_from), arrowprops=arrow)
    skip_arrow = dict(arrowstyle="-|>", color="#7a7a7a", linewidth=1.3)
    for start, end in skips:
        y_split, y_add = ys[start] - 0.5, ys[end]
        ax.plot([0.5, 1.05, 1.05], [y_split, y_split, y_add], color="#7a7a7a", linewidth=1.3)
        ax.annotate("", xy=(0.56, y_add), xytext=(1.05, y_add), arrowprops=skip_arrow)
        ax.text(
            1.08,
            (y_split + y_add) / 2,
            "residual",
            rotation=90,
            va="center",
            fontsize=SMALLEST_FONT_PT,
            color="#555555",
        )
    ax.set_xlim(-0.25, 1.3)
    ax.set_ylim(-0.6, len(steps) - 0.4)
    ax.axis("off")
    ax.set_title(title or ("Pre-norm encoder block" if norm_first else "Post-norm encoder block"), fontsize=11)
    return ax


# What each tile of blocked attention's score matrix is at one step, and its colour.
_TILE_STATES = {
    "folded into m, l, o (freed)": "#d9d9d9",
    "scores in memory now": "#1f77b4",
    "not computed yet": "#ffffff",
}


def plot_block_traversal(num_blocks: int, steps: Sequence[int] | None = None) -> Figure:
    """Show which tiles of the (T, S) score matrix exist at each step of blocked attention.

    The queries and the keys are both cut into ``num_blocks`` blocks, so the
    scores are a ``num_blocks`` × ``num_blocks`` grid of tiles, visited a row
    of tiles (one block of queries) at a time. One panel per step: the tile
    whose scores are in memory, the tiles already folded into their queries'
    running max, sum and output (gone), and the tiles still to come.

    Parameters
    ----------
    num_blocks : int
        How many blocks T and S are each cut into.
    steps : sequence of int, optional
        Which steps to draw, 0-based in visiting order (row by row), from 0 to
        ``num_blocks**2 - 1``; defaults to the first, the second and the first
        of the second row of tiles.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, one panel per step (up to three to a row) and a legend below.

    Raises
    ------
    ValueError
        If ``num_blocks`` is not a positive integer, or ``steps`` is not a
        non-empty sequence of integers in ``[0, num_blocks**2 - 1]``.

    Notes
    -----
    See chapter 7 (memory-efficient attention).
    """
    n = check_positive_int(num_blocks, "num_blocks", at_most=64)
    last = n * n - 1
    if steps is None:
        steps = sorted({0, min(1, last), min(n, last)})
    sequence = isinstance(steps, Sequence) and not isinstance(steps, (str, bytes))
    if not (sequence or isinstance(steps, np.ndarray) and steps.ndim == 1) or len(steps) == 0:
        raise ValueError(f"steps must be a non-empty sequence of integers in [0, {last}]; got {steps!r}")
    for step in steps:
        if not is_index(step, n * n):
            raise ValueError(f"steps must be integers in [0, {last}]; got {step!r}")
    if len(steps) > MAX_PANELS:  # each step is a panel: hundreds would take minutes to draw
        raise ValueError(f"a figure draws at most {MAX_PANELS} steps side by side; got {len(steps)}")
    plt = pyplot()
    from matplotlib.colors import ListedColormap

    colours = ListedColormap(list(_TILE_STATES.values()))  # done, current, to come
    scale = {"cmap": colours, "vmin": 0, "vmax": 2, "aspect": "equal"}
    per_row = min(len(steps), 3)
    rows = -(-len(steps) // per_row)
    side = (FIGURE_WIDTH_IN - 0.5) / per_row
    suptitle = wrap_text("Blocked attention holds one (block, block) tile of the (T, S) scores at a time", 4.6, 12)
    height = (side + 0.7) * rows + 0.9 + 0.25 * suptitle.count("\n")
    fig, axes = plt.subplots(rows, per_row, figsize=(FIGURE_WIDTH_IN, height), squeeze=False, layout="constrained")
    order = np.arange(n * n).reshape(n, n)  # the step at which each tile is computed
    for index, (ax, step) in enumerate(zip(axes.flat, steps, strict=False)):
        tiles = np.sign(order - int(step)) + 1  # 0 before the step, 1 at it, 2 after it
        ylabel = "query block" if index % per_row == 0 else None
        heatmap(ax, tiles, xlabel="key block", ylabel=ylabel, **scale)
        ax.set_title(f"step {int(step) + 1} of {n * n}", fontsize=10)
        ax.set_xticks(np.arange(-0.5, n, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, n, 1), minor=True)
        ax.grid(which="minor", color="black", linewidth=0.6)
        every = max(1, -(-n // 8))  # at most about eight numbers a side
        ax.set_xticks(range(0, n, every), labels=[str(b) for b in range(0, n, every)])
        ax.set_yticks(range(0, n, every), labels=[str(b) for b in range(0, n, every)])
        ax.tick_params(labelsize=SMALLEST_FONT_PT)
    for ax in axes.flat[len(steps) :]:
        ax.set_visible(False)
    legend = ["scores in memory now", "folded into m, l, o (freed)", "not computed yet"]
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=_TILE_STATES[name], edgecolor="black") for name in legend]
    fig.legend(handles, legend, loc="outside lower center", ncol=2, frameon=False, fontsize=9)
    fig.suptitle(suptitle)
    return fig


#: The range of numbers a roofline draws on its log axes: rates and intensities of any real machine.
_ROOFLINE_RANGE = (1e-9, 1e9)


def _drawable_rate(value: Any, name: str) -> float:
    """A positive real number (NumPy's and Decimal too, not bool) within what a log axis can draw."""
    number = check_real_scalar(value, name, positive=True)
    low, high = _ROOFLINE_RANGE
    if not low <= number <= high:
        raise ValueError(f"{name} must lie between {low:g} and {high:g} to be drawn; got {number:.3g}")
    return number


def plot_roofline(
    points: dict[str, tuple[float, float]],
    peak_gflops: float,
    bandwidth_gbytes: float,
    *,
    title: str = "Roofline",
    ax: Axes | None = None,
) -> Axes:
    """Place implementations on a roofline: achieved GFLOP/s against flops per byte moved.

    A kernel that does ``f`` flops while moving ``b`` bytes to and from memory
    can run no faster than ``min(peak_gflops, bandwidth_gbytes * f / b)``: the
    flat roof is the machine's arithmetic, the slope its memory. A point far
    below the roof at its intensity loses time to something else.

    Parameters
    ----------
    points : dict of str to (float, float)
        Each implementation's ``(flops per byte, achieved GFLOP/s)``, both positive.
    peak_gflops : float
        The flat roof, e.g. the measured float32 matrix-product rate.
    bandwidth_gbytes : float
        The sloped roof, a measured memory bandwidth in GB/s.
    title : str, default "Roofline"
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If ``points`` is not a non-empty dict of positive finite pairs, or a rate is not positive.

    Notes
    -----
    See chapter 7 and :cite:`williams2009roofline`.
    """
    peak = _drawable_rate(peak_gflops, "peak_gflops")
    bandwidth = _drawable_rate(bandwidth_gbytes, "bandwidth_gbytes")
    check_text(title, "title")
    if not isinstance(points, dict) or not points:
        raise ValueError(f"points must be a non-empty dict of name -> (flops per byte, GFLOP/s); got {points!r:.80}")
    for name, pair in points.items():
        if isinstance(name, str):
            check_drawable(name, "points' label")
        if not (isinstance(name, str) and isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(
                f"points[{name!r}] must be a pair of positive numbers (flops per byte, GFLOP/s); got {pair!r}"
            )
        try:
            points = {**points, name: tuple(_drawable_rate(x, "each number") for x in pair)}
        except ValueError as exc:
            raise ValueError(
                f"points[{name!r}] must be a pair of positive numbers (flops per byte, GFLOP/s); got {pair!r}: {exc}"
            ) from None
    ax = axes_for(ax, (FIGURE_WIDTH_IN, 3.8))
    xs = np.array([p[0] for p in points.values()], dtype=float)
    lo, hi = min(xs.min(), peak / bandwidth) / 4, max(xs.max(), peak / bandwidth) * 4
    grid = np.geomspace(lo, hi, 200)
    ax.loglog(grid, np.minimum(peak, bandwidth * grid), color="black", linewidth=1.5, label="roof")
    markers = "osD^vP*Xh"
    for i, (name, (x, y)) in enumerate(points.items()):
        ax.loglog([x], [y], markers[i % len(markers)], markersize=8, label=name)
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    decades = np.log10(hi / lo)  # 1, 2, 5, 10, 20, ... while they fit a phone's width; 1, 10, 100, ... past that
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0, 7.0)))  # the rates need more labels
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not powers of ten
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
    ax.annotate(  # the roof's height, readable without the grid
        f"roof: {peak:.3g} GFLOP/s",
        xy=(hi, peak),
        xytext=(-4, 4),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize=SMALLEST_FONT_PT,
    )
    lowest = min(min(p[1] for p in points.values()), float(np.minimum(peak, bandwidth * grid).min()))
    decade = 10 ** np.floor(np.log10(lowest / 1.05))
    bottom = max(m * decade for m in (1, 2, 3, 5, 7) if m * decade <= lowest / 1.05)  # a tick below every point
    ax.set_ylim(bottom=bottom, top=peak * 1.6)  # and room for the label above the roof
    ax.set_xlabel("flops per byte moved")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(wrap_text(title, panel_width_in(ax), 12))
    ax.grid(True, which="major", alpha=0.3)
    # below the axes, where it hides no point
    ax.legend(fontsize=SMALLEST_FONT_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    return ax
