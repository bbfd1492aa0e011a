"""The transformer encoder block in NumPy: attention, feed-forward, residuals, LayerNorm.

Taught in chapter 5. Parameters and behaviour follow
``torch.nn.TransformerEncoderLayer`` (post-norm by default, ``norm_first=True``
for pre-norm, ``activation`` "relu" or "gelu").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import erf

from ._validation import (
    as_float_array,
    check_all_finite,
    check_bool,
    check_choice,
    check_min_ndim,
    check_real_scalar,
)
from .multihead import multihead_attention
from .params import AttentionParams, FeedForwardParams, LayerNormParams, Linear, _Container

__all__ = [
    "layer_norm",
    "relu",
    "gelu",
    "feed_forward",
    "EncoderParams",
    "encoder_block",
    "encoder_stack",
]


def layer_norm(
    x: ArrayLike,
    weight: ArrayLike | None = None,
    bias: ArrayLike | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    r"""Normalise each token vector to mean 0 and variance 1, then scale and shift.

    .. math::

        \operatorname{LN}(x) = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} \odot \gamma + \beta,
        \qquad \mu = \tfrac{1}{D}\textstyle\sum_i x_i,\quad \sigma^2 = \tfrac{1}{D}\textstyle\sum_i (x_i - \mu)^2

    The variance is the biased one (divide by D), as in ``torch.nn.LayerNorm``.

    Parameters
    ----------
    x : array_like, shape (..., D)
        Normalised over the last axis.
    weight, bias : array_like, shape (D,), optional
        :math:`\gamma` and :math:`\beta`; default 1 and 0.
    eps : float, default 1e-5
        Added to the variance; must be positive.

    Returns
    -------
    numpy.ndarray, shape (..., D)

    Raises
    ------
    ValueError
        If ``x`` is 0-dimensional, ``weight`` or ``bias`` is not of shape
        ``(D,)``, or ``eps`` is not a positive number.

    Notes
    -----
    See chapter 5 (the encoder block) and :cite:`ba2016layer`.
    """
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 1, "(..., D)")
    eps = check_real_scalar(eps, "eps", positive=True)
    D = x.shape[-1]
    if D == 0:
        raise ValueError(f"x must have at least one feature to normalise; its last axis is empty (shape {x.shape})")
    check_all_finite(x, "x")
    if x.dtype == np.float16:  # float16's range ends at 65,504: a variance passes it easily, so work in float32
        return layer_norm(x.astype(np.float32), weight, bias, eps).astype(np.float16)
    mean, var = moments(x)
    y = (x - mean) / np.sqrt(var + eps)
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        param = as_float_array(param, name)
        if param.shape != (D,):
            raise ValueError(f"{name} must have shape (D,) = ({D},) for x with D={D}; got {param.shape}")
        check_all_finite(param, name)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
            y = y * param if name == "weight" else y + param
    if not np.isfinite(y).all():
        raise ValueError(f"layer_norm overflowed {y.dtype}: weight * (x - mean) / std is too large to represent")
    return y


def moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and biased variance of a finite ``x`` over its last axis, refusing an overflow.

    Squares of numbers past about 1e154 (float64) or 1.8e19 (float32)
    overflow, and the variance would become ``inf``, normalising every
    token to 0 without a word; LayerNorm's forward and backward share this.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        var = x.var(axis=-1, keepdims=True)  # biased, as PyTorch
    if not (np.isfinite(mean).all() and np.isfinite(var).all()):
        raise ValueError(
            f"x is too large to normalise in {x.dtype}: its mean or variance overflowed (largest |x| = "
            f"{float(np.abs(x).max()):.3g}); scale x down"
            + (", or compute in float64" if x.dtype != np.float64 else "")
        )
    return mean, var


def relu(x: ArrayLike) -> np.ndarray:
    """ReLU, ``max(x, 0)``. See chapter 5."""
    return np.maximum(as_float_array(x, "x"), 0.0)


def gelu(x: ArrayLike) -> np.ndarray:
    r"""Exact GELU, :math:`x \Phi(x) = \tfrac{x}{2}\,(1 + \operatorname{erf}(x/\sqrt{2}))`.

    This is PyTorch's default ``gelu`` (not the tanh approximation). See chapter 5.
    """
    x = as_float_array(x, "x")
    work = x.astype(np.float32) if x.dtype == np.float16 else x  # scipy's erf has no float16 loop
    return (0.5 * work * (1.0 + erf(work / math.sqrt(2.0)))).astype(x.dtype, copy=False)


ACTIVATIONS: dict[str, Callable[[ArrayLike], np.ndarray]] = {"relu": relu, "gelu": gelu}


def feed_forward(x: ArrayLike, params: FeedForwardParams, activation: str = "relu") -> np.ndarray:
    r"""The position-wise feed-forward sub-layer, :math:`\sigma(x W_1 + b_1) W_2 + b_2`: D -> F -> D.

    Parameters
    ----------
    x : array_like, shape (..., D)
    params : FeedForwardParams
    activation : {"relu", "gelu"}, default "relu"

    Returns
    -------
    numpy.ndarray, shape (..., D)

    Raises
    ------
    ValueError
        If ``params`` is not a :class:`~selfattention.FeedForwardParams`, the
        activation is unknown, or x's width is not D.

    Notes
    -----
    See chapter 5.
    """
    if not isinstance(params, FeedForwardParams):
        raise ValueError(f"params must be a FeedForwardParams; got {type(params).__name__}")
    act = ACTIVATIONS[check_choice(activation, ACTIVATIONS, "activation")]
    return params.down(act(params.up(x)))  # (..., F) -> (..., D)


@dataclass(frozen=True)
class EncoderParams(_Container):
    """Every weight of one encoder block, in the package's ``x @ w`` layout.

    Composed of the containers of its parts, with D the model width and F the
    feed-forward width, and the ``nn.TransformerEncoderLayer`` parameters each
    comes from:

    - ``attention``: :class:`~selfattention.AttentionParams` (``self_attn``);
    - ``feed_forward``: :class:`~selfattention.FeedForwardParams`, ``up`` (D, F)
      = ``linear1`` and ``down`` (F, D) = ``linear2``;
    - ``norm1``, ``norm2``: :class:`~selfattention.LayerNormParams` (D,).

    The flat names of the fused PyTorch layout read through: ``w_qkv`` (D, 3D),
    ``b_qkv``, ``w_out``, ``b_out``, ``w_ff1`` (D, F), ``b_ff1``, ``w_ff2``
    (F, D), ``b_ff2``, ``norm1_weight``, ``norm1_bias``, ``norm2_weight``,
    ``norm2_bias``; :meth:`from_arrays` builds one from them.

    Raises
    ------
    ValueError
        On construction, if a part has the wrong type or the widths of the
        parts do not agree.

    Notes
    -----
    See chapter 5. Read one out of PyTorch with :meth:`from_torch`.
    """

    attention: AttentionParams
    feed_forward: FeedForwardParams
    norm1: LayerNormParams
    norm2: LayerNormParams

    def __post_init__(self) -> None:
        for name, kind in (
            ("attention", AttentionParams),
            ("feed_forward", FeedForwardParams),
            ("norm1", LayerNormParams),
            ("norm2", LayerNormParams),
        ):
            self._require(name, kind)
        D = self.attention.d_model
        widths = {
            "attention output (out.d_out)": self.attention.out.d_out,
            "feed_forward input (up.d_in)": self.feed_forward.d_model,
            "norm1": self.norm1.d_model,
            "norm2": self.norm2.d_model,
        }
        for name, width in widths.items():
            if width != D:
                raise ValueError(
                    f"every part must have the model width D={D} of the attention's input; {name} has {width}"
                )

    @property
    def d_model(self) -> int:
        """D, the model width."""
        return self.attention.d_model

    @property
    def dim_feedforward(self) -> int:
        """F, the feed-forward width."""
        return self.feed_forward.dim_feedforward

    @classmethod
    def from_arrays(
        cls,
        w_qkv: ArrayLike,
        b_qkv: ArrayLike | None,
        w_out: ArrayLike,
        b_out: ArrayLike | None,
        w_ff1: ArrayLike,
        b_ff1: ArrayLike | None,
        w_ff2: ArrayLike,
        b_ff2: ArrayLike | None,
        norm1_weight: ArrayLike,
        norm1_bias: ArrayLike | None,
        norm2_weight: ArrayLike,
        norm2_bias: ArrayLike | None,
    ) -> EncoderParams:
        """Build from the twelve flat arrays of the fused layout (any bias may be None)."""

        def part(names: str, build: Callable[[], Any]) -> Any:
            try:
                return build()
            except ValueError as exc:  # name the flat arrays the part was built from
                raise ValueError(f"{names}: {exc}") from None

        return cls(
            attention=AttentionParams.from_fused(w_qkv, w_out, b_qkv, b_out),
            feed_forward=FeedForwardParams(
                part("w_ff1, b_ff1", lambda: Linear(w_ff1, b_ff1)),
                part("w_ff2, b_ff2", lambda: Linear(w_ff2, b_ff2)),
            ),
            norm1=part("norm1_weight, norm1_bias", lambda: LayerNormParams(norm1_weight, norm1_bias)),
            norm2=part("norm2_weight, norm2_bias", lambda: LayerNormParams(norm2_weight, norm2_bias)),
        )

    @classmethod
    def from_torch(cls, layer: Any) -> EncoderParams:
        """Copy every parameter out of a ``torch.nn.TransformerEncoderLayer``.

        Raises
        ------
        ValueError
            If ``layer`` is not an ``nn.TransformerEncoderLayer``.
        """
        from .interop import encoder_params

        return encoder_params(layer)


# The flat names of the fused layout, read through to the parts (chapter 5 uses them).
_FLAT_NAMES = {
    "w_qkv": "attention.w_qkv",
    "b_qkv": "attention.b_qkv",
    "w_out": "attention.out.weight",
    "b_out": "attention.out.bias",
    "w_ff1": "feed_forward.up.weight",
    "b_ff1": "feed_forward.up.bias",
    "w_ff2": "feed_forward.down.weight",
    "b_ff2": "feed_forward.down.bias",
    "norm1_weight": "norm1.weight",
    "norm1_bias": "norm1.bias",
    "norm2_weight": "norm2.weight",
    "norm2_bias": "norm2.bias",
}
for _name, _path in _FLAT_NAMES.items():
    setattr(EncoderParams, _name, property(attrgetter(_path), doc=f"``{_path}``"))


def encoder_block(
    x: ArrayLike,
    params: EncoderParams,
    num_heads: int,
    mask: ArrayLike | None = None,
    norm_first: bool = False,
    activation: str = "relu",
    eps: float = 1e-5,
    *,
    return_weights: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""One transformer encoder block, as ``nn.TransformerEncoderLayer`` computes it.

    Post-norm (the default, as in the original transformer):

    .. math::

        h = \operatorname{LN}_1(x + \operatorname{MHA}(x)), \qquad
        y = \operatorname{LN}_2(h + \operatorname{FF}(h))

    Pre-norm (``norm_first=True``):

    .. math::

        h = x + \operatorname{MHA}(\operatorname{LN}_1(x)), \qquad
        y = h + \operatorname{FF}(\operatorname{LN}_2(h))

    with :math:`\operatorname{FF}(h) = \sigma(h W_1 + b_1) W_2 + b_2`.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        Input tokens.
    params : EncoderParams
        The block's weights.
    num_heads : int
        H; must divide D.
    mask : array_like, optional
        Attention mask, as in :func:`selfattention.multihead_attention`
        (``src_mask`` in PyTorch, with the package's polarity for booleans).
    norm_first : bool, default False
        Pre-norm instead of post-norm.
    activation : {"relu", "gelu"}, default "relu"
        The feed-forward nonlinearity.
    eps : float, default 1e-5
        LayerNorm's epsilon.
    return_weights : bool, default False
        Also return the attention weights, one ``(T, S)`` map per head.
        Chapter 13 reads a pretrained model's heads this way.

    Returns
    -------
    y : numpy.ndarray, shape (..., T, D)
    weights : numpy.ndarray, shape (..., H, T, S)
        Only with ``return_weights=True``.

    Raises
    ------
    ValueError
        If ``activation`` is unknown, ``params`` is not an ``EncoderParams``,
        x's width differs from the parameters', or an argument of the
        attention or LayerNorm is invalid.

    Notes
    -----
    See chapter 5.
    """
    check_choice(activation, ACTIVATIONS, "activation")
    if not isinstance(params, EncoderParams):
        hint = "; pass one block's EncoderParams (encoder_stack takes a list)" if isinstance(params, list) else ""
        raise ValueError(f"params must be an EncoderParams; got {type(params).__name__}{hint}")
    norm_first = check_bool(norm_first, "norm_first")
    return_weights = check_bool(return_weights, "return_weights")
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    if x.shape[-1] != params.d_model:
        raise ValueError(f"x has width D={x.shape[-1]} but the parameters are for D={params.d_model}")
    p = params
    kept: list[np.ndarray] = []

    def attention(h: np.ndarray) -> np.ndarray:
        out, weights = multihead_attention(h, p.attention, num_heads=num_heads, mask=mask)  # (..., T, D)
        kept.append(weights)  # (..., H, T, S)
        return out

    def norm(h: np.ndarray, which: LayerNormParams) -> np.ndarray:
        return layer_norm(h, which.weight, which.bias, eps)

    if norm_first:
        x = x + attention(norm(x, p.norm1))
        x = x + feed_forward(norm(x, p.norm2), p.feed_forward, activation)
    else:
        x = norm(x + attention(x), p.norm1)
        x = norm(x + feed_forward(x, p.feed_forward, activation), p.norm2)
    return (x, kept[0]) if return_weights else x


