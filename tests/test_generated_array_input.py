"""Bad arrays, masks and dtypes, generated: every array-like, mask or dtype parameter of every public callable.

The companion of ``test_generated_bad_input.py`` (integers and flags). ``selfattention.__all__`` is walked;
each parameter whose annotation says ``ArrayLike`` (or that is called ``mask``) or ``DTypeLike`` is read
from the signature, and the bad values of its kind are tried in a minimal valid call from ``MINIMAL``:

- an array: a string, a dict, a ragged nested list and a complex array;
- a mask: those, and integer and float arrays of 0s and 1s, which the package refuses because
  ``mask=1`` would be added to the scores, not keep the key;
- a dtype: a name NumPy does not know, a complex dtype and ``None`` where None is not the default.

Each must give a ``ValueError`` that names the parameter, never a ``TypeError`` or a traceback from inside
NumPy, torch or matplotlib. A callable added to the package with such a parameter fails the first test
until it has a minimal call here (or a reason in ``ELSEWHERE``).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from test_generated_bad_input import _attention, _encoder, assert_covered  # noqa: E402  (shared helpers)

import selfattention as sa  # noqa: E402

pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))
Q3 = RNG.normal(size=(2, 3, 4))
UNIFORM = np.full((3, 3), 1 / 3)
KEEP = sa.causal_mask(3, dtype=bool)


def _lse(q, k, v, mask):
    out, lse = sa.memory_efficient_attention(q, k, v, mask=mask, return_lse=True)
    return out, lse


_OUT, _LSE = _lse(Q3, Q3, Q3, KEEP)

#: A valid call of each public callable with an array, mask or dtype parameter: the function, and keyword
#: arguments that include every such parameter (the one under test is then replaced by a bad value).
MINIMAL: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "softmax": (sa.softmax, {"x": X}),
    "causal_mask": (sa.causal_mask, {"T": 3, "dtype": bool}),
    "sliding_window_mask": (sa.sliding_window_mask, {"T": 3, "window": 2, "dtype": np.float32}),
    "padding_mask": (sa.padding_mask, {"lengths": [2, 3], "dtype": bool}),
    "combine_masks": (lambda masks: sa.combine_masks(masks, KEEP), {"masks": KEEP}),
    "project_qkv": (lambda **kw: sa.project_qkv(params=_attention(), **kw), {"x": X, "key": X, "value": X}),
    "scaled_dot_product_attention": (sa.scaled_dot_product_attention, {"q": Q3, "k": Q3, "v": Q3, "mask": KEEP}),
    "self_attention": (
        sa.self_attention,
        {"x": X, "w_qkv": RNG.normal(size=(4, 12)), "w_out": RNG.normal(size=(4, 4)), "mask": KEEP},
    ),
    "multihead_attention": (
        lambda **kw: sa.multihead_attention(num_heads=2, **kw),
        {
            "x": X,
            "w_qkv": RNG.normal(size=(4, 12)),
            "w_out": RNG.normal(size=(4, 4)),
            "mask": KEEP,
            "b_qkv": np.zeros(12),
            "b_out": np.zeros(4),
            "key": X,
            "value": X,
        },
    ),
    "split_heads": (lambda x: sa.split_heads(x, 2), {"x": Q3}),
    "merge_heads": (sa.merge_heads, {"x": RNG.normal(size=(2, 3, 2))}),
    "repeat_kv": (lambda x: sa.repeat_kv(x, 2), {"x": Q3}),
    "layer_norm": (sa.layer_norm, {"x": X, "weight": np.ones(4), "bias": np.zeros(4)}),
    "relu": (sa.relu, {"x": X}),
    "gelu": (sa.gelu, {"x": X}),
    "feed_forward": (lambda x: sa.feed_forward(x, _encoder().feed_forward), {"x": X}),
    "encoder_block": (lambda **kw: sa.encoder_block(params=_encoder(), num_heads=2, **kw), {"x": X, "mask": KEEP}),
    "encoder_stack": (
        lambda **kw: sa.encoder_stack(layers=[_encoder()], num_heads=2, **kw),
        {"x": X, "mask": KEEP, "final_norm": (np.ones(4), np.zeros(4))},
    ),
    "patchify": (lambda images: sa.patchify(images, 2), {"images": np.zeros((1, 1, 4, 4))}),
    "memory_efficient_attention": (sa.memory_efficient_attention, {"q": Q3, "k": Q3, "v": Q3, "mask": KEEP}),
    "add_positions": (sa.add_positions, {"x": X, "table": sa.sinusoidal_positions(6, 4)}),
    "rope_angles": (lambda positions: sa.rope_angles(positions, 4), {"positions": [0, 1, 2]}),
    "apply_rope": (sa.apply_rope, {"x": X, "positions": [0.0, 1.0, 2.0]}),
    "rope_decay_bound": (lambda distances: sa.rope_decay_bound(distances, 4), {"distances": [1, 2]}),
    "alibi_bias": (lambda dtype: sa.alibi_bias(2, 3, dtype=dtype), {"dtype": np.float32}),
    "decoder_block": (
        lambda **kw: sa.decoder_block(params=_encoder(), num_heads=2, **kw),
        {"x": X, "positions": [0, 1, 2]},
    ),
    "next_token_probabilities": (sa.next_token_probabilities, {"logits": X}),
    "sample_next_token": (lambda logits: sa.sample_next_token(logits, np.random.default_rng(0)), {"logits": X}),
    "softmax_backward": (sa.softmax_backward, {"grad_y": X[:, :3], "y": UNIFORM}),
    "scaled_dot_product_attention_backward": (
        sa.scaled_dot_product_attention_backward,
        {"grad_out": Q3, "q": Q3, "k": Q3, "v": Q3, "mask": KEEP},
    ),
    "memory_efficient_attention_backward": (
        sa.memory_efficient_attention_backward,
        {"grad_out": Q3, "q": Q3, "k": Q3, "v": Q3, "out": _OUT, "lse": _LSE, "mask": KEEP},
    ),
    "linear_backward": (
        sa.linear_backward,
        {"grad_y": RNG.normal(size=(3, 2)), "x": X, "weight": RNG.normal(size=(4, 2)), "bias": np.zeros(2)},
    ),
    "layer_norm_backward": (
        sa.layer_norm_backward,
        {"grad_y": X, "x": X, "weight": np.ones(4), "bias": np.zeros(4)},
    ),
    "multihead_attention_backward": (
        lambda **kw: sa.multihead_attention_backward(params=_attention(), num_heads=2, **kw),
        {"grad_y": X, "x": X, "mask": KEEP},
    ),
    "embedding": (sa.embedding, {"ids": [0, 2, 1], "table": X}),
    "embedding_backward": (sa.embedding_backward, {"grad_out": X[:2], "ids": [0, 2], "table": X}),
    "cross_entropy": (sa.cross_entropy, {"logits": X, "targets": [0, 1, 3]}),
    "cross_entropy_backward": (lambda **kw: sa.cross_entropy_backward(1.0, **kw), {"logits": X, "targets": [0, 1, 3]}),
    "minibatches": (
        lambda arrays: list(sa.minibatches(arrays, batch_size=2, rng=np.random.default_rng(0))),
        {"arrays": X},
    ),
    "attention_rollout": (sa.attention_rollout, {"weights": np.full((2, 1, 2, 3, 3), 1 / 3)}),
    "patch_ink": (lambda images: sa.patch_ink(images, 2), {"images": np.ones((1, 1, 4, 4))}),
    "blank_patches": (
        lambda **kw: sa.blank_patches(patch_size=2, **kw),
        {"images": np.ones((1, 1, 4, 4)), "patches": [[0, 3]]},
    ),
    "mean_pool": (sa.mean_pool, {"hidden": Q3, "keep": np.ones((2, 3), bool)}),
    "plot_attention": (sa.plot_attention, {"weights": UNIFORM}),
    "plot_token_grid": (lambda values: sa.plot_token_grid(values, (2, 2)), {"values": np.ones(4) / 4}),
    "plot_mask": (sa.plot_mask, {"mask": KEEP}),
    "plot_attention_heads": (sa.plot_attention_heads, {"weights": np.stack([UNIFORM, UNIFORM])}),
    "plot_patch_grid": (lambda image: sa.plot_patch_grid(image, 2), {"image": np.ones((4, 4, 3))}),
    "plot_attention_overlay": (
        sa.plot_attention_overlay,
        {"image": np.ones((4, 4, 3)), "weights": np.ones((2, 2)) / 4},
    ),
    "plot_position_table": (sa.plot_position_table, {"table": sa.sinusoidal_positions(5, 4)}),
    "plot_similarity": (lambda similarity: sa.plot_similarity(similarity, ["a", "b", "c"]), {"similarity": np.eye(3)}),
    "plot_head_scores": (lambda scores: sa.plot_head_scores(scores, ["a", "b"]), {"scores": np.ones((2, 1, 3)) / 3}),
    "plot_head_split": (lambda q: sa.plot_head_split(q, 2), {"q": X}),
}

#: Public callables with such parameters whose bad arrays are tested elsewhere, and why.
ELSEWHERE = {
    "patch_attention_forward": "params is a state dict; tests/test_bad_input.py VISION_AND_INTEROP",
    "conv_self_attention_forward": "params is a state dict; tests/test_bad_input.py VISION_AND_INTEROP",
    "t2t_attention_forward": "params is a state dict; tests/test_bad_input.py VISION_AND_INTEROP",
    "vit_forward": "needs a ViTParams (tests/test_vit.py, tests/test_bad_input.py)",
    "load_minilm": "reads the real model (slow; tests/test_pretrained.py)",
}

#: Array parameters that are ids or lengths, not numbers to compute with: a complex or float array is refused
#: there too, under the same rule, so they get the same bad values.
BAD_ARRAYS = {
    "a string": "abc",
    "a dict": {"a": 1},
    "a ragged list": [[1.0, 2.0], [3.0]],
    "a complex array": np.ones((3, 4), dtype=complex),
}
BAD_MASKS = {
    **BAD_ARRAYS,
    "0/1 integers": KEEP.astype(np.int64),
    "0/1 floats": KEEP.astype(np.float32),
}
BAD_DTYPES = {"an unknown name": "no-such-dtype", "a complex dtype": np.complex64}
#: Bad values that are good for one parameter, and why.
ACCEPTED = {
    ("minibatches", "arrays", "a complex array"): "it only shuffles rows: any dtype is data",
}


def _kind(name: str, annotation: str) -> str | None:
    if name == "mask" or name == "masks":
        return "mask"
    if "DTypeLike" in annotation:
        return "dtype"
    if "ArrayLike" in annotation:
        return "array"
    return None


def callables() -> dict[str, dict[str, str]]:
    """Every public function with an array, mask or dtype parameter, and the kind of each."""
    found = {}
    for name in sa.__all__:
        obj = getattr(sa, name)
        if not callable(obj) or inspect.isclass(obj):
            continue
        try:
            parameters = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        kinds = {p: _kind(p, str(q.annotation)) for p, q in parameters.items()}
        kinds = {p: kind for p, kind in kinds.items() if kind is not None}
        if kinds:
            found[name] = kinds
    return found


def cases() -> list[tuple[str, str, str, Any]]:
    out = []
    for label, kinds in callables().items():
        if label not in MINIMAL:
            continue
        for parameter, kind in kinds.items():
            bad = {"array": BAD_ARRAYS, "mask": BAD_MASKS, "dtype": BAD_DTYPES}[kind]
            out += [
                (label, parameter, what, value)
                for what, value in bad.items()
                if (label, parameter, what) not in ACCEPTED
            ]
    return out


def test_every_callable_with_array_mask_or_dtype_parameters_is_covered():
    assert_covered(callables(), MINIMAL, ELSEWHERE)
    for label, (_, kwargs) in MINIMAL.items():  # the minimal call names every such parameter
        assert set(callables()[label]) <= set(kwargs), label


@pytest.mark.parametrize("label", sorted(MINIMAL))
def test_the_minimal_call_is_valid(label):
    function, kwargs = MINIMAL[label]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        function(**kwargs)


@pytest.mark.parametrize(("label", "parameter", "what", "bad"), cases(), ids=lambda v: str(v)[:24])
def test_a_bad_array_mask_or_dtype_is_refused_and_names_the_parameter(label, parameter, what, bad):
    function, kwargs = MINIMAL[label]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"\b{parameter}\b"):
            function(**{**kwargs, parameter: bad})
