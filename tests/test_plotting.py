"""The plotting helpers draw what they say, and reject what they cannot draw."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from selfattention import plot_attention, plot_token_grid


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
