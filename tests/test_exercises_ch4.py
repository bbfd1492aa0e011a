"""Chapter 4's exercise references agree with the layer they describe, and the cases are the ones the chapter names.

The generic tests in test_exercises.py run every checker on its reference, a
stub, float32 answers and each declared mistake; these tie the two new
references to ``sa.multihead_attention`` and check that correct answers
written differently from the references pass and plausible wrong ones fail.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import selfattention as sa
from selfattention.exercises import check_head_score_matrices, check_reorder_heads
from selfattention.exercises.ch04_multihead import (
    HEAD_SCORE_MATRICES,
    REORDER_HEADS,
    _reorder,
    _score_matrices,
)


def _cases(exercise):
    return [args for _, args in exercise.cases(np.random.default_rng(0))]


def test_each_score_matrix_gives_its_head_s_weights_in_the_layer():
    rng = np.random.default_rng(0)
    for w_q, w_k, H in _cases(HEAD_SCORE_MATRICES):
        D, kdim = w_q.shape[0], w_k.shape[0]
        x, z = rng.normal(size=(5, D)), rng.normal(size=(7, kdim))
        w_v = rng.normal(size=(kdim, D))
        params = sa.AttentionParams(q=sa.Linear(w_q), k=sa.Linear(w_k), v=sa.Linear(w_v), out=sa.Linear(np.eye(D)))
        _, weights = sa.multihead_attention(x, params, num_heads=H, key=z)
        np.testing.assert_allclose(sa.softmax(x @ _score_matrices(w_q, w_k, H) @ z.T), weights, rtol=1e-4, atol=1e-6)


def test_the_reordered_layer_gives_the_same_output_and_moves_the_weights():
    rng = np.random.default_rng(1)
    for params, H, order in _cases(REORDER_HEADS):
        x = rng.normal(size=(2, 5, params["w_out"].shape[0]))
        y, weights = sa.multihead_attention(x, **params, num_heads=H, mask=sa.causal_mask(5))
        y_new, weights_new = sa.multihead_attention(
            x, **_reorder(params, H, order), num_heads=H, mask=sa.causal_mask(5)
        )
        np.testing.assert_allclose(y_new, y, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(weights_new, weights[:, order], rtol=1e-4, atol=1e-6)


def test_the_cases_are_those_the_chapter_names():
    heads = [H for _, H, _ in _cases(REORDER_HEADS)]
    assert sorted(set(heads)) == [1, 2, 3, 4]  # "1 to 4 heads"
    assert any(p["w_out"].shape[0] == H for p, H, _ in _cases(REORDER_HEADS))  # "heads of width 1"
    orders = [np.asarray(order) for _, _, order in _cases(REORDER_HEADS)]
    undo = [bool((order[order] == np.arange(len(order))).all()) for order in orders]
    assert any(undo) and not all(undo)  # "orders that undo themselves and orders that do not"
    assert any(p["w_qkv"].dtype == np.float32 for p, _, _ in _cases(REORDER_HEADS))  # "float32 weights"


# Correct answers written in other ways than the references.
def _score_matrices_by_probing(w_q, w_k, num_heads):
    """Read W^h off the scores of basis vectors: entry (a, b) is the score of e_a against e_b."""
    D, kdim = w_q.shape[0], w_k.shape[0]
    q = sa.split_heads(np.eye(D) @ w_q, num_heads)  # (H, D, Dh)
    k = sa.split_heads(np.eye(kdim) @ w_k, num_heads)  # (H, kdim, Dh)
    return np.einsum("had,hbd->hab", q, k) / np.sqrt(w_q.shape[1] // num_heads)


def _score_matrices_loop_float32(w_q, w_k, num_heads):
    Dh = w_q.shape[1] // num_heads
    w_q, w_k = w_q.astype(np.float32), w_k.astype(np.float32)
    return [
        w_q[:, h * Dh : (h + 1) * Dh] @ w_k[:, h * Dh : (h + 1) * Dh].T / np.float32(np.sqrt(Dh))
        for h in range(num_heads)
    ]


def _reorder_with_split_heads(params, num_heads, order):
    """Split every weight into heads, index the head axis, and merge back."""
    w_q, w_k, w_v = np.split(params["w_qkv"], 3, axis=-1)
    b_q, b_k, b_v = np.split(params["b_qkv"], 3)
    pick = list(order)
    move = lambda a: sa.merge_heads(sa.split_heads(a, num_heads)[..., pick, :, :])  # noqa: E731
    w_out = params["w_out"].reshape(num_heads, -1, params["w_out"].shape[1])[pick].reshape(params["w_out"].shape)
    return {
        "w_qkv": np.concatenate([move(w) for w in (w_q, w_k, w_v)], axis=-1),
        "b_qkv": np.concatenate([move(b[None])[0] for b in (b_q, b_k, b_v)]),
        "w_out": w_out,
        "b_out": params["b_out"],
    }


def _reorder_float32_via_torch(params, num_heads, order):
    import torch

    D = params["w_out"].shape[0]
    Dh = D // num_heads
    perm = torch.tensor([h * Dh + i for h in order for i in range(Dh)])
    t = {k: torch.tensor(v, dtype=torch.float32) for k, v in params.items()}
    qkv = torch.cat([perm, perm + D, perm + 2 * D])
    return {"w_qkv": t["w_qkv"][:, qkv], "b_qkv": t["b_qkv"][qkv], "w_out": t["w_out"][perm], "b_out": t["b_out"]}


def _one_head_matrix_for_all(w_q, w_k, num_heads):
    """One head of width D's matrix, W_Q W_K^T / sqrt(D), for every head."""
    return np.stack([w_q @ w_k.T / np.sqrt(w_q.shape[1])] * num_heads)


