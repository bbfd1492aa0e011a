"""Bugs in how a mask is built and applied: the fill value, the order, the polarity, the alignment.

Each function is attention (or a mask) as a public project once wrote it, in
our own words, with the bug kept. Its docstring names the issue or pull request
(``owner/repository#number``), the line that was wrong and the fix. The
package's own functions are the references they are tested against; see the
bug zoo appendix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import as_float_array, check_positive_int
from ..attention import scaled_dot_product_attention
from ._common import keep_mask, qkv, scores, softmax_quiet, weighted_values

__all__ = [
    "weak_mask_value",
    "mask_after_softmax",
    "masked_fill_result_dropped",
    "nan_for_fully_masked_rows",
    "additive_mask_cast_to_bool",
    "blocked_mask_passed_as_keep",
    "causal_mask_top_left",
    "sliding_window_one_too_wide",
]


def weak_mask_value(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Masked attention that pushes blocked scores down by 10,000 instead of setting them to -inf.

    Source: huggingface/transformers#14859, fixed by #17306 (and
    TransformerLensOrg/TransformerLens#318, with -100,000). The bug:
    ``scores + (1 - keep) * -10000``. A blocked key whose score is more than
    about 10,000 above the kept ones still takes weight. The fix:
    ``np.where(keep, scores, -np.inf)``, or the dtype's most negative number.

    Parameters
    ----------
    q, k, v : array_like, shapes (..., T, Dk), (..., S, Dk), (..., S, Dv)
    keep : array_like of bool, shape (..., T, S)
        True where a query may attend.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    q, k, v = qkv(q, k, v)
    keep = keep_mask(keep, q.shape[-2], k.shape[-2])
    s = scores(q, k) + (1.0 - keep) * -10_000.0  # the bug: a finite push, not a block
    return weighted_values(softmax_quiet(s), v)


def mask_after_softmax(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Masked attention that writes -inf into the weights after the softmax instead of into the scores before it.

    Source: huggingface/pytorch-image-models#2236 (EVA's non-fused path). The
    bug: ``softmax`` first, then ``masked_fill(~keep, -inf)`` on the
    probabilities, so any blocked key makes the output -inf or NaN. The fix:
    mask the scores, then take the softmax.

    Parameters and returns as :func:`weak_mask_value`.
    """
    q, k, v = qkv(q, k, v)
    keep = keep_mask(keep, q.shape[-2], k.shape[-2])
    weights = softmax_quiet(scores(q, k))
    weights = np.where(keep, weights, -np.inf)  # the bug: the mask meets probabilities, not scores
    return weighted_values(weights, v)


def masked_fill(x: np.ndarray, where: np.ndarray, value: float) -> np.ndarray:
    """Like torch's ``Tensor.masked_fill`` (no trailing underscore): a new array; ``x`` is left as it was."""
    return np.where(where, value, x)


