"""Chapter 3's exercise references agree with nn.MultiheadAttention, and the cases are the ones the chapter names.

The generic tests in test_exercises.py run every checker on its reference, a
stub, float32 answers and each declared mistake; these tie the two new
references to a real module (autograd for what a sequence-first module reads,
the module's output for the merged mask), and check that correct answers
written differently pass and plausible wrong ones fail.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import selfattention as sa
from selfattention.exercises import check_seq_first_reads, check_to_package_mask
from selfattention.exercises.ch03_batched import SEQ_FIRST_READS, TO_PACKAGE_MASK, _reads, _to_package_mask

torch = pytest.importorskip("torch")


def _cases(exercise):
    return [args for _, args in exercise.cases(np.random.default_rng(100 * exercise.chapter + exercise.number))]


def _measured_reads(B, T, causal, num_heads):
    """(B, T, B, T): where y[b, t] has a nonzero derivative in x[b2, t2], for a sequence-first module."""
    torch.manual_seed(0)
    D = 4 * num_heads
    module = torch.nn.MultiheadAttention(D, num_heads).double()  # batch_first=False: (T, B, D) expected
    mask = torch.from_numpy(~np.tril(np.ones((B, B), dtype=bool))) if causal else None  # the size it expects

    def forward(x):
        return module(x, x, x, attn_mask=mask)[0]

    x = torch.randn(B, T, D, dtype=torch.float64)  # (B, T, D) given as it is
    jacobian = torch.autograd.functional.jacobian(forward, x).numpy()  # (B, T, D, B, T, D)
    return (jacobian != 0).any(axis=(2, 5))


@pytest.mark.parametrize("num_heads", [1, 2])
def test_the_reads_are_those_autograd_measures_on_a_sequence_first_module(num_heads):
    for B, T, causal in _cases(SEQ_FIRST_READS):
        np.testing.assert_array_equal(_reads(B, T, causal), _measured_reads(B, T, causal, num_heads))


def test_a_causal_mask_for_t_is_refused_unless_b_equals_t():
    module = torch.nn.MultiheadAttention(8, 1)
    for B, T in [(4, 3), (2, 5)]:
        x = torch.randn(B, T, 8)
        with pytest.raises(
            RuntimeError, match=rf"shape of the 2D attn_mask is torch.Size\(\[{T}, {T}\]\), but should be \({B}, {B}\)"
        ):
            module(x, x, x, attn_mask=torch.from_numpy(~np.tril(np.ones((T, T), dtype=bool))))
        with pytest.raises(RuntimeError, match=r"shape of the 2D attn_mask"):
            module(x, x, x, attn_mask=torch.from_numpy(sa.causal_mask(T, dtype=np.float32)))
    x = torch.randn(3, 3, 8)  # B = T: accepted (and applied along b)
    module(x, x, x, attn_mask=torch.from_numpy(~np.tril(np.ones((3, 3), dtype=bool))))
    module(x, x, x, attn_mask=torch.from_numpy(sa.causal_mask(3, dtype=np.float32)))


def test_one_sequence_through_a_sequence_first_module_attends_only_to_itself():
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(8, 2)
    x = torch.randn(1, 5, 8)
    _, weights = module(x, x, x)
    assert weights.shape == (5, 1, 1)  # 5 "sequences" of 1 token each
    torch.testing.assert_close(weights, torch.ones(5, 1, 1))


def _module_inputs(attn_mask, key_padding_mask, rng):
    T, S = attn_mask.shape if attn_mask is not None else (key_padding_mask.shape[1],) * 2
    B = key_padding_mask.shape[0] if key_padding_mask is not None else 2
    return rng.normal(size=(B, T, 8)), rng.normal(size=(B, S, 8))


def _run(module, x, z, attn_mask, key_padding_mask, need_weights):
    """The module's (output, weights) as NumPy arrays; the masks are NumPy arrays or None."""
    masks = [
        None if m is None else torch.from_numpy(m.astype(np.float64) if m.dtype.kind == "f" else m)
        for m in (attn_mask, key_padding_mask)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a float attn_mask with a boolean padding mask: deprecated
        y, weights = module(
            *map(torch.from_numpy, (x, z, z)), attn_mask=masks[0], key_padding_mask=masks[1], need_weights=need_weights
        )
    return y.detach().numpy(), None if weights is None else weights.detach().numpy()


def test_the_merged_mask_gives_the_module_s_output_and_weights():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(8, 1, bias=False, batch_first=True).double()
    w_q, w_k, w_v = (w.detach().numpy().T for w in module.in_proj_weight.chunk(3))
    w_out = module.out_proj.weight.detach().numpy().T
    for attn_mask, key_padding_mask in _cases(TO_PACKAGE_MASK):
        x, z = _module_inputs(attn_mask, key_padding_mask, rng)  # queries from x, keys and values from z
        y, weights = _run(module, x, z, attn_mask, key_padding_mask, need_weights=True)
        y_sdpa, _ = _run(module, x, z, attn_mask, key_padding_mask, need_weights=False)
        mask = _to_package_mask(attn_mask, key_padding_mask)
        ours, our_weights = sa.scaled_dot_product_attention(x @ w_q, z @ w_k, z @ w_v, mask=mask)
        np.testing.assert_allclose(ours @ w_out, y_sdpa, rtol=1e-10, atol=1e-12)  # zeros for keyless queries in both
        some_key = np.isfinite(np.broadcast_to(mask, weights.shape)).any(axis=-1)  # (B, T)
        np.testing.assert_allclose(our_weights[some_key], weights[some_key], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose((ours @ w_out)[some_key], y[some_key], rtol=1e-10, atol=1e-12)
        assert np.isnan(weights[~some_key]).all()  # need_weights=True: NaN where every key is blocked


def test_the_cases_are_those_the_chapter_names():
    reads = _cases(SEQ_FIRST_READS)
    assert any(B == T and causal for B, T, causal in reads)  # "when B = T ... nothing complains"
    assert any(B == 1 for B, _, _ in reads) and any(T == 1 for _, T, _ in reads)
    assert {causal for _, _, causal in reads} == {True, False}
    masks = _cases(TO_PACKAGE_MASK)
    assert any(a is None for a, _ in masks) and any(p is None for _, p in masks)
    assert any(a is not None and a.dtype == np.float32 for a, _ in masks)
    assert any(a is not None and a.shape[0] != a.shape[1] for a, _ in masks)  # cross-attention, T != S
    assert any(a is not None and a.shape[0] == 1 for a, _ in masks)  # one query
    assert any(a is not None and a.dtype.kind == "f" and (np.isfinite(a) & (a != 0)).any() for a, _ in masks)
    assert any(p is not None and a is not None and p.shape[0] == a.shape[0] == a.shape[1] for a, p in masks)  # B = T
    assert any(np.isneginf(_to_package_mask(a, p)).all(axis=-1).any() for a, p in masks)  # a query with no key


# --- correct answers written differently pass ---------------------------------------------------------


def _reads_by_loops(B, T, causal):
    reads = np.zeros((B, T, B, T), dtype=int)  # 1 and 0 instead of True and False
    for b in range(B):
        for t in range(T):
            for b2 in range(B):
                reads[b, t, b2, t] = 1 if (b2 <= b or not causal) else 0
    return reads


def _reads_by_einsum(B, T, causal):
    over_b = np.tril(np.ones((B, B), dtype=bool)) if causal else np.ones((B, B), dtype=bool)
    return np.einsum("ac,bd->abcd", over_b, np.eye(T, dtype=bool))


def _merged_in_torch(attn_mask, key_padding_mask):
    parts = []
    if attn_mask is not None:
        a = torch.as_tensor(attn_mask)
        parts.append(torch.zeros(a.shape).masked_fill(a, float("-inf")) if a.dtype == torch.bool else a)
    if key_padding_mask is not None:
        padding = torch.as_tensor(key_padding_mask)
        parts.append(torch.zeros(padding.shape).masked_fill(padding, float("-inf"))[:, None, :])  # float32
    return sum(parts[1:], parts[0])


def _merged_boolean_where_possible(attn_mask, key_padding_mask):
    if attn_mask is not None and attn_mask.dtype.kind == "f":
        padding = 0.0 if key_padding_mask is None else np.where(key_padding_mask, -np.inf, 0.0)[:, None, :]
        return attn_mask + padding
    keep = True if attn_mask is None else ~attn_mask  # (T, S): True = may attend
    return keep & (True if key_padding_mask is None else ~key_padding_mask[:, None, :])


def _merged_in_float32(attn_mask, key_padding_mask):
    blocked = np.float32(-np.inf)
    mask = np.float32(0.0)
    if attn_mask is not None:
        mask = np.where(attn_mask, blocked, np.float32(0)) if attn_mask.dtype == bool else attn_mask.astype(np.float32)
    if key_padding_mask is not None:
        mask = mask + np.where(key_padding_mask, blocked, np.float32(0))[:, None, :]
    return mask


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (check_seq_first_reads, _reads_by_loops),
        (check_seq_first_reads, _reads_by_einsum),
        (check_to_package_mask, _merged_in_torch),
        (check_to_package_mask, _merged_boolean_where_possible),
        (check_to_package_mask, _merged_in_float32),
    ],
)
def test_correct_answers_written_differently_pass(check, answer):
    result = check(answer)
    assert result, repr(result)


