"""Weight containers: every NumPy layer's weights, in one ``x @ w`` layout, validated once.

Taught from chapter 2 on (the projections W_q, W_k, W_v and W_o) and composed
by the later chapters (:class:`selfattention.EncoderParams` in chapter 5).

Every weight matrix acts on the right, ``x @ w``, with ``w`` of shape
``(d_in, d_out)``. PyTorch's ``nn.Linear`` stores the transpose; reading a
PyTorch module or state dict into these containers, with every transpose that
takes, is the job of :mod:`selfattention.interop` and nothing else.

A container checks its shapes once, when it is built, so the functions that
take it only need to check their inputs against it. Containers are frozen:
to change a weight, build a new container (``dataclasses.replace``) or update
the array in place (``params.q.weight[...] -= step``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_float_array,
    check_all_finite,
    check_head_split,
    check_matrix_shape,
    check_positive_int,
)

__all__ = ["Linear", "LayerNormParams", "AttentionParams", "FeedForwardParams", "project_qkv"]


class _Container:
    """What every weight container shares: walking its arrays by name."""

    def named_arrays(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """Yield ``(name, array)`` for every array inside, nested names joined by dots.

        A tuple of containers (a stack of layers) is walked with each
        item's index in the name, ``layers.0.attention.q.weight``.
        ``None`` entries (a layer without a bias) are skipped. The arrays are
        the container's own, not copies. Useful to count parameters
        (``sum(a.size for _, a in p.named_arrays())``) or to update them all.
        """
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, _Container):
                yield from value.named_arrays(f"{prefix}{field.name}.")
            elif isinstance(value, tuple):
                for i, item in enumerate(value):
                    if isinstance(item, _Container):
                        yield from item.named_arrays(f"{prefix}{field.name}.{i}.")
            elif isinstance(value, np.ndarray):
                yield f"{prefix}{field.name}", value

    def _require(self, name: str, kind: type) -> None:
        value = getattr(self, name)
        if not isinstance(value, kind):
            article = "an" if kind.__name__[0] in "AEIOU" else "a"
            raise ValueError(f"{name} must be {article} {kind.__name__}; got {type(value).__name__}")


def _set(container: Any, name: str, value: Any) -> None:
    object.__setattr__(container, name, value)  # frozen dataclasses convert their fields in __post_init__


@dataclass(frozen=True)
class Linear(_Container):
    """An affine map ``x @ weight + bias``.

    Parameters
    ----------
    weight : array_like, shape (d_in, d_out)
        ``nn.Linear.weight.T``.
    bias : array_like, shape (d_out,), optional
        ``nn.Linear.bias``; None for a layer without one.

    Raises
    ------
    ValueError
        If ``weight`` is not 2-D or ``bias`` is not of shape ``(d_out,)``.

    Notes
    -----
    See chapter 2 (the projections) and chapter 5 (the feed-forward layers).
    """

    weight: np.ndarray
    bias: np.ndarray | None = None

    def __post_init__(self) -> None:
        weight = as_float_array(self.weight, "weight")
        if weight.ndim != 2 or 0 in weight.shape:
            raise ValueError(
                f"weight must be a 2-D (d_in, d_out) matrix with d_in, d_out >= 1; got shape {weight.shape}"
            )
        check_all_finite(weight, "weight")
        _set(self, "weight", weight)
        if self.bias is not None:
            bias = as_float_array(self.bias, "bias")
            check_all_finite(bias, "bias")
            if bias.shape != (weight.shape[1],):
                raise ValueError(
                    f"bias must have shape (d_out,) = ({weight.shape[1]},) for weight {weight.shape}; got {bias.shape}"
                )
            _set(self, "bias", bias)

    @property
    def d_in(self) -> int:
        """Input width."""
        return self.weight.shape[0]

    @property
    def d_out(self) -> int:
        """Output width."""
        return self.weight.shape[1]

    def __call__(self, x: ArrayLike, name: str = "x") -> np.ndarray:
        """Apply the map to the last axis of ``x``: (..., d_in) -> (..., d_out)."""
        x = as_float_array(x, name)
        if x.ndim == 0 or x.shape[-1] != self.d_in:
            raise ValueError(
                f"{name} must have {self.d_in} features in its last axis for this layer; got shape {x.shape}"
            )
        check_all_finite(x, name)
        if x.ndim > 2:  # one (rows, d_in) @ (d_in, d_out) product: NumPy would loop over the leading axes
            y = (x.reshape(-1, self.d_in) @ self.weight).reshape(*x.shape[:-1], self.d_out)
        else:
            y = x @ self.weight
        return y if self.bias is None else y + self.bias


@dataclass(frozen=True)
class LayerNormParams(_Container):
    """The scale ``weight`` (gamma) and shift ``bias`` (beta) of a LayerNorm, each of shape (D,).

    ``bias`` may be None (``nn.LayerNorm(bias=False)``). See chapter 5.
    """

    weight: np.ndarray
    bias: np.ndarray | None = None

    def __post_init__(self) -> None:
        weight = as_float_array(self.weight, "weight")
        if weight.ndim != 1 or weight.shape[0] == 0:
            raise ValueError(f"weight must be a vector of shape (D,) with D >= 1; got shape {weight.shape}")
        check_all_finite(weight, "weight")
        _set(self, "weight", weight)
        if self.bias is not None:
            bias = as_float_array(self.bias, "bias")
            check_all_finite(bias, "bias")
            if bias.shape != weight.shape:
                raise ValueError(f"bias must have the weight's shape (D,) = {weight.shape}; got {bias.shape}")
            _set(self, "bias", bias)

    @property
    def d_model(self) -> int:
        """D, the normalised width."""
        return self.weight.shape[0]


@dataclass(frozen=True)
class FeedForwardParams(_Container):
    """The two linear layers of a transformer's feed-forward sub-layer: D -> F -> D.

    Parameters
    ----------
    up : Linear, (D, F)
        ``linear1`` in ``nn.TransformerEncoderLayer``.
    down : Linear, (F, D)
        ``linear2``.

    Raises
    ------
    ValueError
        If either is not a :class:`Linear` or the widths do not chain.

    Notes
    -----
    See chapter 5.
    """

    up: Linear
    down: Linear

    def __post_init__(self) -> None:
        self._require("up", Linear)
        self._require("down", Linear)
        if self.down.d_in != self.up.d_out or self.down.d_out != self.up.d_in:
            raise ValueError(
                f"up maps {self.up.d_in} -> {self.up.d_out} features, so down must map "
                f"{self.up.d_out} -> {self.up.d_in}; got {self.down.d_in} -> {self.down.d_out}"
            )

    @property
    def d_model(self) -> int:
        """D."""
        return self.up.d_in

    @property
    def dim_feedforward(self) -> int:
        """F, the hidden width."""
        return self.up.d_out


@dataclass(frozen=True)
class AttentionParams(_Container):
    """The four projections of a multi-head attention layer.

    With H query heads and Hkv key/value heads of width Dh (values of width Dv):

    - ``q``: (D, H*Dh), the queries' projection;
    - ``k``: (Dkv, Hkv*Dh) and ``v``: (Dkv, Hkv*Dv), the keys' and values'
      (Dkv = D for self-attention);
    - ``out``: (H*Dv, D_out), the output projection.

    Standard multi-head attention has Hkv = H. Fewer key/value heads (grouped-
    query attention; Hkv = 1 is multi-query attention) shows as ``k`` and ``v``
    having fewer columns: ``q.d_out / k.d_out = H / Hkv``, the number of query
    heads that share one key/value head. The head count itself is not stored;
    the functions that use the container take ``num_heads``.

    Raises
    ------
    ValueError
        If a part is not a :class:`Linear` or the widths do not fit together.

    Notes
    -----
    See chapter 3 (single head), chapter 4 (multi-head). Build one from the
    fused PyTorch layout with :meth:`from_fused` or from a module with
    :meth:`from_torch`.
    """

    q: Linear
    k: Linear
    v: Linear
    out: Linear

    def __post_init__(self) -> None:
        for name in ("q", "k", "v", "out"):
            self._require(name, Linear)
        if self.k.d_in != self.v.d_in:
            raise ValueError(f"k and v must read the same input width; got {self.k.d_in} and {self.v.d_in}")
        if self.q.d_out % self.k.d_out:
            raise ValueError(
                f"q has {self.q.d_out} outputs and k has {self.k.d_out}; q's must be a whole multiple of k's "
                "(H*Dh and Hkv*Dh, with H a multiple of Hkv)"
            )
        expected = self.v.d_out * self.kv_groups
        if self.out.d_in != expected:
            raise ValueError(
                f"out must take the H*Dv = {expected} features of the merged heads "
                f"(v gives {self.v.d_out} for {self.kv_groups} query head(s) per key/value head); got {self.out.d_in}"
            )

    @property
    def d_model(self) -> int:
        """D, the width of the queries' input."""
        return self.q.d_in

    @property
    def kv_groups(self) -> int:
        """H / Hkv: how many query heads share each key/value head (1 for standard multi-head attention)."""
        return self.q.d_out // self.k.d_out

    def head_counts(self, num_heads: int) -> tuple[int, int]:
        """``(H, Hkv)`` for ``num_heads`` query heads, checking that they fit the weights."""
        width = "the model width D" if self.q.d_out == self.q.d_in else "the query width H*Dh"
        H = check_positive_int(num_heads, "num_heads")
        check_head_split(self.q.d_out, H, width)
        if H % self.kv_groups:
            raise ValueError(
                f"num_heads={H} must be a multiple of {self.kv_groups}, the query heads per key/value head "
                f"(q has {self.q.d_out} outputs, k has {self.k.d_out})"
            )
        Hkv = H // self.kv_groups
        if self.v.d_out % Hkv:
            raise ValueError(
                f"with num_heads={H}, the values' width Hkv*Dv = {self.v.d_out} must split into Hkv={Hkv} heads, "
                f"but {self.v.d_out} is not divisible by {Hkv}; choose num_heads so that it is"
            )
        return H, Hkv

    @property
    def w_qkv(self) -> np.ndarray:
        """The fused ``(D, 3D)`` input projection ``[W_q | W_k | W_v]`` (a new array)."""
        return np.concatenate([self.q.weight, self.k.weight, self.v.weight], axis=1)

    @property
    def b_qkv(self) -> np.ndarray | None:
        """The fused input bias, or None if the projections have none."""
        biases = (self.q.bias, self.k.bias, self.v.bias)
        return None if any(b is None for b in biases) else np.concatenate(biases)

    @property
    def w_out(self) -> np.ndarray:
        """The output projection's weight."""
        return self.out.weight

    @property
    def b_out(self) -> np.ndarray | None:
        """The output projection's bias, or None."""
        return self.out.bias

    @classmethod
    def from_fused(
        cls,
        w_qkv: ArrayLike,
        w_out: ArrayLike,
        b_qkv: ArrayLike | None = None,
        b_out: ArrayLike | None = None,
        *,
        d_model: int | None = None,
    ) -> AttentionParams:
        """Build from the fused layout of ``nn.MultiheadAttention`` (already transposed).

        Parameters
        ----------
        w_qkv : array_like, shape (D, 3*D)
            Column blocks ``[W_q | W_k | W_v]``: ``in_proj_weight.T``.
        w_out : array_like, shape (D, D)
            ``out_proj.weight.T``.
        b_qkv : array_like, shape (3*D,), optional
        b_out : array_like, shape (D,), optional
        d_model : int, optional
            The width of the input these weights will meet; the error
            messages then name it.

        Raises
        ------
        ValueError
            If a shape does not fit.
        """
        w_qkv = as_float_array(w_qkv, "w_qkv")
        w_out = as_float_array(w_out, "w_out")
        if d_model is not None:
            d_model = check_positive_int(d_model, "d_model")
        D = d_model if d_model is not None else (w_qkv.shape[0] if w_qkv.ndim == 2 else -1)
        context = f" for x with D={D}" if d_model is not None else ""
        if D < 0:
            raise ValueError(f"w_qkv must be a 2-D (D, 3*D) matrix; got shape {w_qkv.shape}")
        check_matrix_shape(w_qkv, "w_qkv", (D, 3 * D), f"(D, 3*D){context}")
        check_matrix_shape(w_out, "w_out", (D, D), f"(D, D){context}")
        biases: list[Any] = [None, None, None]
        if b_qkv is not None:
            b_qkv = as_float_array(b_qkv, "b_qkv")
            if b_qkv.shape != (3 * D,):
                raise ValueError(f"b_qkv must have shape (3*D,) = ({3 * D},){context}; got {b_qkv.shape}")
            biases = np.split(b_qkv, 3)
        if b_out is not None:
            b_out = as_float_array(b_out, "b_out")
            if b_out.shape != (D,):
                raise ValueError(f"b_out must have shape (D,) = ({D},){context}; got {b_out.shape}")
        w_q, w_k, w_v = np.split(w_qkv, 3, axis=1)  # each (D, D)
        return cls(Linear(w_q, biases[0]), Linear(w_k, biases[1]), Linear(w_v, biases[2]), Linear(w_out, b_out))

    @classmethod
    def from_torch(cls, module: Any) -> AttentionParams:
        """Read a ``torch.nn.MultiheadAttention`` (see :func:`selfattention.attention_params`)."""
        from .interop import attention_params

        return attention_params(module)


