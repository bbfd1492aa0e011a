"""The plotting helpers draw what they say, reject what they cannot draw, and load matplotlib only when drawing."""

from __future__ import annotations

import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest

import selfattention as sa
from selfattention import (
    causal_mask,
    plot_attention,
    plot_attention_heads,
    plot_attention_overlay,
    plot_block_traversal,
    plot_encoder_block,
    plot_head_split,
    plot_mask,
    plot_patch_grid,
    plot_position_table,
    plot_roofline,
    plot_token_grid,
    sinusoidal_positions,
)
from selfattention.plotting import diagrams, views

IMAGE = np.full((8, 8, 3), 0.5)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_importing_the_plotting_package_does_not_load_matplotlib():
    code = "import sys, selfattention.plotting; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", result.stdout


def test_all_is_the_submodules_lists_and_reaches_the_top_level():
    assert sa.plotting.__all__ == [*views.__all__, *diagrams.__all__]
    assert len(set(sa.plotting.__all__)) == 14
    for name in sa.plotting.__all__:
        assert getattr(sa, name) is getattr(sa.plotting, name)


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
    assert [t.get_text() for t in ax.texts] == [f"{w:.3f}" for w in weights.ravel()]  # row by row
    assert [t.get_color() for t in ax.texts] == ["white", "black", "white", "white", "black", "white"]


def test_plot_attention_skips_annotations_for_large_matrices_and_draws_on_a_given_axes():
    _, given = plt.subplots()
    ax = plot_attention(np.full((10, 10), 0.1), ax=given)
    assert ax is given
    assert len(ax.texts) == 0
    assert len(plot_attention(np.eye(2), annotate=False).texts) == 0


def test_plot_token_grid_reshapes_row_major():
    values = np.arange(6.0)
    ax = plot_token_grid(values, (2, 3), title="Grid")
    np.testing.assert_array_equal(ax.images[0].get_array(), [[0, 1, 2], [3, 4, 5]])
    assert ax.get_title() == "Grid"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("patch column", "patch row")
    assert ax.figure.axes[1].get_ylabel() == "attention weight"


def test_plot_mask_accepts_both_polarities_and_shows_allowed_as_one():
    float_ax = plot_mask(causal_mask(4), title="causal")
    bool_ax = plot_mask(np.tril(np.ones((4, 4), dtype=bool)))
    expected = np.tril(np.ones((4, 4)))
    np.testing.assert_array_equal(float_ax.images[0].get_array(), expected)
    np.testing.assert_array_equal(bool_ax.images[0].get_array(), expected)
    assert float_ax.get_title() == "causal"
    assert (float_ax.get_xlabel(), float_ax.get_ylabel()) == ("key", "query")
    assert [t.get_text() for t in float_ax.figure.axes[1].get_yticklabels()] == ["blocked", "may attend"]


def test_plot_attention_heads_one_panel_per_head_on_a_shared_scale():
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(6, 5))
    fig = plot_attention_heads(weights, ncols=4)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(6)]
    assert [ax.get_ylabel() for ax in panels] == ["query", "", "", "", "query", ""]  # the first column only
    assert {ax.images[0].get_clim() for ax in panels} == {(0.0, weights.max())}
    assert sum(not ax.get_visible() for ax in fig.axes) == 2  # the grid's two spare cells
    named = plot_attention_heads(weights[:2], titles=["first", "mean"])
    assert [ax.get_title() for ax in named.axes if ax.images] == ["first", "mean"]


def test_plot_head_split_shows_each_heads_columns():
    q = np.arange(24.0).reshape(3, 8)
    fig = plot_head_split(q, 4)
    blocks = [ax for ax in fig.axes if ax.get_title().startswith("head ")]
    assert [ax.get_title() for ax in blocks] == [f"head {h}\ncolumns {2 * h}-{2 * h + 1}" for h in range(4)]
    np.testing.assert_array_equal(blocks[2].images[0].get_array(), q[:, 4:6])
    assert {ax.images[0].get_clim() for ax in blocks} == {(-23.0, 23.0)}


