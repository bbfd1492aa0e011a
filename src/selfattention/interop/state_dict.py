"""Readers of PyTorch-layout state dicts (names to NumPy arrays) into the package's containers.

The names are those of the PyTorch modules the course checks against
(``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``) and of the
chapter 6 modules, which keep the names of the code they follow. A
checkpoint read from disk with NumPy has the same form. No torch needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._validation import as_float_array, check_all_finite
from ..encoder import EncoderParams
from ..params import AttentionParams, FeedForwardParams, LayerNormParams, Linear
from ..pretrained import BertEmbeddings
from ..tiny_encoder import TinyEncoder
from ..vision import ConvAttentionParams, PatchAttentionParams
from .layout import linear_from_torch, linear_to_torch

__all__ = [
    "attention_from_state_dict",
    "encoder_from_state_dict",
    "patch_attention_from_state_dict",
    "conv_attention_from_state_dict",
    "t2t_attention_from_state_dict",
    "tiny_encoder_from_state_dict",
    "tiny_encoder_state_dict",
    "bert_embeddings_from_state_dict",
    "bert_layer_from_state_dict",
]


def _arrays(state: Any, required: list[str], optional: list[str], module: str) -> dict[str, np.ndarray | None]:
    """The named arrays of ``state`` as floats; a missing optional one (a bias) is None."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a mapping of parameter names to arrays; got {type(state).__name__}")
    missing = [name for name in required if name not in state]
    if missing:
        found = sorted(map(str, state))[:12]
        raise ValueError(
            f"state is missing {missing} for {module}; expected the keys {required}; it holds {found}"
            + (" ..." if len(state) > 12 else "")
        )
    arrays = {name: as_float_array(state[name], name) if name in state else None for name in required + optional}
    for name, array in arrays.items():
        if array is not None:
            check_all_finite(array, name)
    return arrays


def _linear(a: dict[str, np.ndarray | None], weight_key: str, bias_key: str, kernel: tuple[int, ...] = ()) -> Linear:
    """``a[weight_key]`` (PyTorch's ``(d_out, d_in, *kernel)``) and its bias as a Linear; messages name the keys."""
    weight, bias = a[weight_key], a.get(bias_key)
    assert weight is not None
    layout = f"(d_out, d_in{', ' + ', '.join(map(str, kernel)) if kernel else ''})"
    if weight.ndim != 2 + len(kernel) or 0 in weight.shape or weight.shape[2:] != kernel:
        raise ValueError(f"{weight_key} must have shape {layout} in PyTorch's layout; got {weight.shape}")
    if bias is not None and bias.shape != (weight.shape[0],):
        transposed = bias.shape == (weight.shape[1],) and weight.shape[0] != weight.shape[1]
        raise ValueError(
            f"{bias_key} must have shape (d_out,) = ({weight.shape[0]},) for {weight_key} of shape {weight.shape}; "
            f"got {bias.shape}"
            + (f" ({weight_key} looks transposed: PyTorch stores (d_out, d_in))" if transposed else "")
        )
    return linear_from_torch(weight, bias)


def _fused_attention(
    a: dict[str, np.ndarray | None], weight_key: str, bias_key: str, out: Linear, square: bool
) -> AttentionParams:
    """Split a fused ``(3*W, d_in)`` projection, rows [q; k; v], into an AttentionParams."""
    weight, bias = a[weight_key], a.get(bias_key)
    assert weight is not None
    rows = "(3*D, D)" if square else "(3*W, d_in)"
    looks_transposed = (
        weight.ndim == 2
        and weight.shape[1] % 3 == 0
        and (weight.shape[0] % 3 != 0 or (square and weight.shape[1] == 3 * weight.shape[0]))
    )
    wrong = (
        weight.ndim != 2
        or 0 in weight.shape
        or weight.shape[0] % 3
        or (square and weight.shape[0] != 3 * weight.shape[1])
    )
    if wrong:
        hint = f" ({weight_key} looks transposed: PyTorch stores the rows [W_q; W_k; W_v])" if looks_transposed else ""
        raise ValueError(f"{weight_key} must have shape {rows} in PyTorch's layout; got {weight.shape}{hint}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(
            f"{bias_key} must have shape ({weight.shape[0]},) for {weight_key} {weight.shape}; got {bias.shape}"
        )
    width = weight.shape[0] // 3
    if out.d_in != width:
        raise ValueError(f"the output projection must read the {width} features of the heads; it reads {out.d_in}")
    weights = np.split(weight, 3, axis=0)  # each (W, d_in)
    biases = np.split(bias, 3) if bias is not None else [None] * 3
    q, k, v = (linear_from_torch(w, b) for w, b in zip(weights, biases, strict=True))
    return AttentionParams(q, k, v, out)


