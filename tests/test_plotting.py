"""The plotting helpers draw what they say, and reject what they cannot draw."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from selfattention import causal_mask, plot_attention, plot_attention_heads, plot_head_split, plot_mask, plot_token_grid


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_plot_attention_labels_colour_bar_and_annotations():
    weights = np.array([[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    ax = plot_attention(weights, ["a", "b", "c"], ["x", "y"], title="Toy weights")
    assert ax.get_title() == "Toy weights"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y"]
    np.testing.assert_array_equal(ax.images[0].get_array(), weights)
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    assert ax.figure.axes[1].get_ylabel() == "attention weight"
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{w:.3f}" for w in weights.ravel())


def test_plot_attention_skips_annotations_for_large_matrices_and_draws_on_a_given_axes():
    _, given = plt.subplots()
    ax = plot_attention(np.full((10, 10), 0.1), ax=given)
    assert ax is given
    assert len(ax.texts) == 0


def test_plot_token_grid_reshapes_row_major():
    values = np.arange(6.0)
    ax = plot_token_grid(values, (2, 3), title="Grid")
    np.testing.assert_array_equal(ax.images[0].get_array(), [[0, 1, 2], [3, 4, 5]])
    assert ax.get_title() == "Grid"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("patch column", "patch row")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot_attention(np.ones(3)), r"weights must be a 2-D \(T, S\) matrix; got shape \(3,\)"),
        (lambda: plot_attention(np.full((2, 2), np.nan)), r"weights must be finite to plot"),
        (lambda: plot_attention(np.ones((2, 3)), ["a"]), r"query_labels must have one label per rows \(T\): expected 2, got 1"),
        (lambda: plot_attention(np.ones((2, 3)), None, "abc"), r"key_labels must be a sequence of labels, one per columns \(S\); got 'abc'"),
        (lambda: plot_token_grid(np.ones(5), (2, 3)), r"values must be a vector of rows\*cols = 2\*3 = 6 patch values; got shape \(5,\)"),
        (lambda: plot_token_grid(np.ones(6), (6,)), r"grid_shape must be a \(rows, cols\) pair; got \(6,\)"),
        (lambda: plot_token_grid(np.ones(6), (0, 6)), r"grid_shape\[0\] must be a positive integer; got 0"),
        (lambda: plot_token_grid(np.full(6, np.inf), (2, 3)), r"values must be finite to plot"),
    ],
)
def test_plotting_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_plot_mask_accepts_both_polarities_and_shows_allowed_as_one():
    float_ax = plot_mask(causal_mask(4), title="causal")
    bool_ax = plot_mask(np.tril(np.ones((4, 4), dtype=bool)))
    expected = np.tril(np.ones((4, 4)))
    np.testing.assert_array_equal(float_ax.images[0].get_array(), expected)
    np.testing.assert_array_equal(bool_ax.images[0].get_array(), expected)
    assert float_ax.get_title() == "causal"
    assert [t.get_text() for t in float_ax.figure.axes[1].get_yticklabels()] == ["blocked", "may attend"]


def test_plot_attention_heads_one_panel_per_head_on_a_shared_scale():
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(6, 5))
    fig = plot_attention_heads(weights, ncols=4)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(6)]
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, weights.max())}
    named = plot_attention_heads(weights[:2], titles=["first", "mean"])
    assert [ax.get_title() for ax in named.axes if ax.images] == ["first", "mean"]


def test_plot_head_split_shows_each_heads_columns():
    q = np.arange(24.0).reshape(3, 8)
    fig = plot_head_split(q, 4)
    blocks = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert [ax.get_title() for ax in blocks] == ["head 0: columns 0-1", "head 1: columns 2-3", "head 2: columns 4-5", "head 3: columns 6-7"]
    np.testing.assert_array_equal(blocks[2].images[0].get_array(), q[:, 4:6])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plot_mask(np.ones(3, dtype=bool)), r"mask must be a 2-D \(T, S\) matrix; got shape \(3,\)"),
        (lambda: plot_mask(np.ones((2, 2))), r"a float mask to plot must hold only 0 \(attend\) and -inf \(blocked\)"),
        (lambda: plot_attention_heads(np.ones((2, 2))), r"weights must have shape \(H, T, S\); got shape \(2, 2\)"),
        (lambda: plot_attention_heads(np.ones((1, 2, 2)), ncols=0), r"ncols must be a positive integer; got 0"),
        (lambda: plot_attention_heads(np.ones((2, 2, 2)), titles=["a"]), r"titles must have one label per panel \(H\): expected 2, got 1"),
        (lambda: plot_head_split(np.ones((3, 8)), 3), r"the model width D=8 is not divisible by num_heads=3"),
        (lambda: plot_head_split(np.ones(8), 2), r"q must be a 2-D \(T, D\) matrix; got shape \(8,\)"),
    ],
)
def test_new_plotting_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_plot_block_traversal_marks_the_current_block():
    from selfattention import plot_block_traversal

    fig = plot_block_traversal(5, steps=[0, 2])
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["step 1 of 5", "step 3 of 5"]
    np.testing.assert_array_equal(panels[1].images[0].get_array()[0], [0, 0, 1, 2, 2])
    with pytest.raises(ValueError, match=r"steps must be integers in \[0, 4\]; got 5"):
        plot_block_traversal(5, steps=[5])
    with pytest.raises(ValueError, match=r"num_blocks must be a positive integer; got 0"):
        plot_block_traversal(0)
