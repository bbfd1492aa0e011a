r"""Positions: telling attention where each token sits.

Taught in chapter 8. Without them, self-attention cannot see word order: permute
the input tokens and its outputs are permuted the same way. Four ways to add
order, each entering the layer at a different place:

- :func:`sinusoidal_positions` (Vaswani et al., 2017): a fixed ``(T, D)`` table
  of sines and cosines, added to the input tokens with :func:`add_positions`;
- a **learned** table of the same shape (BERT, GPT-2, ViT), added the same way;
  it holds only the positions it was trained for;
- :func:`apply_rope` (rotary positions, Su et al., 2021): rotates the queries
  and keys of every head after the projection, so that a score depends on the
  offset between two positions, not on where they are;
- :func:`alibi_bias` (Press et al., 2022): a per-head penalty on the scores,
  proportional to the distance between query and key.

Positions are float64 unless the input is float32 or float16, whose dtype the
result keeps (the angles are computed in float64 either way).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._validation import (
    as_float_array,
    check_all_finite,
    check_bool,
    check_min_ndim,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)

__all__ = [
    "sinusoidal_positions",
    "sinusoidal_shift",
    "add_positions",
    "rope_angles",
    "apply_rope",
    "rope_decay_bound",
    "alibi_slopes",
    "alibi_bias",
]

# Results larger than this many entries (1 GiB in float64) are refused: a typo (T=10**9) should get a
# ValueError, not exhaust memory. The temporaries (angles, sines, cosines) are a few times the result.
_MAX_ENTRIES = 2**27
_MAX_WIDTH = 2**16


def _check_size(shape: tuple[int, ...], what: str) -> None:
    entries = int(np.prod(shape, dtype=object))
    if entries > _MAX_ENTRIES:
        raise ValueError(
            f"{what} of shape {shape} would hold {entries:,} numbers, more than the {_MAX_ENTRIES:,} allowed; "
            "use fewer positions or a smaller width"
        )


def _check_finite_result(result: np.ndarray, what: str, inputs: str) -> np.ndarray:
    """Raise if finite inputs gave an infinite result: the dtype's range was exceeded."""
    if not np.isfinite(result).all():
        raise ValueError(
            f"{what} overflowed {result.dtype}: {inputs} are too large for its range "
            f"(largest {np.finfo(result.dtype).max:.4g}); scale them down or compute in a wider dtype"
        )
    return result


def _even_width(width: Any, name: str, why: str) -> int:
    width = check_positive_int(width, name)
    if width % 2:
        got = f"{name}={width}" if name.isidentifier() else str(width)  # "got D=5", but "the head width ...: got 5"
        raise ValueError(f"{name} must be even, because {why}; got {got} (use {width - 1} or {width + 1})")
    return width


def _frequencies(width: int, base: float) -> np.ndarray:
    """``base ** (-2i / width)`` for i = 0 … width/2 − 1: one angular frequency per pair of features."""
    return base ** (-np.arange(0, width, 2, dtype=np.float64) / width)  # (width/2,)


def _check_base(base: Any) -> float:
    base = check_real_scalar(base, "base", positive=True)
    if base <= 1:
        raise ValueError(
            f"base must be greater than 1, so that the frequencies base^(-2i/D) fall from 1 towards 0; got {base}"
        )
    return base