@pytest.mark.parametrize("norm_first", [False, True])
def test_plot_encoder_block_draws_the_steps_in_order(norm_first):
    ax = plot_encoder_block(norm_first, "gelu")
    labels = [t.get_text().replace("\n", " ") for t in ax.texts if t.get_text() not in ("residual", "")]  # "" = arrows
    x, y, add = "x  (..., T, D)", "y  (..., T, D)", "+"
    attention, ff = "Multi-head self-attention (optional mask)", "Feed-forward: Linear D\u2192F, GELU, Linear F\u2192D"
    if norm_first:
        assert labels == [x, "LayerNorm 1", attention, add, "LayerNorm 2", ff, add, y]
    else:
        assert labels == [x, attention, add, "LayerNorm 1", ff, add, "LayerNorm 2", y]
    assert any("GELU" in t.get_text() for t in ax.texts)
    assert [t.get_text() for t in ax.texts].count("residual") == 2
    assert ax.get_title() == ("Pre-norm encoder block" if norm_first else "Post-norm encoder block")


def test_plots_draw_the_grid_and_the_overlay():
    image = np.random.default_rng(0).random((16, 24, 3))
    ax = plot_patch_grid(image, 8)
    assert ax.get_title() == "2 x 3 patches of 8 x 8 pixels"
    assert len(ax.lines) == (24 // 8 + 1) + (16 // 8 + 1)
    weights = np.arange(6.0).reshape(2, 3)
    ax = plot_attention_overlay(image, weights, marker=(1, 2), title="t")
    np.testing.assert_array_equal(ax.images[1].get_array(), weights)
    assert ax.images[1].get_clim() == (0.0, 5.0)
    assert plot_attention_overlay(image, weights, vmax=9.0).images[1].get_clim() == (0.0, 9.0)
    assert ax.get_title() == "t" and len(ax.lines) == 1
    np.testing.assert_allclose(ax.lines[0].get_xydata(), [[19.5, 11.5]])  # the centre of cell (1, 2)
    assert len(plot_attention_overlay(image, weights, colorbar=False).figure.axes) == 1


def test_plot_patch_grid_shows_a_one_channel_image_in_grey():
    ax = plot_patch_grid(np.random.default_rng(0).random((8, 8, 1)), 4)
    assert ax.images[0].get_array().shape == (8, 8)
    assert ax.images[0].get_cmap().name == "gray"


def test_plot_block_traversal_marks_the_current_tile():
    fig = plot_block_traversal(3, steps=[0, 4])
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["step 1 of 9", "step 5 of 9"]
    np.testing.assert_array_equal(panels[1].images[0].get_array(), [[0, 0, 0], [0, 1, 2], [2, 2, 2]])
    default = [ax.get_title() for ax in plot_block_traversal(8).axes]
    assert default == ["step 1 of 64", "step 2 of 64", "step 9 of 64"]
    assert [ax.get_title() for ax in plot_block_traversal(2, steps=np.array([3])).axes] == ["step 4 of 4"]
    assert [ax.get_title() for ax in plot_block_traversal(1).axes] == ["step 1 of 1"]


def test_plot_roofline_draws_the_roof_and_one_marker_per_point():
    ax = plot_roofline({"a": (1.0, 5.0), "b": (100.0, 80.0)}, 100.0, 10.0)
    roof = ax.lines[0]
    x, y = roof.get_data()
    np.testing.assert_allclose(y, np.minimum(100.0, 10.0 * x))
    assert [line.get_label() for line in ax.lines] == ["roof", "a", "b"]


def test_plot_position_table_centres_the_colours_on_zero():
    ax = plot_position_table(sinusoidal_positions(16, 8))
    image = ax.images[0]
    assert image.get_array().shape == (16, 8)
    assert image.get_clim() == pytest.approx((-1.0, 1.0), abs=1e-12)
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("feature", "position", "Position vectors")


# One case per line: a call, and the message it must raise (a regex).
# fmt: off
ERROR_CASES = [
    (lambda: plot_attention(np.ones(3)), r"weights must be a 2-D \(T, S\) matrix; got shape \(3,\)"),
    (lambda: plot_attention(np.ones((0, 3))), r"weights must be a 2-D \(T, S\) matrix; got shape \(0, 3\)"),
    (lambda: plot_attention(np.full((2, 2), np.nan)), r"weights must be finite to plot; found 4 NaN or infinite value\(s\)"),
    (lambda: plot_attention(np.ones((2, 3)), ["a"]), r"query_labels must have one label per rows \(T\): expected 2, got 1"),
    (lambda: plot_attention(np.ones((2, 3)), None, "abc"), r"key_labels must be a sequence of labels \(a list or tuple\), one per columns \(S\); got 'abc'"),
    (lambda: plot_attention(np.ones((2, 2)), annotate="yes"), r"annotate must be True or False; got 'yes'"),
    (lambda: plot_attention(np.ones((2, 2)), title=3), r"title must be a string; got 3 of type int"),
    (lambda: plot_attention(np.ones((2, 2)), ax="left"), r"ax must be a matplotlib Axes or None; got str"),
    (lambda: plot_attention(np.ones((2, 2)), ax=plt.subplots(1, 2)[1]), r"ax must be a matplotlib Axes or None; got ndarray \(pick one panel, e\.g\. axes\[0\]\)"),
    (lambda: plot_token_grid(np.ones(5), (2, 3)), r"values must be a vector of rows\*cols = 2\*3 = 6 patch values; got shape \(5,\)"),
    (lambda: plot_token_grid(np.ones(6), (6,)), r"grid_shape must be a \(rows, cols\) pair; got \(6,\)"),
    (lambda: plot_token_grid(np.ones(6), (0, 6)), r"grid_shape\[0\] must be a positive integer; got 0"),
    (lambda: plot_token_grid(np.full(6, np.inf), (2, 3)), r"values must be finite to plot; found 6 NaN or infinite value\(s\)"),
    (lambda: plot_token_grid(np.ones(6), (2, 3), colorbar_label=None), r"colorbar_label must be a string; got None"),
    (lambda: plot_token_grid(np.ones(6), (2, 3), ax=1), r"ax must be a matplotlib Axes or None; got int"),
    (lambda: plot_mask(np.ones(3, dtype=bool)), r"mask must be a 2-D \(T, S\) matrix; got shape \(3,\)"),
    (lambda: plot_mask(np.ones((2, 2))), r"a float mask to plot must hold only 0 \(attend\) and -inf \(blocked\); found 4 other value\(s\), e\.g\. 1 \(for True = may attend, pass a boolean mask\)"),
    (lambda: plot_mask(np.array([[0.0, np.nan]])), r"a float mask to plot must hold only 0 \(attend\) and -inf \(blocked\); found 1 other value\(s\), e\.g\. nan"),
    (lambda: plot_mask(np.eye(2, dtype=bool), title=["causal"]), r"title must be a string; got \['causal'\] of type list"),
    (lambda: plot_mask(np.eye(2, dtype=bool), ax=object()), r"ax must be a matplotlib Axes or None; got object"),
    (lambda: plot_attention_heads(np.ones((2, 2))), r"weights must be a 3-D \(H, T, S\) array; got shape \(2, 2\)"),
    (lambda: plot_attention_heads(np.full((1, 2, 2), np.nan)), r"weights must be finite to plot; found 4 NaN or infinite value\(s\)"),
    (lambda: plot_attention_heads(np.ones((1, 2, 2)), ncols=0), r"ncols must be a positive integer; got 0"),
    (lambda: plot_attention_heads(np.ones((2, 2, 2)), titles=["a"]), r"titles must have one label per panel \(H\): expected 2, got 1"),
    (lambda: plot_attention_heads(np.ones((2, 2, 2)), titles=["a", 1]), r"titles\[1\] must be a string; got 1 of type int"),
    (lambda: plot_attention_heads(np.ones((2, 2, 2)), title=None), r"title must be a string; got None of type NoneType"),
    (lambda: plot_patch_grid(np.ones((10, 10, 3)), 4), r"the image size 10x10 is not a multiple of patch_size=4; crop or resize it to a multiple \(for example 8x8\)"),
    (lambda: plot_patch_grid(np.full((8, 8, 3), 2.0), 4), r"image values must lie in \[0, 1\]; got values from 2 to 2"),
    (lambda: plot_patch_grid(np.full((8, 8, 3), np.nan), 4), r"image must be finite to plot; found 192 NaN or infinite value\(s\)"),
    (lambda: plot_patch_grid(np.ones((3, 8, 8)), 4), r"image must have shape \(H, W, 3\) or \(H, W, 1\), channels last; got shape \(3, 8, 8\)"),
    (lambda: plot_patch_grid(IMAGE, 0), r"patch_size must be a positive integer; got 0"),
    (lambda: plot_patch_grid(IMAGE, 4, title=4), r"title must be a string or None; got 4 of type int"),
    (lambda: plot_patch_grid(IMAGE, 4, ax=[]), r"ax must be a matplotlib Axes or None; got list"),
    (lambda: plot_attention_overlay(IMAGE, np.ones(4)), r"weights must be a 2-D \(rows, cols\) grid; got shape \(4,\)"),
    (lambda: plot_attention_overlay(IMAGE, np.full((2, 2), np.inf)), r"weights must be finite to plot; found 4 NaN or infinite value\(s\)"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), alpha=2), r"alpha must lie in \[0, 1\]; got 2.0"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), alpha=None), r"alpha must be a real number; got None of type NoneType"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), alpha="0.5"), r"alpha must be a real number; got '0.5' of type str"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 3)), marker=(2, 0)), r"marker must be a \(row, col\) cell of the 2 x 3 weights; got \(2, 0\)"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 3)), marker=(0, -1)), r"marker must be a \(row, col\) cell of the 2 x 3 weights; got \(0, -1\)"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 3)), marker=(0.5, 1)), r"marker must be a \(row, col\) cell of the 2 x 3 weights; got \(0.5, 1\)"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 3)), marker=3), r"marker must be a \(row, col\) pair; got 3"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), vmax=0), r"vmax must be positive \(the colour scale starts at 0\); got 0.0"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), vmax="max"), r"vmax must be a real number; got 'max' of type str"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), colorbar="no"), r"colorbar must be True or False; got 'no'"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), title=None), r"title must be a string; got None of type NoneType"),
    (lambda: plot_attention_overlay(IMAGE, np.ones((2, 2)), ax="ax"), r"ax must be a matplotlib Axes or None; got str"),
    (lambda: plot_head_split(np.ones((3, 8)), 3), r"the model width D=8 is not divisible by num_heads=3; each head needs D // num_heads columns \(try num_heads in \[1, 2, 4, 8\]\)"),
    (lambda: plot_head_split(np.ones((3, 8)), 0), r"num_heads must be a positive integer; got 0"),
    (lambda: plot_head_split(np.ones(8), 2), r"q must be a 2-D \(T, D\) matrix; got shape \(8,\)"),
    (lambda: plot_head_split(np.full((3, 8), np.nan), 2), r"q must be finite to plot; found 24 NaN or infinite value\(s\)"),
    (lambda: plot_head_split(np.ones((3, 8)), 2, title=b"Q"), r"title must be a string; got b'Q' of type bytes"),
    (lambda: plot_encoder_block(activation="swish"), r"activation must be one of \['gelu', 'relu'\]; got 'swish'"),
    (lambda: plot_encoder_block(norm_first=1), r"norm_first must be True or False; got 1"),
    (lambda: plot_encoder_block(title=1), r"title must be a string or None; got 1 of type int"),
    (lambda: plot_encoder_block(ax=np.empty(2, dtype=object)), r"ax must be a matplotlib Axes or None; got ndarray \(pick one panel"),
    (lambda: plot_position_table(np.ones(4)), r"table must be a 2-D \(T, D\) table, one row per position; got shape \(4,\)"),
    (lambda: plot_position_table(np.full((2, 2), np.nan)), r"table must be finite to plot"),
    (lambda: plot_position_table(np.ones((2, 2)), cmap="nope"), r"cmap must be the name of a matplotlib colour map"),
    (lambda: plot_position_table(np.ones((2, 2)), title=None), r"title must be a string; got None"),
    (lambda: plot_block_traversal(0), r"num_blocks must be a positive integer; got 0"),
    (lambda: plot_block_traversal(65), r"num_blocks must be at most 64; got 65"),
    (lambda: plot_block_traversal(2, steps=[4]), r"steps must be integers in \[0, 3\]; got 4"),
    (lambda: plot_block_traversal(2, steps=[-1]), r"steps must be integers in \[0, 3\]; got -1"),
    (lambda: plot_block_traversal(2, steps=[1.0]), r"steps must be integers in \[0, 3\]; got 1.0"),
    (lambda: plot_block_traversal(2, steps=[True]), r"steps must be integers in \[0, 3\]; got True"),
    (lambda: plot_block_traversal(2, steps=3), r"steps must be a non-empty sequence of integers in \[0, 3\]; got 3"),
    (lambda: plot_block_traversal(2, steps=[]), r"steps must be a non-empty sequence of integers in \[0, 3\]; got \[\]"),
    (lambda: plot_block_traversal(2, steps="01"), r"steps must be a non-empty sequence of integers in \[0, 3\]; got '01'"),
    (lambda: plot_block_traversal(2, steps=np.zeros((1, 1), dtype=int)), r"steps must be a non-empty sequence of integers in \[0, 3\]; got array"),
    (lambda: plot_roofline({}, 1.0, 1.0), r"points must be a non-empty dict"),
    (lambda: plot_roofline({"a": (0.0, 1.0)}, 1.0, 1.0), r"points\['a'\] must be a pair of positive numbers"),
    (lambda: plot_roofline({"a": (1.0, float("nan"))}, 1.0, 1.0), r"points\['a'\] must be a pair of positive numbers"),
    (lambda: plot_roofline({"a": "12"}, 1.0, 1.0), r"points\['a'\] must be a pair of positive numbers"),
    (lambda: plot_roofline({"a": (1.0, 2.0)}, -1.0, 1.0), r"peak_gflops must be"),
    (lambda: plot_roofline({"a": (1.0, 2.0)}, 1.0, 1.0, title=None), r"title must be a string"),
]
# fmt: on


