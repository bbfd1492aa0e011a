"""The interactive figures' data come from the package's NumPy code, and their HTML is self-contained."""

from __future__ import annotations

import json
import re
from importlib import resources

import numpy as np
import pytest

import selfattention as sa
from selfattention import interactive as ia

RNG = np.random.default_rng(0)
WEIGHTS = sa.softmax(RNG.normal(size=(2, 3, 4, 4)))
TOKENS = ["a", "b", "c", "d"]


def _explorer(**kwargs):
    options = {"title": "t", "alt": "a heatmap", **kwargs}
    return ia.attention_explorer([("text", TOKENS, WEIGHTS)], **options)


def _embedded(figure, kind):
    match = re.search(rf'<script type="application/json" class="sa-{kind}">(.*?)</script>', figure.html(), re.S)
    return json.loads(match[1])


def test_the_javascript_added_stays_under_the_issues_budget():
    js = resources.files("selfattention.interactive").joinpath("widgets.js").read_bytes()
    css = resources.files("selfattention.interactive").joinpath("widgets.css").read_bytes()
    assert len(js) < 100_000 and len(css) < 20_000, (len(js), len(css))
    assert not re.search(rb"https?://|import\(|fetch\(|XMLHttpRequest", js), "the script must not load anything"


def test_the_html_is_self_contained():
    page = _explorer().html()
    assert not re.search(r"""(src|href)=["'](?!data:)""", page), "nothing may be loaded from a file or a server"
    assert page.count("<script>") == 1 and 'alt="a heatmap"' in page and 'src="data:image/png;base64,' in page
    assert _embedded(_explorer(), "data")["layers"] == 2


def test_json_cannot_close_its_script_element():
    figure = ia.attention_explorer([("</script><b>", ["</script>", "x"], np.full((2, 2), 0.5))], title="t", alt="a")
    assert figure.html().count("</script>") == 3  # data, expected, the script itself
    assert _embedded(figure, "data")["texts"][0]["label"] == "</script><b>"


def test_explorer_rows_are_the_weights_to_three_decimals():
    figure = _explorer(layer=1, head=2, probes=[(0, 1, 2, 3), (0, 0, 0, 0)])
    shown = np.array(figure.data["texts"][0]["weights"]) / 1000
    np.testing.assert_allclose(shown, WEIGHTS, atol=5e-4)
    assert figure.expected["rows"][0]["row"] == np.round(WEIGHTS[1, 2, 3], 3).tolist()
    assert (figure.data["layer"], figure.data["head"]) == (1, 2)
    single = ia.attention_explorer([("one head", TOKENS, WEIGHTS[0, 0])], title="t", alt="a")
    assert (single.data["layers"], single.data["heads"]) == (1, 1)


def test_stepper_steps_are_online_softmax_updates():
    scores, values = RNG.normal(size=10) * 3, RNG.normal(size=(10, 2))
    figure = ia.softmax_stepper(scores, values, 4, title="t", alt="a")
    steps = figure.expected["steps"]
    assert len(steps) == 3 and steps[0]["rescale"] == 0.0
    m, total = -np.inf, 0.0
    for step, start in zip(steps, range(0, 10, 4), strict=True):
        block = scores[start : start + 4]
        new_m = max(m, block.max())
        assert step["rescale"] == pytest.approx(np.exp(m - new_m) if np.isfinite(m) else 0.0, rel=5e-6)
        total = np.exp(m - new_m) * total + np.exp(block - new_m).sum()
        m = new_m
        assert (step["m"], step["l"], step["block_max"]) == pytest.approx((m, total, block.max()), rel=5e-6)
    np.testing.assert_allclose(steps[-1]["out"], sa.softmax(scores) @ values, rtol=5e-6)
    assert figure.expected["agreement"] == {"tolerance": 1e-12, "within": True, "difference": None}