# --- plausible wrong answers that match no declared mistake fail --------------------------------------


def _ix(B, T):
    return np.ix_(*(np.arange(n) for n in (B, T, B, T)))


def _only_itself(B, T, causal):
    b, t, b2, t2 = _ix(B, T)
    return (b2 == b) & (t2 == t)


def _strictly_earlier(B, T, causal):
    b, t, b2, t2 = _ix(B, T)
    return (t2 == t) & ((b2 < b) | (not causal))  # a query that may not read its own step


def _causal_both_ways(B, T, causal):
    b, t, b2, t2 = _ix(B, T)
    return (b2 <= b) & (t2 <= t) if causal else np.broadcast_to(t2 == t, (B, T, B, T))


def _mask_along_t_batch_mixed(B, T, causal):
    b, t, b2, t2 = _ix(B, T)
    return np.broadcast_to((t2 <= t) if causal else (t2 == t2), (B, T, B, T))


def _always_causal(B, T, causal):
    return _reads(B, T, True)


def _flattened(B, T, causal):
    return _reads(B, T, causal).reshape(B * T, B * T)


def _minimum_of_the_two(attn_mask, key_padding_mask):
    attn = 0.0 if attn_mask is None else (np.where(attn_mask, -np.inf, 0.0) if attn_mask.dtype == bool else attn_mask)
    padding = 0.0 if key_padding_mask is None else np.where(key_padding_mask, -np.inf, 0.0)[:, None, :]
    return np.minimum(attn, padding)  # the most blocking of the two, instead of their sum


