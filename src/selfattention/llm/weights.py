r"""SmolLM2's weights as the course's containers: dequantized, in ``x @ w`` layout, Q and K un-permuted.

Taught in chapter 14. The GGUF file stores each matrix as ggml does, one row
per output feature (PyTorch's ``nn.Linear.weight`` layout), so each becomes
``x @ w`` through :func:`selfattention.interop.layout.linear_from_torch`, the
course's one transpose. Two of them need more:

**The query and key rows are permuted.** llama.cpp computes RoPE on
*adjacent* pairs of features, ``(2i, 2i+1)`` (the paper's layout), while the
Hugging Face checkpoint it was converted from expects pairs half a head apart,
``(i, i + Dh/2)`` ("rotate half"). So the converter reordered the rows of
``W_q`` and ``W_k`` within each head: feature ``i`` of the first half goes to
``2i`` and feature ``i`` of the second half to ``2i + 1``. Every head is
reordered, and ``W_k`` has 3 heads, not 9. :func:`undo_rope_permutation`
puts the columns back, so that the course's half-split :func:`~selfattention.apply_rope`
(and transformers) compute the same model. Without it, RoPE rotates features
that were never a pair, at frequencies they were not trained for, and the
model gets worse without any error: SmolLM2 then answers a chat question with
an empty answer and reads text about 0.9 nats per token worse (chapter 14
measures it). ``W_v`` and ``W_o`` are not permuted: RoPE never touches them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._validation import as_float_array, check_all_finite, check_positive_int
from ..interop.layout import linear_from_torch
from ..params import AttentionParams, Linear, _Container, _set
from .files import GGUFContents, LlamaConfig
from .quantization import dequantize

__all__ = ["LlamaBlock", "LlamaWeights", "undo_rope_permutation", "rope_permutation", "weights_from_gguf"]


@dataclass(frozen=True)
class LlamaBlock(_Container):
    """One decoder block's weights: RMSNorm, attention, RMSNorm, SwiGLU. No biases anywhere.

    Attributes
    ----------
    attention_norm : numpy.ndarray, shape (D,)
        The RMSNorm scale before attention.
    attention : AttentionParams
        ``q`` (D, H*Dh), ``k`` and ``v`` (D, Hkv*Dh), ``out`` (H*Dh, D); the
        query and key columns in the half-split RoPE layout.
    mlp_norm : numpy.ndarray, shape (D,)
        The RMSNorm scale before the feed-forward layer.
    gate, up : Linear
        (D, F) each: :math:`\\operatorname{SiLU}(x W_{gate}) \\odot x W_{up}`.
    down : Linear
        (F, D).

    Notes
    -----
    See chapter 14.
    """

    attention_norm: np.ndarray
    attention: AttentionParams
    mlp_norm: np.ndarray
    gate: Linear
    up: Linear
    down: Linear

    def __post_init__(self) -> None:
        self._require("attention", AttentionParams)
        for name in ("gate", "up", "down"):
            self._require(name, Linear)
        D = self.attention.d_model
        for name in ("attention_norm", "mlp_norm"):
            scale = as_float_array(getattr(self, name), name)
            if scale.shape != (D,):
                raise ValueError(f"{name} must have shape (D,) = ({D},); got {scale.shape}")
            check_all_finite(scale, name)
            _set(self, name, scale)
        if self.gate.weight.shape != self.up.weight.shape or self.gate.d_in != D:
            raise ValueError(
                f"gate and up must both be (D, F) with D = {D}; got {self.gate.weight.shape} and {self.up.weight.shape}"
            )
        if self.down.weight.shape != (self.gate.d_out, D):
            raise ValueError(f"down must be (F, D) = ({self.gate.d_out}, {D}); got {self.down.weight.shape}")
        if any(part.bias is not None for part in (self.gate, self.up, self.down)):
            raise ValueError("a Llama feed-forward layer has no biases; got a Linear with a bias")


@dataclass(frozen=True)
class LlamaWeights(_Container):
    """All of a Llama-architecture model's weights, checked against its config.

    Attributes
    ----------
    config : LlamaConfig
    embedding : numpy.ndarray, shape (V, D)
        One row per token; also the output layer (tied): logits are ``h @ embedding.T``.
    blocks : tuple of LlamaBlock
        ``config.num_layers`` of them.
    final_norm : numpy.ndarray, shape (D,)
        The RMSNorm scale after the last block.

    Notes
    -----
    See chapter 14. :func:`weights_from_gguf` builds one from a file.
    """

    config: LlamaConfig
    embedding: np.ndarray
    blocks: tuple[LlamaBlock, ...]
    final_norm: np.ndarray

    def __post_init__(self) -> None:
        c = self.config
        if not isinstance(c, LlamaConfig):
            raise ValueError(f"config must be a LlamaConfig; got {type(c).__name__}")
        embedding = as_float_array(self.embedding, "embedding")
        if embedding.shape != (c.vocab_size, c.d_model):
            raise ValueError(f"embedding must be (V, D) = ({c.vocab_size}, {c.d_model}); got {embedding.shape}")
        check_all_finite(embedding, "embedding")
        _set(self, "embedding", embedding)
        final_norm = as_float_array(self.final_norm, "final_norm")
        if final_norm.shape != (c.d_model,):
            raise ValueError(f"final_norm must have shape (D,) = ({c.d_model},); got {final_norm.shape}")
        check_all_finite(final_norm, "final_norm")
        _set(self, "final_norm", final_norm)
        if not isinstance(self.blocks, tuple) or len(self.blocks) != c.num_layers:
            raise ValueError(f"blocks must be a tuple of {c.num_layers} LlamaBlock; got {type(self.blocks).__name__}")
        expected = {
            "q": (c.d_model, c.num_heads * c.head_dim),
            "k": (c.d_model, c.num_kv_heads * c.head_dim),
            "v": (c.d_model, c.num_kv_heads * c.head_dim),
            "out": (c.num_heads * c.head_dim, c.d_model),
        }
        for i, block in enumerate(self.blocks):
            if not isinstance(block, LlamaBlock):
                raise ValueError(f"blocks[{i}] must be a LlamaBlock; got {type(block).__name__}")
            for name, shape in expected.items():
                found = getattr(block.attention, name).weight.shape
                if found != shape:
                    raise ValueError(f"blocks[{i}].attention.{name} must be {shape} for this config; got {found}")
            if block.gate.weight.shape != (c.d_model, c.d_ff):
                raise ValueError(
                    f"blocks[{i}].gate must be (D, F) = ({c.d_model}, {c.d_ff}); got {block.gate.weight.shape}"
                )

    @property
    def dtype(self) -> np.dtype:
        """The weights' dtype."""
        return self.embedding.dtype

    def astype(self, dtype: DTypeLike) -> LlamaWeights:
        """The same weights in float32 or float64 (float64 is for checking to 1e-10)."""
        try:
            # np.dtype(None) is float64, and None == np.dtype("float64") is True: refuse None before both
            resolved = None if dtype is None else np.dtype(dtype)
        except (TypeError, ValueError):
            resolved = None
        if resolved is None or resolved.name not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64; got {dtype!r}")
        return _cast(self, resolved)

    def parameter_count(self) -> int:
        """How many numbers the model holds (the tied embedding counted once)."""
        return sum(array.size for _, array in self.named_arrays())