def masked_fill_result_dropped(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Masked attention whose masking line returns a new array that nobody keeps.

    Source: facebookresearch/ParlAI#3068 (also lucidrains/flamingo-pytorch#10).
    The bug: ``scores.masked_fill(blocked, -inf)`` as a statement; the
    out-of-place ``masked_fill`` returns the masked copy and leaves ``scores``
    alone, so nothing is masked. The fix: ``scores = scores.masked_fill(...)``
    or the in-place ``masked_fill_``.

    Parameters and returns as :func:`weak_mask_value`.
    """
    q, k, v = qkv(q, k, v)
    keep = keep_mask(keep, q.shape[-2], k.shape[-2])
    s = scores(q, k)
    masked_fill(s, ~keep, -np.inf)  # the bug: the masked copy is dropped
    return weighted_values(softmax_quiet(s), v)


def nan_for_fully_masked_rows(q: Any, k: Any, v: Any, keep: Any) -> np.ndarray:
    """Masked attention with -inf and a plain softmax: a query that may attend to no key gets NaN.

    Source: pytorch/pytorch#103749 ("SDPA produces NaN with padding mask").
    The bug: ``softmax(where(keep, scores, -inf))`` is ``0 / 0`` on a row
    whose every key is blocked, and the NaN then spreads through the next
    layer. The fix (PyTorch's, since 2.5): such a row gets weights 0 and output 0.

    Parameters and returns as :func:`weak_mask_value`.
    """
    q, k, v = qkv(q, k, v)
    keep = keep_mask(keep, q.shape[-2], k.shape[-2])
    s = np.where(keep, scores(q, k), -np.inf)
    return weighted_values(softmax_quiet(s), v)  # the bug: exp(-inf - -inf) is NaN on an empty row


def additive_mask_cast_to_bool(q: Any, k: Any, v: Any, bias: Any) -> np.ndarray:
    """Attention handed an additive mask (0 to keep, -inf to block) that it turns into a boolean one by casting.

    Source: huggingface/transformers#38094 (Llama 4's SDPA path). The bug:
    ``bias.astype(bool)``: 0 becomes False and -inf True, so under the
    "True = attend" convention the mask is inverted. The fix: ``bias == 0``
    (or pass the additive mask on as it is).

    Parameters
    ----------
    q, k, v : array_like
        As in :func:`weak_mask_value`.
    bias : array_like of float, shape (..., T, S)
        0 where a query may attend, -inf where it may not.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    q, k, v = qkv(q, k, v)
    bias = as_float_array(bias, "bias")
    keep = keep_mask(bias.astype(bool), q.shape[-2], k.shape[-2])  # the bug: nonzero (blocked) becomes True
    s = np.where(keep, scores(q, k), -np.inf)
    return weighted_values(softmax_quiet(s), v)


def blocked_mask_passed_as_keep(q: Any, k: Any, v: Any) -> np.ndarray:
    """Causal attention that builds a mask with True = blocked and hands it to an API where True = attend.

    Source: rasbt/LLMs-from-scratch#1061, fixed by #1062. The bug:
    ``attn_mask=torch.triu(ones, diagonal=1).bool()`` passed to
    ``F.scaled_dot_product_attention``, which keeps the True entries, so each
    query sees only the future. The fix: pass ``~blocked`` (or ``is_causal=True``).

    Parameters
    ----------
    q, k, v : array_like, shapes (..., T, Dk), (..., T, Dk), (..., T, Dv)

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    q, k, v = qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    blocked = np.triu(np.ones((T, S), dtype=bool), k=1)  # True above the diagonal: the future
    return scaled_dot_product_attention(q, k, v, mask=blocked)[0]  # the bug: this API keeps True


def causal_mask_top_left(q: Any, k: Any, v: Any) -> np.ndarray:
    """Causal attention for the newest T of S tokens, with the diagonal starting at the top-left corner.

    Source: lucidrains/x-transformers#187 (and EleutherAI/gpt-neox#1178). The
    bug: the fast path called PyTorch's ``F.scaled_dot_product_attention(...,
    is_causal=True)``, which aligns the diagonal top-left: query ``i`` sees
    keys ``0 … i``. After a KV cache the T queries are the last T of S
    positions, so the one new token saw only the first key. The project's
    hand-written mask was right (lower-right, ``triu(S - T + 1)``), so the
    two paths disagreed whenever T < S. The fix: the lower-right mask
    (``causal_lower_right``), or no mask at all for one new token.

    Parameters
    ----------
    q : array_like, shape (..., T, Dk)
        The newest T tokens' queries.
    k, v : array_like, shapes (..., S, Dk), (..., S, Dv)
        All S tokens' keys and values, the cached ones first; S >= T.

    Returns
    -------
    numpy.ndarray, shape (..., T, Dv)
    """
    q, k, v = qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    if T > S:
        raise ValueError(f"the queries are the newest of the S tokens, so T <= S; got T = {T}, S = {S}")
    keep = np.tril(np.ones((T, S), dtype=bool))  # the bug: top-left, as is_causal=True; right is k=S - T
    return scaled_dot_product_attention(q, k, v, mask=keep)[0]


def sliding_window_one_too_wide(T: int, window: int) -> np.ndarray:
    """A causal sliding-window mask meant to let each query see ``window`` keys, its own among them.

    Source: huggingface/transformers#39408, fixed by #40163. The bug: the
    window was passed to flash-attention as ``(window, window)``, whose bounds
    are inclusive, so a query saw ``window + 1`` keys while the eager path's
    mask gave it ``window``. The fix: ``i - j <= window - 1``.

    Parameters
    ----------
    T : int
        Tokens (queries and keys).
    window : int
        Keys each query should see, its own included.

    Returns
    -------
    numpy.ndarray of bool, shape (T, T)
        True where query ``i`` may attend to key ``j``.
    """
    T, window = check_positive_int(T, "T", at_most=2**14), check_positive_int(window, "window")
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    return (j <= i) & (i - j <= window)  # the bug: inclusive of window + 1 keys