def encoder_stack(
    x: ArrayLike,
    layers: Sequence[EncoderParams],
    num_heads: int,
    mask: ArrayLike | None = None,
    norm_first: bool = False,
    activation: str = "relu",
    eps: float = 1e-5,
    final_norm: LayerNormParams | tuple[ArrayLike, ArrayLike | None] | None = None,
    final_norm_eps: float | None = None,
) -> np.ndarray:
    """N encoder blocks in sequence, as ``nn.TransformerEncoder`` runs them.

    Parameters
    ----------
    x : array_like, shape (..., T, D)
        Input tokens.
    layers : sequence of EncoderParams
        One per block, applied in order.
    num_heads, mask, norm_first, activation, eps
        As in :func:`encoder_block`, shared by every block.
    final_norm : LayerNormParams or (weight, bias), optional
        A LayerNorm after the last block (``nn.TransformerEncoder``'s
        ``norm``); pre-norm stacks usually have one.
    final_norm_eps : float, optional
        The final LayerNorm's epsilon; defaults to ``eps``. PyTorch lets the
        two differ (``nn.TransformerEncoder(layer, N, norm=nn.LayerNorm(D, eps=...))``).

    Returns
    -------
    numpy.ndarray, shape (..., T, D)

    Raises
    ------
    ValueError
        If ``layers`` is empty or holds something other than ``EncoderParams``,
        ``final_norm`` is not a (weight, bias) pair, or a block raises.

    Notes
    -----
    See chapter 5 (a stack of N layers).
    """
    if isinstance(layers, EncoderParams):
        raise ValueError(
            "layers must be a list of EncoderParams, one per block; got a single EncoderParams "
            "(pass [params] for one block, or [params] * N to repeat the same weights N times)"
        )
    if not isinstance(layers, Sequence) or isinstance(layers, str):
        raise ValueError(f"layers must be a list of EncoderParams, one per block; got {type(layers).__name__}")
    layers = list(layers)
    if not layers:
        raise ValueError("layers must hold at least one EncoderParams; got an empty sequence")
    for index, params in enumerate(layers):
        if not isinstance(params, EncoderParams):
            raise ValueError(f"layers[{index}] must be an EncoderParams; got {type(params).__name__}")
    if isinstance(final_norm, (tuple, list)) and len(final_norm) == 2:
        try:
            final_norm = LayerNormParams(*final_norm)
        except ValueError as exc:
            raise ValueError(f"final_norm must be a (weight, bias) pair of LayerNorm parameters: {exc}") from None
    if final_norm is not None and not isinstance(final_norm, LayerNormParams):
        raise ValueError(
            f"final_norm must be a LayerNormParams, a (weight, bias) pair or None; got {type(final_norm).__name__}"
        )
    final_norm_eps = (
        eps if final_norm_eps is None else check_real_scalar(final_norm_eps, "final_norm_eps", positive=True)
    )
    for params in layers:
        x = encoder_block(x, params, num_heads, mask=mask, norm_first=norm_first, activation=activation, eps=eps)
    if final_norm is not None:
        x = layer_norm(x, final_norm.weight, final_norm.bias, final_norm_eps)
    return x
