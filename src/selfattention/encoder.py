"""The transformer encoder block in NumPy: attention, feed-forward, residuals, LayerNorm.

Taught in chapter 5. Parameters and behaviour follow
``torch.nn.TransformerEncoderLayer`` (post-norm by default, ``norm_first=True``
for pre-norm, ``activation`` "relu" or "gelu").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import erf

from ._validation import as_float_array, check_min_ndim, check_real_scalar
from .multihead import multihead_attention

__all__ = [
    "layer_norm",
    "relu",
    "gelu",
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
    eps = check_real_scalar(eps, "eps")
    if eps <= 0:
        raise ValueError(f"eps must be positive; got {eps}")
    D = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)  # biased, as PyTorch
    y = (x - mean) / np.sqrt(var + eps)
    for name, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        param = as_float_array(param, name)
        if param.shape != (D,):
            raise ValueError(f"{name} must have shape (D,) = ({D},) for x with D={D}; got {param.shape}")
        y = y * param if name == "weight" else y + param
    return y


def relu(x: ArrayLike) -> np.ndarray:
    """ReLU, ``max(x, 0)``. See chapter 5."""
    return np.maximum(as_float_array(x, "x"), 0.0)


def gelu(x: ArrayLike) -> np.ndarray:
    r"""Exact GELU, :math:`x \Phi(x) = \tfrac{x}{2}\,(1 + \operatorname{erf}(x/\sqrt{2}))`.

    This is PyTorch's default ``gelu`` (not the tanh approximation). See chapter 5.
    """
    x = as_float_array(x, "x")
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))  # a Python float keeps float32 as float32


ACTIVATIONS: dict[str, Callable[[ArrayLike], np.ndarray]] = {"relu": relu, "gelu": gelu}


@dataclass
class EncoderParams:
    """Every weight of one encoder block, in the package's ``x @ w`` layout.

    Shapes, with D the model width and F the feed-forward width, and the
    ``nn.TransformerEncoderLayer`` parameter each one comes from:

    - ``w_qkv`` (D, 3D) and ``b_qkv`` (3D,): ``self_attn.in_proj_weight.T`` and ``in_proj_bias``;
    - ``w_out`` (D, D) and ``b_out`` (D,): ``self_attn.out_proj.weight.T`` and ``.bias``;
    - ``w_ff1`` (D, F) and ``b_ff1`` (F,): ``linear1.weight.T`` and ``linear1.bias``;
    - ``w_ff2`` (F, D) and ``b_ff2`` (D,): ``linear2.weight.T`` and ``linear2.bias``;
    - ``norm1_weight``, ``norm1_bias``, ``norm2_weight``, ``norm2_bias`` (D,):
      ``norm1.weight``, ``norm1.bias``, ``norm2.weight``, ``norm2.bias``.

    Raises
    ------
    ValueError
        On construction, if any array has the wrong shape for the D and F
        implied by ``w_qkv`` and ``w_ff1``.

    Notes
    -----
    See chapter 5. Read one out of PyTorch with :meth:`from_torch`.
    """

    w_qkv: np.ndarray
    b_qkv: np.ndarray
    w_out: np.ndarray
    b_out: np.ndarray
    w_ff1: np.ndarray
    b_ff1: np.ndarray
    w_ff2: np.ndarray
    b_ff2: np.ndarray
    norm1_weight: np.ndarray
    norm1_bias: np.ndarray
    norm2_weight: np.ndarray
    norm2_bias: np.ndarray

    def __post_init__(self) -> None:
        for field in fields(self):
            setattr(self, field.name, as_float_array(getattr(self, field.name), field.name))
        if self.w_qkv.ndim != 2 or self.w_qkv.shape[1] != 3 * self.w_qkv.shape[0]:
            raise ValueError(f"w_qkv must have shape (D, 3*D); got {self.w_qkv.shape}")
        if self.w_ff1.ndim != 2:
            raise ValueError(f"w_ff1 must have shape (D, F); got {self.w_ff1.shape}")
        D, F = self.w_qkv.shape[0], self.w_ff1.shape[1]
        expected = {
            "b_qkv": (3 * D,), "w_out": (D, D), "b_out": (D,),
            "w_ff1": (D, F), "b_ff1": (F,), "w_ff2": (F, D), "b_ff2": (D,),
            "norm1_weight": (D,), "norm1_bias": (D,), "norm2_weight": (D,), "norm2_bias": (D,),
        }
        for name, shape in expected.items():
            got = getattr(self, name).shape
            if got != shape:
                raise ValueError(f"{name} must have shape {shape} for D={D}, F={F}; got {got}")

    @property
    def d_model(self) -> int:
        """D, the model width."""
        return self.w_qkv.shape[0]

    @property
    def dim_feedforward(self) -> int:
        """F, the feed-forward width."""
        return self.w_ff1.shape[1]

    @classmethod
    def from_torch(cls, layer: Any) -> "EncoderParams":
        """Copy every parameter out of a ``torch.nn.TransformerEncoderLayer``.

        Raises
        ------
        ValueError
            If ``layer`` is not an ``nn.TransformerEncoderLayer`` or its
            attention has no biases (``bias=False``).
        """
        from .bridges import encoder_layer_weights

        return cls(**encoder_layer_weights(layer))


def _check_activation(activation: Any) -> Callable[[ArrayLike], np.ndarray]:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {activation!r}")
    return ACTIVATIONS[activation]


def encoder_block(
    x: ArrayLike,
    params: EncoderParams,
    num_heads: int,
    mask: ArrayLike | None = None,
    norm_first: bool = False,
    activation: str = "relu",
    eps: float = 1e-5,
) -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray, shape (..., T, D)

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
    act = _check_activation(activation)
    if not isinstance(params, EncoderParams):
        raise ValueError(f"params must be an EncoderParams; got {type(params).__name__}")
    if not isinstance(norm_first, (bool, np.bool_)):
        raise ValueError(f"norm_first must be True or False; got {norm_first!r}")
    x = as_float_array(x, "x")
    check_min_ndim(x, "x", 2, "(..., T, D)")
    if x.shape[-1] != params.d_model:
        raise ValueError(f"x has width D={x.shape[-1]} but the parameters are for D={params.d_model}")
    p = params

    def self_attention_branch(h: np.ndarray) -> np.ndarray:
        out, _ = multihead_attention(h, p.w_qkv, p.w_out, num_heads, mask=mask, b_qkv=p.b_qkv, b_out=p.b_out)
        return out  # (..., T, D)

    def feed_forward_branch(h: np.ndarray) -> np.ndarray:
        return act(h @ p.w_ff1 + p.b_ff1) @ p.w_ff2 + p.b_ff2  # (..., T, F) -> (..., T, D)

    if norm_first:
        x = x + self_attention_branch(layer_norm(x, p.norm1_weight, p.norm1_bias, eps))
        x = x + feed_forward_branch(layer_norm(x, p.norm2_weight, p.norm2_bias, eps))
    else:
        x = layer_norm(x + self_attention_branch(x), p.norm1_weight, p.norm1_bias, eps)
        x = layer_norm(x + feed_forward_branch(x), p.norm2_weight, p.norm2_bias, eps)
    return x


def encoder_stack(
    x: ArrayLike,
    layers: Sequence[EncoderParams],
    num_heads: int,
    mask: ArrayLike | None = None,
    norm_first: bool = False,
    activation: str = "relu",
    eps: float = 1e-5,
    final_norm: tuple[ArrayLike, ArrayLike] | None = None,
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
    final_norm : (weight, bias), optional
        A LayerNorm after the last block (``nn.TransformerEncoder``'s
        ``norm``); pre-norm stacks usually have one.

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
    layers = list(layers)
    if not layers:
        raise ValueError("layers must hold at least one EncoderParams; got an empty sequence")
    for index, params in enumerate(layers):
        if not isinstance(params, EncoderParams):
            raise ValueError(f"layers[{index}] must be an EncoderParams; got {type(params).__name__}")
    if final_norm is not None and (not isinstance(final_norm, (tuple, list)) or len(final_norm) != 2):
        raise ValueError(f"final_norm must be a (weight, bias) pair or None; got {type(final_norm).__name__}")
    for params in layers:
        x = encoder_block(x, params, num_heads, mask=mask, norm_first=norm_first, activation=activation, eps=eps)
    if final_norm is not None:
        x = layer_norm(x, final_norm[0], final_norm[1], eps)
    return x
