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


def _four_words():
    """Chapter 1's weights: query 2 (row 1) ties exactly between keys 1 and 3, [0.455, 0.045, 0.455, 0.045]."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    q = words @ np.array([[2, 0, 2], [2, 0, 0], [2, 1, 2]])
    k = words @ np.array([[2, 2, 2], [0, 2, 1], [0, 1, 1]])
    return sa.softmax(q @ k.T / np.sqrt(3))


def test_explorer_reports_a_tie_as_a_tie():
    weights = _four_words()
    assert weights[1, 0] == weights[1, 2]  # an exact tie in float64
    figure = ia.attention_explorer(
        [("four", ["w1", "w2", "w3", "w4"], weights)], title="t", alt="a", probes=[(0, 0, 0, q) for q in range(4)]
    )
    assert figure.data["texts"][0]["best"] == [[[[2], [0, 2], [2], [2]]]]
    assert [row["best"] for row in figure.expected["rows"]] == [[2], [0, 2], [2], [2]]


def test_explorer_ties_are_decided_at_the_three_decimals_shown():
    rows = np.array(
        [
            [0.4996, 0.5004, 0.0],  # both shown as 0.500: the figure cannot tell them apart, so a tie
            [0.4994, 0.5006, 0.0],  # 0.499 and 0.501: key 1
            [0.25, 0.25, 0.5],  # the two smaller ones tie, not the largest: key 2 alone
        ]
    )
    figure = ia.attention_explorer([("x", ["a", "b", "c"], rows)], title="t", alt="a")
    assert figure.data["texts"][0]["best"] == [[[[0, 1], [1], [2]]]]
    shown = np.array(figure.data["texts"][0]["weights"][0][0])
    for row, best in zip(shown, figure.data["texts"][0]["best"][0][0], strict=True):
        assert best == np.flatnonzero(row == row.max()).tolist()
    even = ia.attention_explorer([("x", ["a", "b", "c"], np.full((3, 3), 1 / 3))], title="t", alt="a")
    assert even.data["texts"][0]["best"][0][0] == [[0, 1, 2]] * 3


def test_explorer_opens_on_the_chosen_text_layer_head_and_query():
    other = sa.softmax(RNG.normal(size=(2, 3, 5, 5)))
    texts = [("first", TOKENS, WEIGHTS), ("second", [*TOKENS, "e"], other)]
    figure = ia.attention_explorer(texts, title="t", alt="a", layer=1, head=2, text=1, query=4)
    assert {key: figure.data[key] for key in ("text", "layer", "head", "query")} == {
        "text": 1,
        "layer": 1,
        "head": 2,
        "query": 4,
    }
    default = ia.attention_explorer(texts, title="t", alt="a", layer=1, head=2)
    assert (default.data["text"], default.data["query"]) == (0, 0)
    assert figure.fallback_png != default.fallback_png  # the static image shows the chosen text
    np_ints = ia.attention_explorer(texts, title="t", alt="a", text=np.int64(1), query=np.array(2))
    assert (np_ints.data["text"], np_ints.data["query"]) == (1, 2)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"text": 2}, r"text must be an integer in \[0, 2\); got 2"),
        ({"text": -1}, "text must be a non-negative integer; got -1"),
        ({"text": 1.0}, "text must be a non-negative integer; got 1.0"),
        ({"query": 4}, r"query must be a token index in \[0, 4\) for text 0 \('first', 4 tokens\); got 4"),
        ({"text": 1, "query": 5}, r"query must be a token index in \[0, 5\) for text 1 \('second', 5 tokens\); got 5"),
        ({"query": True}, "query must be a non-negative integer; got True"),
        ({"query": "1"}, "query must be a non-negative integer"),
    ],
)
def test_explorer_refuses_a_bad_opening_selection(options, message):
    texts = [("first", TOKENS, WEIGHTS), ("second", [*TOKENS, "e"], sa.softmax(RNG.normal(size=(2, 3, 5, 5))))]
    with pytest.raises(ValueError, match=message):
        ia.attention_explorer(texts, title="t", alt="a", **options)


def test_stepper_embeds_the_values_and_each_step_s_weights_whose_sum_with_v_is_the_output():
    scores, values = RNG.normal(size=10) * 3, RNG.normal(size=(10, 2))
    figure = ia.softmax_stepper(scores, values, 4, title="t", alt="a")
    np.testing.assert_allclose(figure.data["values"], values, rtol=5e-6)
    steps = figure.data["steps"]
    assert [len(step["weights"]) for step in steps] == [4, 8, 10]  # the keys read so far
    for step in steps:
        p = np.array(step["weights"])
        read = len(p)
        np.testing.assert_allclose(p, sa.softmax(scores[:read]), rtol=5e-6)  # the softmax over the keys read
        np.testing.assert_allclose(p @ values[:read], step["out"], rtol=1e-5, atol=1e-6)  # out = sum p v
    np.testing.assert_allclose(steps[-1]["weights"], sa.softmax(scores), rtol=5e-6)
    assert figure.expected["steps"] == steps


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


# ---------------------------------------------------------------- the next-token explorer (chapter 14)

NEXT_LOGITS = np.random.default_rng(14).normal(size=200) * 2
NEXT_VOCABULARY = [f"w{i}" for i in range(200)]


def _next(prompts=None, vocabulary=NEXT_VOCABULARY, **kwargs):
    if prompts is None:
        prompts = {"one": ("Once upon a", NEXT_LOGITS)}
    return ia.next_token_explorer(prompts, vocabulary, **{"title": "t", "alt": "bars", **kwargs})


def _row(figure, prompt, t, k, p):
    data = figure.data
    table = data["prompts"][prompt]
    return table["rows"][table["settings"][(t * len(data["top_k"]) + k) * len(data["top_p"]) + p]]


def _reference_row(z, shown, temperature, top_k, top_p):
    """The row the explorer must embed, from next_token_probabilities over all V logits: kept, rest, cut, kept ones."""
    q = sa.next_token_probabilities(z, temperature=temperature, top_k=top_k, top_p=top_p)
    before = sa.next_token_probabilities(z, temperature=temperature)
    listed = np.argsort(z, kind="stable")[::-1][:shown]  # most likely first; ties: the higher index first
    kept, rest = q > 0, q.copy()
    rest[listed] = 0
    per_mille = [int(np.floor(x * 1000 + 0.5)) for x in (rest.sum(), before[~kept].sum(), *q[listed][kept[listed]])]
    return listed, [int(kept.sum()), *per_mille]


@pytest.mark.parametrize("case", ["random", "ties", "peaked", "flat"])
def test_next_token_explorer_embeds_next_token_probabilities_for_every_setting(case, monkeypatch):
    monkeypatch.setattr(
        ia.next_token, "_next_token_png", lambda *args: b"\x89PNG"
    )  # the data is what is compared: no drawing
    rng = np.random.default_rng(["random", "ties", "peaked", "flat"].index(case))
    V = 120
    z = {
        "random": rng.normal(size=V) * 2,
        "ties": rng.integers(-40, 40, size=V) * 0.1,  # exact ties: at the k-th, at top-p's cut, among those listed
        "peaked": np.concatenate([[9.0, 7.5], rng.normal(size=V - 2)]),
        "flat": rng.normal(size=V) * 0.05,
    }[case]
    figure = ia.next_token_explorer(
        {"a prompt": ("some text", z), "the same, negated": ("more text", -z)},
        NEXT_VOCABULARY[:V],
        title="t",
        alt="a",
        top_ks=(1, 2, 5, 10, 200),
        top_ps=(0.3, 0.5, 0.9),
        shown=8,
        logit_tolerance=0,  # exact data: ties are ties on every machine
    )
    data = figure.data
    assert data["top_k"] == [None, 1, 2, 5, 10, 200] and data["top_p"] == [None, 0.3, 0.5, 0.9]
    checked = 0
    for n, logits in enumerate((z, -z)):
        for t, tau in enumerate(data["temperatures"]):
            for k, top_k in enumerate(data["top_k"]):
                for p, top_p in enumerate(data["top_p"]):
                    listed, expected = _reference_row(logits, 8, tau, top_k, top_p)
                    assert _row(figure, n, t, k, p) == expected, (case, n, tau, top_k, top_p)
                    checked += 1
        assert data["prompts"][n]["tokens"] == [NEXT_VOCABULARY[i] for i in listed]
    assert checked == 2 * 20 * 6 * 4


def test_next_token_explorer_probes_are_next_token_probabilities_own_numbers():
    z = NEXT_LOGITS
    probes = [(0, 1.0, None, None), (0, 0.7, 5, 0.9), (1, 1.5, None, 0.5), (1, 0.1, 1, None)]
    figure = _next({"a": ("x", z), "b": ("y", z[::-1])}, probes=probes)
    data = figure.data
    for probe, row in zip(probes, figure.expected["rows"], strict=True):
        n, tau, top_k, top_p = probe
        assert (row["prompt"], row["temperature"], row["top_k"], row["top_p"]) == probe
        q = sa.next_token_probabilities((z, z[::-1])[n], temperature=tau, top_k=top_k, top_p=top_p)
        listed = np.argsort((z, z[::-1])[n], kind="stable")[::-1][:10]
        assert row["kept"] == (q > 0).sum()
        for shown, i in zip(row["probabilities"], listed, strict=True):
            assert shown is None if q[i] == 0 else shown == pytest.approx(q[i], abs=5e-4)
        # the embedded row says the same
        t = data["temperatures"].index(tau)
        embedded = _row(figure, n, t, data["top_k"].index(top_k), data["top_p"].index(top_p))
        assert embedded[0] == row["kept"] and embedded[1] / 1000 == row["rest"] and embedded[2] / 1000 == row["cut"]
        assert [x / 1000 for x in embedded[3:]] == [x for x in row["probabilities"] if x is not None]
    assert figure.expected["rows"][3]["probabilities"][:2] == [1.0, None]  # top-k 1 at a low temperature


def test_the_bound_on_a_probability_is_what_pushing_the_logits_apart_reaches():
    """A set's probability moves most when its logits rise by the tolerance and the others fall by it."""
    rng = np.random.default_rng(3)
    z, tolerance, tau = rng.normal(size=50) * 2, 0.01, 0.7
    chosen = np.isin(np.arange(50), rng.choice(50, size=5, replace=False))

    def mass(logits):
        return sa.softmax(logits / tau)[chosen].sum()

    low, high = ia.next_token._mass_bounds(mass(z), 2 * tolerance / tau)
    assert mass(z + np.where(chosen, tolerance, -tolerance)) == pytest.approx(high, abs=1e-11)
    assert mass(z - np.where(chosen, tolerance, -tolerance)) == pytest.approx(low, abs=1e-11)
    for _ in range(100):
        assert low <= mass(z + rng.uniform(-tolerance, tolerance, size=50)) <= high


