"""Bad integers and flags, generated: every integer or bool parameter of every public callable is tried.

``selfattention.__all__`` (and the methods of its classes that take such parameters) is walked; each
parameter whose annotation says ``int`` or ``bool`` is read from the signature, and the bad values of its
kind are tried in a minimal valid call from ``MINIMAL``: a string, a float and a bool for an integer, a
string and an integer for a flag. Each must give a ``ValueError`` that names the parameter. A size-like
integer is also given 10**12, which must be refused or computed without allocating (never a MemoryError).
A callable added to the package with such a parameter fails the first test until it has a minimal call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import selfattention as sa  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))
Q3 = RNG.normal(size=(2, 3, 4))
Q4 = RNG.normal(size=(1, 2, 3, 4))
UNIFORM = np.full((3, 3), 1 / 3)


def _attention(D=4):
    return sa.AttentionParams.from_fused(RNG.normal(size=(D, 3 * D)), RNG.normal(size=(D, D)))


def _encoder(D=4, F=6):
    rng = np.random.default_rng(1)
    shapes = dict(
        w_qkv=(D, 3 * D), b_qkv=(3 * D,), w_out=(D, D), b_out=(D,), w_ff1=(D, F), b_ff1=(F,), w_ff2=(F, D),
        b_ff2=(D,), norm1_weight=(D,), norm1_bias=(D,), norm2_weight=(D,), norm2_bias=(D,),
    )  # fmt: skip
    return sa.EncoderParams.from_arrays(**{name: rng.normal(size=shape) for name, shape in shapes.items()})


def _decoder():
    return sa.TinyDecoder.random(16, 8, 2, 1, 1, 16, seed=0)


def _encoder_model():
    return sa.TinyEncoder.random(10, 6, 8, 2, seed=0)


def _online():
    return (np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 2)), np.zeros((1, 3)), np.zeros((3, 2)))


def _lse_call(**kw):
    q, k, v = (RNG.normal(size=(1, 3, 4)) for _ in range(3))
    out, lse = sa.memory_efficient_attention(q, k, v, return_lse=True)
    return sa.memory_efficient_attention_backward(np.ones_like(out), q, k, v, out, lse, **kw)


def _vit_params():
    import torch

    torch.manual_seed(0)
    return sa.tiny_vit_params(sa.TinyViT())


#: A minimal valid call of each public callable with an integer or bool parameter: the function, and the
#: keyword arguments of a valid call (the parameter under test is then replaced by a bad value).
MINIMAL: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "softmax": (lambda **kw: sa.softmax(X, **kw), {"axis": -1}),
    "causal_mask": (lambda **kw: sa.causal_mask(**kw), {"T": 3, "S": 4}),
    "sliding_window_mask": (lambda **kw: sa.sliding_window_mask(**kw), {"T": 3, "window": 2, "S": 4}),
    "padding_mask": (lambda **kw: sa.padding_mask([2, 3], **kw), {"S": 4}),
    "scaled_dot_product_attention": (
        lambda **kw: sa.scaled_dot_product_attention(Q4, Q4, Q4, **kw),
        {"is_causal": True, "enable_gqa": False},
    ),
    "split_heads": (lambda **kw: sa.split_heads(Q3, **kw), {"num_heads": 2}),
    "repeat_kv": (lambda **kw: sa.repeat_kv(Q4, **kw), {"n_rep": 2}),
    "multihead_attention": (
        lambda **kw: sa.multihead_attention(Q3, _attention(), **kw),
        {"num_heads": 2, "is_causal": True},
    ),
    "mha_parameter_count": (lambda **kw: sa.mha_parameter_count(**kw), {"d_model": 4, "bias": True}),
    "mha_multiply_adds": (lambda **kw: sa.mha_multiply_adds(**kw), {"T": 3, "d_model": 4, "num_heads": 2, "S": 5}),
    "encoder_block": (
        lambda **kw: sa.encoder_block(Q3, _encoder(), **kw),
        {"num_heads": 2, "norm_first": True, "return_weights": True},
    ),
    "encoder_stack": (
        lambda **kw: sa.encoder_stack(Q3, [_encoder()], **kw),
        {"num_heads": 2, "norm_first": True},
    ),
    "patchify": (lambda **kw: sa.patchify(np.zeros((1, 1, 4, 4)), **kw), {"patch_size": 2}),
    "memory_efficient_attention": (
        lambda **kw: sa.memory_efficient_attention(Q3, Q3, Q3, **kw),
        {"block_size": 2, "is_causal": True, "return_lse": True},
    ),
    "online_softmax_update": (lambda **kw: sa.online_softmax_update(*_online(), **kw), {"in_place": False}),
    "split_over_threads": (
        lambda **kw: sa.split_over_threads(sa.memory_efficient_attention, Q3, Q3, Q3, **kw),
        {"threads": 2},
    ),
    "sinusoidal_positions": (lambda **kw: sa.sinusoidal_positions(**kw), {"T": 3, "D": 4, "interleaved": True}),
    "sinusoidal_shift": (lambda **kw: sa.sinusoidal_shift(2, **kw), {"D": 4, "interleaved": True}),
    "add_positions": (lambda **kw: sa.add_positions(X, sa.sinusoidal_positions(6, 4), **kw), {"offset": 1}),
    "rope_angles": (lambda **kw: sa.rope_angles([0, 1, 2], **kw), {"head_dim": 4}),
    "apply_rope": (lambda **kw: sa.apply_rope(X, **kw), {"interleaved": True}),
    "rope_decay_bound": (lambda **kw: sa.rope_decay_bound([1, 2], **kw), {"head_dim": 4}),
    "alibi_slopes": (lambda **kw: sa.alibi_slopes(**kw), {"num_heads": 2}),
    "alibi_bias": (lambda **kw: sa.alibi_bias(**kw), {"num_heads": 2, "T": 3, "S": 4}),
    "KVCache": (lambda **kw: sa.KVCache(**kw), {"max_len": 4}),
    "next_token_probabilities": (lambda **kw: sa.next_token_probabilities(X, **kw), {"top_k": 2}),
    "sample_next_token": (lambda **kw: sa.sample_next_token(X, np.random.default_rng(0), **kw), {"top_k": 2}),
    "SlidingWindowCache": (lambda **kw: sa.SlidingWindowCache(**kw), {"window": 4}),
    "kv_cache_bytes": (
        lambda **kw: sa.kv_cache_bytes(**kw),
        {"num_layers": 2, "num_kv_heads": 2, "head_dim": 4, "bytes_per_value": 2, "tokens": 3},
    ),
    "decoder_block": (lambda **kw: sa.decoder_block(X, _encoder(), **kw), {"num_heads": 2, "window": 2}),
    "TinyDecoder.random": (
        lambda **kw: sa.TinyDecoder.random(**kw),
        {
            "vocab_size": 16,
            "d_model": 8,
            "num_heads": 2,
            "num_kv_heads": 1,
            "num_layers": 1,
            "dim_feedforward": 16,
            "seed": 0,
        },
    ),  # fmt: skip
    "TinyDecoder.generate": (
        lambda **kw: _decoder().generate([1, 2], **kw),
        {"steps": 2, "use_cache": True, "window": 2},
    ),
    "TinyDecoder.forward": (lambda **kw: _decoder().forward([1, 2, 3], **kw), {"window": 2}),
    "decode_step_cost": (
        lambda **kw: sa.decode_step_cost(**kw),
        {
            "num_layers": 2,
            "d_model": 8,
            "num_heads": 2,
            "num_kv_heads": 1,
            "head_dim": 4,
            "dim_feedforward": 16,
            "vocab_size": 10,
            "gated": True,
            "bytes_per_value": 2,
            "batch": 1,
            "context": 5,
        },
    ),  # fmt: skip
    "softmax_backward": (lambda **kw: sa.softmax_backward(X, sa.softmax(X), **kw), {"axis": -1}),
    "scaled_dot_product_attention_backward": (
        lambda **kw: sa.scaled_dot_product_attention_backward(Q3, Q3, Q3, Q3, **kw),
        {"is_causal": True},
    ),
    "memory_efficient_attention_backward": (_lse_call, {"is_causal": False, "block_size": 2}),
    "multihead_attention_backward": (
        lambda **kw: sa.multihead_attention_backward(Q3, Q3, _attention(), **kw),
        {"num_heads": 2, "is_causal": True},
    ),
    "sequence_task": (
        lambda **kw: sa.sequence_task("reverse", rng=np.random.default_rng(0), **kw),
        {"n": 2, "length": 4, "vocab_size": 5, "offset": 1},
    ),
    "source_positions": (lambda **kw: sa.source_positions("shift", **kw), {"length": 4, "offset": 1}),
    "minibatches": (
        lambda **kw: list(sa.minibatches(np.arange(5), rng=np.random.default_rng(0), **kw)),
        {"batch_size": 2, "drop_last": True},
    ),
    "TinyEncoder.random": (
        lambda **kw: sa.TinyEncoder.random(**kw),
        {"vocab_size": 10, "length": 6, "d_model": 8, "num_heads": 2, "num_layers": 1, "positions": True, "seed": 0},
    ),
    "load_digits_split": (lambda **kw: sa.load_digits_split(**kw), {"seed": 0}),
    "vit_forward": (lambda **kw: sa.vit_forward(np.zeros((1, 1, 8, 8)), _vit_params(), **kw), {"num_heads": 4}),
    "attention_rollout": (lambda **kw: sa.attention_rollout(np.stack([UNIFORM[None]] * 2), **kw), {"residual": True}),
    "patch_ink": (lambda **kw: sa.patch_ink(np.zeros((1, 1, 4, 4)), **kw), {"patch_size": 2}),
    "blank_patches": (
        lambda **kw: sa.blank_patches(np.zeros((1, 1, 4, 4)), np.array([[0]]), **kw),
        {"patch_size": 2},
    ),
    "plot_attention_heads": (lambda **kw: sa.plot_attention_heads(np.stack([UNIFORM] * 2), **kw), {"ncols": 2}),
    "plot_patch_grid": (lambda **kw: sa.plot_patch_grid(np.zeros((4, 4, 1)), **kw), {"patch_size": 2}),
    "plot_attention_overlay": (
        lambda **kw: sa.plot_attention_overlay(np.zeros((4, 4, 1)), np.ones((2, 2)) / 4, **kw),
        {"colorbar": True},
    ),
    "plot_head_split": (lambda **kw: sa.plot_head_split(np.zeros((2, 4)), **kw), {"num_heads": 2}),
    "plot_encoder_block": (lambda **kw: sa.plot_encoder_block(**kw), {"norm_first": True}),
    "plot_block_traversal": (lambda **kw: sa.plot_block_traversal(**kw), {"num_blocks": 2}),
}
#: Callables whose integer or bool parameters are tested elsewhere, with why.
ELSEWHERE = {
    "patch_attention_forward": "needs a state dict; tests/test_bad_input.py VISION_AND_INTEROP",
    "t2t_attention_forward": "needs a state dict; tests/test_bad_input.py VISION_AND_INTEROP",
    "PatchAttentionBlock": "a torch module: its sizes are torch's to refuse (tests/test_vision.py)",
    "ConvSelfAttention": "a torch module (tests/test_vision.py)",
    "T2TAttention": "a torch module (tests/test_vision.py)",
    "TinyViT": "a torch module (tests/test_vit.py)",
    "TinyEncoderModule": "a torch module (tests/test_training.py)",
    "TinyDecoder": "a dataclass built by TinyDecoder.random (tested here)",
    "TinyEncoder": "a dataclass built by TinyEncoder.random (tested here)",
    "ViTParams": "a dataclass built by tiny_vit_params",
    "BertConfig": "read from config.json by load_minilm (tests/test_pretrained.py)",
    "MiniLM": "the real model (slow; tests/test_pretrained.py)",
    "MiniLM.forward": "the real model (slow; tests/test_pretrained.py)",
    "MiniLM.encode": "the real model (slow; tests/test_pretrained.py)",
    "torch_sdpa": "tests/test_sdpa.py",
    "sdpa_kernel_used": "tests/test_sdpa.py",
    "tiny_encoder_from_state_dict": "tests/test_training.py",
    "plot_attention": "annotate takes None as well (tests/test_plotting.py)",
    "plot_token_grid": "grid_shape is a pair (tests/test_plotting.py)",
}
#: Integer parameters that may be negative or zero (an axis, an offset, a seed counts from 0).
SIGNED = {"axis", "offset", "seed"}
METHODS = ("random", "generate", "forward", "encode", "update", "step")


def _kind(annotation: str) -> str | None:
    if "Sequence" in annotation or "tuple" in annotation:
        return None
    if "bool" in annotation:
        return "bool"
    if "int" in annotation:
        return "int"
    return None


def callables() -> dict[str, tuple[Callable[..., Any], dict[str, str]]]:
    """Every public callable (and method) with integer or bool parameters, and their kinds."""
    found = {}
    for name in sa.__all__:
        obj = getattr(sa, name)
        if not callable(obj) or (inspect.isclass(obj) and issubclass(obj, BaseException)):
            continue
        targets = [(name, obj)]
        if inspect.isclass(obj):
            targets += [(f"{name}.{m}", getattr(obj, m)) for m in METHODS if hasattr(obj, m)]
        for label, target in targets:
            try:
                parameters = inspect.signature(target).parameters
            except (TypeError, ValueError):
                continue
            kinds = {p: _kind(str(q.annotation)) for p, q in parameters.items()}
            kinds = {p: kind for p, kind in kinds.items() if kind is not None}
            if kinds:
                found[label] = (target, kinds)
    return found


def cases() -> list[tuple[str, str, str, Any]]:
    out = []
    for label, (_, kinds) in callables().items():
        if label not in MINIMAL:
            continue
        for parameter, kind in kinds.items():
            bad = ["no", 1, 2.5] if kind == "bool" else ["3", 2.5, True]
            if kind == "int" and parameter not in SIGNED:
                bad.append(-1)
            out += [(label, parameter, kind, value) for value in bad]
    return out


pytestmark = pytest.mark.usefixtures("close_figures")  # tests/conftest.py


def assert_covered(found, minimal, elsewhere):
    """Every callable found has a minimal call, or a reason it is tested elsewhere; none has both."""
    missing = sorted(set(found) - set(minimal) - set(elsewhere))
    assert not missing, f"add a minimal valid call for {missing} to MINIMAL (or say where it is tested in ELSEWHERE)"
    assert not set(minimal) & set(elsewhere)


def test_every_callable_with_integer_or_bool_parameters_is_covered():
    assert_covered(callables(), MINIMAL, ELSEWHERE)


@pytest.mark.parametrize("label", sorted(MINIMAL))
def test_the_minimal_call_is_valid(label):
    function, kwargs = MINIMAL[label]
    function(**kwargs)


@pytest.mark.parametrize(("label", "parameter", "kind", "bad"), cases(), ids=lambda v: repr(v)[:30])
def test_a_bad_value_is_refused_and_names_the_parameter(label, parameter, kind, bad):
    function, kwargs = MINIMAL[label]
    with pytest.raises(ValueError, match=rf"\b{parameter}\b"):
        function(**{**kwargs, parameter: bad})


@pytest.mark.parametrize(
    ("label", "parameter"),
    [
        (label, parameter)
        for label, (_, kinds) in callables().items()
        if label in MINIMAL
        for parameter, kind in kinds.items()
        if kind == "int" and parameter not in SIGNED
    ],
)
def test_a_huge_size_is_refused_or_counted_never_allocated(label, parameter):
    """10**12 of anything: a ValueError, or a result when the size allocates nothing (a count, a window or
    block that is only an upper limit, a batch larger than the data); never a MemoryError or a crash."""
    function, kwargs = MINIMAL[label]
    try:
        function(**{**kwargs, parameter: 10**12})
    except ValueError as error:
        assert str(error), label
