"""Temperature, top-k and top-p: the package's next-token distribution against transformers' logits warpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import selfattention as sa


def _transformers_probabilities(logits, temperature, top_k, top_p):
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = torch.from_numpy(np.atleast_2d(logits))
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None and top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, dim=-1).numpy().reshape(np.shape(logits))


@pytest.mark.slow
@settings(deadline=None)  # the first case imports transformers
@given(
    seed=st.integers(0, 2**32 - 1),
    V=st.integers(1, 40),
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.5, 4.0]),
    top_k=st.one_of(st.none(), st.integers(1, 45)),
    top_p=st.one_of(st.none(), st.sampled_from([0.1, 0.5, 0.8, 0.95, 1.0])),
)
def test_the_distribution_matches_transformers_warpers(seed, V, temperature, top_k, top_p):
    logits = np.random.default_rng(seed).normal(scale=3.0, size=(3, V))  # continuous: no exact ties or boundaries
    ours = sa.next_token_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    np.testing.assert_allclose(ours, _transformers_probabilities(logits, temperature, top_k, top_p), atol=1e-12)
    np.testing.assert_allclose(ours.sum(axis=-1), 1.0, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("logits", "top_p"),
    [([1.0, 1.0, 0.0], 0.3), ([3.0, 1.0, 1.0, 1.0, 1.0], 0.9), ([0.0, 0.0, 0.0, 0.0], 0.5), ([2.0, 2.0, 1.0], 0.4)],
)
def test_top_p_breaks_ties_at_the_cut_as_transformers_does_on_short_rows(logits, top_p):
    logits = np.array(logits)
    ours = sa.next_token_probabilities(logits, top_p=top_p)
    np.testing.assert_allclose(ours, _transformers_probabilities(logits, 1.0, None, top_p), atol=1e-7)


def test_top_k_keeps_ties_and_top_p_keeps_at_least_one_token():
    logits = np.array([2.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(sa.next_token_probabilities(logits, top_k=2) > 0, [True, True, True, False])
    assert (sa.next_token_probabilities(logits, top_p=1e-9) > 0).tolist() == [True, False, False, False]
    assert (sa.next_token_probabilities([1.0, 1.0, 0.0], top_p=0.3) > 0).tolist() == [
        False,
        True,
        False,
    ]  # the later tie
    greedy_like = sa.next_token_probabilities(logits, temperature=1e-3)
    assert greedy_like[0] == pytest.approx(1.0)


def test_sampling_is_repeatable_and_follows_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.2, 0.0001]))
    draws = sa.sample_next_token(np.tile(logits, (20000, 1)), np.random.default_rng(0))
    again = sa.sample_next_token(np.tile(logits, (20000, 1)), np.random.default_rng(0))
    np.testing.assert_array_equal(draws, again)
    shares = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(shares, [0.5, 0.3, 0.2, 0.0001], atol=0.015)  # 20,000 draws: about 3.5 standard errors
    kept = sa.sample_next_token(np.tile(logits, (2000, 1)), np.random.default_rng(1), top_k=2)
    assert set(np.unique(kept)) == {0, 1}  # a token outside top-k is never drawn
    one = sa.sample_next_token(logits, np.random.default_rng(2))
    assert isinstance(one, int) and 0 <= one < 4


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sa.next_token_probabilities([1.0, 2.0], temperature=0), r"temperature must be positive"),
        (lambda: sa.next_token_probabilities([1.0, 2.0], temperature=-1.0), r"temperature must be positive"),
        (lambda: sa.next_token_probabilities([1.0, 2.0], top_k=0), r"top_k must be a positive integer"),
        (lambda: sa.next_token_probabilities([1.0, 2.0], top_p=1.5), r"top_p must lie in \(0, 1\]"),
        (lambda: sa.next_token_probabilities([1.0, 2.0], top_p=0.0), r"top_p must be positive"),
        (lambda: sa.next_token_probabilities([], top_p=0.5), r"logits must hold at least one score"),
        (lambda: sa.next_token_probabilities([1.0, np.nan]), r"logits .*NaN"),
        (lambda: sa.next_token_probabilities([1e308, 0.0], temperature=1e-10), r"logits / temperature overflowed"),
        (lambda: sa.sample_next_token([1.0, 2.0], rng=0), r"rng must be a numpy.random.Generator"),
    ],
)
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