def attention_from_state_dict(state: Mapping[str, Any], prefix: str = "") -> AttentionParams:
    """An ``nn.MultiheadAttention``'s weights (``in_proj_weight``, ``in_proj_bias``, ``out_proj.*``).

    Parameters
    ----------
    state : mapping
        Names to arrays, in PyTorch's layout.
    prefix : str, default ""
        Prepended to every name, e.g. ``"self_attn."`` inside an encoder layer.

    Returns
    -------
    AttentionParams

    Raises
    ------
    ValueError
        If ``state`` is not a mapping or lacks a weight.

    Notes
    -----
    See chapter 4.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'self_attn.'; got {type(prefix).__name__}")
    names = [f"{prefix}in_proj_weight", f"{prefix}out_proj.weight"]
    a = _arrays(state, names, [f"{prefix}in_proj_bias", f"{prefix}out_proj.bias"], "nn.MultiheadAttention")
    out = _linear(a, f"{prefix}out_proj.weight", f"{prefix}out_proj.bias")
    return _fused_attention(a, f"{prefix}in_proj_weight", f"{prefix}in_proj_bias", out, square=True)


def encoder_from_state_dict(state: Mapping[str, Any], prefix: str = "") -> EncoderParams:
    """An ``nn.TransformerEncoderLayer``'s weights (``self_attn.*``, ``linear1/2.*``, ``norm1/2.*``).

    Parameters
    ----------
    state : mapping
        Names to arrays, in PyTorch's layout.
    prefix : str, default ""
        Prepended to every name, e.g. ``"layers.0."`` inside an ``nn.TransformerEncoder``.

    Returns
    -------
    EncoderParams

    Raises
    ------
    ValueError
        If ``state`` is not a mapping or lacks a weight.

    Notes
    -----
    See chapter 5.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'layers.0.'; got {type(prefix).__name__}")
    layers = ("linear1", "linear2", "norm1", "norm2")
    a = _arrays(
        state,
        [f"{prefix}{n}.weight" for n in layers],
        [f"{prefix}{n}.bias" for n in layers],
        "nn.TransformerEncoderLayer",
    )
    return EncoderParams(
        attention=attention_from_state_dict(state, f"{prefix}self_attn."),
        feed_forward=FeedForwardParams(
            _linear(a, f"{prefix}linear1.weight", f"{prefix}linear1.bias"),  # (D, F)
            _linear(a, f"{prefix}linear2.weight", f"{prefix}linear2.bias"),  # (F, D)
        ),
        norm1=LayerNormParams(a[f"{prefix}norm1.weight"], a[f"{prefix}norm1.bias"]),
        norm2=LayerNormParams(a[f"{prefix}norm2.weight"], a[f"{prefix}norm2.bias"]),
    )


def patch_attention_from_state_dict(state: Mapping[str, Any]) -> PatchAttentionParams:
    """A :class:`~selfattention.PatchAttentionBlock`'s weights (``proj``, ``to_q``, ``to_k``, ``to_v``, ``to_out``).

    Raises
    ------
    ValueError
        If ``state`` is not a mapping or lacks a weight. See chapter 6.
    """
    layers = ("proj", "to_q", "to_k", "to_v", "to_out")
    a = _arrays(state, [f"{n}.{kind}" for n in layers for kind in ("weight", "bias")], [], "PatchAttentionBlock")
    kernel = a["proj.weight"].shape[2:]  # (p, p): any patch size; the check below wants both axes
    if len(kernel) != 2 or kernel[0] != kernel[1]:
        raise ValueError(
            f"proj.weight must have shape (E, C, p, p), a square patch kernel; got {a['proj.weight'].shape}"
        )
    proj = _linear(a, "proj.weight", "proj.bias", kernel)
    q, k, v, out = (_linear(a, f"{n}.weight", f"{n}.bias") for n in layers[1:])
    return PatchAttentionParams(patch=proj, attention=AttentionParams(q, k, v, out))


def conv_attention_from_state_dict(state: Mapping[str, Any]) -> ConvAttentionParams:
    """A :class:`~selfattention.ConvSelfAttention`'s weights (1x1 convolutions ``q``, ``k``, ``v`` and ``gamma``).

    Raises
    ------
    ValueError
        If ``state`` is not a mapping or lacks a weight. See chapter 6.
    """
    names = ["q.weight", "q.bias", "k.weight", "k.bias", "v.weight", "v.bias", "gamma"]
    a = _arrays(state, names, [], "ConvSelfAttention")
    q, k, v = (_linear(a, f"{n}.weight", f"{n}.bias", (1, 1)) for n in "qkv")  # 1x1 convolutions
    return ConvAttentionParams(q=q, k=k, v=v, gamma=a["gamma"])


