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
Hkv   number of key/value heads (H, or fewer: grouped-query attention)
Dh    width of one head, ``D // H`` (``d_k`` in the paper)
F     width of the feed-forward hidden layer
N     number of stacked encoder blocks
====  ==========================================================

Weight matrices act on the right, ``x @ w``, with ``w`` of shape
``(d_in, d_out)``, held in the containers of :mod:`selfattention.params`; a
PyTorch ``nn.Linear`` weight is the transpose, and :mod:`selfattention.interop`
is the one place that converts.

The modules, in teaching order: ``scores`` (softmax), ``masks``, ``params``
(weight containers), ``attention``, ``multihead``, ``encoder``, ``vision``,
``efficient`` (and ``parallel``, its thread split), ``positions``,
``decoding`` (and ``decode_cost``, what a step reads, and ``sampling``, how the
next token is chosen), ``backward``,
``training``, ``tiny_encoder``, ``vit`` (and ``vit_training``, its training and recorded
run), ``pretrained``, ``llm`` (chapter 14's SmolLM2-135M, from its GGUF file);
then ``interop`` (reading PyTorch), ``plotting``,
``interactive`` (the site's interactive figures),
``exercises`` (the checkers), ``bugs`` (the bug zoo's buggy code and
the property tests that catch it), ``testing`` and ``measure`` (helpers for the
tests, chapters and benchmarks), ``recorded`` (the recorded ``make bench`` run
and the sources it timed), and ``machine`` (the floating-point paths and
thread counts a run uses, and ``torch_threads``).

``import selfattention`` loads NumPy and SciPy only. torch is imported when
something that needs it is first used (the PyTorch modules of chapter 6, the
readers of PyTorch modules, ``selfattention.testing``), and matplotlib when a
figure is first drawn.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import (
    attention,
    backward,
    decode_cost,
    decoding,
    efficient,
    encoder,
    interop,
    masks,
    multihead,
    parallel,
    params,
    plotting,
    positions,
    pretrained,
    sampling,
    scores,
    tiny_encoder,
    training,
    vision,
    vit,
)
from .attention import *  # noqa: F403
from .backward import *  # noqa: F403
from .decode_cost import *  # noqa: F403
from .decoding import *  # noqa: F403
from .efficient import *  # noqa: F403
from .encoder import *  # noqa: F403
from .interop import *  # noqa: F403
from .masks import *  # noqa: F403
from .multihead import *  # noqa: F403
from .parallel import *  # noqa: F403
from .params import *  # noqa: F403
from .plotting import *  # noqa: F403
from .positions import *  # noqa: F403
from .pretrained import *  # noqa: F403
from .sampling import *  # noqa: F403
from .scores import *  # noqa: F403
from .tiny_encoder import *  # noqa: F403
from .training import *  # noqa: F403
from .vision import *  # noqa: F403
from .vit import *  # noqa: F403

# Names whose module imports torch: loaded on first use (PEP 562). A test checks
# that this list equals the module's own __all__.
_LAZY = {
    "vision_modules": ("PatchAttentionBlock", "ConvSelfAttention", "T2TAttention", "TinyViT"),
    "tiny_encoder_torch": ("TinyEncoderModule",),
}
_SUBMODULES = (
    "exercises",
    "bugs",
    "llm",
    "testing",
    "measure",
    "recorded",
    "machine",
    "vision_modules",
    "tiny_encoder_torch",
    "vit_training",
    "interactive",
)

__all__ = [
    *scores.__all__,
    *masks.__all__,
    *params.__all__,
    *attention.__all__,
    *multihead.__all__,
    *encoder.__all__,
    *vision.__all__,
    *_LAZY["vision_modules"],
    *efficient.__all__,
    *parallel.__all__,
    *positions.__all__,
    *decoding.__all__,
    *decode_cost.__all__,
    *sampling.__all__,
    *backward.__all__,
    *training.__all__,
    *tiny_encoder.__all__,
    *_LAZY["tiny_encoder_torch"],
    *vit.__all__,
    *pretrained.__all__,
    *interop.__all__,
    *plotting.__all__,
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    for module, names in _LAZY.items():
        if name in names:
            return getattr(importlib.import_module(f".{module}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
