"""Every plot helper and interactive figure refuses text matplotlib cannot draw, and names the argument.

The cases are generated: each public helper's text parameters are read from its signature (an annotation
that mentions ``str``), and every kind of undrawable text is tried in each, as a string, as one item of a
sequence of labels, or as one key of a mapping of labelled runs. A helper added to ``__all__`` must get a
minimal valid call in ``MINIMAL`` below, or the first test fails and says so.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from selfattention import interactive, plotting  # noqa: E402
from selfattention.masks import causal_mask  # noqa: E402

UNIFORM = np.full((3, 3), 1 / 3)


class _TinyModel:
    """What next_token_inputs reads from a model: three tokens, and logits that favour the first whatever the text."""

    tokenizer = SimpleNamespace(
        get_vocab_size=lambda: 3, decode_batch=lambda batch, skip_special_tokens: [["a", "b", "c"][i] for (i,) in batch]
    )

    def encode(self, text):
        return [0] * len(text)

    def logits(self, ids):
        return np.tile([2.0, 1.0, 0.0], (len(ids), 1))  # (T, V)


#: A minimal valid call of each public helper: the function and keyword arguments that include every
#: sequence- or mapping-valued text argument, so that one of its items can be replaced by bad text.
MINIMAL: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "plot_attention": (
        lambda **kw: plotting.plot_attention(UNIFORM, **kw),
        {"query_labels": ["a", "b", "c"], "key_labels": ["x", "y", "z"]},
    ),
    "plot_token_grid": (lambda **kw: plotting.plot_token_grid(np.ones(6) / 6, (2, 3), **kw), {}),
    "plot_mask": (lambda **kw: plotting.plot_mask(causal_mask(3), **kw), {}),
    "plot_attention_heads": (
        lambda **kw: plotting.plot_attention_heads(np.stack([UNIFORM, UNIFORM]), **kw),
        {"titles": ["one", "two"], "labels": ["a", "b", "c"]},
    ),
    "plot_patch_grid": (lambda **kw: plotting.plot_patch_grid(np.zeros((4, 4, 1)), 2, **kw), {}),
    "plot_attention_overlay": (
        lambda **kw: plotting.plot_attention_overlay(np.zeros((4, 4, 1)), np.ones((2, 2)) / 4, **kw),
        {},
    ),
    "plot_position_table": (lambda **kw: plotting.plot_position_table(np.zeros((3, 4)), **kw), {}),
    "plot_learning_curves": (
        lambda runs, **kw: plotting.plot_learning_curves(runs, **kw),
        {"runs": {"run": {"step": [1, 2], "loss": [1.0, 0.5], "accuracy": [0.5, 0.9]}}},
    ),
    "plot_similarity": (lambda **kw: plotting.plot_similarity(np.eye(2), **kw), {"labels": ["a", "b"]}),
    "plot_head_scores": (lambda **kw: plotting.plot_head_scores(np.zeros((1, 2, 2)), **kw), {"names": ["p"]}),
    "plot_head_split": (lambda **kw: plotting.plot_head_split(np.zeros((2, 4)), 2, **kw), {}),
    "plot_encoder_block": (lambda **kw: plotting.plot_encoder_block(**kw), {}),
    "plot_block_traversal": (lambda **kw: plotting.plot_block_traversal(2, **kw), {}),
    "plot_roofline": (
        lambda points, **kw: plotting.plot_roofline(points, 100.0, 10.0, **kw),
        {"points": {"kernel": (2.0, 5.0)}},
    ),
    "attention_explorer": (
        lambda texts, **kw: interactive.attention_explorer(texts, **kw),
        {"texts": [("text", ["a", "b", "c"], UNIFORM)], "title": "t", "alt": "a"},
    ),
    "softmax_stepper": (
        lambda **kw: interactive.softmax_stepper(np.zeros(4), np.zeros((4, 2)), 2, **kw),
        {"title": "t", "alt": "a"},
    ),
    "mask_builder": (lambda **kw: interactive.mask_builder(3, **kw), {"title": "t", "alt": "a"}),
    "next_token_explorer": (
        lambda **kw: interactive.next_token_explorer(**kw),
        {"prompts": {"prompt": ("text", [2.0, 1.0, 0.0])}, "vocabulary": ["a", "b", "c"], "title": "t", "alt": "a"},
    ),
    "next_token_inputs": (lambda **kw: interactive.next_token_inputs(_TinyModel(), **kw), {"prompts": {"p": "text"}}),
}
#: Text drawn as written, its $ a dollar sign: a vocabulary's tokens are data, not labels to typeset.
LITERAL = {("next_token_explorer", "vocabulary")}
NOT_TEXT = {"cmap", "activation"}  # names matplotlib or the package looks up: refused as unknown, tested elsewhere
BAD_TEXT = {"unparsable mathtext": r"costs $\frac$", "a lone surrogate": "a\ud800b"}


def helpers() -> dict[str, Callable[..., Any]]:
    names = [*plotting.__all__, *(n for n in interactive.__all__ if n != "InteractiveFigure")]
    return {name: getattr(plotting, name, None) or getattr(interactive, name) for name in names}


def text_parameters(function: Callable[..., Any]) -> list[str]:
    """The parameters whose annotation mentions ``str``: titles, labels, sequences and mappings of them."""
    found = []
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = str(parameter.annotation)
        if "str" in annotation and name not in NOT_TEXT:
            found.append(name)
    return found


def cases() -> list[tuple[str, str, str]]:
    return [
        (helper, parameter, kind)
        for helper, function in helpers().items()
        for parameter in text_parameters(function)
        for kind in BAD_TEXT
    ]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_every_public_helper_has_a_minimal_call():
    missing = sorted(set(helpers()) - set(MINIMAL))
    assert not missing, f"add a minimal valid call for {missing} to MINIMAL, so its text arguments are tested"


@pytest.mark.parametrize("helper", sorted(MINIMAL))
def test_the_minimal_call_draws(helper):
    function, kwargs = MINIMAL[helper]
    function(**kwargs)


def _with_bad_text(kwargs: dict[str, Any], parameter: str, bad: str) -> dict[str, Any]:
    good = kwargs.get(parameter)
    if isinstance(good, dict):  # runs or points: the first key is a label
        first = next(iter(good))
        return {**kwargs, parameter: {bad: good[first], **{k: v for k, v in good.items() if k != first}}}
    if parameter == "texts":  # the explorer: (label, tokens, weights) triples; a token is text too
        label, tokens, weights = good[0]
        return {**kwargs, parameter: [(label, [bad, *tokens[1:]], weights)]}
    if isinstance(good, list):
        return {**kwargs, parameter: [bad, *good[1:]]}
    return {**kwargs, parameter: bad}


@pytest.mark.parametrize(("helper", "parameter", "kind"), cases())
def test_undrawable_text_is_refused_with_the_arguments_name(helper, parameter, kind):
    function, kwargs = MINIMAL[helper]
    if (helper, parameter) in LITERAL and kind == "unparsable mathtext":
        function(**_with_bad_text(kwargs, parameter, BAD_TEXT[kind]))  # drawn as written
        return
    with pytest.raises(ValueError, match=rf"^{parameter}\b.*(mathtext|lone surrogate)"):
        function(**_with_bad_text(kwargs, parameter, BAD_TEXT[kind]))


def test_a_literal_dollar_sign_and_real_mathtext_still_draw():
    plotting.plot_attention(UNIFORM, title=r"costs \$5, or $x^2$", query_labels=["$", "b", "c"])
    plotting.plot_similarity(np.eye(2), ["$5", "$q_1$"])