def _significant_digits(x: float) -> int:
    return len(f"{x!r}".lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0").rstrip("0") or "0")


def test_stepper_embeds_numbers_rounded_to_six_significant_digits():
    # Last-bit differences (another BLAS kernel, SIMD path or thread count) must not reach the page.
    scores, values = RNG.normal(size=10) * 3, RNG.normal(size=(10, 2))
    figure = ia.softmax_stepper(scores, values, 4, title="t", alt="a")
    nudged = ia.softmax_stepper(scores * (1 + 4e-16), values * (1 - 4e-16), 4, title="t", alt="a")
    assert figure.html() == nudged.html()
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", figure.html().split("sa-data")[1])]
    assert numbers and max(_significant_digits(x) for x in numbers) <= ia.SIGNIFICANT_DIGITS
    np.testing.assert_allclose(figure.data["scores"], scores, rtol=5e-6)


def test_stepper_embeds_the_difference_only_when_it_is_above_the_tolerance():
    # Exact data: the online result equals the softmax to rounding, so only the fact is embedded.
    figure = ia.softmax_stepper([0.0, 1.0, 2.0], [[1.0], [2.0], [3.0]], 2, title="t", alt="a")
    assert (
        figure.data["agreement"]
        == figure.expected["agreement"]
        == {"tolerance": 1e-12, "within": True, "difference": None}
    )
    assert "max_difference" not in figure.data
    # Large values: the output averages them, so its rounding grows with them; the bound is relative.
    rng = np.random.default_rng(3)
    large = ia.softmax_stepper(rng.normal(size=40), rng.normal(size=(40, 3)) * 1e9, 7, title="t", alt="a")
    assert large.data["agreement"] == {"tolerance": 1e-12, "within": True, "difference": None}


def test_mask_builder_masks_are_the_packages():
    figure = ia.mask_builder(6, windows=(2,), lengths=(6, 4), title="t", alt="a")
    assert [key for key, _ in figure.data["patterns"]] == ["none", "causal", "window2"]
    expected = sa.combine_masks(sa.sliding_window_mask(6, 2, dtype=bool), sa.padding_mask([4], 6)[0])
    assert figure.data["masks"]["window2,4"] == ["".join("1" if b else "0" for b in row) for row in expected]
    assert figure.data["masks"]["none,6"] == ["111111"] * 6
    assert figure.data["masks"]["causal,6"][2] == "111000"


def test_a_figure_displays_as_html_in_a_notebook():
    bundle = _explorer()._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"} and "interactive figure" in bundle["text/plain"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ia.attention_explorer([], title="t", alt="a"), "texts must be a non-empty list"),
        (lambda: ia.attention_explorer("abc", title="t", alt="a"), "texts must be a non-empty list"),
        (lambda: ia.attention_explorer([("x", TOKENS)], title="t", alt="a"), r"texts\[0\] must be a \(label, tokens"),
        (lambda: ia.attention_explorer([("", TOKENS, WEIGHTS)], title="t", alt="a"), "label must be a non-empty"),
        (lambda: ia.attention_explorer([("x", "abcd", WEIGHTS)], title="t", alt="a"), "tokens must be a list of str"),
        (lambda: ia.attention_explorer([("x", TOKENS[:3], WEIGHTS)], title="t", alt="a"), "with T = 3 tokens"),
        (lambda: ia.attention_explorer([("x", TOKENS, WEIGHTS * 2)], title="t", alt="a"), "rows that sum to 1"),
        (lambda: ia.attention_explorer([("x", TOKENS, -WEIGHTS)], title="t", alt="a"), "non-negative"),
        (
            lambda: ia.attention_explorer([("x", TOKENS, WEIGHTS), ("y", TOKENS, WEIGHTS[:1])], title="t", alt="a"),
            "the same number of layers and heads",
        ),
        (lambda: _explorer(layer=2), r"layer must be an integer in \[0, 2\); got 2"),
        (lambda: _explorer(head=True), "head must be a non-negative integer; got True"),
        (lambda: _explorer(probes=[(0, 0, 0, 4)]), r"probe \(0, 0, 0, 4\) is out of range"),
        (lambda: _explorer(probes=[(0, 0)]), "quadruple"),
        (lambda: _explorer(title=""), "title must be a non-empty string"),
        (lambda: _explorer(alt=None), "alt must be a non-empty string"),
        (lambda: ia.softmax_stepper(np.ones((2, 2)), np.ones((2, 1)), 1, title="t", alt="a"), r"shape \(S,\)"),
        (lambda: ia.softmax_stepper(np.ones(3), np.ones((2, 1)), 1, title="t", alt="a"), r"\(S, Dv\) = \(3, Dv\)"),
        (lambda: ia.softmax_stepper([np.inf, 0.0], np.ones((2, 1)), 1, title="t", alt="a"), "infinite"),
        (lambda: ia.softmax_stepper(np.ones(3), np.ones((3, 1)), 0, title="t", alt="a"), "block_size must be"),
        (lambda: ia.softmax_stepper(np.ones(3), np.ones((3, 1)), 4, title="t", alt="a"), "at most 3"),
        (lambda: ia.mask_builder(17, title="t", alt="a"), "T must be at most 16"),
        (lambda: ia.mask_builder(4, windows=(5,), title="t", alt="a"), "each window must be at most 4"),
        (lambda: ia.mask_builder(4, lengths=(0,), title="t", alt="a"), "each length must be a positive integer"),
    ],
)
def test_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_markup_in_any_text_cannot_break_the_page():
    nasty = ["<!--<script>", "</script><img src=x onerror=alert(1)>", "a & b > c"]
    figure = ia.attention_explorer([(nasty[0], nasty, np.full((3, 3), 1 / 3))], title=nasty[1], alt=nasty[2])
    page = figure.html()
    data = re.search(r'class="sa-data">(.*?)</script>', page, re.S)[1]
    assert "<" not in data and ">" not in data and "&" not in data
    assert json.loads(data)["texts"][0]["tokens"] == nasty
    assert "<img src=x" not in page and page.count("<script") == 3  # data, expected, code