def _cast(value: Any, dtype: np.dtype) -> Any:
    """A copy of checked weights in another float dtype, not checked again.

    Every container was checked when it was built, and a finite float32 or
    float64 number stays finite in the other: checking 135 million numbers
    again would take longer than the copy.
    """
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    if isinstance(value, tuple):
        return tuple(_cast(item, dtype) for item in value)
    if isinstance(value, _Container):
        copy = object.__new__(type(value))
        for f in fields(value):
            _set(copy, f.name, _cast(getattr(value, f.name), dtype))
        return copy
    return value


def _head_columns(w: ArrayLike, num_heads: Any, name: str) -> tuple[np.ndarray, int, int]:
    w = as_float_array(w, name)
    H = check_positive_int(num_heads, "num_heads")
    if w.ndim != 2 or w.shape[1] % H or (w.shape[1] // H) % 2:
        raise ValueError(
            f"{name} must be a (D, H*Dh) matrix whose columns split into num_heads={H} heads of even width; "
            f"got shape {w.shape}"
        )
    return w, H, w.shape[1] // H


def undo_rope_permutation(w: ArrayLike, num_heads: int) -> np.ndarray:
    """From llama.cpp's interleaved-pair column order back to the half-split order, within each head.

    Column ``2i + j`` of a head (``j`` = 0 or 1) moves to ``j * Dh/2 + i``:
    the pairs ``(2i, 2i+1)`` that llama.cpp rotates become ``(i, i + Dh/2)``,
    the pairs :func:`~selfattention.apply_rope` rotates by default.

    Parameters
    ----------
    w : array_like, shape (D, H*Dh)
        A query or key projection in ``x @ w`` layout, as read from GGUF.
    num_heads : int
        H for ``W_q``, Hkv for ``W_k``.

    Returns
    -------
    numpy.ndarray, shape (D, H*Dh)

    Raises
    ------
    ValueError
        If the columns do not split into ``num_heads`` heads of even width.

    Notes
    -----
    See chapter 14 (the permutation). :func:`rope_permutation` is the inverse,
    what llama.cpp's ``convert_hf_to_gguf.py`` applies.
    """
    w, H, Dh = _head_columns(w, num_heads, "w")
    D = w.shape[0]
    return w.reshape(D, H, Dh // 2, 2).swapaxes(-1, -2).reshape(D, H * Dh)  # (D, H, 2, Dh/2) -> (D, H*Dh)


def rope_permutation(w: ArrayLike, num_heads: int) -> np.ndarray:
    """From the half-split column order to llama.cpp's interleaved pairs, within each head (the inverse).

    Column ``j * Dh/2 + i`` of a head moves to ``2i + j``. See
    :func:`undo_rope_permutation` for the parameters.
    """
    w, H, Dh = _head_columns(w, num_heads, "w")
    D = w.shape[0]
    return w.reshape(D, H, 2, Dh // 2).swapaxes(-1, -2).reshape(D, H * Dh)  # (D, H, Dh/2, 2) -> (D, H*Dh)


def _tensor(contents: GGUFContents, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Tensor ``name`` dequantized to float32, in the stored (out, in) layout, its shape checked."""
    if name not in contents.tensors:
        raise ValueError(f"the file has no tensor {name!r}")
    kind, raw = contents.tensors[name]
    array = dequantize(raw, kind)
    if array.shape != shape:
        raise ValueError(f"{name} is stored as {array.shape}; this config needs {shape}")
    return array


def weights_from_gguf(contents: GGUFContents, *, undo_permutation: bool = True) -> LlamaWeights:
    """Dequantize every tensor of a GGUF file to float32 and put it in the course's ``x @ w`` containers.

    Parameters
    ----------
    contents : GGUFContents
        From :func:`selfattention.llm.read_gguf`.
    undo_permutation : bool, default True
        Put the query and key columns back in the half-split RoPE order
        (:func:`undo_rope_permutation`). False keeps llama.cpp's order: right
        only with interleaved RoPE (chapter 14 shows both).

    Returns
    -------
    LlamaWeights
        float32.

    Raises
    ------
    ValueError
        If a tensor is missing or its shape does not fit the config.

    Notes
    -----
    See chapter 14. Dequantizing SmolLM2 takes under a second; the file's
    tensor names are llama.cpp's (``blk.N.attn_q.weight``, ...).
    """
    if not isinstance(contents, GGUFContents):
        raise ValueError(f"contents must be a GGUFContents from read_gguf; got {type(contents).__name__}")
    if not isinstance(undo_permutation, bool):
        raise ValueError(f"undo_permutation must be True or False; got {undo_permutation!r}")
    c = contents.config
    D, F, q_width, kv_width = c.d_model, c.d_ff, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim

    def linear(name: str, d_in: int, d_out: int, heads: int | None = None) -> Linear:
        layer = linear_from_torch(_tensor(contents, name, (d_out, d_in)))  # stored (d_out, d_in), as PyTorch
        if heads is not None and undo_permutation:
            layer = Linear(undo_rope_permutation(layer.weight, heads))
        return layer

    blocks = []
    for i in range(c.num_layers):
        p = f"blk.{i}."
        attention = AttentionParams(
            q=linear(p + "attn_q.weight", D, q_width, c.num_heads),
            k=linear(p + "attn_k.weight", D, kv_width, c.num_kv_heads),
            v=linear(p + "attn_v.weight", D, kv_width),
            out=linear(p + "attn_output.weight", q_width, D),
        )
        blocks.append(
            LlamaBlock(
                attention_norm=_tensor(contents, p + "attn_norm.weight", (D,)),
                attention=attention,
                mlp_norm=_tensor(contents, p + "ffn_norm.weight", (D,)),
                gate=linear(p + "ffn_gate.weight", D, F),
                up=linear(p + "ffn_up.weight", D, F),
                down=linear(p + "ffn_down.weight", F, D),
            )
        )
    return LlamaWeights(
        config=c,
        embedding=_tensor(contents, "token_embd.weight", (c.vocab_size, D)),
        blocks=tuple(blocks),
        final_norm=_tensor(contents, "output_norm.weight", (D,)),
    )