@pytest.mark.parametrize(("call", "message"), ERROR_CASES)
def test_plotting_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_plot_attention_heads_writes_token_labels_on_square_maps():
    weights = np.full((2, 3, 3), 1 / 3)
    fig = plot_attention_heads(weights, labels=["[CLS]", "hi", "[SEP]"], ncols=2)
    first, second = fig.axes[:2]
    assert [t.get_text() for t in first.get_xticklabels()] == ["[CLS]", "hi", "[SEP]"]
    assert [t.get_text() for t in first.get_yticklabels()] == ["[CLS]", "hi", "[SEP]"]
    assert [t.get_text() for t in second.get_yticklabels()] == ["", "", ""]  # shared rows: named once
    with pytest.raises(ValueError, match=r"labels name the tokens of a square \(H, T, T\) map"):
        plot_attention_heads(np.full((2, 3, 4), 0.25), labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="labels"):
        plot_attention_heads(weights, labels=["a", "b"])


def test_plot_similarity_annotates_every_cell():
    similarity = np.array([[1.0, 0.25, -0.1], [0.25, 1.0, 0.5], [-0.1, 0.5, 1.0]])
    ax = sa.plot_similarity(similarity, ["a", "b", "c"], title="three")
    assert ax.get_title() == "three"
    assert sorted(t.get_text() for t in ax.texts) == sorted(format(v, ".2f") for v in similarity.ravel())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.images[0].get_clim() == (-0.1, 1.0)


