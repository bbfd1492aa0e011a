"""Attention masks: which keys each query may see.

Taught in chapter 3 (the causal mask); the key-padding mask and the lower-right
alignment for T < S are what a KV cache and batches of unequal lengths need
(chapter 9).

Two kinds of mask, as in ``torch.nn.functional.scaled_dot_product_attention``:

- **boolean**: True where the query may attend to the key;
- **additive float**: added to the scores, 0 to keep a key and ``-inf`` to block it.

Masks broadcast against the scores, shape ``(..., T, S)``. To combine masks,
call :func:`combine_masks`: a key is kept only where every mask keeps it
(booleans are and-ed; float masks are added, which does the same for 0/-inf).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._validation import as_array, check_no_nan_or_posinf, check_positive_int

__all__ = ["causal_mask", "sliding_window_mask", "padding_mask", "combine_masks"]


#: The most entries a mask function builds: 2**28 (2 GiB as float64). T = S = 16,384 fits; a typo such as
#: ``causal_mask(10**6)`` (10**12 entries, 931 GiB as bool) is refused instead of failing with a MemoryError.
MAX_MASK_ENTRIES = 2**28


def _check_mask_size(shape: tuple[int, ...], what: str, hint: str = "check the sizes") -> None:
    entries = int(np.prod(shape, dtype=object))
    if entries > MAX_MASK_ENTRIES:
        raise ValueError(
            f"{what} would hold {entries:,} entries (shape {shape}), more than the {MAX_MASK_ENTRIES:,} a mask "
            f"function builds; {hint}"
        )


def _mask_dtype(dtype: DTypeLike) -> np.dtype:
    """A boolean or floating dtype for a mask."""
    if dtype is None:
        raise ValueError("dtype must be bool or a NumPy floating dtype such as np.float32; got None")
    try:
        dtype = np.dtype(dtype)
    except TypeError as exc:
        raise ValueError(f"dtype must be bool or a NumPy floating dtype; got {dtype!r} ({exc})") from None
    if dtype != np.bool_ and not np.issubdtype(dtype, np.floating):
        raise ValueError(f"dtype must be bool (True = attend) or a floating dtype (it holds -inf); got {dtype}")
    return dtype


def _as_dtype(keep: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A boolean keep-array in the requested form: itself, or 0 / -inf."""
    return keep if dtype == np.bool_ else np.where(keep, 0.0, -np.inf).astype(dtype)


def causal_mask(T: int, S: int | None = None, dtype: DTypeLike = np.float64) -> np.ndarray:
    r"""Causal mask: each query sees its own position and the ones before it.

    With ``S = T`` (the default), query ``i`` may attend to keys ``0 … i``:

    .. math::

        M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}

    With ``S > T`` the T queries are the *last* T of the S positions (new
    tokens after a KV cache of ``S - T`` earlier ones), so query ``i`` sits at
    absolute position ``S - T + i`` and may attend to keys ``0 … S - T + i``:
    the diagonal ends at the lower-right corner. PyTorch calls this alignment
    ``causal_lower_right``. Note that ``torch.nn.functional.scaled_dot_product_attention(
    is_causal=True)`` aligns at the *upper left* instead (query ``i`` sees keys
    ``0 … i``), which is the same only when ``T = S``. With ``S < T`` the first
    ``T - S`` queries see no key at all.

    Parameters
    ----------
    T : int
        Number of queries, at least 1.
    S : int, optional
        Number of keys; defaults to ``T``.
    dtype : numpy dtype, default float64
        A floating dtype gives an additive mask (0 and ``-inf``); ``bool``
        gives a boolean mask, True where the query may attend.

    Returns
    -------
    numpy.ndarray
        Shape ``(T, S)``.

    Raises
    ------
    ValueError
        If ``T`` or ``S`` is not a positive integer, ``dtype`` is neither
        bool nor floating, or the mask would hold more than
        :data:`~selfattention.masks.MAX_MASK_ENTRIES` entries.

    Notes
    -----
    See chapter 3 (the causal mask). :func:`selfattention.scaled_dot_product_attention`
    with ``is_causal=True`` applies the same mask without the caller building it.
    """
    T = check_positive_int(T, "T")
    S = T if S is None else check_positive_int(S, "S")
    dtype = _mask_dtype(dtype)
    _check_mask_size((T, S), "causal_mask(T, S)", "check T and S, or pass is_causal=True to the attention function")
    return _as_dtype(causal_keep(T, S), dtype)


