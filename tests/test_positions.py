"""Positions (chapter 8): sinusoidal tables, RoPE and ALiBi, against independent implementations.

The references: Hugging Face ``transformers`` (XLM's and Marian's sinusoidal
tables, LLaMA's rotary embedding and ``apply_rotary_pos_emb``, BLOOM's ALiBi),
Meta's complex-number RoPE written here in torch (``torch.polar``), and the
ALiBi paper's reference recipe for the slopes, written here with ``math``.
Hypothesis checks the properties on random shapes and positions.
"""

from __future__ import annotations

import math
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the internet

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import selfattention as sa

# Hugging Face's reference code comes from the hf fixture (tests/conftest.py): imported on first use, and a
# test that uses it is slow (make test runs it, make unit does not).


def test_transformers_is_installed_so_the_parity_tests_run(hf):
    assert hf.transformers.__version__ == "5.23.0"


# --- sinusoidal ---------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "D"), [(1, 2), (50, 16), (128, 64), (7, 10)])
def test_sinusoidal_matches_the_papers_formula_written_as_loops(T, D):
    table = sa.sinusoidal_positions(T, D)
    expected = np.empty((T, D))
    for p in range(T):
        for i in range(D // 2):
            expected[p, 2 * i] = math.sin(p / 10000 ** (2 * i / D))
            expected[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / D))
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("T", "D"), [(40, 16), (100, 64)])
def test_sinusoidal_matches_hugging_face_in_both_layouts(T, D, hf):
    interleaved = torch.empty(T, D)
    hf.xlm.create_sinusoidal_embeddings(T, D, interleaved)  # XLM: the paper's layout
    np.testing.assert_allclose(sa.sinusoidal_positions(T, D), interleaved.numpy(), rtol=0, atol=1e-6)
    marian = hf.marian.MarianSinusoidalPositionalEmbedding(T, D)  # Marian: [sin | cos]
    concatenated = marian.create_weight()
    np.testing.assert_allclose(
        sa.sinusoidal_positions(T, D, interleaved=False), concatenated.numpy(), rtol=0, atol=1e-6
    )


def test_the_two_sinusoidal_layouts_differ_by_a_fixed_permutation():
    D = 12
    order = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])  # sines first, then cosines
    np.testing.assert_array_equal(
        sa.sinusoidal_positions(30, D)[:, order], sa.sinusoidal_positions(30, D, interleaved=False)
    )


@given(
    offset=st.integers(-40, 40) | st.floats(-40, 40, allow_nan=False),
    half_width=st.integers(1, 16),
    base=st.floats(1.5, 1e5),
    interleaved=st.booleans(),
)
def test_one_matrix_moves_every_position_by_the_same_offset(offset, half_width, base, interleaved):
    D, T = 2 * half_width, 60
    shift = sa.sinusoidal_shift(offset, D, base, interleaved=interleaved)
    positions = np.arange(T, dtype=float)
    # the table at p and at p + offset, for non-integer offsets too: evaluate the formula at any real position
    table = sa.sinusoidal_positions(T, D, base, interleaved=interleaved)
    angles = (positions + offset)[:, None] * base ** (-np.arange(0, D, 2) / D)
    moved = np.empty((T, D))
    if interleaved:
        moved[:, 0::2], moved[:, 1::2] = np.sin(angles), np.cos(angles)
    else:
        moved[:, : D // 2], moved[:, D // 2 :] = np.sin(angles), np.cos(angles)
    np.testing.assert_allclose(table @ shift, moved, atol=1e-9)
    np.testing.assert_allclose(shift @ shift.T, np.eye(D), atol=1e-12)  # a rotation
    np.testing.assert_allclose(sa.sinusoidal_shift(-offset, D, base, interleaved=interleaved), shift.T, atol=1e-12)


def test_sinusoidal_dot_products_depend_on_the_offset_only():
    table = sa.sinusoidal_positions(64, 32)
    gram = table @ table.T  # (T, T)
    for k in range(-10, 11):
        diagonal = np.diagonal(gram, offset=k)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-12)
    np.testing.assert_allclose(np.diag(gram), 16.0)  # D/2 pairs of sin^2 + cos^2


