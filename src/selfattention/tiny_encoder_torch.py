"""The PyTorch twin of chapter 11's :class:`~selfattention.TinyEncoder`, built from ``torch.nn`` modules.

It is the reference the NumPy model's forward and hand-written backward are
checked against: ``nn.Embedding``, a position table, ``nn.LayerNorm``,
``nn.MultiheadAttention`` and ``nn.Linear``, composed in the same order, with
the gradients left to ``torch.autograd``. Weights move between the two with
:func:`selfattention.tiny_encoder_state_dict` and
:func:`selfattention.tiny_encoder_from_state_dict`. This module imports torch;
``import selfattention`` loads it only when the class is first used.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ._validation import check_bool
from .tiny_encoder import _check_sizes

__all__ = ["TinyEncoderModule"]


class TinyEncoderModule(nn.Module):
    """Embeddings, a learned position table, N pre-norm attention layers, a final LayerNorm and a linear head.

    Parameters
    ----------
    vocab_size, length, d_model, num_heads, num_layers : int
        V, T_max, D, H and N, as in :meth:`selfattention.TinyEncoder.random`.
    positions : bool, default True
        False for no position table.

    Raises
    ------
    ValueError
        If a size is not a positive integer or D is not a multiple of H.

    Notes
    -----
    See chapter 11. ``forward(ids)`` takes a ``(B, T)`` LongTensor and returns ``(B, T, V)`` logits.
    """

    def __init__(
        self, vocab_size: int, length: int, d_model: int, num_heads: int, num_layers: int = 1, positions: bool = True
    ) -> None:
        super().__init__()
        V, T, D, H, N = _check_sizes(vocab_size, length, d_model, num_heads, num_layers)
        self.num_heads = H
        self.embedding = nn.Embedding(V, D)
        self.positions = nn.Parameter(torch.randn(T, D)) if check_bool(positions, "positions") else None
        self.norms = nn.ModuleList(nn.LayerNorm(D) for _ in range(N))
        self.attentions = nn.ModuleList(nn.MultiheadAttention(D, H, batch_first=True) for _ in range(N))
        self.final_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, V)`` for token ids ``(B, T)``."""
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.ndim != 2 or ids.numel() == 0:
            got = f"{ids.dtype}, shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids must be a (B, T) LongTensor of token ids with B, T >= 1; got {got}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.embedding.num_embeddings):
            raise ValueError(f"ids must lie in 0 … {self.embedding.num_embeddings - 1}")
        h = self.embedding(ids)  # (B, T, D)
        if self.positions is not None:
            if ids.shape[1] > self.positions.shape[0]:
                raise ValueError(
                    f"ids has {ids.shape[1]} tokens but the position table covers {self.positions.shape[0]}"
                )
            h = h + self.positions[: ids.shape[1]]
        for norm, attention in zip(self.norms, self.attentions, strict=True):
            a = norm(h)
            h = h + attention(a, a, a, need_weights=False)[0]
        return self.head(self.final_norm(h))  # (B, T, V)