def sliding_window_mask(T: int, window: int, S: int | None = None, dtype: DTypeLike = np.float64) -> np.ndarray:
    r"""Sliding-window causal mask: each query sees its own position and the ``window - 1`` before it.

    Query ``i`` sits at absolute position :math:`p = S - T + i` (lower-right
    aligned, as in :func:`causal_mask`) and may attend to key ``j`` when

    .. math::

        0 \le p - j < \text{window}.

    With ``window >= S`` it is the causal mask. Mistral 7B v0.1 uses a
    window of 4096; a KV cache then needs only the last ``window`` keys and
    values.

    Parameters
    ----------
    T : int
        Number of queries, at least 1.
    window : int
        How many positions each query sees, its own included; at least 1.
    S : int, optional
        Number of keys; defaults to ``T``.
    dtype : numpy dtype, default float64
        Floating (0 and ``-inf``) or ``bool`` (True where the query may attend).

    Returns
    -------
    numpy.ndarray
        Shape ``(T, S)``.

    Raises
    ------
    ValueError
        If ``T``, ``S`` or ``window`` is not a positive integer, ``dtype``
        is neither bool nor floating, or the mask would hold more than
        :data:`~selfattention.masks.MAX_MASK_ENTRIES` entries.

    Notes
    -----
    See chapter 9 (sliding windows), :cite:`child2019generating` (local
    attention) and :cite:`jiang2023mistral` (this one-sided window with a
    rolling-buffer cache; Longformer's windows are two-sided).
    """
    T = check_positive_int(T, "T", at_most=2**20)
    S = T if S is None else check_positive_int(S, "S", at_most=2**20)
    window = check_positive_int(window, "window")
    _check_mask_size((T, S), "sliding_window_mask(T, window, S)")
    distance = np.arange(T)[:, None] + (S - T) - np.arange(S)[None, :]  # p - j, (T, S)
    return _as_dtype((distance >= 0) & (distance < window), _mask_dtype(dtype))


def causal_keep(T: int, S: int) -> np.ndarray:
    """Boolean lower-right causal pattern, (T, S): query ``i`` sees keys ``0 … S - T + i``.

    Query ``i`` sits at absolute position ``S - T + i``. No argument checks:
    the building block of :func:`causal_mask`.
    """
    return np.arange(S)[None, :] <= np.arange(T)[:, None] + (S - T)  # (T, S)


def fully_blocked_rows(mask: np.ndarray | None, is_causal: bool, T: int, S: int) -> np.ndarray:
    """Boolean ``(..., T)``: the queries whose every key a validated mask (and ``is_causal``) blocks.

    Broadcasts against the scores' batch axes. With ``is_causal`` the
    alignment is lower-right, as in :func:`causal_mask`. No argument checks.
    """
    keep = np.ones((T, S), dtype=bool) if mask is None else (mask if mask.dtype == np.bool_ else mask > -np.inf)
    if is_causal:
        keep = keep & causal_keep(T, S)
    return ~np.broadcast_to(keep, (*keep.shape[:-2], T, S)).any(axis=-1)


def padding_mask(lengths: ArrayLike, S: int | None = None, dtype: DTypeLike = bool) -> np.ndarray:
    """Key-padding mask from sequence lengths: each sequence sees only its real keys.

    Sequences of different lengths are padded to a common length S to form a
    batch; entry ``b`` keeps keys ``0 … lengths[b] - 1`` and blocks the padding.

    Parameters
    ----------
    lengths : array_like of int, shape (B,)
        The true length of each sequence, each between 1 and S.
    S : int, optional
        The padded length; defaults to ``max(lengths)``.
    dtype : numpy dtype, default bool
        ``bool`` (True = attend) or a floating dtype (0 / ``-inf``).

    Returns
    -------
    numpy.ndarray, shape (B, 1, S)
        Broadcasts against single-head scores ``(B, T, S)``. For multi-head
        scores ``(B, H, T, S)`` add the head axis: ``mask[:, None]``.

    Raises
    ------
    ValueError
        If ``lengths`` is not a 1-D array of integers between 1 and S, ``S``
        is not a positive integer, ``dtype`` is neither bool nor floating, or
        the mask would hold more than :data:`~selfattention.masks.MAX_MASK_ENTRIES` entries.

    Notes
    -----
    See chapter 3 (masks) and :func:`combine_masks` to add a causal mask.
    torch's ``key_padding_mask`` has the opposite polarity: True = padding.
    """
    lengths = as_array(lengths, "lengths")
    if lengths.size == 0:  # np.asarray([]) is float64: say "empty", not "float64"
        raise ValueError(
            f"lengths must be a non-empty 1-D array of integers, one per sequence; got none (shape {lengths.shape})"
        )
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(
            f"lengths must be a non-empty 1-D array of integers; got shape {lengths.shape}, dtype {lengths.dtype}"
        )
    S = int(lengths.max()) if S is None else check_positive_int(S, "S")
    _check_mask_size((lengths.size, 1, S), "padding_mask(lengths, S)")
    if lengths.min() < 1 or lengths.max() > S:
        raise ValueError(f"every length must lie between 1 and S={S}; got lengths {lengths.tolist()}")
    keep = np.arange(S)[None, :] < lengths[:, None]  # (B, S)
    return _as_dtype(keep[:, None, :], _mask_dtype(dtype))  # (B, 1, S)


