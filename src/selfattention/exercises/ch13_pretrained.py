"""Chapter 13 exercises: mean pooling over real tokens, finding the previous-token head, counting BERT's parameters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..pretrained import BertConfig, mean_pool
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, answer_array, compare_array

__all__ = ["check_mean_pool", "check_previous_token_head", "check_parameter_count"]


def _pool_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for B, T, D, lengths in [(1, 4, 3, [4]), (2, 5, 4, [5, 2]), (3, 6, 8, [3, 6, 1])]:
        keep = np.arange(T) < np.array(lengths)[:, None]  # (B, T)
        hidden = rng.normal(size=(B, T, D))
        cases.append((f"B={B}, T={T}, lengths {lengths}", (hidden, keep)))
    return cases


MEAN_POOL = Exercise(
    name="mean pooling over real tokens",
    kind="implement",
    concept="mean pooling with padding",
    chapter=13,
    number=1,
    cases=_pool_cases,
    reference=mean_pool,
    compare=compare_array("pooled vectors", "check for a row of keep with no real token, or a division by zero"),
    mistakes=(
        Mistake(
            lambda h, keep: h.mean(axis=1),
            "It matches averaging the padding in too; sum over the real tokens only and divide by their number",
        ),
        Mistake(
            lambda h, keep: (h * keep[..., None]).sum(axis=1) / h.shape[1],
            "It matches dividing by T, padding included; divide by each row's count of real tokens, keep.sum(1)",
        ),
        Mistake(
            lambda h, keep: (h * keep[..., None]).sum(axis=1),
            "It matches the sum without dividing; divide by the number of real tokens",
        ),
        Mistake(
            lambda h, keep: (h * keep[..., None]).sum(axis=1) / keep.sum(),
            "It matches dividing by the real tokens of the whole batch; count per row, keep.sum(1, keepdims=True)",
        ),
        Mistake(
            lambda h, keep: (lambda m: m / np.linalg.norm(m, axis=-1, keepdims=True))(mean_pool(h, keep)),
            "It matches the right mean scaled to length 1; the exercise asks for the mean alone, before the "
            "normalisation that encode applies next",
        ),
    ),
)


def check_mean_pool(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(hidden, keep) -> (B, D)``: the mean of each row's vectors over its real tokens.

    See chapter 13, exercise 1.
    """
    return MEAN_POOL.check(fn)


def _previous_token_scores(weights: np.ndarray) -> np.ndarray:
    T = weights.shape[-1]
    t = np.arange(1, T)  # the first token has no previous token
    return weights[..., t, t - 1].mean(axis=-1)  # (L, H)


def _best(scores: np.ndarray) -> tuple[int, int]:
    layer, head = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(layer), int(head)


def _head_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for L, H, T, prev, nxt, wrap in [
        (2, 3, 6, (1, 2), (0, 1), None),
        (3, 4, 8, (0, 3), (2, 0), (2, 2)),
        (6, 12, 10, (0, 2), (1, 8), (4, 5)),
    ]:
        scores = rng.normal(size=(L, H, T, T))
        scores[prev][np.arange(1, T), np.arange(T - 1)] += 6.0  # a previous-token head
        scores[nxt][np.arange(T - 1), np.arange(1, T)] += 7.0  # a next-token head, stronger
        scores[nxt][np.arange(T), np.arange(T)] += 2.0
        for layer in range(L):
            for head in range(H):
                scores[layer, head][np.arange(T), np.arange(T)] += 6.0 if (layer, head) == (L - 1, H - 1) else 0.0
        if wrap is not None:  # row 0 of this head puts its weight on the last token: (0 - 1) wraps there
            scores[wrap][0, -1] += 40.0
            scores[wrap][np.arange(1, T), np.arange(T - 1)] += 4.4
        cases.append((f"L={L}, H={H}, T={T}", (softmax(scores),)))
    return cases


def _compare_head(got: Any, expected: tuple[int, int]) -> str | None:
    answer = answer_array(got)
    if answer is None or answer.shape != (2,) or answer.dtype.kind not in "iuf":
        return f"should return a (layer, head) pair of integers; got {got!r}"
    if answer.dtype.kind == "f" and not np.isfinite(answer).all():
        return f"layer and head should be whole numbers; got {got!r}"
    if answer.dtype.kind == "f" and not np.array_equal(answer, np.round(answer)):
        return f"layer and head should be whole numbers; got {got!r}"
    if tuple(int(a) for a in answer) != expected:
        return f"should be (layer, head) = {expected}; got {tuple(int(a) for a in answer)}"
    return None


def _with_wrap(weights: np.ndarray) -> tuple[int, int]:
    T = weights.shape[-1]
    t = np.arange(T)
    return _best(weights[..., t, t - 1].mean(axis=-1))