def test_next_token_explorer_page_is_the_same_for_any_logits_within_the_tolerance(monkeypatch):
    """What another machine's logits could be: each moved by up to logit_tolerance. An accepted page must not change."""
    monkeypatch.setattr(
        ia.next_token, "_next_token_png", lambda *args: b"\x89PNG"
    )  # the data is what is compared: no drawing
    vocabulary, tolerance = [f"t{i}" for i in range(300)], 1e-6
    options = {"temperatures": (0.5, 1.0, 2.0), "logit_tolerance": tolerance, "shown": 6}
    accepted = refused = 0
    for seed in range(6):  # seed 5 is refused: a cut removes 0.448500438 at temperature 1, top-k 5
        rng = np.random.default_rng(seed)
        z = rng.normal(size=300) * 2.5
        try:
            figure = ia.next_token_explorer({"p": ("text", z)}, vocabulary, title="t", alt="a", **options)
        except ValueError as error:  # a number near a rounding edge: refusing it is the honest answer
            assert "logit_tolerance" in str(error)
            refused += 1
            continue
        accepted += 1
        ranked = np.argsort(z)[::-1]
        for push in (
            rng.uniform(-1, 1, size=300),
            np.where(np.isin(np.arange(300), ranked[:3]), 1.0, -1.0),  # the most likely up, the rest down
            np.where(np.isin(np.arange(300), ranked[:3]), -1.0, 1.0),
        ):
            moved = {"p": ("text", z + 0.999 * tolerance * push)}
            exact = {**options, "logit_tolerance": 0}  # these logits are what another machine computed
            assert ia.next_token_explorer(moved, vocabulary, title="t", alt="a", **exact).data == figure.data
    assert (accepted, refused) == (5, 1)
    # Near an edge: token 0 at 0.5005 + margin. Accepted when the margin is more than the tolerance can move it.
    two = {"temperatures": (1.0,), "top_ks": (), "top_ps": (), "shown": 2, "logit_tolerance": 1e-4}
    for margin, ok in ((5.2e-5, True), (4.8e-5, False)):  # 1e-4 moves a probability near 1/2 by 1/4 * 2 * 1e-4
        q = 0.5005 + margin
        logits = [0.0, -np.log(q / (1 - q))]
        if ok:
            figure = ia.next_token_explorer({"p": ("x", logits)}, ["a", "b"], title="t", alt="a", **two)
            pushed = {"p": ("x", [-0.999e-4, logits[1] + 0.999e-4])}
            exact = {**two, "logit_tolerance": 0}
            assert ia.next_token_explorer(pushed, ["a", "b"], title="t", alt="a", **exact).data == figure.data
        else:
            with pytest.raises(ValueError, match="too close to a rounding edge"):
                ia.next_token_explorer({"p": ("x", logits)}, ["a", "b"], title="t", alt="a", **two)