def t2t_attention_from_state_dict(state: Mapping[str, Any]) -> AttentionParams:
    """A :class:`~selfattention.T2TAttention`'s weights (fused ``qkv``, with or without bias, and ``proj``).

    Raises
    ------
    ValueError
        If ``state`` is not a mapping or lacks a weight. See chapter 6.
    """
    a = _arrays(state, ["qkv.weight", "proj.weight", "proj.bias"], ["qkv.bias"], "T2TAttention")
    return _fused_attention(a, "qkv.weight", "qkv.bias", _linear(a, "proj.weight", "proj.bias"), square=False)


def tiny_encoder_from_state_dict(state: Mapping[str, Any], num_heads: int, scale: float | None = None) -> TinyEncoder:
    """A :class:`~selfattention.TinyEncoderModule`'s weights, or gradients, as a :class:`~selfattention.TinyEncoder`.

    The names are the module's: ``embedding.weight``, ``positions`` (absent
    in a model without positions), ``norms.{i}.*``, ``attentions.{i}.*`` (an
    ``nn.MultiheadAttention`` each), ``final_norm.*`` and ``head.*``. The
    number of layers is read from the ``norms.{i}.weight`` keys. Chapter 11
    also reads the module's gradients this way,
    ``{name: p.grad for name, p in module.named_parameters()}``, to compare
    them with :meth:`TinyEncoder.backward`.

    Parameters
    ----------
    state : mapping
        Names to arrays (or tensors), in PyTorch's layout.
    num_heads : int
        H, which the weights do not record.
    scale : float, optional
        As in :class:`~selfattention.TinyEncoder`.

    Raises
    ------
    ValueError
        If ``state`` is not a mapping, lacks a weight or has the wrong shapes.

    Notes
    -----
    See chapter 11.
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a mapping of parameter names to arrays; got {type(state).__name__}")
    indices = {
        int(match[1]) for name in state if (match := re.fullmatch(r"(?:norms|attentions)\.(\d+)\..+", str(name)))
    }
    layers = max(indices, default=-1) + 1  # a gap (a missing layer) is caught as missing keys below
    per_layer = ["weight", "bias", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    known = {"embedding.weight", "positions", "final_norm.weight", "final_norm.bias", "head.weight", "head.bias"}
    known |= {f"norms.{i}.{n}" for i in range(layers) for n in per_layer[:2]}
    known |= {f"attentions.{i}.{n}" for i in range(layers) for n in per_layer[2:]}
    unknown = sorted(str(name) for name in state if name not in known)
    if unknown:
        raise ValueError(f"state holds keys a TinyEncoderModule does not have: {unknown[:8]}")
    norms = [f"norms.{i}" for i in range(layers)] + ["final_norm"]
    names = ["embedding.weight", "head.weight"] + [f"{n}.weight" for n in norms]
    a = _arrays(state, names, ["positions", "head.bias"] + [f"{n}.bias" for n in norms], "TinyEncoderModule")
    if not layers:
        raise ValueError("state has no layers: expected keys norms.0.weight, attentions.0.in_proj_weight, ...")
    layer_norms = [LayerNormParams(a[f"{n}.weight"], a[f"{n}.bias"]) for n in norms]
    return TinyEncoder(
        embedding=a["embedding.weight"],  # nn.Embedding stores (V, D), the lookup table itself: no transpose
        positions=a["positions"],
        norms=tuple(layer_norms[:-1]),
        attentions=tuple(attention_from_state_dict(state, f"attentions.{i}.") for i in range(layers)),
        final_norm=layer_norms[-1],
        head=_linear(a, "head.weight", "head.bias"),
        num_heads=num_heads,
        scale=scale,
    )


def tiny_encoder_state_dict(model: TinyEncoder) -> dict[str, np.ndarray]:
    """The inverse of :func:`tiny_encoder_from_state_dict`: a :class:`~selfattention.TinyEncoder` in PyTorch's layout.

    ``module.load_state_dict({k: torch.from_numpy(v) for k, v in tiny_encoder_state_dict(model).items()})``
    gives a :class:`~selfattention.TinyEncoderModule` the NumPy model's weights (copies).

    Raises
    ------
    ValueError
        If ``model`` is not a TinyEncoder, or its layers lack the biases ``nn.MultiheadAttention`` has.

    Notes
    -----
    See chapter 11.
    """
    if not isinstance(model, TinyEncoder):
        raise ValueError(f"model must be a TinyEncoder; got {type(model).__name__}")
    norms = [*model.norms, model.final_norm]
    if any(n.bias is None for n in norms) or model.head.bias is None:
        raise ValueError(
            "every LayerNorm and the head must have a bias: TinyEncoderModule's nn.LayerNorm and nn.Linear do"
        )
    state: dict[str, np.ndarray] = {"embedding.weight": model.embedding.copy()}
    if model.positions is not None:
        state["positions"] = model.positions.copy()
    named_norms = [(f"norms.{i}", n) for i, n in enumerate(model.norms)] + [("final_norm", model.final_norm)]
    for name, norm in named_norms:
        state[f"{name}.weight"] = norm.weight.copy()
        if norm.bias is not None:
            state[f"{name}.bias"] = norm.bias.copy()
    for i, attention in enumerate(model.attentions):
        if attention.b_qkv is None or attention.b_out is None:
            raise ValueError(f"attention layer {i} has no biases; nn.MultiheadAttention (bias=True) needs them")
        fused = Linear(attention.w_qkv, attention.b_qkv)
        state[f"attentions.{i}.in_proj_weight"], state[f"attentions.{i}.in_proj_bias"] = linear_to_torch(fused)
        weight, bias = linear_to_torch(attention.out)
        state[f"attentions.{i}.out_proj.weight"], state[f"attentions.{i}.out_proj.bias"] = weight, bias
    state["head.weight"], head_bias = linear_to_torch(model.head)
    if head_bias is not None:
        state["head.bias"] = head_bias
    return state


def bert_embeddings_from_state_dict(state: Mapping[str, Any], prefix: str = "embeddings.") -> BertEmbeddings:
    """A Hugging Face ``BertModel``'s input layer: ``word_embeddings``, ``position_embeddings``,
    ``token_type_embeddings`` and ``LayerNorm``.

    The tables are lookups, stored ``(rows, D)`` as the package keeps them: no transpose.

    Raises
    ------
    ValueError
        If ``state`` is not a mapping, lacks a table or the shapes disagree.

    Notes
    -----
    See chapter 13.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'embeddings.'; got {type(prefix).__name__}")
    tables = ("word_embeddings", "position_embeddings", "token_type_embeddings")
    names = [f"{prefix}{t}.weight" for t in tables] + [f"{prefix}LayerNorm.weight", f"{prefix}LayerNorm.bias"]
    a = _arrays(state, names, [], "BertEmbeddings")  # BERT's LayerNorm has a bias: a missing one is an error
    word, position, token_type = (a[f"{prefix}{t}.weight"] for t in tables)
    norm = LayerNormParams(a[f"{prefix}LayerNorm.weight"], a[f"{prefix}LayerNorm.bias"])
    return BertEmbeddings(word=word, position=position, token_type=token_type, norm=norm)