def test_plot_head_scores_one_panel_per_pattern_with_marks():
    scores = np.random.default_rng(0).uniform(size=(3, 6, 12))
    fig = sa.plot_head_scores(scores, ["prev", "next", "[CLS]"], marks=[(0, 0, 2), (1, 1, 8), (1, 0, 0)], title="heads")
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["prev", "next", "[CLS]"]
    assert [len(ax.patches) for ax in panels] == [1, 2, 0]  # each mark on its own panel only
    assert all(ax.images[0].get_clim() == (0, 1) for ax in panels)
    assert fig.get_suptitle() == "heads"
    assert fig.axes[-1].get_ylabel() == "mean attention weight"
    relabelled = sa.plot_head_scores(scores[:2], ["a", "b"], colorbar_label="share")
    assert relabelled.axes[-1].get_ylabel() == "share"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sa.plot_similarity(np.eye(3)[:2], ["a", "b"]), r"square \(N, N\) matrix; got shape \(2, 3\)"),
        (lambda: sa.plot_similarity(2 * np.eye(2), ["a", "b"]), r"must lie in \[-1, 1\]"),
        (lambda: sa.plot_similarity(np.eye(2), None), "labels must name the 2 rows"),
        (lambda: sa.plot_similarity(np.eye(2), ["a"]), "labels"),
        (lambda: sa.plot_similarity(np.eye(2), ["a", "b"], cmap="nope"), "cmap must be the name"),
        (lambda: sa.plot_similarity([[np.nan]], ["a"]), "similarity"),
        (lambda: sa.plot_head_scores(np.ones((2, 3)), ["a", "b"]), "3-D"),
        (lambda: sa.plot_head_scores(np.full((1, 2, 2), 1.5), ["a"]), r"in \[0, 1\]; got 1.5"),
        (lambda: sa.plot_head_scores(np.ones((2, 2, 2)), ["a"]), "names"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), None), "names must name the 1 patterns"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), [3]), "each name"),
        (
            lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks=[(0, 2, 0)]),
            r"a layer below 2 and a head below 2; got \(0, 2, 0\)",
        ),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks=[(0, 0, True)]), "a head below 2"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks=[(1, 0, 0)]), "a panel below 1"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks=[(0, 1)]), r"\(pattern, layer, head\) triple"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks=[1]), r"\(pattern, layer, head\) triple"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], marks="ab"), "marks must be a sequence"),
        (lambda: sa.plot_head_scores(np.ones((1, 2, 2)), ["a"], colorbar_label=3), "colorbar_label"),
        (lambda: sa.plot_head_scores(np.ones((2, 2, 2)), {"p", "q"}), "an unordered set"),
        (lambda: sa.plot_similarity(np.eye(2), {"a": 1, "b": 2}), "a list or tuple"),
        (lambda: sa.plot_similarity(np.eye(2), [None, "b"]), r"labels\[0\] must be a string"),
        (lambda: sa.plot_similarity(np.eye(2), ["a", True]), r"labels\[1\] must be a string"),
        (lambda: plot_attention_heads(np.ones((1, 2, 2)) / 2, labels=np.zeros((2, 2))), "1-D sequence"),
    ],
)
def test_chapter_13_plots_reject_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# Every figure must read on a phone: saved with the notebook's tight bounding box, no wider
# than MAX_FIGURE_WIDTH_IN, and no text smaller than SMALLEST_FONT_PT (tests/test_figure_scale.py
# checks the chapters' figures against the same rule). One call per figure, with the chapters' shapes.
_RNG = np.random.default_rng(0)
_TOKENS = ["[CLS]", "the", "striker", "scored", "twice", "in", "the", "second", "half", ".", "[SEP]"]
PHONE_FIGURES = {
    "attention 4x4, numbers": lambda: plot_attention(_RNG.dirichlet(np.ones(4), 4), list("abcd"), list("abcd")),
    "attention 8x8, numbers": lambda: plot_attention(_RNG.dirichlet(np.ones(8), 8)),
    "attention 13 pieces": lambda: plot_attention(_RNG.dirichlet(np.ones(13), 13), _TOKENS + ["x", "y"], _TOKENS + ["x", "y"]),
    "token grid": lambda: plot_token_grid(_RNG.random(196), (14, 14), title="Class token, scaled by 1/sqrt(d_k)"),
    "mask 6": lambda: plot_mask(causal_mask(6), title="Causal mask, T = 6\nrow t sees 0..t, predicts t+1"),
    "mask 10": lambda: plot_mask(causal_mask(10)),
    "heads 5": lambda: plot_attention_heads(_RNG.dirichlet(np.ones(10), (5, 10)), titles=[*"0123", "mean of the 4 heads"]),
    "heads 4 of 16": lambda: plot_attention_heads(_RNG.dirichlet(np.ones(16), (4, 16))),
    "heads, labels": lambda: plot_attention_heads(_RNG.dirichlet(np.ones(11), (3, 11)), labels=_TOKENS,
                                                  title="Three trained heads: previous token, next token, [CLS]"),
    "patch grid": lambda: plot_patch_grid(_RNG.random((224, 224, 3)), 16, title="224 x 224 pixels: 14 x 14 patches of 16 x 16"),
    "overlay": lambda: plot_attention_overlay(_RNG.random((224, 224, 3)), _RNG.random((56, 56)), marker=(3, 4),
                                              title="Attention of pixel x (untrained, q/k weights x20)"),
    "position table": lambda: plot_position_table(sinusoidal_positions(100, 64), title="Sinusoidal table, 100 positions, D = 64"),
    "learning curves": lambda: sa.plot_learning_curves(
        {f"lr = {lr}": {"step": [25, 50], "loss": [2.0, 1.0], "accuracy": [0.5, 0.9]} for lr in (0.003, 0.03, 1.0)},
        title="The same model, three learning rates", chance=2.3),
    "similarity": lambda: sa.plot_similarity(np.eye(6), ["guitar", "strumming", "cat/sofa", "kitten/couch", "rates", "weather"],
                                             title="Cosine similarity of six sentences (all-MiniLM-L6-v2, NumPy)"),
    "head scores 5 x 6 x 12": lambda: sa.plot_head_scores(_RNG.random((5, 6, 12)), ["previous token", "next token", "itself", "[CLS]", "[SEP]"],
                                                         title="Mean attention weight of each of the 72 heads, over 20 sentences (red: the two heads below)"),
    "head scores 3 x 30 x 9": lambda: sa.plot_head_scores(_RNG.random((3, 30, 9)), ["first token (sink)", "previous token", "induction"]),
    "head scores 2": lambda: sa.plot_head_scores(_RNG.random((2, 6, 12)), ["weight on [CLS]", "[CLS]'s share of what the head adds"]),
    "head split 4": lambda: plot_head_split(_RNG.standard_normal((10, 16)), 4),
    "head split 16": lambda: plot_head_split(_RNG.standard_normal((10, 32)), 16),
    "encoder block": lambda: plot_encoder_block(),
    "two encoder blocks": lambda: [plot_encoder_block(first, ax=ax) for first, ax in zip((False, True), plt.subplots(1, 2, figsize=(4.6, 6.8))[1], strict=True)][0],
    "block traversal": lambda: plot_block_traversal(4),
    "block traversal, 5 steps of 40": lambda: plot_block_traversal(40, [0, 1, 40, 41, 1599]),
    "roofline": lambda: plot_roofline({"reference": (2.0, 3.0), "torch fused": (60.0, 200.0)}, 300.0, 10.0,
                                      title="Roofline, T = 4096, B*H = 32 (recorded run)"),
}  # fmt: skip