def test_sizes_and_edge_cases():
    with pytest.raises(ValueError, match="at most 100,000"):
        ia.attention_explorer(
            [("x", [f"t{i}" for i in range(60)], np.full((6, 12, 60, 60), 1 / 60))], title="t", alt="a"
        )
    with pytest.raises(ValueError, match="at most 64"):
        ia.attention_explorer([("x", ["t"] * 65, np.full((65, 65), 1 / 65))], title="t", alt="a")
    with pytest.raises(ValueError, match="at most 64 keys"):
        ia.softmax_stepper(np.zeros(65), np.zeros((65, 1)), 1, title="t", alt="a")
    with pytest.raises(ValueError, match="values must lie within ±1e150 to be drawn"):
        ia.softmax_stepper([0.0, 0.0], [[1.7e308], [1.7e308]], 2, title="t", alt="a")
    with pytest.raises(ValueError, match="Dv >= 1"):
        ia.softmax_stepper([0.5, 1.0], np.zeros((2, 0)), 1, title="t", alt="a")
    one = ia.softmax_stepper([2.0], [[1.0]], 1, title="t", alt="a")
    assert one.expected["steps"][0]["out"] == [1.0]
    assert [key for key, _ in ia.mask_builder(1, title="t", alt="a").data["patterns"]] == ["none", "causal"]
    assert ia.mask_builder(4, lengths=[3, 3, 4], title="t", alt="a").data["lengths"] == [4, 3]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _explorer(probes=[(0, 0, 0, False)]), "four non-negative integers"),
        (lambda: _explorer(probes=[(0, 0, 0, 1.0)]), "four non-negative integers"),
        (lambda: _explorer(probes=[(0, 0, 0, "1")]), "four non-negative integers"),
        (lambda: _explorer(probes=5), "probes must be a list"),
        (lambda: ia.attention_explorer([("x", ["a", " "], np.full((2, 2), 0.5))], title="t", alt="a"), "blank"),
        (lambda: ia.mask_builder(4, lengths=[], title="t", alt="a"), "at least one count"),
        (lambda: ia.mask_builder(4, windows=2, title="t", alt="a"), "windows must be a sequence"),
        (lambda: ia.InteractiveFigure('x" onmouseover="', "t", {}, {}, b"\x89PNG", "a"), "kind must be one of"),
        (lambda: ia.InteractiveFigure("mask", 5, {}, {}, b"\x89PNG", "a"), "title must be a non-empty string"),
        (lambda: ia.InteractiveFigure("mask", "t", [], {}, b"\x89PNG", "a"), "data must be a dict"),
        (lambda: ia.InteractiveFigure("mask", "t", {}, {}, b"GIF", "a"), "PNG"),
    ],
)
def test_more_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_numpy_integer_probes_are_accepted():
    figure = _explorer(probes=[(np.int64(0), np.int64(1), 2, np.int32(3))])
    assert figure.expected["rows"][0]["query"] == 3 and json.loads(json.dumps(figure.expected))
    figure.html()


def test_the_script_holds_nothing_an_html_parser_would_read_as_markup():
    js = resources.files("selfattention.interactive").joinpath("widgets.js").read_text()
    assert "<script" not in js and "</" not in js and "<!--" not in js


def test_explorer_accepts_a_half_precision_softmax_and_says_why_it_refuses_rows():
    """Rows of T weights rounded to float16 or bfloat16 sum to 1 only within about T * eps."""
    import torch

    from selfattention.interactive import attention_explorer
    from selfattention.scores import softmax

    scores = np.random.default_rng(0).standard_normal((1, 2, 20, 20)) * 3
    tokens = [f"t{i}" for i in range(20)]
    half = softmax(scores).astype(np.float16)
    brain = torch.softmax(torch.tensor(scores, dtype=torch.bfloat16), dim=-1)
    assert np.abs(half.astype(np.float64).sum(-1) - 1).max() > 1e-4  # the old fixed tolerance refused it
    for weights in (half, brain):
        attention_explorer([("text", tokens, weights)], title="t", alt="a")
    with pytest.raises(ValueError, match=r"within 0.0001 for 20 float64 weights\); got row sums from 1.01 to 1.01"):
        attention_explorer([("text", tokens, softmax(scores) * 1.01)], title="t", alt="a")
    with pytest.raises(ValueError, match=r"non-negative; got a weight of -0.5"):
        attention_explorer([("text", tokens[:2], [[1.5, -0.5], [0.5, 0.5]])], title="t", alt="a")