def bert_layer_from_state_dict(state: Mapping[str, Any], prefix: str = "encoder.layer.0.") -> EncoderParams:
    """One Hugging Face ``BertLayer`` as the post-norm :class:`~selfattention.EncoderParams` of chapter 5.

    BERT names the same block differently from ``nn.TransformerEncoderLayer``:

    =====================================  ===========================
    BERT                                   EncoderParams
    =====================================  ===========================
    ``attention.self.query/key/value``     ``attention.q/k/v``
    ``attention.output.dense``             ``attention.out``
    ``attention.output.LayerNorm``         ``norm1``
    ``intermediate.dense``                 ``feed_forward.up``
    ``output.dense``                       ``feed_forward.down``
    ``output.LayerNorm``                   ``norm2``
    =====================================  ===========================

    Every ``nn.Linear`` weight is transposed into the ``x @ w`` layout. Every
    weight and bias is required, and q, k, v and the output projection must
    all be square (BERT has as many key/value heads as query heads).

    Raises
    ------
    ValueError
        If ``state`` is not a mapping, lacks a weight or a bias, or has the wrong shapes.

    Notes
    -----
    See chapter 13.
    """
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string such as 'encoder.layer.0.'; got {type(prefix).__name__}")
    linears = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "out": "attention.output.dense",
        "up": "intermediate.dense",
        "down": "output.dense",
    }
    norms = {"norm1": "attention.output.LayerNorm", "norm2": "output.LayerNorm"}
    modules = [*linears.values(), *norms.values()]
    names = [f"{prefix}{m}.{kind}" for m in modules for kind in ("weight", "bias")]
    a = _arrays(state, names, [], "BertLayer")  # every BERT linear layer and LayerNorm has a bias
    lin = {key: _linear(a, f"{prefix}{m}.weight", f"{prefix}{m}.bias") for key, m in linears.items()}
    D = lin["q"].d_in
    for key in ("q", "k", "v", "out"):
        if lin[key].weight.shape != (D, D):
            found = tuple(reversed(lin[key].weight.shape))
            raise ValueError(f"{prefix}{linears[key]}.weight must have shape ({D}, {D}); got {found}")
    ln = {key: LayerNormParams(a[f"{prefix}{m}.weight"], a[f"{prefix}{m}.bias"]) for key, m in norms.items()}
    return EncoderParams(
        attention=AttentionParams(lin["q"], lin["k"], lin["v"], lin["out"]),
        feed_forward=FeedForwardParams(lin["up"], lin["down"]),
        norm1=ln["norm1"],
        norm2=ln["norm2"],
    )