def _figure_of(drawn):
    return drawn if isinstance(drawn, plt.Figure) else drawn.figure


@pytest.mark.parametrize("name", PHONE_FIGURES)
def test_every_figure_fits_a_phone(name):
    import io

    from PIL import Image

    from selfattention.plotting._common import MAX_FIGURE_WIDTH_IN, SMALLEST_FONT_PT

    figure = _figure_of(PHONE_FIGURES[name]())
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")  # as the notebooks' inline backend saves it
    width_in = Image.open(buffer).size[0] / 100
    assert width_in <= MAX_FIGURE_WIDTH_IN, f"{name}: {width_in:.2f} inches wide, more than {MAX_FIGURE_WIDTH_IN:.2f}"
    texts = [t for t in figure.findobj(plt.Text) if t.get_visible() and t.get_text().strip()]
    assert texts, f"{name}: no text found"
    small = {(t.get_text()[:30], t.get_fontsize()) for t in texts if t.get_fontsize() < SMALLEST_FONT_PT}
    assert not small, f"{name}: text below {SMALLEST_FONT_PT} pt: {sorted(small)}"


def test_the_phone_rule_and_title_wrapping():
    from selfattention.plotting._common import (
        MAX_FIGURE_WIDTH_IN,
        MIN_TEXT_PX,
        SMALLEST_FONT_PT,
        text_px_on_phone,
        wrap_text,
    )

    assert text_px_on_phone(SMALLEST_FONT_PT, MAX_FIGURE_WIDTH_IN) == pytest.approx(MIN_TEXT_PX)
    assert text_px_on_phone(10, 11.0) == pytest.approx(10 * 343 / (72 * 11.0))  # today's widest: 4.3 px
    assert text_px_on_phone(8, 3.0) == pytest.approx(8 * 100 / 72)  # narrower than the column: shown at full size
    assert text_px_on_phone(8, 4.0, dpi=200) == pytest.approx(text_px_on_phone(8, 4.0))  # the dpi does not matter
    wrapped = wrap_text("Mean attention weight of each of the 72 heads, over 20 sentences", 3.0, 12)
    assert wrapped.replace("\n", " ") == "Mean attention weight of each of the 72 heads, over 20 sentences"
    assert all(len(line) <= 3.0 * 72 / (0.55 * 12) for line in wrapped.split("\n")) and "\n" in wrapped
    assert (
        wrap_text("$\\sqrt{d_k}$ scaled, a long title with maths in it", 1.0, 12)
        == "$\\sqrt{d_k}$ scaled, a long title with maths in it"
    )