def test_next_token_explorer_float32_logits_a_few_ulps_apart_give_the_same_page():
    z = (np.random.default_rng(7).normal(size=200) * 2).astype(np.float32)
    # float32 logits of a real model move by up to 6e-4 between machines: too much for most settings. These do.
    options = {"temperatures": (1.0,), "top_ks": (1,), "top_ps": (), "shown": 3, "logit_tolerance": 1e-5}
    figure = _next({"p": ("text", z)}, **options)
    nudged = z
    for _ in range(4):  # four float32 ulps, up for half the tokens and down for the others
        nudged = np.nextafter(nudged, np.where(np.arange(200) % 2, np.float32(np.inf), np.float32(-np.inf)))
    assert np.abs(nudged - z).max() > 0
    assert _next({"p": ("text", nudged)}, **options).html() == figure.html()


def test_next_token_explorer_refuses_numbers_another_machine_could_round_otherwise():
    # Two tokens at 0.4995 and 0.5005: on the edge between 0.499 and 0.500 at three decimals.
    edge = np.log(0.5005 / 0.4995)
    two = {"temperatures": (1.0,), "top_ks": (), "top_ps": (), "shown": 2}
    with pytest.raises(
        ValueError, match=r"at temperature 1, top-k off, top-p off: the probability of token 0 \('a'\), 0.50050"
    ):
        ia.next_token_explorer({"edge": ("x", [0.0, -edge])}, ["a", "b"], title="t", alt="a", **two)
    # Float32 logits may move by 6e-4 on another machine (FLOAT32_LOGIT_TOLERANCE); float64 ones by 1e-9.
    close = np.array([2.0, 1.9997, 0.0, -1.0])
    with pytest.raises(ValueError, match=r"ranked 1 and 2, have logits 0.0003 apart. Its logits may differ by 0.0006"):
        ia.next_token_explorer({"p": ("x", close.astype(np.float32))}, list("abcd"), title="t", alt="a")
    ia.next_token_explorer({"p": ("x", close)}, list("abcd"), title="t", alt="a")
    # Equal logits at top-k's cut: which one is kept depends on the last bits.
    tied = np.array([3.0, 1.0, 1.0 + 1e-12, -2.0, -2.5])
    with pytest.raises(ValueError, match=r"ranked 2 and 3"):
        ia.next_token_explorer({"p": ("x", tied)}, list("abcde"), title="t", alt="a", shown=2)
    with pytest.raises(
        ValueError, match=r"top-k 2, top-p off: top-k's cut falls between token 2 \('c'\) and token 1 \('b'\)"
    ):
        ia.next_token_explorer({"p": ("x", tied)}, list("abcde"), title="t", alt="a", shown=1, top_ks=(2,),
                               top_ps=(), logit_tolerance=1e-9)  # fmt: skip
    # Top-p 0.5 over probabilities 0.5, 0.25, 0.25: the first token alone reaches p exactly.
    halves = np.log([0.5, 0.25, 0.25])
    with pytest.raises(ValueError, match=r"top-k off, top-p 0.5: top-p's cut after 1 tokens is a close call"):
        ia.next_token_explorer({"p": ("x", halves)}, list("abc"), title="t", alt="a", shown=1, temperatures=(1.0,),
                               top_ks=(), top_ps=(0.5,), logit_tolerance=0)  # fmt: skip


