"""Chapter 13 exercises: max pooling over real tokens, the duplicate-token head, a checkpoint's shapes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..pretrained import mean_pool
from ..scores import softmax
from ._framework import CaseList, CheckResult, Exercise, Mistake, compare_array

__all__ = ["check_max_pool", "check_duplicate_token_scores", "check_shape_problems"]


# --- Exercise 1: max pooling over real tokens ---------------------------------------------------


def _max_pool(hidden: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The largest value of each feature over each row's real tokens: padding can never win."""
    return np.where(keep[..., None], hidden, -np.inf).max(axis=1)  # (B, D)


def _prefix_max(hidden: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The mistake: the first keep.sum() positions of each row, as if the padding always came last."""
    return np.stack([row[:n].max(axis=0) for row, n in zip(hidden, keep.sum(axis=1), strict=True)])


def _pool_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for description, rows, D, dtype in [
        ("T = D = 3, padded on the right", ["110", "100"], 3, np.float64),
        ("T = 1", ["1"], 4, np.float64),
        ("padding on the left", ["001111", "111111", "000001"], 5, np.float64),
        ("float32, padded on the right", ["1111111", "1111000", "1000000"], 8, np.float32),
    ]:
        keep = np.array([[c == "1" for c in row] for row in rows])  # (B, T)
        hidden = rng.normal(size=(*keep.shape, D))
        hidden[..., 0] = -3.0 - np.abs(hidden[..., 0])  # a feature below -3 at every token: a padding 0 would win
        hidden[~keep] += 4.0  # padding vectors with large values, as a model's padding rows can have
        cases.append((f"{description}, lengths {keep.sum(axis=1).tolist()}", (hidden.astype(dtype), keep)))
    return cases


MAX_POOL = Exercise(
    name="max pooling over real tokens",
    kind="extend",
    concept="pooling with padding: a mask inside a max",
    chapter=13,
    number=1,
    cases=_pool_cases,
    reference=_max_pool,
    compare=compare_array(
        "pooled vectors",
        "0 * inf is NaN, so put -inf in with np.where rather than multiplying the mask by it; and a max over "
        "padding alone gives -inf: mask along the token axis, keep[..., None] of shape (B, T, 1), and take the "
        "max over axis 1, where every row has a real token",
    ),
    mistakes=(
        Mistake(
            lambda hidden, keep: (hidden * keep[..., None]).max(axis=1),
            "It matches zeroing the padding before the max: where a feature is negative at every real token, "
            "a padding 0 wins. Fill the padding with -inf instead, np.where(keep[..., None], hidden, -np.inf)",
        ),
        Mistake(
            lambda hidden, keep: hidden.max(axis=1),
            "It matches the max over every position, padding included; leave the padding out",
        ),
        Mistake(
            mean_pool,
            "It matches the mean over the real tokens, the chapter's pooling; take each feature's largest value",
        ),
        Mistake(
            _prefix_max,
            "It matches the first keep.sum() positions of each row; the real tokens need not come first (a "
            "tokenizer can pad on the left), so select them with the mask itself",
        ),
    ),
)


def check_max_pool(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(hidden, keep) -> (B, D)``: each feature's largest value over each row's real tokens.

    ``hidden`` is (B, T, D), ``keep`` (B, T) is True at real tokens, and every
    row has at least one. See chapter 13, exercise 1.
    """
    return MAX_POOL.check(fn)


# --- Exercise 2: the duplicate-token head ----------------------------------------------------------

_SPECIAL_TOKENS = ("[CLS]", "[SEP]")


def _duplicate_scores(weights: np.ndarray, tokens: list[str], slip: str = "") -> np.ndarray:
    """Each head's mean weight from a word piece to the other copies of it; ``slip`` names a mistake to make."""
    pieces = np.asarray(tokens)
    T = len(pieces)
    other = (pieces[:, None] == pieces[None, :]) & ~np.eye(T, dtype=bool)  # (T, T): key j is another copy of t
    word = ~np.isin(pieces, _SPECIAL_TOKENS)  # (T,): the word pieces' rows
    rows = other.any(axis=1) & (word | (slip == "special"))  # (T,): the queries averaged over
    keys = other
    if slip == "self":
        keys = other | np.eye(T, dtype=bool)
    elif slip.startswith("earlier"):
        keys = other & np.tri(T, k=-1, dtype=bool)  # keys before the query only
        if slip == "earlier":
            rows = keys.any(axis=1) & word
    on_copies = (weights * keys).sum(axis=-1)  # (L, H, T): each query's total weight on its copies
    if slip == "mean over copies":
        on_copies = on_copies / np.maximum(keys.sum(axis=1), 1)
    if slip == "every query":
        rows = np.ones(T, dtype=bool)
    elif slip == "every word piece":
        rows = word
    return on_copies[..., rows].mean(axis=-1)  # (L, H)


def _previous_token_scores(weights: np.ndarray, tokens: list[str]) -> np.ndarray:
    """The mistake: the chapter's previous-token measure, over the word pieces' rows."""
    t = np.arange(1, weights.shape[-1] - 1)
    return weights[..., t, t - 1].mean(axis=-1)


def _matches_slips(*slips: str) -> Callable[[Any, tuple[Any, ...]], bool]:
    """A detector: the answer equals the scores computed with any of ``slips``."""
    compare = compare_array("scores")
    return lambda got, args: any(compare(got, _duplicate_scores(*args, slip=slip)) is None for slip in slips)


_DUPLICATE_TEXTS = [
    (1, 1, np.float64, "[CLS] the cat saw the dog [SEP]"),
    (2, 3, np.float64, "[CLS] no no [SEP]"),
    (2, 4, np.float32, "[CLS] a rose is a rose [SEP] is it a rose ? [SEP]"),
    (6, 12, np.float64, "[CLS] un ##bel ##ie ##va ##bly , un ##bel ##ie ##va ##ble . [SEP]"),
]


def _duplicate_cases(rng: np.random.Generator) -> CaseList:
    cases = []
    for L, H, dtype, text in _DUPLICATE_TEXTS:
        tokens = text.split()
        weights = softmax(2.0 * rng.normal(size=(L, H, len(tokens), len(tokens))))  # rows sum to 1
        described = f"L={L}, H={H}, {dtype.__name__}: {text}"
        cases.append((described, (weights.astype(dtype), tokens)))
    return cases


# The mistakes made with _duplicate_scores' slips: (slip, other slips that are the same mistake, hint).
_DUPLICATE_SLIPS = [
    (
        "self",
        (),
        "It matches counting the query's own position as a copy; a head that attends to itself would win. "
        "Leave out the diagonal",
    ),
    (
        "every query",
        ("every word piece",),
        "It matches averaging over every query, those without a copy included; average over the word pieces "
        "that have another copy",
    ),
    (
        "earlier",
        ("earlier, any copy",),
        "It matches counting only the copies before the query; BERT reads both ways, so a copy after it counts too",
    ),
    (
        "mean over copies",
        (),
        "It matches averaging over a query's copies; add up its weight on all of them (a piece that occurs "
        "three times has two other copies)",
    ),
    (
        "special",
        (),
        "It matches counting [SEP] as a word piece: a pair of texts has two [SEP]s, and they are not words. "
        "Leave the rows of [CLS] and [SEP] out",
    ),
]


DUPLICATE_TOKEN_SCORES = Exercise(
    name="the duplicate-token head",
    kind="search",
    concept="finding a head by its pattern: weight on the other copies of a word piece",
    chapter=13,
    number=2,
    cases=_duplicate_cases,
    reference=_duplicate_scores,
    compare=compare_array(
        "scores",
        "a division by zero? Average over the queries that have another copy; every case has at least one",
    ),
    mistakes=(
        *(
            Mistake(partial(_duplicate_scores, slip=slip), hint, detect=_matches_slips(slip, *alike) if alike else None)
            for slip, alike, hint in _DUPLICATE_SLIPS
        ),
        Mistake(
            _previous_token_scores,
            "It matches the weight on the previous token, the chapter's measure; here the keys are the other "
            "copies of the query's word piece, wherever they are",
        ),
    ),
)


def check_duplicate_token_scores(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(weights, tokens) -> (L, H)``: each head's mean weight on the other copies of a word piece.

    ``weights`` is (L, H, T, T), one text's attention in every head, and
    ``tokens`` its T word pieces as strings. For every query that is a word
    piece (not [CLS] or [SEP]) with at least one other copy in the text, take
    the total weight it puts on those copies; average over such queries.
    See chapter 13, exercise 2.
    """
    return DUPLICATE_TOKEN_SCORES.check(fn)


# --- Exercise 3: a checkpoint's shapes against its config -------------------------------------------

# Each linear layer of a BERT block, and its stored weight's shape (out, in) in terms of D and F.
_LINEARS = {
    "attention.self.query": ("D", "D"),
    "attention.self.key": ("D", "D"),
    "attention.self.value": ("D", "D"),
    "attention.output.dense": ("D", "D"),
    "intermediate.dense": ("F", "D"),
    "output.dense": ("D", "F"),
}
_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")


def _expected_shapes(config: dict[str, Any], layout: str = "out, in", first_layer: int = 0) -> dict[str, tuple]:
    """Every tensor the forward pass reads, and the shape the config implies for it in the file."""
    D, F = config["hidden_size"], config["intermediate_size"]
    size = {"D": D, "F": F}
    shapes: dict[str, tuple] = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], D),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], D),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
    }
    for i in range(first_layer, first_layer + config["num_hidden_layers"]):
        for name, (d_out, d_in) in _LINEARS.items():
            stored = (size[d_out], size[d_in])  # nn.Linear keeps (out, in)
            shapes[f"encoder.layer.{i}.{name}.weight"] = stored if layout == "out, in" else stored[::-1]
            shapes[f"encoder.layer.{i}.{name}.bias"] = (size[d_out],)
        for name in _NORMS:
            shapes[f"encoder.layer.{i}.{name}.weight"] = shapes[f"encoder.layer.{i}.{name}.bias"] = (D,)
    return shapes


def _shape_problems(header: dict[str, Any], config: dict[str, Any], slip: str = "") -> list[str]:
    """The sorted names of the tensors the forward reads that are missing or of the wrong shape."""
    expected = _expected_shapes(
        config, layout="in, out" if slip == "in, out" else "out, in", first_layer=1 if slip == "from 1" else 0
    )
    if slip == "weights only":
        expected = {name: shape for name, shape in expected.items() if name.endswith(".weight")}
    problems = {name for name, shape in expected.items() if name not in header or tuple(header[name]["shape"]) != shape}
    if slip == "present only":
        problems = {name for name in problems if name in header}
    elif slip == "lists":  # a list from JSON is never equal to a tuple: every present tensor "differs"
        problems = set(expected)
    elif slip == "extras":
        problems |= {name for name in header if name != "__metadata__" and name not in expected}
    return sorted(problems)


def _config(V: int, D: int, L: int, H: int, F: int, P: int, S: int = 2) -> dict[str, Any]:
    return {
        "model_type": "bert",
        "hidden_act": "gelu",
        "vocab_size": V,
        "hidden_size": D,
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "intermediate_size": F,
        "max_position_embeddings": P,
        "type_vocab_size": S,
        "layer_norm_eps": 1e-12,
    }


def _header(config: dict[str, Any], changes: dict[str, tuple | None]) -> dict[str, Any]:
    """A safetensors header for ``config``, names in the file's sorted order, with ``changes`` planted.

    ``changes`` maps a name to the shape stored instead, or to None to leave the tensor out.
    """
    D, P = config["hidden_size"], config["max_position_embeddings"]
    shapes = {
        **_expected_shapes(config),
        "pooler.dense.weight": (D, D),  # in the file, not read by the forward
        "pooler.dense.bias": (D,),
        "embeddings.position_ids": (1, P),
    }
    shapes.update(changes)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(name for name, shape in shapes.items() if shape is not None):
        dtype, width = ("I64", 8) if name == "embeddings.position_ids" else ("F32", 4)
        size = width * int(np.prod(shapes[name]))
        header[name] = {"dtype": dtype, "shape": list(shapes[name]), "data_offsets": [offset, offset + size]}
        offset += size
    return header


def _checkpoint_cases(rng: np.random.Generator) -> CaseList:
    D = int(rng.choice([8, 12, 16]))
    V, P = int(rng.integers(30, 60)), int(rng.choice([16, 32]))
    small = _config(V, D, 2, 4, 4 * D, P)
    one = _config(V, D, 1, 1, 2 * D, P)
    square = _config(V, D, 2, 2, D, P)  # F = D: the feed-forward weights are square
    three = _config(V, D, 3, 2, 3 * D, P)
    minilm = _config(30522, 384, 6, 12, 1536, 512)
    return [
        ("a small BERT of 2 layers, nothing wrong", (_header(small, {}), small)),
        (
            "one layer: its query bias one entry too long, its up-projection stored (in, out)",
            (
                _header(
                    one,
                    {
                        "encoder.layer.0.attention.self.query.bias": (D + 1,),
                        "encoder.layer.0.intermediate.dense.weight": (D, 2 * D),
                    },
                ),
                one,
            ),
        ),
        (
            "all-MiniLM-L6-v2's shapes: 30,521 word rows, layer 3's key bias missing, layer 5's output.dense "
            "stored (in, out)",
            (
                _header(
                    minilm,
                    {
                        "embeddings.word_embeddings.weight": (30521, 384),
                        "encoder.layer.3.attention.self.key.bias": None,
                        "encoder.layer.5.output.dense.weight": (1536, 384),
                    },
                ),
                minilm,
            ),
        ),
        (
            "F = D, so a transposed up-projection keeps its shape; a token-type table of one row",
            (
                _header(
                    square,
                    {
                        "encoder.layer.1.intermediate.dense.weight": (D, D),  # transposed, and the same shape
                        "embeddings.token_type_embeddings.weight": (1, D),
                    },
                ),
                square,
            ),
        ),
        (
            "3 layers: the last one's value weight missing, a LayerNorm weight stored as (1, D)",
            (
                _header(
                    three,
                    {
                        "encoder.layer.2.attention.self.value.weight": None,
                        "encoder.layer.1.output.LayerNorm.weight": (1, D),
                    },
                ),
                three,
            ),
        ),
    ]


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _compare_names(got: Any, expected: list[str]) -> str | None:
    if isinstance(got, np.ndarray):
        got = got.tolist()
    if isinstance(got, (str, bytes)) or not isinstance(got, (list, tuple, set, frozenset)):
        return f"should return a list of tensor names; got {type(got).__name__}"
    if not all(isinstance(name, str) for name in got):
        return f"should return a list of tensor names (strings); got {got!r:.80}"
    extra, missed = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
    found = [f"missed {len(missed)}: {_few(missed)}"] if missed else []
    found += [f"reported {len(extra)} with no problem: {_few(extra)}"] if extra else []
    return "; ".join(found) or None


# The mistakes made with _shape_problems' slips, in the order they are tried: "present only" must come
# before "weights only", which gives the same answer where a bias is missing.
_SHAPE_SLIPS = [
    (
        "lists",
        "It matches flagging every tensor: JSON gives a shape as a list, and in Python [8, 8] != (8, 8); "
        "compare tuple(entry['shape']) with a tuple",
    ),
    (
        "in, out",
        "It matches expecting the x @ w layout (in, out); the file stores nn.Linear's weight as (out, in), "
        "so intermediate.dense.weight is (F, D)",
    ),
    (
        "extras",
        "It matches reporting tensors the forward pass does not read (the pooler, position_ids); report "
        "only the ones it needs",
    ),
    ("from 1", "It matches numbering the layers from 1; encoder.layer.0 is the first block"),
    (
        "present only",
        "It matches checking only the tensors the file holds; a tensor that is missing is a problem too",
    ),
    (
        "weights only",
        "It matches checking the weights but not the biases; every linear layer and LayerNorm has a bias",
    ),
]


SHAPE_PROBLEMS = Exercise(
    name="a checkpoint's shapes against its config",
    kind="implement",
    concept="what a config implies for every tensor of a BERT checkpoint",
    chapter=13,
    number=3,
    cases=_checkpoint_cases,
    reference=_shape_problems,
    compare=_compare_names,
    mistakes=tuple(Mistake(partial(_shape_problems, slip=slip), hint) for slip, hint in _SHAPE_SLIPS),
    float32=False,
)


def check_shape_problems(fn: Callable[..., Any]) -> CheckResult:
    """Check ``fn(header, config) -> list of str``: the tensors a BERT's forward reads that are missing or misshapen.

    ``header`` is a safetensors header as a dict (name -> dtype, shape as a
    list, data offsets; and ``__metadata__``), ``config`` a ``config.json``
    as a dict. Any order of the names passes. See chapter 13, exercise 3.
    """
    return SHAPE_PROBLEMS.check(fn)
