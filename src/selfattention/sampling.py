"""Choosing the next token from a decoder's logits: temperature, top-k and top-p (nucleus) sampling.

Taught in chapter 9. Greedy decoding takes the most likely token every time;
sampling draws it from the model's distribution instead, reshaped in three
common ways, applied in the order Hugging Face ``transformers`` applies its
``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper``:

1. **temperature** :math:`\\tau`: the softmax of :math:`z / \\tau`; below 1 it
   sharpens the distribution toward the greedy choice, above 1 it flattens it;
2. **top-k**: keep only the :math:`k` most likely tokens (and any tied with the
   :math:`k`-th);
3. **top-p** (nucleus) :cite:`holtzman2020curious`: keep the most likely tokens
   until their probabilities add up to at least :math:`p`.

Whatever is kept is renormalised to sum to 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_float_array, check_all_finite, check_min_ndim, check_positive_int, check_real_scalar

__all__ = ["next_token_probabilities", "sample_next_token"]


def next_token_probabilities(
    logits: ArrayLike, *, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    r"""The distribution a sampler draws the next token from, after temperature, top-k and top-p.

    .. math::

        p = \operatorname{softmax}(z / \tau), \quad
        p_i \leftarrow 0 \text{ outside the kept set}, \quad p \leftarrow p / \textstyle\sum_i p_i

    Parameters
    ----------
    logits : array_like, shape (..., V)
        One score per vocabulary entry (the last row of a decoder's output),
        for any number of sequences.
    temperature : float, default 1.0
        :math:`\tau > 0`. 1 leaves the model's distribution as it is.
    top_k : int, optional
        Keep the ``top_k`` highest logits (and any tied with the lowest of
        them); the others get probability 0.
    top_p : float, optional
        In ``(0, 1]``: keep the most likely tokens, in order, until their
        probability (after temperature and top-k) adds up to at least
        ``top_p``; always at least one. Among equally likely tokens at the
        cut, the higher index comes first. ``transformers`` does the same when
        PyTorch's sort keeps equal logits in their order, as it does for rows
        of up to 16 here; its sort is not stable on longer rows, so with ties
        at the cut ``transformers`` may keep another of the tied tokens.

    Returns
    -------
    numpy.ndarray, shape (..., V), float64
        Non-negative, each row summing to 1.

    Raises
    ------
    ValueError
        If ``logits`` is not an array of finite numbers with at least one
        entry on its last axis, ``temperature`` is not a positive number,
        ``top_k`` is not a positive integer or ``top_p`` is not in (0, 1].

    Notes
    -----
    See chapter 9 (sampling). The same numbers as ``transformers``'
    ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper``
    applied in that order (tested), computed in float64.
    """
    z = as_float_array(logits, "logits").astype(np.float64)
    check_min_ndim(z, "logits", 1, "(..., V)")
    if z.shape[-1] == 0 or z.size == 0:
        raise ValueError(f"logits must hold at least one score per vocabulary entry; got shape {z.shape}")
    check_all_finite(z, "logits")
    temperature = check_real_scalar(temperature, "temperature", positive=True)
    if top_k is not None:
        top_k = check_positive_int(top_k, "top_k")
    if top_p is not None:
        top_p = check_real_scalar(top_p, "top_p", positive=True)
        if top_p > 1:
            raise ValueError(f"top_p must lie in (0, 1], a share of the probability; got {top_p}")
    with np.errstate(over="ignore"):
        z = z / temperature
    if not np.isfinite(z).all():
        raise ValueError(
            f"logits / temperature overflowed float64 (temperature={temperature:g}); raise the temperature"
        )
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[..., -top_k, None]  # the k-th largest logit of each row
        z = np.where(z >= kth, z, -np.inf)  # ties with the k-th are kept, as transformers keeps them
    probabilities = np.exp(z - z.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    if top_p is not None and top_p < 1:
        # most likely first; among equal ones the higher index first, as transformers' ascending sort read
        # backwards gives them when it keeps ties in order (torch.sort does on short rows, not on long ones)
        order = np.argsort(probabilities, axis=-1, kind="stable")[..., ::-1]
        ranked = np.take_along_axis(probabilities, order, axis=-1)
        before = np.cumsum(ranked, axis=-1) - ranked  # the probability of every token ranked above each one
        keep_ranked = before < top_p  # the first token always: nothing is ranked above it
        keep = np.empty_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=-1)
        probabilities = np.where(keep, probabilities, 0.0)
        probabilities /= probabilities.sum(axis=-1, keepdims=True)
    return probabilities


def sample_next_token(
    logits: ArrayLike,
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Any:
    """Draw the next token from :func:`next_token_probabilities`; an int for (V,) logits, an array for (..., V).

    Parameters
    ----------
    logits : array_like, shape (..., V)
    rng : numpy.random.Generator
        The source of randomness, e.g. ``np.random.default_rng(0)``: a seeded
        generator makes the draws repeatable.
    temperature, top_k, top_p
        As in :func:`next_token_probabilities`.

    Returns
    -------
    int or numpy.ndarray of int, shape (...)
        The drawn token id of each sequence.

    Raises
    ------
    ValueError
        As :func:`next_token_probabilities`, or if ``rng`` is not a NumPy
        ``Generator``.

    Notes
    -----
    One uniform number per sequence, ``u``, picks the first token whose
    cumulative probability passes it, so the same generator state gives the
    same tokens. See chapter 9.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator, e.g. np.random.default_rng(0); got {type(rng).__name__}"
        )
    probabilities = next_token_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    cumulative = np.cumsum(probabilities, axis=-1)
    u = rng.random(probabilities.shape[:-1] + (1,)) * cumulative[..., -1:]  # the total is 1 up to rounding
    tokens = np.minimum((cumulative <= u).sum(axis=-1), probabilities.shape[-1] - 1)
    return int(tokens) if tokens.ndim == 0 else tokens