def _both_required(attn_mask, key_padding_mask):
    attn = attn_mask if attn_mask.dtype.kind == "f" else np.where(attn_mask, -np.inf, 0.0)  # fails on None
    return attn + np.where(key_padding_mask, -np.inf, 0.0)[:, None, :]


def _transposed_attn_mask(attn_mask, key_padding_mask):
    return _to_package_mask(None if attn_mask is None else attn_mask.T, key_padding_mask)


def _padding_only_as_b_s(attn_mask, key_padding_mask):
    merged = _to_package_mask(attn_mask, key_padding_mask)
    return merged[:, 0] if attn_mask is None else merged  # (B, S): no query axis when there is no attn_mask


def _float_mask_cast_to_float32_then_rounded(attn_mask, key_padding_mask):
    return np.round(_to_package_mask(attn_mask, key_padding_mask), 2)  # biases rounded away


# fmt: off
WRONG = [
    (check_seq_first_reads, _only_itself, r"case 1 \(B=3, T=2, no mask\): y\[0, 0\] depends on x\[1, 0\], .*got False$"),
    (check_seq_first_reads, _strictly_earlier, r"case 2 \(B=4, T=3, causal\): y\[0, 0\] depends on x\[0, 0\], .*got False$"),
    (check_seq_first_reads, _causal_both_ways, r"case 2 \(B=4, T=3, causal\): y\[0, 1\] does not depend on x\[0, 0\], .*got True$"),
    (check_seq_first_reads, _mask_along_t_batch_mixed, r"case 1 .*: y\[0, 0\] does not depend on x\[0, 1\].*\. It matches every output reading every input"),
    (check_seq_first_reads, _always_causal, r"case 1 \(B=3, T=2, no mask\): y\[0, 0\] depends on x\[1, 0\]"),
    (check_seq_first_reads, _flattened, r"case 1 .*: the answer should have shape \(3, 2, 3, 2\) \(B, T, B, T\); got \(6, 6\)$"),
    (check_to_package_mask, _minimum_of_the_two, r"case 5 \(float32 attn_mask, one query.*\): sequence 0, every query, key 1 should add 0.1015 to the score; got 0$"),
    (check_to_package_mask, _both_required, r"case 3 \(key_padding_mask only.*\) raised AttributeError: 'NoneType' object has no attribute 'dtype'$"),
    (check_to_package_mask, _transposed_attn_mask, r"case 1 .*: sequence 0, query 0, key 1 should be blocked \(-inf\); got 0$"),
    (check_to_package_mask, _padding_only_as_b_s, r"case 3 .*: the mask should broadcast to shape \(3, 1, 4\), \(batch, queries, keys\); got shape \(3, 4\)\. It matches the padding without a query axis"),
    (check_to_package_mask, _float_mask_cast_to_float32_then_rounded, r"case 2 .*should add -?\d\.\d+ to the score; got"),
]
# fmt: on


@pytest.mark.parametrize(("check", "wrong", "message"), WRONG, ids=lambda v: getattr(v, "__name__", ""))
def test_plausible_wrong_answers_fail_with_the_first_bad_case(check, wrong, message):
    with np.errstate(all="ignore"):
        result = check(wrong)
    assert result.status == "FAIL" and re.search(message, repr(result)), repr(result)