def test_add_positions_refuses_a_sequence_longer_than_the_table():
    table = np.zeros((8, 4))
    assert sa.add_positions(np.ones((2, 8, 4)), table).shape == (2, 8, 4)
    np.testing.assert_array_equal(
        sa.add_positions(np.zeros((3, 4)), np.arange(32.0).reshape(8, 4), offset=5), np.arange(20.0, 32).reshape(3, 4)
    )
    with pytest.raises(ValueError, match=r"the table holds positions 0 … 7, but 9 tokens starting at position 0"):
        sa.add_positions(np.ones((9, 4)), table)
    with pytest.raises(ValueError, match=r"need positions up to 9"):
        sa.add_positions(np.ones((3, 4)), table, offset=7)


# --- RoPE -----------------------------------------------------------------------------------


def _meta_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE as Meta's LLaMA code writes it: adjacent features (2i, 2i+1) as one complex number."""
    Dh = x.shape[-1]
    frequencies = 1.0 / base ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)
    rotations = torch.polar(
        torch.ones(len(positions), Dh // 2, dtype=torch.float64), torch.outer(positions, frequencies)
    )
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], Dh // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotations).flatten(-2)


@pytest.mark.parametrize(("T", "Dh", "base"), [(1, 2, 10000.0), (9, 8, 10000.0), (33, 64, 500000.0)])
def test_interleaved_rope_matches_metas_complex_numbers(T, Dh, base):
    x = torch.randn(2, 3, T, Dh, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    positions = torch.arange(T, dtype=torch.float64) + 5
    ours = sa.apply_rope(x.numpy(), positions.numpy(), base=base, interleaved=True)
    np.testing.assert_allclose(ours, _meta_rope(x, positions, base).numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("T", "Dh", "base"), [(1, 2, 10000.0), (9, 8, 10000.0), (33, 64, 500000.0)])
def test_rotate_half_rope_matches_hugging_face_llama(T, Dh, base, hf):
    q = torch.randn(2, 4, T, Dh, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    k = torch.randn(2, 2, T, Dh, dtype=torch.float64, generator=torch.Generator().manual_seed(T + 1))
    positions = np.arange(T) + 3.0
    angles = torch.from_numpy(sa.rope_angles(positions, Dh, base))  # (T, Dh/2), float64
    cos, sin = torch.cat([angles, angles], -1).cos()[None], torch.cat([angles, angles], -1).sin()[None]
    q_hf, k_hf = hf.llama.apply_rotary_pos_emb(q, k, cos, sin)  # the layout, in float64
    np.testing.assert_allclose(sa.apply_rope(q.numpy(), positions, base), q_hf.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(sa.apply_rope(k.numpy(), positions, base), k_hf.numpy(), rtol=0, atol=1e-12)

    # and the whole float32 path of a LLaMA layer's rotary embedding (its angles are float32)
    config = hf.transformers.LlamaConfig(
        hidden_size=Dh * 4, num_attention_heads=4, rope_parameters={"rope_type": "default", "rope_theta": base}
    )
    rotary = hf.llama.LlamaRotaryEmbedding(config)
    position_ids = torch.arange(T)[None] + 3
    cos32, sin32 = rotary(q.float(), position_ids)
    q32, _ = hf.llama.apply_rotary_pos_emb(q.float(), k.float(), cos32, sin32)
    ours32 = sa.apply_rope(q.numpy().astype(np.float32), positions, base)
    assert ours32.dtype == np.float32
    np.testing.assert_allclose(ours32, q32.numpy(), rtol=1e-4, atol=1e-4)


def test_the_two_rope_layouts_differ_by_a_fixed_permutation():
    x = np.random.default_rng(0).normal(size=(5, 10))
    order = np.concatenate([np.arange(0, 10, 2), np.arange(1, 10, 2)])  # interleaved -> rotate-half
    np.testing.assert_allclose(sa.apply_rope(x, interleaved=True)[:, order], sa.apply_rope(x[:, order]), atol=1e-15)


@given(
    m=st.floats(-1e4, 1e4, allow_nan=False),
    n=st.floats(-1e4, 1e4, allow_nan=False),
    shift=st.floats(-1e4, 1e4, allow_nan=False),
    half_width=st.integers(1, 32),
    interleaved=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_rope_score_depends_on_the_offset_only_and_norms_are_kept(m, n, shift, half_width, interleaved, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(2, 1, 2 * half_width))

    def score(at_q, at_k):
        rotated_q = sa.apply_rope(q, [at_q], interleaved=interleaved)
        rotated_k = sa.apply_rope(k, [at_k], interleaved=interleaved)
        return float(rotated_q[0] @ rotated_k[0])

    assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-9 * (1 + abs(m) + abs(n) + abs(shift)))
    rotated = sa.apply_rope(q, [m], interleaved=interleaved)
    np.testing.assert_allclose(np.linalg.norm(rotated), np.linalg.norm(q), rtol=1e-12)


def test_rope_scores_depend_on_the_offset_only_to_1e_12():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 64))
    scores = {
        (m, n): sa.apply_rope(q[None], [m])[0] @ sa.apply_rope(k[None], [n])[0] for m in range(40) for n in range(40)
    }
    for (m, n), value in scores.items():
        assert abs(value - scores[(m - n, 0) if m >= n else (0, n - m)]) < 1e-12


@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=4, max_side=6).map(lambda s: (*s[:-1], 2 * s[-1])),
        elements=st.floats(-10, 10),
    )
)
def test_position_zero_is_the_identity_and_positions_default_to_0_to_t_minus_1(x):
    T = x.shape[-2]
    np.testing.assert_array_equal(sa.apply_rope(x, np.zeros(T)), x)
    np.testing.assert_array_equal(sa.apply_rope(x), sa.apply_rope(x, np.arange(T)))