PREVIOUS_TOKEN_HEAD = Exercise(
    name="the previous-token head",
    kind="search",
    concept="finding a head by its pattern",
    chapter=13,
    number=2,
    cases=_head_cases,
    reference=lambda w: _best(_previous_token_scores(w)),
    compare=_compare_head,
    mistakes=(
        Mistake(
            lambda w: _best(np.diagonal(w, offset=1, axis1=-2, axis2=-1).mean(axis=-1)),
            "It matches the next-token head: the previous token of query t is key t - 1, below the diagonal",
        ),
        Mistake(
            lambda w: _best(np.diagonal(w, axis1=-2, axis2=-1).mean(axis=-1)),
            "It matches the head that attends to itself (the diagonal); the previous token is key t - 1",
        ),
        Mistake(
            _with_wrap,
            "It matches including query 0, whose key 0 - 1 = -1 wraps around to the last token; start at t = 1",
        ),
        Mistake(
            lambda w: tuple(reversed(_best(_previous_token_scores(w)))),
            "It matches the right head with layer and head swapped; return (layer, head)",
        ),
    ),
    float32=False,
)


def check_previous_token_head(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(weights) -> (layer, head)`` for weights (L, H, T, T): the head that most attends to token t - 1.

    See chapter 13, exercise 2.
    """
    return PREVIOUS_TOKEN_HEAD.check(fn)


_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def _config(values: tuple[int, ...]) -> dict[str, Any]:
    return {**dict(zip(_CONFIG_KEYS, values, strict=True)), "model_type": "bert", "hidden_act": "gelu"}


def _count(config: dict[str, Any]) -> int:
    return BertConfig.from_dict({**config, "layer_norm_eps": 1e-12}).parameter_count()


def _counted(
    c: dict[str, Any],
    *,
    layers: int | None = None,
    biases: bool = True,
    norms: bool = True,
    tables: str = "all",
    pooler: bool = False,
    embedding_norm: bool = True,
    projections: int = 4,
) -> int:
    """The count with one part left out or added: how each mistake counts."""
    D, F = c["hidden_size"], c["intermediate_size"]
    L = c["num_hidden_layers"] if layers is None else layers
    V, P, S = c["vocab_size"], c["max_position_embeddings"], c["type_vocab_size"]
    rows = {"all": V + P + S, "word": V, "no types": V + P}
    attention = projections * (D * D + (D if biases else 0))
    feed_forward = 2 * D * F + (F + D if biases else 0)
    block = attention + feed_forward + (4 * D if norms else 0)
    embeddings = rows.get(tables, 0) * D + (2 * D if norms and embedding_norm else 0)
    return embeddings + L * block + (D * D + D if pooler else 0)


def _compare_count(got: Any, expected: int) -> str | None:
    answer = answer_array(got)
    if answer is None or answer.ndim != 0 or answer.dtype.kind not in "iuf":
        return f"should return a whole number of parameters; got {got!r}"
    value = float(answer)
    if not np.isfinite(value) or value != round(value):
        return f"should return a whole number of parameters; got {got!r}"
    if abs(value) > 1e15:
        return f"should be {expected:,}; got {value:.3g}, far too large"
    if int(answer) != expected:
        return f"should be {expected:,}; got {int(answer):,} ({int(answer) - expected:+,})"
    return None


PARAMETER_COUNT = Exercise(
    name="BERT's parameter count",
    kind="count",
    concept="the weights of a BERT from its config",
    chapter=13,
    number=3,
    cases=lambda rng: [
        ("a small BERT with three token types", (_config((1000, 16, 3, 4, 64, 128, 3)),)),
        ("all-MiniLM-L6-v2", (_config((30522, 384, 6, 12, 1536, 512, 2)),)),
        ("BERT-base", (_config((30522, 768, 12, 12, 3072, 512, 2)),)),
        ("a tiny BERT", (_config((100, 8, 2, 2, 16, 32, 2)),)),
        ("a BERT with one token type", (_config((1000, 16, 3, 4, 64, 128, 1)),)),
    ],
    reference=_count,
    compare=_compare_count,
    mistakes=(
        Mistake(
            lambda c: _counted(c, pooler=True),
            "It matches counting the pooler (a dense layer on [CLS]), which sentence embeddings do not use",
        ),
        Mistake(lambda c: _counted(c, biases=False), "It matches leaving out the biases: each linear layer has d_out"),
        Mistake(
            lambda c: _counted(c, norms=False),
            "It matches leaving out the LayerNorms: one after the embeddings and two per block, each 2 * D",
        ),
        Mistake(
            lambda c: _counted(c, tables="word"),
            "It matches counting the word embeddings alone; the position and token-type tables add "
            "(max_position_embeddings + type_vocab_size) * D",
        ),
        Mistake(
            lambda c: _counted(c, tables="none"),
            "It matches leaving out the embedding tables, (vocab_size + positions + token types) * D",
        ),
        Mistake(
            lambda c: _counted(c, tables="no types"),
            "It matches leaving out the token-type (segment) table, type_vocab_size * D",
        ),
        Mistake(
            lambda c: _counted(c, embedding_norm=False),
            "It matches leaving out the LayerNorm after the embeddings (2 * D); the blocks' two are counted",
        ),
        Mistake(
            lambda c: _counted(c, projections=3),
            "It matches counting q, k and v but not the attention's output projection, another D * D + D per block",
        ),
        Mistake(
            lambda c: _counted(c, layers=1),
            "It matches counting one block; multiply the block's parameters by num_hidden_layers",
        ),
    ),
    float32=False,
)


def check_parameter_count(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(config) -> int``: weights and biases of a BERT encoder's embeddings and blocks, from its config.

    See chapter 13, exercise 3.
    """
    return PARAMETER_COUNT.check(fn)
