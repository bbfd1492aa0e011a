"""Self-attention from scratch: the NumPy implementations the course teaches.

NumPy functions are the teaching implementations; PyTorch is the reference
that the tests and chapters check them against.

Shape letters, used in every docstring and on the book's notation page:

====  ==========================================================
B     batch size
T     number of query tokens (sequence length)
S     number of key/value tokens (S = T in self-attention)
D     model width (``d_model``)
H     number of heads
Dh    width of one head, ``D // H`` (``d_k`` in the paper)
F     width of the feed-forward hidden layer
N     number of stacked encoder blocks
====  ==========================================================

Weight matrices act on the right, ``x @ w``, with ``w`` of shape
``(d_in, d_out)``; a PyTorch ``nn.Linear`` weight is the transpose.
"""

from .attention import scaled_dot_product_attention, self_attention
from .bridges import encoder_layer_config, mha_weights, numpy_state_dict
from .efficient import memory_efficient_attention
from .encoder import EncoderParams, encoder_block, encoder_stack, gelu, layer_norm, relu
from .multihead import (
    merge_heads,
    mha_multiply_adds,
    mha_parameter_count,
    multihead_attention,
    split_heads,
)
from .plotting import (
    plot_attention,
    plot_attention_heads,
    plot_attention_overlay,
    plot_block_traversal,
    plot_encoder_block,
    plot_head_split,
    plot_mask,
    plot_patch_grid,
    plot_token_grid,
)
from .scores import causal_mask, softmax
from .vision import (
    ConvSelfAttention,
    PatchAttentionBlock,
    T2TAttention,
    conv_self_attention_forward,
    patch_attention_forward,
    patchify,
    t2t_attention_forward,
)

__all__ = [
    "softmax",
    "causal_mask",
    "scaled_dot_product_attention",
    "self_attention",
    "memory_efficient_attention",
    "split_heads",
    "merge_heads",
    "multihead_attention",
    "mha_parameter_count",
    "mha_multiply_adds",
    "mha_weights",
    "layer_norm",
    "relu",
    "gelu",
    "EncoderParams",
    "encoder_block",
    "encoder_stack",
    "encoder_layer_config",
    "patchify",
    "PatchAttentionBlock",
    "ConvSelfAttention",
    "T2TAttention",
    "patch_attention_forward",
    "conv_self_attention_forward",
    "t2t_attention_forward",
    "numpy_state_dict",
    "plot_attention",
    "plot_token_grid",
    "plot_mask",
    "plot_attention_heads",
    "plot_head_split",
    "plot_encoder_block",
    "plot_patch_grid",
    "plot_attention_overlay",
    "plot_block_traversal",
]

__version__ = "0.1.0"