def _blocks_of_the_product(w_q, w_k, num_heads):
    """Diagonal (Dh, Dh)-blocks of W_Q W_K^T: confusing the heads' input rows with their columns."""
    full, Dh = w_q @ w_k.T, w_q.shape[1] // num_heads
    return np.stack([full[h * Dh : (h + 1) * Dh, h * Dh : (h + 1) * Dh] for h in range(num_heads)]) / np.sqrt(Dh)


def _reversed_heads(w_q, w_k, num_heads):
    return _score_matrices(w_q, w_k, num_heads)[::-1]


def _scaled_by_sqrt_h(w_q, w_k, num_heads):
    return _score_matrices(w_q, w_k, num_heads) / np.sqrt(num_heads)


def _reorder_only_queries_and_keys(params, num_heads, order):
    new = _reorder(params, num_heads, order)
    D = params["w_out"].shape[0]
    new["w_qkv"][:, 2 * D :] = params["w_qkv"][:, 2 * D :]
    new["b_qkv"][2 * D :] = params["b_qkv"][2 * D :]
    return new


def _reorder_only_queries(params, num_heads, order):
    """Only W_Q's columns and biases move, as if a head were its queries alone."""
    new = _reorder(params, num_heads, order)
    D = params["w_out"].shape[0]
    new["w_qkv"][:, D:] = params["w_qkv"][:, D:]
    new["b_qkv"][D:] = params["b_qkv"][D:]
    new["w_out"] = params["w_out"]
    return new


def _reorder_within_heads_too(params, num_heads, order):
    """Also reverses each head's own columns (and W_O's rows with them): the same output, not the asked layout."""
    D = params["w_out"].shape[0]
    Dh = D // num_heads
    head = np.concatenate([np.arange(h * Dh, (h + 1) * Dh)[::-1] for h in order])
    qkv = np.concatenate([head, D + head, 2 * D + head])
    return {
        "w_qkv": params["w_qkv"][:, qkv],
        "b_qkv": params["b_qkv"][qkv],
        "w_out": params["w_out"][head],
        "b_out": params["b_out"],
    }


def _reorder_identity(params, num_heads, order):
    return {key: value.copy() for key, value in params.items()}


# (checker, answer, whether it is right): right answers written otherwise than the references, and plausible
# wrong answers that match no declared mistake.
ANSWERS = [
    (check_head_score_matrices, _score_matrices_by_probing, True),
    (check_head_score_matrices, _score_matrices_loop_float32, True),
    (check_reorder_heads, _reorder_with_split_heads, True),
    (check_reorder_heads, _reorder_float32_via_torch, True),
    (check_head_score_matrices, _one_head_matrix_for_all, False),
    (check_head_score_matrices, _blocks_of_the_product, False),
    (check_head_score_matrices, _reversed_heads, False),
    (check_head_score_matrices, _scaled_by_sqrt_h, False),
    (check_reorder_heads, _reorder_only_queries_and_keys, False),
    (check_reorder_heads, _reorder_only_queries, False),
    (check_reorder_heads, _reorder_within_heads_too, False),
    (check_reorder_heads, _reorder_identity, False),
]


@pytest.mark.parametrize(("check", "answer", "right"), ANSWERS, ids=lambda a: getattr(a, "__name__", str(a)))
def test_right_answers_in_other_forms_pass_and_plausible_wrong_ones_fail(check, answer, right):
    result = check(answer)
    assert result.status == ("PASS" if right else "FAIL"), repr(result)


def test_every_order_of_a_layer_s_heads_is_the_same_layer():
    rng = np.random.default_rng(2)
    params, H, _ = _cases(REORDER_HEADS)[2]
    x = rng.normal(size=(1, 4, params["w_out"].shape[0]))
    y, _ = sa.multihead_attention(x, **params, num_heads=H)
    for order in itertools.permutations(range(H)):
        np.testing.assert_allclose(sa.multihead_attention(x, **_reorder(params, H, list(order)), num_heads=H)[0], y)