def test_rope_positions_may_differ_per_batch_entry():
    x = np.random.default_rng(2).normal(size=(2, 4, 8))
    positions = np.array([[0, 1, 2, 3], [10, 11, 12, 13]])
    rotated = sa.apply_rope(x, positions)
    np.testing.assert_array_equal(rotated[1], sa.apply_rope(x[1], positions[1]))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_rope_keeps_the_dtype(dtype):
    x = np.random.default_rng(3).normal(size=(3, 4)).astype(dtype)
    rotated = sa.apply_rope(x)
    assert rotated.dtype == dtype
    np.testing.assert_allclose(rotated, sa.apply_rope(x.astype(np.float64)), rtol=2e-3, atol=2e-3)


def test_rope_decay_bound_starts_at_one_and_falls():
    bound = sa.rope_decay_bound(np.arange(0, 257), 128)
    assert bound[0] == pytest.approx(1.0)
    assert (bound[1:] < 1).all()
    windows = bound[1:].reshape(4, 64).mean(axis=1)  # averages over 64 distances
    assert (np.diff(windows) < 0).all()  # falls on average, with ripples
    assert bound[200:].max() < 0.35


# --- ALiBi ----------------------------------------------------------------------------------


def _reference_slopes(n: int) -> list[float]:
    """The recipe of the paper's reference code (ofirpress/attention_with_linear_biases), rewritten."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("H", [*range(1, 33), 40, 64, 96])
def test_alibi_slopes_follow_the_reference_recipe_and_bloom(H, hf):
    np.testing.assert_allclose(sa.alibi_slopes(H), _reference_slopes(H), rtol=1e-13)
    np.testing.assert_allclose(sa.alibi_slopes(H), hf.bloom._get_alibi_slopes(H, "cpu").numpy(), rtol=1e-6)


def test_alibi_slopes_for_8_and_12_heads():
    np.testing.assert_array_equal(sa.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(sa.alibi_slopes(12), 2.0 ** -np.array([1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]))


@pytest.mark.parametrize(("H", "T", "S"), [(1, 1, 1), (4, 5, 5), (12, 3, 8), (6, 7, 7)])
def test_alibi_bias_is_minus_slope_times_distance(H, T, S):
    bias = sa.alibi_bias(H, T, S)
    assert bias.shape == (H, T, S)
    slopes = sa.alibi_slopes(H)
    for h in range(H):
        for i in range(T):
            for j in range(S):
                assert bias[h, i, j] == -slopes[h] * abs(S - T + i - j)
    assert not np.signbit(bias[bias == 0]).any()  # 0, not -0.0


@pytest.mark.parametrize(("H", "T"), [(4, 6), (12, 10)])
def test_alibi_under_the_causal_mask_equals_blooms_per_row_shifted_bias(H, T, hf):
    """BLOOM adds slope * j; ours adds -slope * (i - j). They differ by a constant per row: same softmax."""
    scores = np.random.default_rng(H).normal(size=(1, H, T, T))
    alibi_bloom = hf.bloom.build_alibi_tensor(torch.ones(1, T), H, torch.float64).numpy()  # (H, 1, T)
    causal = sa.causal_mask(T)
    ours = sa.softmax(scores + sa.combine_masks(sa.alibi_bias(H, T), causal))
    theirs = sa.softmax(scores + alibi_bloom + causal)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)  # BLOOM's slopes are float32
    shifted = sa.alibi_slopes(H)[:, None, None] * np.arange(T)  # slope * j, in float64: the same up to rounding
    np.testing.assert_allclose(ours, sa.softmax(scores + shifted + causal), rtol=1e-12, atol=1e-15)


def test_alibi_rows_after_a_kv_cache_are_the_last_rows_of_the_full_bias():
    full = sa.alibi_bias(8, 10)
    np.testing.assert_array_equal(sa.alibi_bias(8, 3, 10), full[:, -3:])


# --- bad input --------------------------------------------------------------------------------

BAD_INPUT = [
    (lambda: sa.sinusoidal_positions(10, 7), r"D must be even, because each frequency fills two columns.*got D=7"),
    (lambda: sa.sinusoidal_positions(0, 8), r"T must be a positive integer; got 0"),
    (lambda: sa.sinusoidal_positions(10, 8, base=0), r"base must be positive; got 0.0"),
    (lambda: sa.sinusoidal_positions(10, 8, base=1.0), r"base must be greater than 1"),
    (lambda: sa.sinusoidal_positions(10, 8, base=np.nan), r"base must be finite"),
    (lambda: sa.sinusoidal_positions(10, 8, interleaved="yes"), r"interleaved must be True or False"),
    (lambda: sa.sinusoidal_positions(10**6, 10**4), r"would hold 10,000,000,000 numbers"),
    (lambda: sa.sinusoidal_shift(np.inf, 8), r"offset must be finite"),
    (lambda: sa.sinusoidal_shift(1, 9), r"D must be even"),
    (lambda: sa.add_positions(np.ones((3, 4)), np.ones((8, 5))), r"x has width D=4 but the table's rows have 5"),
    (lambda: sa.add_positions(np.ones((3, 4)), np.ones(4)), r"table must have shape \(max_len, D\)"),
    (lambda: sa.add_positions(np.ones(4), np.ones((8, 4))), r"x must have at least 2 axes"),
    (lambda: sa.add_positions(np.ones((3, 4)), np.ones((8, 4)), offset=-1), r"offset must be a non-negative integer"),
    (lambda: sa.add_positions(np.ones((3, 4)), np.full((8, 4), np.nan)), r"table must hold only finite numbers"),
    (lambda: sa.apply_rope(np.ones((3, 5))), r"the head width Dh \(x's last axis\) must be even.*got 5 \(use 4 or 6\)"),
    (lambda: sa.apply_rope(np.ones(4)), r"x must have at least 2 axes \(\.\.\., T, Dh\)"),
    (
        lambda: sa.apply_rope(np.ones((3, 4)), positions=[0, 1]),
        r"positions must hold one position per token.*\(3,\).*got shape \(2,\)",
    ),
    (lambda: sa.apply_rope(np.ones((3, 4)), positions=5), r"positions must hold one position per token"),
    (
        lambda: sa.apply_rope(np.ones((2, 3, 4)), positions=np.zeros((3, 3))),
        r"positions of shape \(3, 3\) must be \(T,\) or have one axis for each of x's leading axes \(2,\)",
    ),
    (lambda: sa.apply_rope(np.ones((3, 4)), positions=[0, np.nan, 2]), r"positions must hold only finite numbers"),
    (lambda: sa.apply_rope(np.ones((3, 4)), positions=["a", "b", "c"]), r"positions must be an array of real numbers"),
    (lambda: sa.apply_rope(np.ones((3, 4)), base=-2), r"base must be positive"),
    (lambda: sa.apply_rope(np.ones((3, 4)), interleaved=1), r"interleaved must be True or False"),
    (lambda: sa.apply_rope(np.full((3, 4), np.inf)), r"x must hold only finite numbers"),
    (lambda: sa.rope_angles([], 8), r"positions must be a non-empty array"),
    (lambda: sa.rope_angles([1, 2], 0), r"head_dim must be a positive integer; got 0"),
    (lambda: sa.rope_decay_bound([1, 2], 7), r"head_dim must be even"),
    (lambda: sa.alibi_slopes(0), r"num_heads must be a positive integer; got 0"),
    (lambda: sa.alibi_slopes(2.0), r"num_heads must be a positive integer; got 2.0 .*write 2"),
    (lambda: sa.alibi_slopes(10**6), r"num_heads must be at most 4,096"),
    (lambda: sa.alibi_bias(4, 0), r"T must be a positive integer; got 0"),
    (lambda: sa.alibi_bias(4, 3, S=-1), r"S must be a positive integer; got -1"),
    (
        lambda: sa.alibi_bias(4, 3, dtype=bool),
        r"dtype must be float16, float32 or float64 .*added to the scores.*got <class 'bool'>",
    ),
    (lambda: sa.alibi_bias(4, 3, dtype=int), r"dtype must be float16, float32 or float64 .*got <class 'int'>"),
    (lambda: sa.alibi_bias(4, 3, dtype=None), r"dtype must be float16, float32 or float64 .*got None"),
    (lambda: sa.alibi_bias(4, 3, dtype=np.longdouble), r"dtype must be float16, float32 or float64 .*longdouble"),
    (lambda: sa.alibi_bias(64, 10**5, 10**5), r"would hold 640,000,000,000 numbers"),
    # found by an adversarial review: sizes that passed the old cap and then exhausted memory
    (lambda: sa.sinusoidal_positions(2**20, 2**11), r"the table of shape \(1048576, 2048\) would hold 2,147,483,648"),
    (lambda: sa.alibi_bias(32, 8192), r"the bias of shape \(32, 8192, 8192\) would hold"),
    (lambda: sa.rope_angles([1], 2**40), r"head_dim must be at most 65,536"),
    (lambda: sa.rope_decay_bound(np.arange(10**5), 2**16), r"the angles of shape \(100000, 32768\) would hold"),
    # per-example positions (B, T) with heads: the batch axis would meet the head axis
    (
        lambda: sa.apply_rope(np.zeros((2, 2, 3, 4)), np.zeros((2, 3))),
        r"positions of shape \(2, 3\) must be .* x's leading axes \(2, 2\).* pass positions\[:, None, :\]",
    ),
    (lambda: sa.apply_rope(np.zeros((3, 4)), np.zeros((5, 3))), r"one axis for each of x's leading axes \(\)"),
    (lambda: sa.apply_rope(np.zeros((0, 4))), r"x has no tokens: shape \(0, 4\)"),
    (lambda: sa.rope_decay_bound([np.nan], 64), r"distances must hold only finite numbers"),
    (lambda: sa.add_positions(np.ones((2, 5, 8)), np.zeros((0, 8))), r"table must have at least one row"),
    # finite input whose result overflows the dtype
    (lambda: sa.apply_rope(np.full((2, 2), 6e4, np.float16)), r"apply_rope overflowed float16: .* compute in a wider"),
    (lambda: sa.apply_rope(np.full((2, 2), 1.5e308)), r"apply_rope overflowed float64"),
    (
        lambda: sa.add_positions(np.full((1, 2), 6e4, np.float16), np.full((1, 2), 6e4, np.float16)),
        r"x \+ table overflowed float16",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_gets_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_positions_accept_tensors_and_lists():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    np.testing.assert_array_equal(sa.apply_rope(x, torch.arange(3)), sa.apply_rope(x.detach().numpy()))
    np.testing.assert_array_equal(sa.add_positions([[1.0, 2.0]], [[0.5, 0.5]]), [[1.5, 2.5]])
    assert sa.alibi_bias(np.int64(2), torch.tensor(3)).shape == (2, 3, 3)


def test_positions_with_one_axis_per_leading_axis_of_x_are_accepted():
    q = np.random.default_rng(4).normal(size=(2, 3, 5, 8))  # (B, H, T, Dh)
    per_example = np.array([np.arange(5), np.arange(5) + 10])  # (B, T)
    rotated = sa.apply_rope(q, per_example[:, None, :])  # (B, 1, T)
    for b in range(2):
        np.testing.assert_array_equal(rotated[b], sa.apply_rope(q[b], per_example[b]))


def test_overflow_checks_raise_no_numpy_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="overflowed"):
            sa.apply_rope(np.full((2, 2), 3e38, np.float32))


def test_float16_alibi_holds_far_penalties_at_the_lowest_finite_value():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bias = sa.alibi_bias(64, 1, 100_000, dtype=np.float16)
    assert bias.dtype == np.float16 and np.isfinite(bias).all()
    assert bias.min() == np.finfo(np.float16).min
    np.testing.assert_allclose(sa.alibi_bias(4, 6, dtype=np.float32), sa.alibi_bias(4, 6), rtol=1e-7)


def test_plot_position_table_refuses_values_whose_colour_range_overflows():
    with pytest.raises(ValueError, match=r"table values must lie within"):
        sa.plot_position_table([[1e308, -1e308], [0.0, 5e307]])