def sinusoidal_positions(T: int, D: int, base: float = 10000.0, *, interleaved: bool = True) -> np.ndarray:
    r"""The sinusoidal position table of the original Transformer.

    .. math::

        PE_{p,\,2i} = \sin\!\left(p \,/\, \mathrm{base}^{2i/D}\right), \qquad
        PE_{p,\,2i+1} = \cos\!\left(p \,/\, \mathrm{base}^{2i/D}\right)

    for positions ``p = 0 … T-1`` and ``i = 0 … D/2 - 1``: each pair of
    columns is one frequency, from one radian per position (i = 0) down to
    ``1 / base`` of that.

    Parameters
    ----------
    T : int
        Number of positions (rows).
    D : int
        Model width (columns); even.
    base : float, default 10000.0
        Sets the slowest frequency; greater than 1.
    interleaved : bool, default True
        True: the paper's layout, sine and cosine of each frequency in
        adjacent columns ``(2i, 2i+1)``. False: all sines, then all cosines
        (``[sin | cos]``), the layout of Hugging Face's Marian models. The
        two hold the same numbers, with the columns in a different fixed
        order. (tensor2tensor also puts the sines first, but spaces its
        frequencies as ``10000 ** (-i / (D/2 - 1))``, so its numbers differ.)

    Returns
    -------
    numpy.ndarray, shape (T, D), float64
        Added to the (T, D) input tokens: ``x + PE`` (:func:`add_positions`).

    Raises
    ------
    ValueError
        If ``T`` is not a positive integer, ``D`` is not a positive even
        integer, ``base`` is not a real number greater than 1, or
        ``interleaved`` is not a bool.

    Notes
    -----
    See chapter 8 (sinusoidal positions) and :func:`sinusoidal_shift`, the
    matrix that moves every row ``k`` positions on.
    """
    T = check_positive_int(T, "T")
    D = _even_width(D, "D", "each frequency fills two columns, a sine and a cosine")
    base = _check_base(base)
    interleaved = check_bool(interleaved, "interleaved")
    _check_size((T, D), "the table")
    angles = np.arange(T, dtype=np.float64)[:, None] * _frequencies(D, base)  # (T, D/2)
    table = np.empty((T, D))
    if interleaved:
        table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)  # columns sin, cos, sin, cos, ...
    else:
        table[:, : D // 2], table[:, D // 2 :] = np.sin(angles), np.cos(angles)  # [sin | cos]
    return table


def sinusoidal_shift(offset: float, D: int, base: float = 10000.0, *, interleaved: bool = True) -> np.ndarray:
    r"""The matrix :math:`R_k` that moves every row of the sinusoidal table ``k`` positions on.

    .. math::

        PE_{p + k} = PE_p \, R_k \quad \text{for every } p

    Pair ``i`` of columns holds :math:`(\sin p\omega_i, \cos p\omega_i)`, and
    the angle-sum identities give
    :math:`(\sin (p+k)\omega_i, \cos (p+k)\omega_i) = (\sin p\omega_i, \cos p\omega_i)
    \begin{pmatrix}\cos k\omega_i & -\sin k\omega_i \\ \sin k\omega_i & \cos k\omega_i\end{pmatrix}`,
    so :math:`R_k` is block-diagonal with one such 2×2 rotation per frequency.
    It depends on ``k`` only, not on ``p``: a linear map can turn "position p"
    into "position p + k" for every p at once.

    Parameters
    ----------
    offset : float
        k; any real number, negative included.
    D : int
        Model width; even.
    base : float, default 10000.0
        As in :func:`sinusoidal_positions`.
    interleaved : bool, default True
        The column layout of the table it acts on, as in :func:`sinusoidal_positions`.

    Returns
    -------
    numpy.ndarray, shape (D, D), float64
        Orthogonal: ``R_k @ R_k.T`` is the identity, and ``R_{-k} = R_k.T``.

    Raises
    ------
    ValueError
        As :func:`sinusoidal_positions`, or if ``offset`` is not a finite real number.

    Notes
    -----
    See chapter 8 (sinusoidal positions).
    """
    offset = check_real_scalar(offset, "offset")
    D = _even_width(D, "D", "each frequency fills two columns, a sine and a cosine")
    base = _check_base(base)
    interleaved = check_bool(interleaved, "interleaved")
    if D > 2**14:
        raise ValueError(f"D must be at most {2**14:,} for a dense (D, D) matrix; got {D:,}")
    angle = offset * _frequencies(D, base)  # (D/2,)
    sin_col, cos_col = (np.arange(0, D, 2), np.arange(1, D, 2)) if interleaved else np.split(np.arange(D), 2)
    shift = np.zeros((D, D))
    shift[sin_col, sin_col] = shift[cos_col, cos_col] = np.cos(angle)
    shift[cos_col, sin_col] = np.sin(angle)  # row cos, column sin: sin(a + b) = sin a cos b + cos a sin b
    shift[sin_col, cos_col] = -np.sin(angle)  # cos(a + b) = cos a cos b - sin a sin b
    return shift


def add_positions(x: ArrayLike, table: ArrayLike, offset: int = 0) -> np.ndarray:
    """Add absolute positions to the tokens: ``x[..., t, :] + table[offset + t]``.

    The same function serves a fixed (sinusoidal) table and a learned one
    (BERT's, GPT-2's and ViT's ``position_embeddings``). A table has one row
    per position it knows; a sequence that reaches past its last row cannot
    be given positions, which is the limit of learned absolute positions.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        The token vectors.
    table : array_like, shape (max_len, D)
        One row per position.
    offset : int, default 0
        The position of ``x``'s first token (a continuation of earlier text).

    Returns
    -------
    numpy.ndarray, shape (..., T, D)
        In the wider of the two dtypes.

    Raises
    ------
    ValueError
        If the widths differ, the table is not 2-D, an input is not finite,
        or ``offset + T`` exceeds the table's ``max_len``.

    Notes
    -----
    See chapter 8 (sinusoidal and learned positions).
    """
    x = as_float_array(x, "x")
    table = as_float_array(table, "table")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    offset = check_nonnegative_int(offset, "offset")
    if table.ndim != 2:
        raise ValueError(f"table must have shape (max_len, D), one row per position; got shape {table.shape}")
    T, D = x.shape[-2:]
    if table.shape[1] != D:
        raise ValueError(f"x has width D={D} but the table's rows have {table.shape[1]}; they must match")
    check_all_finite(x, "x")
    check_all_finite(table, "table")
    max_len = table.shape[0]
    if max_len == 0:
        raise ValueError(f"table must have at least one row (one per position); got shape {table.shape}")
    if offset + T > max_len:
        raise ValueError(
            f"the table holds positions 0 … {max_len - 1}, but {T} tokens starting at position {offset} need "
            f"positions up to {offset + T - 1}. A table has a row only for each position it was built or trained "
            "for; shorten the input, or use positions that extend (sinusoidal, RoPE, ALiBi)"
        )
    with np.errstate(over="ignore"):
        result = x + table[offset : offset + T]  # (..., T, D)
    return _check_finite_result(result, "x + table", "the token vectors and positions")


def _positions_for(positions: Any, T: int, batch: tuple[int, ...]) -> np.ndarray:
    """Positions as float64: shape (T,), or one axis per leading axis of x, each of x's size or 1.

    A (B, T) array for x of shape (B, H, T, Dh) is refused: NumPy would align its
    batch axis with the heads, and silently rotate by the wrong positions when B == H.
    """
    if positions is None:
        return np.arange(T, dtype=np.float64)
    positions = as_float_array(positions, "positions").astype(np.float64)
    if positions.ndim == 0 or positions.shape[-1] != T:
        raise ValueError(
            f"positions must hold one position per token, shape (T,) = ({T},) or (..., {T}); got shape "
            f"{positions.shape}"
        )
    lead = positions.shape[:-1]
    fits = len(lead) == len(batch) and all(p in (1, b) for p, b in zip(lead, batch, strict=True))
    if positions.ndim > 1 and not fits:
        hint = ""
        if len(lead) < len(batch) and len(lead) >= 1:
            missing = ", None" * (len(batch) - len(lead))
            hint = f"; for per-example positions (B, T) and x of shape (B, H, T, Dh), pass positions[:{missing}, :]"
        raise ValueError(
            f"positions of shape {positions.shape} must be (T,) or have one axis for each of x's leading axes "
            f"{batch}, each of the same size or 1{hint}"
        )
    check_all_finite(positions, "positions")
    return positions


def rope_angles(positions: ArrayLike, head_dim: int, base: float = 10000.0) -> np.ndarray:
    r"""The rotation angles of RoPE: :math:`\theta_{t,i} = p_t \cdot \mathrm{base}^{-2i/D_h}`.

    Parameters
    ----------
    positions : array_like, shape (..., T)
        The position of each token; integers or any finite real numbers.
    head_dim : int
        Dh; even.
    base : float, default 10000.0
        Greater than 1. LLaMA 1 and 2 use 10000; LLaMA 3 uses 500000.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dh/2), float64
        One angle per token and pair of features, in radians.

    Raises
    ------
    ValueError
        If ``head_dim`` is not a positive even integer, ``base`` is not
        greater than 1, or ``positions`` is empty or not finite.

    Notes
    -----
    See chapter 8 (RoPE).
    """
    return _angles(positions, head_dim, base, "positions")


def _angles(positions: Any, head_dim: Any, base: Any, name: str) -> np.ndarray:
    head_dim = _even_width(head_dim, "head_dim", "RoPE rotates the features in pairs")
    if head_dim > _MAX_WIDTH:
        raise ValueError(f"head_dim must be at most {_MAX_WIDTH:,}; got {head_dim:,}")
    base = _check_base(base)
    positions = as_float_array(positions, name).astype(np.float64)
    if positions.ndim == 0 or positions.size == 0:
        raise ValueError(f"{name} must be a non-empty array of shape (..., T); got shape {positions.shape}")
    check_all_finite(positions, name)
    _check_size((*positions.shape, head_dim // 2), "the angles")
    return positions[..., None] * _frequencies(head_dim, base)  # (..., T, Dh/2)


def apply_rope(
    x: ArrayLike, positions: ArrayLike | None = None, base: float = 10000.0, interleaved: bool = False
) -> np.ndarray:
    r"""Rotary position embedding: rotate each pair of features by an angle that grows with the position.

    For token ``t`` at position :math:`p_t` and pair ``i`` of features, with
    :math:`\theta = p_t\, \mathrm{base}^{-2i/D_h}`:

    .. math::

        \begin{pmatrix} y_a \\ y_b \end{pmatrix} =
        \begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{pmatrix}
        \begin{pmatrix} x_a \\ x_b \end{pmatrix}

    Applied to the queries and the keys of every head (not to the values), it
    makes :math:`\mathrm{rope}(q, m) \cdot \mathrm{rope}(k, n)` a function of
    ``q``, ``k`` and ``m - n`` only.

    Parameters
    ----------
    x : array_like, shape (..., T, Dh)
        Queries or keys, split into heads; Dh even.
    positions : array_like, shape (T,) or (..., T), optional
        The position of each token; defaults to ``0 … T-1``. Any finite real
        numbers: a KV cache continues at ``S_cached + 0 … T-1``.
    base : float, default 10000.0
        Greater than 1.
    interleaved : bool, default False
        Which features form a pair. False: ``(i, i + Dh/2)``, "rotate half",
        the layout of GPT-NeoX and Hugging Face's LLaMA. True: ``(2i, 2i+1)``,
        the paper's and Meta's LLaMA code. A checkpoint's weights are laid out
        for one of them; the two differ by a fixed permutation of the features.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dh)
        Same dtype as ``x`` (float16 is computed in float32); each row keeps its norm.

    Raises
    ------
    ValueError
        If ``x`` has fewer than 2 axes or an odd last axis, ``positions`` has
        the wrong length, ``base`` is not greater than 1, or an input is not finite.

    Notes
    -----
    See chapter 8 (RoPE) and :func:`rope_angles`.
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, Dh)")
    *batch, T, Dh = x.shape
    _even_width(Dh, "the head width Dh (x's last axis)", "RoPE rotates the features in pairs")
    if T == 0:
        raise ValueError(f"x has no tokens: shape {x.shape}, with T = 0 in (..., T, Dh)")
    check_all_finite(x, "x")
    interleaved = check_bool(interleaved, "interleaved")
    angles = rope_angles(_positions_for(positions, T, tuple(batch)), Dh, base)  # (..., T, Dh/2), float64
    work = np.float32 if x.dtype == np.float16 else x.dtype
    cos, sin = np.cos(angles).astype(work), np.sin(angles).astype(work)
    xw = x.astype(work, copy=False)
    a, b = (xw[..., 0::2], xw[..., 1::2]) if interleaved else (xw[..., : Dh // 2], xw[..., Dh // 2 :])
    out = np.empty(x.shape, dtype=work)
    with np.errstate(over="ignore", invalid="ignore"):
        rotated_a, rotated_b = a * cos - b * sin, a * sin + b * cos  # (..., T, Dh/2) each
        if interleaved:
            out[..., 0::2], out[..., 1::2] = rotated_a, rotated_b
        else:
            out[..., : Dh // 2], out[..., Dh // 2 :] = rotated_a, rotated_b
        result = out.astype(x.dtype, copy=False)
    return _check_finite_result(result, "apply_rope", "the entries of x")


def rope_decay_bound(distances: ArrayLike, head_dim: int, base: float = 10000.0) -> np.ndarray:
    r"""RoFormer's bound on how large a RoPE score can be at a distance, relative to distance 0.

    Su et al. (section 3.4.3) bound the rotated score by
    :math:`\max_i |h_{i+1} - h_i| \cdot \sum_{j=1}^{D_h/2} |S_j|`, with
    :math:`S_j = \sum_{i<j} e^{\,\mathrm{i}\,(m-n)\theta_i}`. This returns
    :math:`\frac{1}{D_h/2}\sum_j |S_j|` at each distance ``m - n``, divided by
    its value at distance 0, :math:`(D_h/2 + 1)/2`: 1 at distance 0, and
    falling, with ripples, as the distance grows.

    Parameters
    ----------
    distances : array_like
        Distances ``m - n`` (any real numbers).
    head_dim : int
        Dh; even.
    base : float, default 10000.0
        Greater than 1.

    Returns
    -------
    numpy.ndarray, float64
        The relative bound, the shape of ``distances``.

    Raises
    ------
    ValueError
        If ``head_dim`` is not a positive even integer, ``base`` is not greater
        than 1, or ``distances`` is not a finite array.

    Notes
    -----
    See chapter 8 (RoPE's long-range decay).
    """
    angles = _angles(np.atleast_1d(as_float_array(distances, "distances")), head_dim, base, "distances")  # (N, Dh/2)
    partial_sums = np.cumsum(np.exp(1j * angles), axis=-1)  # S_1 … S_{Dh/2}
    bound = np.abs(partial_sums).mean(axis=-1) / ((head_dim // 2 + 1) / 2)
    return bound.reshape(np.shape(distances))


def alibi_slopes(num_heads: int) -> np.ndarray:
    r"""ALiBi's per-head slopes: a geometric sequence that starts and shrinks by :math:`2^{-8/H}`.

    For H a power of two, head ``h = 1 … H`` gets :math:`m_h = 2^{-8h/H}`
    (for 8 heads: 1/2, 1/4, …, 1/256). For any other H, the recipe of the
    paper's reference code: the slopes for ``P``, the largest power of two
    below H, then every other slope for ``2P`` (``2^{-4/P}, 2^{-12/P}, …``)
    until there are H.

    Parameters
    ----------
    num_heads : int
        H, at least 1.

    Returns
    -------
    numpy.ndarray, shape (H,), float64
        Each in (0, 1), and distinct.

    Raises
    ------
    ValueError
        If ``num_heads`` is not a positive integer (at most 4096).

    Notes
    -----
    See chapter 8 (ALiBi).
    """
    H = check_positive_int(num_heads, "num_heads", at_most=4096)
    P = 1 << (H.bit_length() - 1)  # the largest power of two <= H
    slopes = 2.0 ** (-8.0 * np.arange(1, P + 1) / P)
    extra = 2.0 ** (-8.0 * np.arange(1, 2 * P + 1, 2) / (2 * P))[: H - P]  # every other slope of 2P: odd exponents
    return np.concatenate([slopes, extra])


def _bias_dtype(dtype: Any) -> np.dtype:
    """A NumPy floating dtype for a bias that is added to the scores (a boolean mask would not be)."""
    try:
        parsed = None if dtype is None else np.dtype(dtype)  # np.dtype(None) would silently mean float64
    except TypeError:
        parsed = None
    if parsed is None or parsed not in (np.float16, np.float32, np.float64):  # longdouble: no BLAS, no torch
        raise ValueError(f"dtype must be float16, float32 or float64 (the bias is added to the scores); got {dtype!r}")
    return parsed


def alibi_bias(num_heads: int, T: int, S: int | None = None, dtype: DTypeLike = np.float64) -> np.ndarray:
    r"""ALiBi's additive bias: each head penalises a key by its slope times its distance from the query.

    .. math::

        b_{h,i,j} = -\,m_h \, \lvert (S - T + i) - j \rvert

    Query ``i`` sits at position ``S - T + i``, lower-right aligned as in
    :func:`selfattention.causal_mask`, so T new queries after a KV cache get
    the right distances. ALiBi was designed for causal models: add this to the
    scores **together with** the causal mask, which blocks the keys after the
    query (where the distance formula is mirrored). Some implementations add
    ``m_h * j`` instead: it differs by ``m_h (S - T + i)``, the same for a
    whole row, which the softmax ignores.

    Parameters
    ----------
    num_heads : int
        H; the slopes are :func:`alibi_slopes`.
    T : int
        Number of queries.
    S : int, optional
        Number of keys; defaults to T.
    dtype : numpy floating dtype, default float64
        Computed in this dtype. In float16, penalties beyond its range
        (65,504) are held at its most negative finite value, which the
        softmax treats as a block, like ``-inf``, with no overflow.

    Returns
    -------
    numpy.ndarray, shape (H, T, S)
        0 on the diagonal (the query's own position), negative elsewhere.
        With S < T the first T - S queries sit before key 0, as in
        :func:`selfattention.causal_mask`, and their rows have no 0.
        Broadcasts against multi-head scores (..., H, T, S); pass it as
        ``mask=combine_masks(alibi_bias(H, T), causal_mask(T))``.

    Raises
    ------
    ValueError
        If a size is not a positive integer or ``dtype`` is not floating.

    Notes
    -----
    See chapter 8 (ALiBi).
    """
    slopes = alibi_slopes(num_heads)
    T = check_positive_int(T, "T")
    S = T if S is None else check_positive_int(S, "S")
    dtype = _bias_dtype(dtype)
    _check_size((slopes.size, T, S), "the bias")
    distance = np.abs(np.arange(T)[:, None] + (S - T) - np.arange(S)[None, :])  # (T, S): |query pos - key pos|
    lowest = np.finfo(dtype).min  # float16: -65,504
    work = np.float32 if dtype == np.float16 else dtype  # float16's range ends at 65,504: multiply in float32
    minus_distance = (-distance).astype(work)  # negated as integers, so the diagonal is 0.0, not -0.0
    penalty = np.maximum(slopes[:, None, None].astype(work) * minus_distance, lowest)
    return penalty.astype(dtype, copy=False)  # (H, T, S)
