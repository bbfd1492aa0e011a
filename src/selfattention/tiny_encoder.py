r"""A small attention-only encoder that labels every token, with its forward and backward pass in NumPy.

Taught in chapter 11, which trains it with :class:`~selfattention.Adam` on
the tasks of :func:`~selfattention.sequence_task`. Its layers, for token ids
:math:`x` and N layers:

.. math::

    h_0 = E[x] + P, \qquad
    h_{i+1} = h_i + \operatorname{MHA}_i(\operatorname{LN}_i(h_i)), \qquad
    \text{logits} = \operatorname{LN}_f(h_N)\, W + b.

Pre-norm, as in chapter 5, but without the feed-forward: a copying task
needs only attention to move tokens between positions. The backward pass is
chapter 10's functions in reverse order; ``tests/test_tiny_encoder.py`` checks
it against ``torch.autograd`` on :class:`~selfattention.TinyEncoderModule`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_bool,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)
from .attention import scaled_dot_product_attention
from .backward import layer_norm_backward, linear_backward, multihead_attention_backward
from .encoder import layer_norm
from .multihead import merge_heads, multihead_attention, split_heads
from .params import AttentionParams, LayerNormParams, Linear, _Container, _set, project_qkv
from .positions import add_positions
from .training import _token_ids, embedding, embedding_backward

__all__ = ["TinyEncoder"]

EditWeights = Callable[[int, np.ndarray], np.ndarray]


def _check_sizes(vocab_size: Any, length: Any, d_model: Any, num_heads: Any, num_layers: Any) -> tuple[int, ...]:
    """``(V, T, D, H, N)`` checked: positive integers, H dividing D, at most 2**27 weights.

    Shared by :meth:`TinyEncoder.random` and :class:`~selfattention.TinyEncoderModule`.
    """
    V = check_positive_int(vocab_size, "vocab_size", at_most=2**20)
    T = check_positive_int(length, "length", at_most=2**16)
    D = check_positive_int(d_model, "d_model", at_most=2**12)
    H = check_positive_int(num_heads, "num_heads")
    N = check_positive_int(num_layers, "num_layers", at_most=64)
    if D % H:
        raise ValueError(f"d_model={D} must be a multiple of num_heads={H}")
    if (V + T + 4 * N * D + V) * D > 2**27:
        raise ValueError("these sizes make more than 2**27 weights; choose a smaller model")
    return V, T, D, H, N


@dataclass(frozen=True)
class TinyEncoder(_Container):
    """Embeddings, positions, N pre-norm attention layers, a final LayerNorm and a linear head.

    A frozen container like the weight containers (:class:`~selfattention.Linear` and the others): its
    arrays are updated in place (:meth:`Adam.step`), and :meth:`backward`
    returns the gradients in a ``TinyEncoder`` of the same structure.

    Attributes
    ----------
    embedding : numpy.ndarray, shape (V, D)
        One row per token.
    positions : numpy.ndarray, shape (T_max, D), or None
        A learned position table added to the embeddings (chapter 8); None
        for a model without positions.
    norms : tuple of LayerNormParams
        The LayerNorm in front of each attention layer.
    attentions : tuple of AttentionParams
        The attention layers.
    final_norm : LayerNormParams
    head : Linear, (D, V)
        Scores for each of the V output tokens.
    num_heads : int
        H, heads per attention layer.
    scale : float or None
        Multiplies the scores; None for the usual :math:`1/\\sqrt{D_h}`.

    Raises
    ------
    ValueError
        On construction, if a part has the wrong type or the widths do not agree.

    Notes
    -----
    See chapter 11. :meth:`random` makes one with random weights.
    """

    embedding: np.ndarray
    positions: np.ndarray | None
    norms: tuple[LayerNormParams, ...]
    attentions: tuple[AttentionParams, ...]
    final_norm: LayerNormParams
    head: Linear
    num_heads: int
    scale: float | None = None

    def __post_init__(self) -> None:
        table = as_float_array(self.embedding, "embedding")
        if table.ndim != 2 or 0 in table.shape:
            raise ValueError(f"embedding must be a (V, D) matrix; got shape {table.shape}")
        check_all_finite(table, "embedding")
        _set(self, "embedding", table)
        D = table.shape[1]
        if self.positions is not None:
            positions = as_float_array(self.positions, "positions")
            if positions.ndim != 2 or positions.shape[0] == 0 or positions.shape[1] != D:
                raise ValueError(f"positions must be a (T_max, D={D}) table, or None; got shape {positions.shape}")
            check_all_finite(positions, "positions")
            _set(self, "positions", positions)
        for name, kind in (("norms", LayerNormParams), ("attentions", AttentionParams)):
            parts = getattr(self, name)
            if not isinstance(parts, (list, tuple)) or not parts or not all(isinstance(p, kind) for p in parts):
                raise ValueError(f"{name} must be a non-empty list of {kind.__name__}, one per layer")
            _set(self, name, tuple(parts))
        if len(self.norms) != len(self.attentions):
            raise ValueError(f"norms and attentions must pair up; got {len(self.norms)} and {len(self.attentions)}")
        self._require("final_norm", LayerNormParams)
        self._require("head", Linear)
        widths = [n.d_model for n in self.norms] + [a.d_model for a in self.attentions]
        widths += [a.out.d_out for a in self.attentions] + [self.final_norm.d_model, self.head.d_in]
        if any(w != D for w in widths):
            raise ValueError(f"every layer, norm and the head's input must have the embedding's width D={D}")
        if self.head.d_out != table.shape[0]:
            raise ValueError(
                f"the head must score the V={table.shape[0]} tokens of the embedding; it has {self.head.d_out} outputs"
            )
        _set(self, "num_heads", check_positive_int(self.num_heads, "num_heads"))
        for i, attention in enumerate(self.attentions):
            if attention.kv_groups != 1 or attention.q.d_out != D or attention.v.d_out != D:
                raise ValueError(
                    f"attention layer {i} must be standard multi-head attention with q, k, v of width D={D} "
                    f"(got {attention.q.d_out}, {attention.k.d_out}, {attention.v.d_out}); TinyEncoder has no GQA"
                )
            attention.head_counts(self.num_heads)
        if self.scale is not None:
            _set(self, "scale", check_real_scalar(self.scale, "scale", positive=True))

    @classmethod
    def random(
        cls,
        vocab_size: int,
        length: int,
        d_model: int,
        num_heads: int,
        num_layers: int = 1,
        *,
        positions: bool = True,
        scale: float | None = None,
        seed: int = 0,
    ) -> TinyEncoder:
        """A model with random weights, ready to train.

        Embeddings and positions are standard normal; each projection is
        normal with variance :math:`1/d_{in}` (so a unit-variance input gives
        unit-variance outputs) and zero bias; LayerNorms start at 1 and 0.

        Parameters
        ----------
        vocab_size : int
            V; the head also scores V tokens.
        length : int
            T_max, the longest sequence the position table covers.
        d_model, num_heads, num_layers : int
            D, H and N.
        positions : bool, default True
            False for a model with no position table.
        scale : float, optional
            The scores' factor; None for :math:`1/\\sqrt{D_h}`.
        seed : int, default 0
        """
        V, T, D, H, N = _check_sizes(vocab_size, length, d_model, num_heads, num_layers)
        positions = check_bool(positions, "positions")
        rng = np.random.default_rng(check_nonnegative_int(seed, "seed"))

        def linear(d_in: int, d_out: int) -> Linear:
            return Linear(rng.normal(0.0, d_in**-0.5, (d_in, d_out)), np.zeros(d_out))

        def norm() -> LayerNormParams:
            return LayerNormParams(np.ones(D), np.zeros(D))

        return cls(
            embedding=rng.standard_normal((V, D)),
            positions=rng.standard_normal((T, D)) if positions else None,
            norms=tuple(norm() for _ in range(N)),
            attentions=tuple(AttentionParams(*(linear(D, D) for _ in range(4))) for _ in range(N)),
            final_norm=norm(),
            head=linear(D, V),
            num_heads=H,
            scale=scale,
        )

    @property
    def vocab_size(self) -> int:
        """V."""
        return self.embedding.shape[0]

    @property
    def num_layers(self) -> int:
        """N."""
        return len(self.attentions)

    @property
    def num_parameters(self) -> int:
        """The number of trainable numbers."""
        return sum(a.size for _, a in self.named_arrays())

    def _ids(self, ids: Any) -> np.ndarray:
        ids = as_array(ids, "ids")
        if ids.ndim not in (1, 2) or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                f"ids must be integer token ids of shape (T,) or (B, T) with B, T >= 1; "
                f"got shape {ids.shape}, dtype {ids.dtype}"
            )
        ids = _token_ids(ids, self.vocab_size, "ids", "token ids")
        weights = ids.size * ids.shape[-1] * self.num_heads  # B * T * T * H attention weights per layer
        if weights > 2**27:
            raise ValueError(
                f"ids of shape {ids.shape} need {weights:,} attention weights per layer, more than {2**27:,}; "
                "pass fewer or shorter sequences at a time"
            )
        if self.positions is not None and ids.shape[-1] > self.positions.shape[0]:
            raise ValueError(f"ids has {ids.shape[-1]} tokens but the position table covers {self.positions.shape[0]}")
        return ids

    def _attend(self, i: int, a: np.ndarray, edit_weights: EditWeights | None) -> tuple[np.ndarray, np.ndarray]:
        """Layer i's attention on the normalised input ``a``; ``edit_weights`` may replace its weights."""
        params = self.attentions[i]
        if edit_weights is None:
            return multihead_attention(a, params, num_heads=self.num_heads, scale=self.scale)
        q, k, v = project_qkv(a, params)  # (..., T, D) each
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))  # (..., H, T, Dh)
        _, weights = scaled_dot_product_attention(q, k, v, scale=self.scale)  # (..., H, T, T)
        try:
            edited = edit_weights(i, weights.copy())
        except Exception as exc:  # the learner's function: report it as this call's problem
            raise ValueError(f"edit_weights(layer, weights) raised {type(exc).__name__} at layer {i}: {exc}") from exc
        edited = as_float_array(edited, "the edited weights")
        if edited.shape != weights.shape:
            raise ValueError(f"edit_weights must return the weights' shape {weights.shape}; got {edited.shape}")
        check_all_finite(edited, "the edited weights")
        return params.out(merge_heads(edited @ v)), edited  # (..., T, D), (..., H, T, T)

    def _forward(self, ids: np.ndarray, edit_weights: EditWeights | None = None) -> dict[str, Any]:
        h = embedding(ids, self.embedding)  # (..., T, D)
        if self.positions is not None:
            h = add_positions(h, self.positions)
        residual, normed, weights = [], [], []
        for i, norm in enumerate(self.norms):
            residual.append(h)
            a = layer_norm(h, norm.weight, norm.bias)
            y, w = self._attend(i, a, edit_weights)
            normed.append(a)
            weights.append(w)
            h = h + y  # the residual connection
        z = layer_norm(h, self.final_norm.weight, self.final_norm.bias)
        return {"residual": residual, "normed": normed, "weights": weights, "h": h, "z": z, "logits": self.head(z)}

    def forward(self, ids: ArrayLike, edit_weights: EditWeights | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Logits for every position, and every layer's attention weights.

        Parameters
        ----------
        ids : array_like of int, shape (T,) or (B, T)
        edit_weights : callable, optional
            ``edit_weights(layer, weights) -> weights`` replaces a layer's
            attention weights (shape (..., H, T, T)) before they mix the
            values: an ablation (chapter 11 makes them uniform, or shuffles
            them). Return the weights unchanged to leave a layer alone.

        Returns
        -------
        logits : numpy.ndarray, shape (..., T, V)
        weights : numpy.ndarray, shape (N, ..., H, T, T)
            Layer by layer.

        Raises
        ------
        ValueError
            If an id is out of range or there are more tokens than positions.
        """
        if edit_weights is not None and not callable(edit_weights):
            raise ValueError(f"edit_weights must be a function (layer, weights) -> weights; got {edit_weights!r}")
        cache = self._forward(self._ids(ids), edit_weights)
        return cache["logits"], np.stack(cache["weights"])

    def predict(self, ids: ArrayLike) -> np.ndarray:
        """The most likely token at every position: shape of ``ids``."""
        return self.forward(ids)[0].argmax(axis=-1)

    def backward(self, grad_logits: ArrayLike, ids: ArrayLike) -> TinyEncoder:
        r"""The gradient of a loss with respect to every weight, from :math:`\partial L / \partial\,\text{logits}`.

        Recomputes the forward, then runs chapter 10's gradients in reverse:
        the head (:func:`~selfattention.linear_backward`), the final LayerNorm
        (:func:`~selfattention.layer_norm_backward`), then for each layer from
        the last, :func:`~selfattention.multihead_attention_backward` and its
        LayerNorm. A residual connection copies the gradient past the layer,
        so the two paths add. Last, :func:`~selfattention.embedding_backward`
        and the positions, whose gradient is the sum over the batch.

        Parameters
        ----------
        grad_logits : array_like, shape (..., T, V)
            E.g. :func:`~selfattention.cross_entropy_backward`.
        ids : array_like of int, shape (T,) or (B, T)
            The forward's input.

        Returns
        -------
        TinyEncoder
            Gradients in the model's structure: ``grads.attentions[0].q.weight``
            is :math:`\partial L / \partial W_q` of the first layer. The
            positions' gradient is zero past the T positions used.

        Raises
        ------
        ValueError
            As :meth:`forward`, or if ``grad_logits`` is not the logits' shape.
        """
        ids = self._ids(ids)
        cache = self._forward(ids)
        grad_logits = as_float_array(grad_logits, "grad_logits")
        if grad_logits.shape != cache["logits"].shape:
            raise ValueError(
                f"grad_logits must have the logits' shape {cache['logits'].shape}; got {grad_logits.shape}"
            )
        check_all_finite(grad_logits, "grad_logits")
        grad_z, grad_head_w, grad_head_b = linear_backward(grad_logits, cache["z"], self.head.weight, self.head.bias)
        fn = self.final_norm
        grad_h, grad_fn_w, grad_fn_b = layer_norm_backward(grad_z, cache["h"], fn.weight, fn.bias)
        grad_norms, grad_attentions = [], []
        for i in reversed(range(self.num_layers)):
            grad_a, grad_attention = multihead_attention_backward(
                grad_h, cache["normed"][i], self.attentions[i], self.num_heads, scale=self.scale
            )
            norm = self.norms[i]
            grad_x, grad_w, grad_b = layer_norm_backward(grad_a, cache["residual"][i], norm.weight, norm.bias)
            grad_h = grad_h + grad_x  # h_{i+1} = h_i + attention: the gradient reaches h_i along both paths
            grad_norms.insert(0, LayerNormParams(grad_w, grad_b))
            grad_attentions.insert(0, grad_attention)
        grad_positions = None
        if self.positions is not None:
            grad_positions = np.zeros_like(self.positions)
            T = ids.shape[-1]
            grad_positions[:T] = grad_h.reshape(-1, T, grad_h.shape[-1]).sum(axis=0)  # every sequence used them
        return TinyEncoder(
            embedding=embedding_backward(grad_h, ids, self.embedding),
            positions=grad_positions,
            norms=tuple(grad_norms),
            attentions=tuple(grad_attentions),
            final_norm=LayerNormParams(grad_fn_w, grad_fn_b),
            head=Linear(grad_head_w, grad_head_b),
            num_heads=self.num_heads,
            scale=self.scale,
        )