def project_qkv(
    x: ArrayLike,
    params: AttentionParams,
    key: ArrayLike | None = None,
    value: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The input projections of attention: queries, keys and values from their inputs.

    .. math::

        Q = X W_q + b_q, \qquad K = X_k W_k + b_k, \qquad V = X_v W_v + b_v

    The first step of :func:`selfattention.multihead_attention`; the heads are
    split afterwards (:func:`selfattention.split_heads`).

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        The queries' input.
    params : AttentionParams
    key, value : array_like, shape (..., S, Dkv), optional
        The keys' and values' inputs for cross-attention (``value`` defaults
        to ``key``); both default to ``x`` (self-attention).

    Returns
    -------
    q : numpy.ndarray, shape (..., T, H*Dh)
    k : numpy.ndarray, shape (..., S, Hkv*Dh)
    v : numpy.ndarray, shape (..., S, Hkv*Dv)

    Raises
    ------
    ValueError
        If ``params`` is not an :class:`AttentionParams`, an input has fewer
        than 2 axes or the wrong width, ``value`` comes without ``key``, or
        ``key`` and ``value`` hold different numbers of tokens.

    Notes
    -----
    See chapter 4 (multi-head attention, step by step).
    """
    if not isinstance(params, AttentionParams):
        raise ValueError(f"params must be an AttentionParams; got {type(params).__name__}")
    x = as_float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 axes (..., T, D); got shape {x.shape}")
    if key is None and value is not None:
        raise ValueError("value was given without key; pass key (and value, if it differs from key)")
    if key is None:
        return params.q(x), params.k(x), params.v(x)
    key = as_float_array(key, "key")
    value = key if value is None else as_float_array(value, "value")
    for name, arr in (("key", key), ("value", value)):
        if arr.ndim < 2:
            raise ValueError(f"{name} must have at least 2 axes (..., S, D); got shape {arr.shape}")
        if arr.shape[-1] != params.k.d_in and params.k.d_in == x.shape[-1]:
            raise ValueError(f"{name} has {arr.shape[-1]} features but x has {x.shape[-1]}; they must match")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key has {key.shape[-2]} tokens but value has {value.shape[-2]}; they must match")
    try:
        np.broadcast_shapes(x.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the batch axes of x {x.shape[:-2]}, key {key.shape[:-2]} and value {value.shape[:-2]} "
            "do not broadcast together; give key and value the same batch size as x (or 1)"
        ) from None
    return params.q(x), params.k(key, "key"), params.v(value, "value")