def test_next_token_explorer_shows_whitespace_and_writes_dollars_literally():
    vocabulary = [" the", "\n", "\t", "", "$x$", "a\x07", "$$", "plain"]
    z = np.array([8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    figure = ia.next_token_explorer({"p": ("x", z)}, vocabulary, title="t", alt="a", shown=8)
    assert figure.data["prompts"][0]["tokens"] == ["␣the", "↵", "⇥", "∅", "$x$", "a\\x07", "$$", "plain"]
    with pytest.raises(ValueError, match="vocabulary.0. must be text that can be drawn.*lone surrogate"):
        ia.next_token_explorer({"p": ("x", z)}, ["a\ud800", *vocabulary[1:]], title="t", alt="a")


def test_next_token_explorer_page_does_not_grow_with_the_vocabulary():
    sizes = {}
    for V in (1_000, 49_152):
        rng = np.random.default_rng(0)
        prompts = {f"prompt {n}": (f"text {n}", rng.normal(size=V) * (1 + n)) for n in range(4)}
        figure = ia.next_token_explorer(prompts, [f"t{i}" for i in range(V)], title="t", alt="a", logit_tolerance=0)
        sizes[V] = len(figure.html().encode())
        assert f'"vocabulary":{V}' in figure.html()
    assert sizes[49_152] < 1.3 * sizes[1_000] and sizes[49_152] < 200_000, sizes


def test_next_token_explorer_html_is_self_contained():
    figure = _next(probes=[(0, 1.0, None, None)])
    page = figure.html()
    assert not re.search(r"""(src|href)=["'](?!data:)""", page) and 'data-kind="next"' in page
    assert _embedded(figure, "data") == figure.data and _embedded(figure, "expected") == figure.expected
    assert figure.data["start"] == [9, 0, 0]  # temperature 1.0, top-k and top-p off
    assert _next(temperatures=[0.25, 0.75, 1.5]).data["start"][0] == 1  # the temperature nearest 1
    # settings are offered and computed as shown, to 6 significant digits
    assert _next(temperatures=[0.1 * 3, 1.0], top_ps=[0.1 * 9]).data["temperatures"] == [0.3, 1.0]


def test_next_token_inputs_reads_each_prompt_s_last_logits_and_the_vocabulary():
    from types import SimpleNamespace

    V = 5
    words = ["a", " b", "\n", "<|end|>", "\ufffd"]
    model = SimpleNamespace(
        encode=lambda text: list(range(len(text))),
        logits=lambda ids: np.arange(len(ids) * V, dtype=np.float64).reshape(len(ids), V),  # (T, V)
        tokenizer=SimpleNamespace(
            get_vocab_size=lambda: V, decode_batch=lambda batch, skip_special_tokens: [words[i] for (i,) in batch]
        ),
    )
    prompts, vocabulary = ia.next_token_inputs(model, {"short": "ab", "long": "abcd"})
    assert vocabulary == words
    assert prompts["short"][0] == "ab" and prompts["short"][1].tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    assert prompts["long"][1].tolist() == [15.0, 16.0, 17.0, 18.0, 19.0]
    figure = ia.next_token_explorer(prompts, vocabulary, title="t", alt="a")
    assert figure.data["prompts"][0]["tokens"] == ["\ufffd", "<|end|>", "↵", "␣b", "a"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _next({}), r"prompts must be a non-empty dict \{label: \(text, logits\)\}"),
        (lambda: _next([("a", ("x", np.zeros(200)))]), "prompts must be a non-empty dict"),
        (lambda: _next({f"p{i}": ("x", np.zeros(200)) for i in range(7)}), "at most 6 prompts; got 7"),
        (lambda: _next({"": ("x", np.zeros(200))}), "prompts' label must be a non-empty string"),
        (lambda: _next({"a": np.zeros(200)}), r"prompts\['a'\] must be a \(text, logits\) pair"),
        (lambda: _next({"a": ("  ", np.zeros(200))}), r"prompts\['a'\]'s text must be a non-blank string"),
        (lambda: _next({"a": ("x", np.zeros(199))}), r"logits must have shape \(V,\) = \(200,\).*got \(199,\)"),
        (lambda: _next({"a": ("x", np.zeros((1, 200)))}), r"got \(1, 200\)"),
        (lambda: _next({"a": ("x", np.full(200, np.nan))}), "NaN"),
        (lambda: _next({"a": ("x", ["1"] * 200)}), "logits must be an array of real numbers"),
        (lambda: _next(vocabulary="abc"), "vocabulary must be a non-empty list"),
        (lambda: _next(vocabulary=[]), "vocabulary must be a non-empty list"),
        (lambda: _next(vocabulary=[1] * 200), r"vocabulary must hold one str per token; vocabulary\[0\] is 1"),
        (lambda: _next(temperatures=[]), "temperatures must be a non-empty sequence"),
        (lambda: _next(temperatures=[0.0, 1.0]), "each of temperatures must be positive; got 0.0"),
        (lambda: _next(top_ks=[0]), "each of top_ks must be a positive integer; got 0"),
        (lambda: _next(top_ks=5), "top_ks must be a sequence"),
        (lambda: _next(top_ps=[1.0]), r"each of top_ps must lie in \(0, 1\).*which 'off' offers; got 1.0"),
        (lambda: _next(temperatures=np.linspace(0.1, 4, 41)), "temperatures may offer at most 40 values; got 41"),
        (lambda: _next(top_ks=range(1, 40), top_ps=np.linspace(0.01, 0.99, 39)), "at most 2,000 settings"),
        (lambda: _next(temperature=0.15), r"temperature must be one of the offered \[0.1, 0.2,.*got 0.15"),
        (lambda: _next(top_k=7), r"top_k must be one of the offered \[None, 1, 3, 5, 10, 50\] \(None is off\); got 7"),
        (lambda: _next(top_p="0.9"), "top_p must be a real number"),
        (lambda: _next(shown=0), "shown must be a positive integer; got 0"),
        (lambda: _next(shown=21), "shown must be at most 20; got 21"),
        (lambda: _next(logit_tolerance=-1e-9), "logit_tolerance must be 0 or more"),
        (lambda: _next(probes=[(0, 1.0, None)]), r"\(prompt, temperature, top_k, top_p\) quadruple"),
        (lambda: _next(probes=[(1, 1.0, None, None)]), r"a probe's prompt must be an index in \[0, 1\); got 1"),
        (lambda: _next(probes=[(0, 1.05, None, None)]), "a probe's temperature must be one of the offered"),
        (lambda: _next(probes=[(0, 1.0, 4, None)]), "a probe's top_k must be one of the offered"),
        (lambda: _next(probes=5), "probes must be a list"),
        (lambda: _next(title=""), "title must be a non-empty string"),
        (lambda: ia.next_token_inputs(object(), {"a": "b"}), "model must be a language model.*without encode"),
        (lambda: ia.next_token_inputs(_FakeModel(), {}), r"prompts must be a non-empty dict \{label: text\}"),
        (lambda: ia.next_token_inputs(_FakeModel(), {"a": ""}), r"prompts\['a'\] must be the prompt's text"),
        (lambda: ia.next_token_inputs(_FakeModel(), {"$\\frac$": "b"}), "prompts' label must be text matplotlib"),
    ],
)
def test_next_token_explorer_bad_input_is_a_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


class _FakeModel:
    """The least a model needs for next_token_inputs (it refuses the prompts before using any of it)."""

    encode = logits = tokenizer = None
