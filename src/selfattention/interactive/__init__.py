"""Interactive figures: data exported by the chapters' NumPy code, drawn by a small script, no server.

Each builder returns an :class:`InteractiveFigure`. In a notebook it displays as
HTML; on the book's website the same HTML is the page's figure. The HTML holds
everything: the data (as JSON), the numbers a browser test compares the
display with (``expected``), a static image with alt text (shown where scripts
do not run), and the script and style (``widgets.js``, ``widgets.css``, about
30 kB, shipped with the package). Nothing is fetched: the figure works from
``file://``, offline, and in JupyterLab.

- :func:`attention_explorer`: pick a layer and head, select a query token, read
  its attention row and the key (or tied keys) it weights most (chapters 1 and 13);
- :func:`softmax_stepper`: step through the online softmax, block by block, with
  each key's weight and value row (chapter 7);
- :func:`mask_builder`: causal, sliding-window and padding masks, combined, on a
  grid with query and key numbers and the padding hatched (chapter 9);
- :func:`next_token_explorer`: a language model's next token under a
  temperature, top-k and top-p the learner sets (chapter 14), from the
  logits :func:`next_token_inputs` reads out of a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .._validation import (
    as_float_array,
    check_all_finite,
    check_nonnegative_int,
    check_positive_int,
    precision_of,
    row_sum_tolerance,
)
from ..efficient import online_softmax_update
from ..masks import causal_mask, padding_mask, sliding_window_mask
from ..plotting._common import check_drawable
from ..scores import softmax
from . import figure, next_token  # noqa: F401 (the submodules, for tests and readers)
from .figure import (
    DIFFERENCE_TOLERANCE,
    MAX_EXPLORER_VALUES,
    MAX_KEYS,
    MAX_TOKENS,
    MAX_VALUE_WIDTH,
    SIGNIFICANT_DIGITS,  # noqa: F401 (the rounding every figure's data gets; tests read it here)
    InteractiveFigure,
    _check_text,
    _png,
    _rounded,
)
from .next_token import next_token_explorer, next_token_inputs

__all__ = [
    "InteractiveFigure",
    "attention_explorer",
    "softmax_stepper",
    "mask_builder",
    "next_token_explorer",
    "next_token_inputs",
]


def attention_explorer(
    texts: Sequence[tuple[str, Sequence[str], ArrayLike]],
    *,
    title: str,
    alt: str,
    layer: int = 0,
    head: int = 0,
    text: int = 0,
    query: int = 0,
    probes: Sequence[tuple[int, int, int, int]] = (),
) -> InteractiveFigure:
    """Pick a text, a layer and a head, select a query token, and read its attention row.

    The figure names the key (or keys) that receive the row's largest weight.
    The rule for ties: they are decided on the numbers the figure shows, the
    weights rounded to three decimals. Every key whose rounded weight equals
    the row's largest rounded weight is named, and two or more are reported
    as a tie (chapter 1's word 2: most weight, tied at 0.455 each, on word 1
    and word 3). Weights equal in float64 round alike, so an exact tie is
    always reported as one; weights that differ only beyond the third decimal
    are reported as tied too, because the figure cannot show which is larger.
    So the figure never names one key over another that it shows with the
    same number. ``data["texts"][n]["best"]`` holds these keys, row by row.

    Parameters
    ----------
    texts : sequence of (label, tokens, weights)
        ``weights`` of shape (L, H, T, T) (or (T, T) for one head), the rows
        summing to 1, with T = ``len(tokens)``. Shown to 3 decimals.
    title, alt : str
        The figure's title, and the alt text of its static image.
    layer, head : int
        The layer and head selected at first.
    text, query : int
        The text (an index into ``texts``) and the query token (an index into
        that text's tokens) selected at first. The static image shows this
        text's weights in ``layer`` and ``head``.
    probes : sequence of (text, layer, head, query)
        Rows the browser test selects and compares, as ``expected["rows"]``.

    Returns
    -------
    InteractiveFigure

    Raises
    ------
    ValueError
        If a text's weights do not have the shape of its tokens, rows do not
        sum to 1, the texts disagree on L and H, or an index (``layer``,
        ``head``, ``text``, ``query``, a probe's) is out of range.

    Notes
    -----
    See chapters 1 and 13.
    """
    from ..plotting import plot_attention

    _check_text(title, "title")
    _check_text(alt, "alt")
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence) or not texts:
        raise ValueError(f"texts must be a non-empty list of (label, tokens, weights); got {type(texts).__name__}")
    entries, shapes = [], set()
    for n, entry in enumerate(texts):
        if not isinstance(entry, (tuple, list)) or len(entry) != 3:
            raise ValueError(f"texts[{n}] must be a (label, tokens, weights) triple; got {entry!r:.60}")
        label, tokens, weights = entry
        _check_text(label, f"texts[{n}]'s label")
        if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"texts[{n}]'s tokens must be a list of strings; got {tokens!r:.60}")
        for i, token in enumerate(tokens):
            check_drawable(token, f"texts[{n}]'s tokens[{i}]")
        eps, dtype_name = precision_of(weights)
        w = as_float_array(weights, f"texts[{n}]'s weights")
        if w.ndim == 2:
            w = w[None, None]
        T = len(tokens)
        blank = [i for i, t in enumerate(tokens) if not t.strip()]
        if blank:
            raise ValueError(f"texts[{n}]'s tokens must not be blank (a button needs a name); token {blank[0]} is")
        if T > MAX_TOKENS:
            raise ValueError(f"texts[{n}] has {T} tokens; an explorer shows at most {MAX_TOKENS}")
        if w.ndim != 4 or w.shape[2:] != (T, T) or T == 0:
            raise ValueError(
                f"texts[{n}]'s weights must have shape (L, H, T, T) or (T, T) with T = {T} tokens; got {w.shape}"
            )
        check_all_finite(w, f"texts[{n}]'s weights")
        if (w < 0).any():
            raise ValueError(
                f"texts[{n}]'s weights must be attention weights, non-negative; got a weight of {float(w.min()):.3g}"
            )
        # Weights typed in to four decimals are welcome too: hence the floor of 1e-4.
        tolerance = max(1e-4, row_sum_tolerance(T, eps))
        sums = w.astype(np.float64).sum(axis=-1)
        if np.abs(sums - 1).max() > tolerance:
            raise ValueError(
                f"texts[{n}]'s weights must be attention weights: rows that sum to 1 (within {tolerance:.2g} for "
                f"{T} {dtype_name} weights); got row sums from {sums.min():.6g} to {sums.max():.6g}"
            )
        shapes.add(w.shape[:2])
        entries.append((label, list(tokens), w.astype(np.float64)))
    if len(shapes) != 1:
        raise ValueError(f"every text must have the same number of layers and heads; got {sorted(shapes)}")
    (L, H) = shapes.pop()
    values = sum(w.size for _, _, w in entries)
    if values > MAX_EXPLORER_VALUES:
        raise ValueError(
            f"the texts hold {values:,} weights; an explorer embeds at most {MAX_EXPLORER_VALUES:,} in its page "
            "(use fewer or shorter texts)"
        )
    # 0-d arrays and tensors are integers too (the package's scalar policy)
    layer, head = check_nonnegative_int(layer, "layer"), check_nonnegative_int(head, "head")
    text, query = check_nonnegative_int(text, "text"), check_nonnegative_int(query, "query")
    for name, value, stop in (("layer", layer, L), ("head", head, H), ("text", text, len(entries))):
        if not value < stop:
            raise ValueError(f"{name} must be an integer in [0, {stop}); got {value!r}")
    if not query < len(entries[text][1]):
        raise ValueError(
            f"query must be a token index in [0, {len(entries[text][1])}) for text {text} "
            f"({entries[text][0]!r}, {len(entries[text][1])} tokens); got {query!r}"
        )
    rows = []
    if isinstance(probes, np.ndarray) and probes.ndim == 2:
        probes = probes.tolist()  # an array of (text, layer, head, query) rows
    if isinstance(probes, (str, bytes)) or not isinstance(probes, Sequence):
        raise ValueError(f"probes must be a list of (text, layer, head, query); got {type(probes).__name__}")
    for probe in probes:
        if not isinstance(probe, (tuple, list, np.ndarray)) or len(probe) != 4:
            raise ValueError(f"each probe must be a (text, layer, head, query) quadruple; got {probe!r}")
        try:
            n, p_layer, p_head, p_query = (check_nonnegative_int(i, "a probe's entry") for i in probe)
        except ValueError:
            raise ValueError(
                f"each probe must hold four non-negative integers (text, layer, head, query); got {tuple(probe)!r}"
            ) from None
        T = len(entries[n][1]) if 0 <= n < len(entries) else -1
        if T < 0 or not (0 <= p_layer < L and 0 <= p_head < H and 0 <= p_query < T):
            raise ValueError(
                f"probe {(n, p_layer, p_head, p_query)} is out of range for {len(entries)} texts, L={L}, H={H}"
            )
        row = np.round(entries[n][2][p_layer, p_head, p_query], 3)
        rows.append({"text": n, "layer": p_layer, "head": p_head, "query": p_query, "row": row.tolist()})
    texts = []
    for label, tokens, w in entries:
        shown = np.rint(w * 1000).astype(int)  # per mille: the three decimals the figure shows
        top = shown == shown.max(axis=-1, keepdims=True)  # ties at the shown precision (an exact tie is one)
        best = [[[np.flatnonzero(keys).tolist() for keys in queries] for queries in heads] for heads in top]
        texts.append({"label": label, "tokens": tokens, "weights": shown.tolist(), "best": best})  # best: (L, H, T, k)
    data = {"layers": L, "heads": H, "layer": layer, "head": head, "text": text, "query": query, "texts": texts}
    for probe in rows:  # the keys the figure must name as the row's largest
        probe["best"] = texts[probe["text"]]["best"][probe["layer"]][probe["head"]][probe["query"]]
    label, tokens, w = entries[text]
    shown = np.rint(w[layer, head] * 1000) / 1000  # the static image shows the embedded (rounded) weights
    ax = plot_attention(shown, tokens, tokens, title=title if L == 1 else f"{title}: layer {layer}, head {head}")
    return InteractiveFigure("explorer", title, data, {"rows": rows}, _png(ax.figure), alt)


def softmax_stepper(
    scores: ArrayLike, values: ArrayLike, block_size: int, *, title: str, alt: str
) -> InteractiveFigure:
    r"""Step through the online softmax of one query, one block of keys at a time.

    Every step is computed by :func:`~selfattention.online_softmax_update`:
    the block's largest score, the running maximum :math:`m`, the factor
    :math:`e^{m_{old} - m}` that rescales the old sum, the running sum
    :math:`\ell`, and the output so far :math:`o / \ell`. The last step is
    compared with ``softmax(scores) @ values``.

    The figure shows the keys in their blocks, each key's value row, and, at
    every step, the weight each key read so far carries,
    :math:`p_j = e^{s_j - m} / \ell` with the step's :math:`m` and
    :math:`\ell`: the output so far is :math:`\sum_j p_j v_j` over those
    keys. A step rescales the earlier keys' weights, and after the last block
    they are ``softmax(scores)``.

    Parameters
    ----------
    scores : array_like, shape (S,)
        One query's scores against S keys (finite).
    values : array_like, shape (S, Dv)
    block_size : int
        Keys per block; the last block may be shorter.
    title, alt : str
        The figure's title, and the alt text of its static image.

    Returns
    -------
    InteractiveFigure
        ``expected`` holds every step's numbers (``weights``: :math:`p_j` of
        the keys read so far) and the exact output, each rounded to
        ``SIGNIFICANT_DIGITS`` significant digits, and ``agreement``: whether the
        last step equals the exact output within ``DIFFERENCE_TOLERANCE``, the
        largest difference taken relative to the values' largest magnitude when
        that is above 1 (the difference itself only when it does not).

    Raises
    ------
    ValueError
        If the shapes do not fit, a value is not finite or lies beyond
        ±1e150 (past that the figure could not draw it), or ``block_size`` is
        not a positive integer.

    Notes
    -----
    See chapter 7.
    """
    from ..plotting._common import pyplot

    _check_text(title, "title")
    _check_text(alt, "alt")
    s = as_float_array(scores, "scores").astype(np.float64)
    v = as_float_array(values, "values").astype(np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be one query's scores, shape (S,); got {s.shape}")
    if v.ndim != 2 or v.shape[0] != s.size or v.shape[1] == 0:
        raise ValueError(f"values must have shape (S, Dv) = ({s.size}, Dv) with Dv >= 1; got {v.shape}")
    if s.size > MAX_KEYS or v.shape[1] > MAX_VALUE_WIDTH:
        raise ValueError(
            f"a stepper shows at most {MAX_KEYS} keys and values of width {MAX_VALUE_WIDTH}; got S={s.size}, "
            f"Dv={v.shape[1]}"
        )
    check_all_finite(s, "scores")
    check_all_finite(v, "values")
    for name, array in (("scores", s), ("values", v)):
        if np.abs(array).max() > 1e150:  # the figure's axes span max - min, which would overflow float64
            raise ValueError(f"{name} must lie within ±1e150 to be drawn; got up to {np.abs(array).max():.3g}")
    block_size = check_positive_int(block_size, "block_size", at_most=s.size)
    m, total, out = np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, v.shape[1]))
    steps = []
    for start in range(0, s.size, block_size):
        block = s[None, start : start + block_size]  # (1, block)
        new_m, total, out = online_softmax_update(m, total, out, block, v[start : start + block_size])
        rescale = np.exp(m - new_m)[0, 0] if np.isfinite(m[0, 0]) else 0.0
        m = new_m
        read = s[: start + block.size]  # the keys read so far: their weights under this step's m and l
        weights = np.exp(read - m[0, 0]) / total[0, 0]
        steps.append((block.max(), m[0, 0], rescale, total[0, 0], out[0] / total[0, 0], weights))
    exact = softmax(s) @ v  # inputs within ±1e150 and at most 64 keys: every sum stays finite
    difference = float(np.abs(exact - out[0] / total[0, 0]).max())
    names = ("block_max", "m", "rescale", "l", "out", "weights")
    steps = [{name: _rounded(number) for name, number in zip(names, step, strict=True)} for step in steps]
    difference /= max(1.0, float(np.abs(v).max()))  # relative to the values' scale: the output averages them
    within = difference < DIFFERENCE_TOLERANCE
    agreement = {
        "tolerance": DIFFERENCE_TOLERANCE,
        "within": within,
        "difference": None if within else _rounded(difference),
    }
    data = {
        "scores": _rounded(s),
        "values": _rounded(v),
        "block_size": block_size,
        "steps": steps,
        "exact": _rounded(exact),
        "agreement": agreement,
    }
    fig, ax = pyplot().subplots(figsize=(6, 2.6))
    blocks = np.arange(s.size) // block_size
    ax.bar(np.arange(s.size), data["scores"], color=[f"C{b % 10}" for b in blocks])  # drawn from what is embedded
    ax.plot([st["m"] for st in steps for _ in range(block_size)][: s.size], "k--", label="running maximum m")
    for start in range(block_size, s.size, block_size):  # the block boundaries
        ax.axvline(start - 0.5, color="0.4", linewidth=1, linestyle=":")
    ax.set(xlabel="key", ylabel="score", title=title)
    ax.legend(fontsize="small")
    expected = {"steps": steps, "exact": data["exact"], "agreement": agreement}
    return InteractiveFigure("stepper", title, data, expected, _png(fig), alt)


def mask_builder(
    T: int, windows: Sequence[int] | None = None, lengths: Sequence[int] | None = None, *, title: str, alt: str
) -> InteractiveFigure:
    """Build attention masks by combining a pattern (none, causal, sliding window) with padding.

    Every mask is computed by the package: :func:`~selfattention.causal_mask`,
    :func:`~selfattention.sliding_window_mask` and
    :func:`~selfattention.padding_mask`, combined with a logical and.

    Parameters
    ----------
    T : int
        Tokens (queries = keys), at most 16.
    windows : sequence of int, optional
        Sliding-window sizes to offer, each between 1 and T; default 2 and 3
        (those not above T).
    lengths : sequence of int, optional
        Real-token counts to offer (the rest is padding); default T down to T - 3.
    title, alt : str
        The figure's title, and the alt text of its static image.

    Returns
    -------
    InteractiveFigure
        ``expected["masks"]`` holds every combination as rows of 0/1.

    Raises
    ------
    ValueError
        If T is not an integer in [1, 16], or a window or length is out of range.

    Notes
    -----
    See chapter 9 (sliding windows), with chapter 3's causal and padding masks.
    """
    from ..plotting import plot_mask

    _check_text(title, "title")
    _check_text(alt, "alt")
    T = check_positive_int(T, "T", at_most=16)
    windows = windows.tolist() if isinstance(windows, np.ndarray) and windows.ndim == 1 else windows
    lengths = lengths.tolist() if isinstance(lengths, np.ndarray) and lengths.ndim == 1 else lengths
    for name, value in (("windows", windows), ("lengths", lengths)):
        if value is not None and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)):
            raise ValueError(f"{name} must be a sequence of integers; got {type(value).__name__}")
    windows = [w for w in (2, 3) if w <= T] if windows is None else windows
    windows = sorted({check_positive_int(w, "each window", at_most=T) for w in windows})
    lengths = list(range(T, max(T - 4, 0), -1)) if lengths is None else lengths
    if not lengths:
        raise ValueError("lengths must offer at least one count of real tokens; got an empty sequence")
    lengths = sorted({check_positive_int(n, "each length", at_most=T) for n in lengths}, reverse=True)
    patterns = {"none": np.ones((T, T), dtype=bool), "causal": causal_mask(T, dtype=bool)}
    for w in windows:
        patterns[f"window{w}"] = sliding_window_mask(T, w, dtype=bool)
    names = {
        "none": "none (full attention)",
        "causal": "causal",
        **{f"window{w}": f"sliding window of {w}" for w in windows},
    }
    masks = {}
    for key, pattern in patterns.items():
        for n in lengths:
            mask = pattern & padding_mask([n], T)[0]  # (T, T): and the real keys, (1, T)
            masks[f"{key},{n}"] = ["".join("1" if b else "0" for b in row) for row in mask]
    data = {"T": T, "patterns": [[key, names[key]] for key in patterns], "lengths": lengths, "masks": masks}
    ax = plot_mask(patterns["causal"], title=f"{title}: causal, {T} tokens")
    return InteractiveFigure("mask", title, data, {"masks": masks}, _png(ax.figure), alt)