def combine_masks(*masks: ArrayLike) -> np.ndarray:
    """Combine masks: a key is kept only where every mask keeps it.

    Boolean masks are and-ed and the result is boolean. If any mask is a float
    (additive) mask, every boolean one is first turned into 0 / ``-inf`` and
    the masks are added, so the result is additive, in the widest float dtype.

    Parameters
    ----------
    *masks : array_like
        One or more boolean or float masks that broadcast together, for
        example ``causal_mask(T, dtype=bool)`` and ``padding_mask(lengths)``.

    Returns
    -------
    numpy.ndarray
        The broadcast shape of the inputs.

    Raises
    ------
    ValueError
        If no mask is given, a mask is neither boolean nor floating, the
        shapes do not broadcast, or their broadcast shape holds more than
        :data:`~selfattention.masks.MAX_MASK_ENTRIES` entries.

    Notes
    -----
    See chapter 3 (masks).
    """
    if not masks:
        raise ValueError("combine_masks needs at least one mask; got none")
    arrays = [_as_mask_array(mask, f"masks[{index}]") for index, mask in enumerate(masks)]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise ValueError(f"the masks' shapes {[a.shape for a in arrays]} do not broadcast together") from None
    _check_mask_size(shape, "combine_masks(...)")
    if all(a.dtype == np.bool_ for a in arrays):
        return np.logical_and.reduce(np.broadcast_arrays(*arrays)) if len(arrays) > 1 else arrays[0].copy()
    dtype = np.result_type(*(a for a in arrays if a.dtype != np.bool_))
    total = np.zeros(shape, dtype=dtype)
    with np.errstate(over="ignore"):  # two large negative float16 entries add up to -inf: blocked either way
        for array in arrays:
            total += _as_dtype(array, dtype) if array.dtype == np.bool_ else array
    return total


# --- Used by the attention functions ---------------------------------------------


def check_mask(mask: Any, scores_shape: tuple[int, ...]) -> np.ndarray | None:
    """Validate an attention mask against the scores' shape and return it as an array."""
    if mask is None:
        return None
    mask = _as_mask_array(mask, "mask")
    try:
        fits = np.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {mask.shape} does not broadcast to the scores' shape (..., T, S) = {scores_shape}"
        )
    return mask


def check_head_axis_mask(mask: ArrayLike | None, scores_ndim: int) -> np.ndarray | None:
    """Refuse a mask whose axes would silently line up with the wrong ones of the (..., H, T, S) scores.

    Used by every attention function whose scores have four or more axes
    (multi-head attention, ``enable_gqa``, and (B, H, T, Dk) inputs). A
    (T, S) mask is shared by every head and batch entry, and a mask with as
    many axes as the scores names each one. In between, NumPy aligns from the
    right, so the first axis of a per-example (B, T, S) or (B, 1, S) mask would
    meet the head axis: when B happens to equal H it would run without an
    error and mask the wrong thing. A mask whose extra axes all have size 1,
    such as (1, T, S), cannot line up wrongly and is accepted.
    """
    if mask is None:
        return None
    mask = _as_mask_array(mask, "mask")
    if 2 < mask.ndim < scores_ndim and any(size != 1 for size in mask.shape[:-2]):
        raise ValueError(
            f"mask has {mask.ndim} axes {mask.shape} but the scores have {scores_ndim} (..., H, T, S); its first "
            "axis would line up with the heads. Give it every axis: mask[:, None] for a per-example mask "
            "(B, T, S) or (B, 1, S), mask[None] for a per-head mask (H, T, S), or pass a (T, S) mask shared by "
            "every head and example"
        )
    return mask


def _as_mask_array(mask: Any, name: str) -> np.ndarray:
    """A mask as an array: boolean, or floating with no NaN or +inf; 0/1 integers are refused."""
    mask = as_array(mask, name)
    if mask.dtype != np.bool_ and not np.issubdtype(mask.dtype, np.floating):
        raise ValueError(
            f"{name} must be boolean (True = attend) or floating (added to the scores: "
            f"0 keeps, -inf blocks); got dtype {mask.dtype}. For a 0/1 mask, pass {name}.astype(bool)"
        )
    if mask.dtype != np.bool_:
        check_no_nan_or_posinf(mask, name)
        if mask.size and mask.max() == 1 and ((mask == 0) | (mask == 1)).all():
            raise ValueError(
                f"{name} is a float mask of only 0s and 1s: a float mask is added to the scores, so 1 would add 1, "
                f"not keep the key. For keep (1) / block (0), pass {name}.astype(bool); for an additive mask, use "
                "0 to keep and -inf to block"
            )
    return mask


def apply_mask(scores: np.ndarray, mask: np.ndarray) -> None:
    """Apply a validated mask to ``scores`` in place."""
    if mask.dtype == np.bool_:
        np.copyto(scores, -np.inf, where=~mask)  # True = attend, so block where False
    else:
        scores += mask


def apply_causal_tile(scores: np.ndarray, first_query: int, first_key: int) -> None:
    """Block, in place, the keys after each query in a (..., rows, cols) tile of causal scores.

    The tile's row r is the query at absolute position ``first_query + r``, and
    its column c the key at ``first_key + c``; only a boolean (rows, cols)
    pattern is built. A whole (T, S) score matrix is the tile with
    ``first_query = S - T`` and ``first_key = 0`` (lower-right alignment).
    """
    rows, cols = scores.shape[-2:]
    later = np.arange(first_key, first_key + cols)[None, :] > np.arange(first_query, first_query + rows)[:, None]
    np.copyto(scores, -np.inf, where=later)
