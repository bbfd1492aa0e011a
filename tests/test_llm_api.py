"""Chapter 14's public API under bad and unusual input: ``selfattention.llm`` and ``selfattention.interop.llama``.

Bad input must give a ValueError that names what was expected and what arrived: never a traceback from
inside NumPy, tokenizers, gguf, jinja2 or torch, never a silent wrong answer, and never a MemoryError or a
hang from a typo. Unusual but correct input (tensors of ids, NumPy integers, no new tokens, a one-token
prompt, float64 weights) must work, and generation must be repeatable and leave the model as it was.

Most tests use a tiny Llama (2 blocks, D = 32, 4 query heads over 2 key/value heads, a 264-token
byte-level vocabulary) with random weights, written here also as a GGUF file, so that they run in well
under a second each; the few that need SmolLM2 itself share one load and are marked slow.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from selfattention import AttentionParams, KVCache, Linear, llm
from selfattention.interop.llama import llama_state_dict, transformers_llama
from selfattention.llm import (
    GGUFContents,
    Llama,
    LlamaBlock,
    LlamaConfig,
    LlamaWeights,
    build_tokenizer,
    dequantize,
    dequantize_q4_1,
    dequantize_q8_0,
    llama_block,
    quantize_q4_1,
    render_chat,
    rms_norm,
    rope_permutation,
    swiglu,
    undo_rope_permutation,
    weights_from_gguf,
)

# --- a tiny Llama: its vocabulary, weights, GGUF contents and file ---------------------------------------

CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2; <|im_end|> ends an answer
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "o n"]
TOKENS = CONTROL + sorted(pre_tokenizers.ByteLevel.alphabet()) + [m.replace(" ", "") for m in MERGES]
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONFIG = LlamaConfig(
    num_layers=2,
    d_model=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    d_ff=64,
    vocab_size=len(TOKENS),
    context_length=64,
    rope_base=10000.0,
    rms_norm_eps=1e-5,
)
V = CONFIG.vocab_size


def tiny_weights(seed: int = 0) -> LlamaWeights:
    rng = np.random.default_rng(seed)
    D, F, Dh = CONFIG.d_model, CONFIG.d_ff, CONFIG.head_dim

    def linear(d_in, d_out):
        return Linear((rng.normal(size=(d_in, d_out)) / np.sqrt(d_in)).astype(np.float32))

    def norm():
        return (1 + 0.1 * rng.normal(size=D)).astype(np.float32)

    blocks = tuple(
        LlamaBlock(
            attention_norm=norm(),
            attention=AttentionParams(
                q=linear(D, CONFIG.num_heads * Dh),
                k=linear(D, CONFIG.num_kv_heads * Dh),
                v=linear(D, CONFIG.num_kv_heads * Dh),
                out=linear(CONFIG.num_heads * Dh, D),
            ),
            mlp_norm=norm(),
            gate=linear(D, F),
            up=linear(D, F),
            down=linear(F, D),
        )
        for _ in range(CONFIG.num_layers)
    )
    embedding = rng.normal(size=(V, D)).astype(np.float32)
    return LlamaWeights(config=CONFIG, embedding=embedding, blocks=blocks, final_norm=norm())


def tiny_contents(weights: LlamaWeights) -> GGUFContents:
    """What a GGUF file of these weights holds: F32 norms and embedding, Q4_1 matrices, Q and K permuted."""
    c = weights.config
    tensors = {"token_embd.weight": ("F32", weights.embedding), "output_norm.weight": ("F32", weights.final_norm)}
    for i, block in enumerate(weights.blocks):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = ("F32", block.attention_norm)
        tensors[p + "ffn_norm.weight"] = ("F32", block.mlp_norm)
        matrices = {
            "attn_q": rope_permutation(block.attention.q.weight, c.num_heads),
            "attn_k": rope_permutation(block.attention.k.weight, c.num_kv_heads),
            "attn_v": block.attention.v.weight,
            "attn_output": block.attention.out.weight,
            "ffn_gate": block.gate.weight,
            "ffn_up": block.up.weight,
            "ffn_down": block.down.weight,
        }
        for name, w in matrices.items():  # stored one row per output feature, as PyTorch's nn.Linear
            tensors[p + name + ".weight"] = ("Q4_1", quantize_q4_1(np.ascontiguousarray(w.T)))
    return GGUFContents(
        config=c,
        tensors=tensors,
        tokens=TOKENS,
        merges=MERGES,
        token_types=[3] * len(CONTROL) + [1] * (len(TOKENS) - len(CONTROL)),
        special_ids={"bos": 0, "eos": 2, "unknown": 0, "padding": 2},
        pre_tokenizer="smollm",
        chat_template=TEMPLATE,
        sha256="0" * 64,
    )


def write_gguf(path, contents: GGUFContents, *, architecture="llama", header=True, tokenizer=True, extra=()):
    """Write ``contents`` as a GGUF file with gguf's writer; ``header``/``tokenizer`` False leave those out."""
    c = contents.config
    writer = gguf.GGUFWriter(str(path), architecture)
    if header:
        writer.add_block_count(c.num_layers)
        writer.add_context_length(c.context_length)
        writer.add_embedding_length(c.d_model)
        writer.add_feed_forward_length(c.d_ff)
        writer.add_head_count(c.num_heads)
        writer.add_head_count_kv(c.num_kv_heads)
        writer.add_rope_freq_base(c.rope_base)
        writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    if tokenizer:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(contents.pre_tokenizer)
        writer.add_token_list(contents.tokens)
        writer.add_token_types(contents.token_types)
        writer.add_token_merges(contents.merges)
        writer.add_bos_token_id(contents.special_ids["bos"])
        writer.add_eos_token_id(contents.special_ids["eos"])
        writer.add_unk_token_id(contents.special_ids["unknown"])
        writer.add_pad_token_id(contents.special_ids["padding"])
        writer.add_chat_template(contents.chat_template)
    for name, (kind, data) in contents.tensors.items():
        writer.add_tensor(name, data, raw_dtype=None if kind == "F32" else gguf.GGMLQuantizationType[kind])
    for name, data in extra:
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


WEIGHTS = tiny_weights()
CONTENTS = tiny_contents(WEIGHTS)
TOKENIZER = build_tokenizer(CONTENTS)


def tiny_llama(weights: LlamaWeights = WEIGHTS, **overrides) -> Llama:
    return Llama(
        **{
            "weights": weights,
            "tokenizer": TOKENIZER,
            "chat_template": TEMPLATE,
            "eos_id": 2,
            "name": "tiny",
            **overrides,
        }
    )


MODEL = tiny_llama()
BLOCK = WEIGHTS.blocks[0]
X = np.random.default_rng(1).normal(size=(3, CONFIG.d_model)).astype(np.float32)
USER = [{"role": "user", "content": "hi"}]


def q4_1_error_bound(w: np.ndarray) -> np.ndarray:
    """How far Q4_1 may move each weight of ``w`` (rows of blocks of 32), per weight.

    Half a level, d/2 with d = (max - min)/15, for the rounding to a level; and float16's relative rounding
    2**-11 of the minimum m and of d, which moves w = d q + m by at most 2**-11 (|m| + 15 d).
    """
    blocks = np.asarray(w, np.float64).reshape(*np.shape(w)[:-1], -1, 32)
    low, high = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    d = (high - low) / 15
    bound = d / 2 + 2.0**-11 * (np.abs(low) + 15 * d) + 1e-6 * (np.abs(low) + np.abs(high))  # float32 arithmetic
    return np.broadcast_to(bound, blocks.shape).reshape(np.shape(w))


def _with_nan(array, value=np.nan):
    array = np.array(array, copy=True)
    array.flat[0] = value
    return array


def _block(**changes) -> LlamaBlock:
    return dataclasses.replace(BLOCK, **changes)


# --- bad input: one table ------------------------------------------------------------------------------

BAD_INPUT = [
    # text
    (lambda: MODEL.encode(3), r"text must be a str; got int"),
    (lambda: MODEL.encode(b"the"), r"text must be a str; got bytes"),
    (lambda: MODEL.tokens(None), r"text must be a str; got NoneType"),
    (lambda: MODEL.encode("a\ud800b"), r"text must be valid Unicode; it holds '\\ud800' at position 1"),
    (lambda: MODEL.tokens("\udcff"), r"text must be valid Unicode"),
    (lambda: MODEL.generate("the \ud83d", 2), r"text must be valid Unicode"),
    (lambda: MODEL.attentions(["the"]), r"text \(as token ids\) must be a 1-D sequence of token ids \(ints\)"),
    (lambda: MODEL.attentions(None), r"text \(as token ids\) must be a 1-D sequence of token ids"),
    (lambda: MODEL.attentions([]), r"text \(as token ids\) must hold at least one token id; got none"),
    # token ids
    (lambda: MODEL.decode([1.0, 2.0]), r"ids must be a 1-D sequence of token ids \(ints\); got \[1.0, 2.0\]"),
    (lambda: MODEL.decode([True, False]), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode([5, True]), r"ids must be a 1-D sequence of token ids \(ints\); got \[5, True\]"),
    (lambda: MODEL.decode(["a"]), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode("abc"), r"ids must be a 1-D sequence of token ids \(ints\); got 'abc'"),
    (lambda: MODEL.decode([[1, 2]]), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode([[1, 2], [3]]), r"ids must be a 1-D sequence of token ids \(ints\); got \[\[1, 2\], \[3\]\]"),
    (lambda: MODEL.decode(5), r"ids must be a 1-D sequence of token ids \(ints\); got 5"),
    (lambda: MODEL.decode(None), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode({1, 2}), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode([-1]), rf"ids must be token ids in \[0, {V}\); got values from -1 to -1"),
    (lambda: MODEL.decode([5, V]), rf"ids must be token ids in \[0, {V}\); got values from 5 to {V}"),
    (lambda: MODEL.decode([10**30]), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.decode(torch.tensor([5.0])), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.logits([]), r"ids must hold at least one token id; got none"),
    (lambda: MODEL.logits([1.5]), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.logits(np.array([[5, 6]])), r"ids must be a 1-D sequence of token ids"),
    (lambda: MODEL.logits([5] * 65), r"ids holds 65 tokens; the model was trained for at most 64"),
    (lambda: MODEL.generate_ids([], 2), r"ids must hold at least one token id; got none"),
    (lambda: MODEL.generate_ids([V], 2), rf"ids must be token ids in \[0, {V}\)"),
    # the prompt: at least one token to continue
    (lambda: MODEL.generate("", 2), r"prompt must hold at least one token for the model to continue; got an empty"),
    (lambda: MODEL.generate(5, 2), r"text must be a str; got int"),
    (lambda: MODEL.generate(["the"], 2), r"text must be a str; got list"),
    (lambda: MODEL.attentions(""), r"the tokens of text must hold at least one token id; got none"),
    (lambda: MODEL.attentions("x" * 65), r"the tokens of text holds 65 tokens; the model was trained for at most 64"),
    # caches
    (lambda: MODEL.new_caches(0), r"max_len must be a positive integer; got 0"),
    (lambda: MODEL.new_caches(10**9), r"max_len must be at most 64; got 1,000,000,000"),
    (lambda: MODEL.new_caches(2.0), r"max_len must be a positive integer; got 2.0 of type float \(write 2\)"),
    # messages and chat templates
    (lambda: MODEL.chat_prompt(None), r"messages must be a non-empty list of \{'role': ..., 'content': ...\} dicts"),
    (lambda: MODEL.chat_prompt([]), r"messages must be a non-empty list"),
    (lambda: MODEL.chat_prompt(USER[0]), r"messages must be a non-empty list .* got \{'role': 'user'"),
    (lambda: MODEL.chat_prompt(["hi"]), r"messages\[0\] must be a dict with role 'system', 'user' or 'assistant'"),
    (lambda: MODEL.chat_prompt([{"role": "bot", "content": "hi"}]), r"messages\[0\] must be a dict with role"),
    (lambda: MODEL.chat_prompt([*USER, {"role": "user", "content": None}]), r"messages\[1\] must be .* a str content"),
    (lambda: MODEL.chat_prompt(iter(USER)), r"messages must be a non-empty list"),
    (lambda: MODEL.chat(None, 2), r"messages must be a non-empty list"),
    (lambda: render_chat(None, USER), r"template must be a str \(a Jinja chat template\); got NoneType"),
    (lambda: render_chat(TEMPLATE, USER, add_generation_prompt="yes"), r"add_generation_prompt must be True or False"),
    (lambda: render_chat("{% for %}", USER), r"the chat template failed on these messages: TemplateSyntaxError"),
    (lambda: render_chat("{{ 1 / 0 }}", USER), r"the chat template failed on these messages: ZeroDivisionError"),
    (lambda: render_chat("{{ m.x.y }}", USER), r"the chat template failed on these messages: UndefinedError"),
    (lambda: render_chat("{{ ''.__class__.__mro__ }}", USER), r"the chat template failed .* SecurityError"),
    (lambda: render_chat("{% for i in range(10**9) %}{% endfor %}", USER), r"the chat template failed .* too big"),
    (
        # transformers' templates stop on a conversation they cannot render with raise_exception(message)
        lambda: render_chat("{{ raise_exception('only user turns, please') }}", USER),
        r"the chat template failed on these messages: TemplateError: only user turns, please",
    ),
    # building a Llama
    (lambda: tiny_llama(weights=None), r"weights must be LlamaWeights; got NoneType"),
    (lambda: tiny_llama(tokenizer=None), r"tokenizer must be a tokenizers.Tokenizer .*; got NoneType"),
    (lambda: tiny_llama(tokenizer="gpt2"), r"tokenizer must be a tokenizers.Tokenizer .*; got str"),
    (lambda: tiny_llama(chat_template=None), r"chat_template must be a str; got NoneType"),
    (lambda: tiny_llama(name=3), r"name must be a str; got int"),
    (lambda: tiny_llama(eos_id="<|im_end|>"), r"eos_id must be a non-negative integer; got '<\|im_end\|>' of type str"),
    (lambda: tiny_llama(eos_id=2.0), r"eos_id must be a non-negative integer; got 2.0 of type float"),
    (lambda: tiny_llama(eos_id=V), rf"eos_id: {V} is not a token id; the vocabulary's ids run from 0 to {V - 1}"),
    (lambda: tiny_llama(eos_id=-1), r"eos_id must be a non-negative integer; got -1"),
    (lambda: tiny_llama(stop_ids=0), r"stop_ids must be a set of token ids; got 0"),
    (lambda: tiny_llama(stop_ids="ab"), r"stop_ids must be a set of token ids; got 'ab'"),
    (
        lambda: tiny_llama(stop_ids={10**6}),
        r"stop_ids: 1000000 is not a token id; the vocabulary's ids run from 0 to 263",
    ),
    # weights
    (lambda: dataclasses.replace(WEIGHTS, config={}), r"config must be a LlamaConfig; got dict"),
    (lambda: dataclasses.replace(WEIGHTS, embedding=np.ones((V - 1, 32))), r"embedding must be \(V, D\) = \(264, 32\)"),
    (lambda: dataclasses.replace(WEIGHTS, embedding=np.ones((V, 32), bool)), r"embedding must be an array of numbers"),
    (lambda: dataclasses.replace(WEIGHTS, embedding="abc"), r"embedding must be an array of real numbers"),
    (lambda: dataclasses.replace(WEIGHTS, final_norm=np.ones((1, 32))), r"final_norm must have shape \(D,\) = \(32,\)"),
    (lambda: dataclasses.replace(WEIGHTS, blocks=list(WEIGHTS.blocks)), r"blocks must be a tuple of 2 LlamaBlock"),
    (lambda: dataclasses.replace(WEIGHTS, blocks=WEIGHTS.blocks[:1]), r"blocks must be a tuple of 2 LlamaBlock"),
    (lambda: dataclasses.replace(WEIGHTS, blocks=(BLOCK, "x")), r"blocks\[1\] must be a LlamaBlock; got str"),
    (
        lambda: dataclasses.replace(WEIGHTS, config=dataclasses.replace(CONFIG, num_kv_heads=4)),
        r"blocks\[0\].attention.k must be \(32, 32\) for this config; got \(32, 16\)",
    ),
    (lambda: _block(attention_norm=np.ones(31)), r"attention_norm must have shape \(D,\) = \(32,\); got \(31,\)"),
    (lambda: _block(gate=Linear(np.ones((32, 63)))), r"gate and up must both be \(D, F\) with D = 32"),
    (lambda: _block(down=Linear(np.ones((64, 31)))), r"down must be \(F, D\) = \(64, 32\); got \(64, 31\)"),
    (lambda: _block(up="up"), r"up must be a Linear; got str"),
    (lambda: _block(gate=Linear(np.ones((32, 64)), np.ones(64))), r"a Llama feed-forward layer has no biases"),
    # functions of the block
    (lambda: rms_norm(X, np.ones(31)), r"weight must have shape \(D,\) = \(32,\) for x \(3, 32\); got \(31,\)"),
    (lambda: rms_norm(X, np.ones(32), eps=0), r"eps must be positive; got 0.0"),
    (lambda: rms_norm(3.0, np.ones(1)), r"x must have at least 1 axes"),
    (lambda: rms_norm(np.ones((3, 0)), np.ones(0)), r"x must have at least one feature to normalise"),
    (lambda: rms_norm(_with_nan(X), np.ones(32)), r"x must hold only finite numbers; found 1 NaN"),
    (lambda: rms_norm(X, _with_nan(np.ones(32))), r"weight must hold only finite numbers; found 1 NaN"),
    (lambda: rms_norm(X, _with_nan(np.ones(32), np.inf)), r"weight must hold only finite numbers; found 1 infinite"),
    (
        lambda: rms_norm(X * 1e30, np.ones(32, np.float32)),
        r"x is too large to normalise in float32: its mean square overflowed",
    ),
    (
        lambda: rms_norm(X.astype(np.float64) * 1e200, np.ones(32)),
        r"x is too large to normalise in float64: .* scale x down$",
    ),
    (lambda: rms_norm(X, np.full(32, 3e38, np.float32)), r"rms_norm overflowed float32"),
    (lambda: swiglu(X, BLOCK.gate, BLOCK.up, "down"), r"down must be a Linear; got str"),
    (
        lambda: swiglu(X, BLOCK.gate, BLOCK.up, Linear(np.ones((64, 5)))),
        r"gate and up must be \(D, F\) and down \(F, D\)",
    ),
    (lambda: swiglu(np.ones((3, 5)), BLOCK.gate, BLOCK.up, BLOCK.down), r"x must have 32 features in its last axis"),
    (lambda: llama_block(X, "block", 4), r"block must be a LlamaBlock; got str"),
    (lambda: llama_block(X, BLOCK, 3), r"the model width D=32 is not divisible by num_heads=3"),
    (lambda: llama_block(X, BLOCK, 1), r"num_heads=1 must be a multiple of 2, the query heads per key/value head"),
    (lambda: llama_block(X, BLOCK, 4.0), r"num_heads must be a positive integer; got 4.0 of type float"),
    (lambda: llama_block(X, BLOCK, 4, cache=[]), r"cache must be a KVCache or None; got list"),
    (lambda: llama_block(X[0], BLOCK, 4), r"x must be \(t, D\) with t >= 1 and D = 32; got shape \(32,\)"),
    (lambda: llama_block(X[:0], BLOCK, 4), r"x must be \(t, D\) with t >= 1 and D = 32; got shape \(0, 32\)"),
    (lambda: llama_block(_with_nan(X), BLOCK, 4), r"x must hold only finite numbers"),
    (lambda: llama_block(X, BLOCK, 4, positions=[0, 1]), r"positions must hold one position per token"),
    (lambda: llama_block(X, BLOCK, 4, positions=[0, np.nan, 2]), r"positions must hold only finite numbers"),
    (lambda: llama_block(X, BLOCK, 4, rope_base=1.0), r"base must be greater than 1"),
    (lambda: llama_block(X, BLOCK, 4, eps=-1), r"eps must be positive; got -1.0"),
    (lambda: llama_block(X, BLOCK, 4, return_weights=1), r"return_weights must be True or False; got 1"),
    # the RoPE permutation
    (lambda: undo_rope_permutation(np.ones((8, 8)), 3), r"w must be a \(D, H\*Dh\) matrix whose columns split into"),
    (lambda: undo_rope_permutation(np.ones((8, 6)), 2), r"num_heads=2 heads of even width; got shape \(8, 6\)"),
    (lambda: rope_permutation(np.ones(8), 2), r"w must be a \(D, H\*Dh\) matrix .* got shape \(8,\)"),
    (lambda: rope_permutation(np.ones((8, 8)), 0), r"num_heads must be a positive integer; got 0"),
    (lambda: rope_permutation(np.ones((8, 8)), True), r"num_heads must be a positive integer; got True"),
    (lambda: undo_rope_permutation(np.ones((8, 8)), 10**12), r"split into num_heads=1000000000000 heads"),
    # quantization
    (lambda: dequantize_q8_0(np.zeros(34)), r"Q8_0 data must be uint8 rows of whole 34-byte blocks.* got float64"),
    (lambda: dequantize_q8_0(np.zeros(34, np.int8)), r"Q8_0 data must be uint8 .* got int8 of shape \(34,\)"),
    (lambda: dequantize_q8_0(np.zeros(33, np.uint8)), r"Q8_0 data must be uint8 .* got uint8 of shape \(33,\)"),
    (lambda: dequantize_q8_0(np.uint8(3)), r"Q8_0 data must be uint8 .* got uint8 of shape \(\)"),
    (lambda: dequantize_q4_1([0] * 20), r"Q4_1 data must be uint8 rows of whole 20-byte blocks.* got int64"),
    (lambda: dequantize_q4_1(np.zeros((2, 21), np.uint8)), r"Q4_1 data .* got uint8 of shape \(2, 21\)"),
    (lambda: dequantize(np.zeros(34, np.uint8), "q8_0"), r"kind must be one of 'F32', 'Q8_0', 'Q4_1' .*; got 'q8_0'"),
    (
        lambda: dequantize(np.zeros(34, np.uint8), ["Q8_0"]),
        r"kind must be one of 'F32', 'Q8_0', 'Q4_1'.*got \['Q8_0'\]",
    ),
    (lambda: dequantize(np.zeros(3), "F32"), r"F32 data must be float32; got float64"),
    (lambda: quantize_q4_1(np.zeros(31)), r"w must have rows of whole blocks of 32 numbers; got shape \(31,\)"),
    (lambda: quantize_q4_1(3.0), r"w must have rows of whole blocks of 32 numbers; got shape \(\)"),
    (lambda: quantize_q4_1(np.full(32, np.nan)), r"w must hold only finite numbers; found 32 NaN"),
    (lambda: quantize_q4_1(np.ones(32, bool)), r"w must be an array of numbers; got a boolean array"),
    (lambda: quantize_q4_1("a" * 32), r"w must be an array of real numbers"),
    (lambda: quantize_q4_1(np.full(32, 1e6)), r"w must lie within \+-65,504, float16's range: .* magnitude 1e\+06"),
    (lambda: quantize_q4_1(np.linspace(-7e4, 0, 32)), r"w must lie within \+-65,504"),
    (lambda: quantize_q4_1(np.full(32, 1e39)), r"w must lie within \+-65,504, .* magnitude 1e\+39"),
    # reading files and GGUF contents
    (lambda: llm.read_config(3), r"path must be an existing GGUF file; got 3"),
    (lambda: llm.read_config(b"/tmp"), r"path must be an existing GGUF file; got b'/tmp'"),
    (lambda: llm.read_config("no/such/file.gguf"), r"path must be an existing GGUF file; got .*'no/such/file.gguf'"),
    (lambda: llm.read_config(__file__), r"test_llm_api.py is not a GGUF file"),
    (lambda: llm.read_gguf(use_cache="yes"), r"use_cache must be True or False; got 'yes'"),
    (lambda: llm.load_smollm2(sha256=3), r"sha256 must be a 64-character hex digest or None; got 3"),
    (lambda: llm.load_smollm2(sha256="b179c9"), r"sha256 must be a 64-character hex digest or None; got 'b179c9'"),
    (lambda: llm.load_smollm2(use_cache="no"), r"use_cache must be True or False; got 'no'"),
    (lambda: weights_from_gguf({}), r"contents must be a GGUFContents from read_gguf; got dict"),
    (lambda: weights_from_gguf(CONTENTS, undo_permutation="no"), r"undo_permutation must be True or False"),
    (
        lambda: weights_from_gguf(dataclasses.replace(CONTENTS, tensors={})),
        r"the file has no tensor 'blk.0.attn_q.weight'",
    ),
    (
        lambda: weights_from_gguf(dataclasses.replace(CONTENTS, config=dataclasses.replace(CONFIG, d_ff=32))),
        r"blk.0.ffn_gate.weight is stored as \(64, 32\); this config needs \(32, 32\)",
    ),
    (lambda: build_tokenizer(None), r"contents must be a GGUFContents from read_gguf; got NoneType"),
    (lambda: build_tokenizer(dataclasses.replace(CONTENTS, pre_tokenizer="llama3")), r"by llama.cpp's 'llama3' rules"),
    (lambda: build_tokenizer(dataclasses.replace(CONTENTS, token_types=[1])), r"264 tokens but 1 token types"),
    (lambda: build_tokenizer(dataclasses.replace(CONTENTS, merges=["a"])), r"a merge is not two tokens"),
    # interop (no torch needed to build a state dict)
    (lambda: llama_state_dict(None), r"weights must be shaped like selfattention.llm.LlamaWeights; 'NoneType'"),
    (lambda: llama_state_dict({"embedding": 1}), r"weights must be shaped like .*LlamaWeights; 'dict' object"),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[f"case{i}" for i in range(len(BAD_INPUT))])
def test_bad_input_gets_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _shaped_like_weights(**changes) -> SimpleNamespace:
    """An object with LlamaWeights' attributes (what the interop functions read), some of them changed."""
    parts = {name: getattr(WEIGHTS, name) for name in ("config", "embedding", "blocks", "final_norm")}
    return SimpleNamespace(**{**parts, **changes})


@pytest.mark.parametrize("blocks", [None, 3])
def test_llama_state_dict_refuses_blocks_that_are_not_a_sequence(blocks):
    with pytest.raises(ValueError, match=r"weights must be shaped like selfattention.llm.LlamaWeights; '\w+' object"):
        llama_state_dict(_shaped_like_weights(blocks=blocks))


# --- generation options --------------------------------------------------------------------------------

BAD_OPTIONS = [
    ({"max_new_tokens": 10**9}, r"2 prompt tokens \+ max_new_tokens=1000000000 passes the model's context of 64"),
    ({"max_new_tokens": 10**30}, r"max_new_tokens=10{30} passes the model's context of 64"),
    ({"max_new_tokens": 63}, r"2 prompt tokens \+ max_new_tokens=63 passes the model's context of 64"),
    ({"max_new_tokens": -1}, r"max_new_tokens must be a non-negative integer; got -1"),
    ({"max_new_tokens": 2.0}, r"max_new_tokens must be a non-negative integer; got 2.0 of type float"),
    ({"max_new_tokens": True}, r"max_new_tokens must be a non-negative integer; got True of type bool"),
    ({"max_new_tokens": "3"}, r"max_new_tokens must be a non-negative integer; got '3' of type str"),
    ({"max_new_tokens": None}, r"max_new_tokens must be a non-negative integer; got None"),
    ({"temperature": float("nan")}, r"temperature must be finite; got nan"),
    ({"temperature": float("inf")}, r"temperature must be finite; got inf"),
    ({"temperature": -1}, r"temperature must be 0 \(greedy\) or positive; got -1.0"),
    ({"temperature": "1"}, r"temperature must be a real number; got '1' of type str"),
    ({"temperature": True}, r"temperature must be a real number; got True of type bool"),
    ({"temperature": None}, r"temperature must be a real number; got None"),
    ({"temperature": np.ones(2)}, r"temperature must be a real number; got an array of shape \(2,\)"),
    ({"temperature": 5e-324, "seed": 0}, r"logits / temperature overflowed float64 .* raise the temperature"),
    ({"top_k": 5}, r"top_k and top_p shape a sampled distribution; with temperature=0 \(greedy\) leave them None"),
    ({"top_p": 0.9}, r"with temperature=0 \(greedy\) leave them None"),
    ({"temperature": 1.0, "top_k": 0}, r"top_k must be a positive integer; got 0"),
    ({"temperature": 1.0, "top_k": 2.0}, r"top_k must be a positive integer; got 2.0 of type float \(write 2\)"),
    ({"temperature": 1.0, "top_k": True}, r"top_k must be a positive integer; got True of type bool"),
    ({"temperature": 1.0, "top_k": "5"}, r"top_k must be a positive integer; got '5'"),
    ({"temperature": 1.0, "top_p": 0}, r"top_p must be positive; got 0.0"),
    ({"temperature": 1.0, "top_p": 1.5}, r"top_p must lie in \(0, 1\], a share of the probability; got 1.5"),
    ({"temperature": 1.0, "top_p": float("nan")}, r"top_p must be finite; got nan"),
    ({"temperature": 1.0, "top_p": "0.5"}, r"top_p must be a real number; got '0.5'"),
    ({"temperature": 1.0, "seed": -1}, r"seed must be a non-negative integer; got -1"),
    ({"temperature": 1.0, "seed": 1.5}, r"seed must be a non-negative integer; got 1.5 of type float"),
    ({"temperature": 1.0, "seed": True}, r"seed must be a non-negative integer; got True of type bool"),
    ({"temperature": 1.0, "seed": "1"}, r"seed must be a non-negative integer; got '1' of type str"),
    ({"temperature": 1.0, "seed": np.random.default_rng(0)}, r"seed must be a non-negative integer; got Generator"),
    ({"use_cache": "yes"}, r"use_cache must be True or False; got 'yes'"),
    ({"use_cache": 1}, r"use_cache must be True or False; got 1"),
    ({"use_cache": None}, r"use_cache must be True or False; got None"),
]


@pytest.mark.parametrize("entry", ["generate", "generate_ids", "chat"])
@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[f"option{i}" for i in range(len(BAD_OPTIONS))])
def test_bad_generation_options_get_a_clear_value_error(entry, options, message):
    options = {"max_new_tokens": 3, **options}
    n = options.pop("max_new_tokens")
    if entry == "chat":
        if "passes the model's context" in message:  # the chat prompt is longer than "the"'s 2 tokens
            message = message.replace("2 prompt tokens", r"\d+ prompt tokens")
        call = lambda: MODEL.chat("hi", n, **options)  # noqa: E731
    elif entry == "generate":
        call = lambda: MODEL.generate("the", n, **options)  # noqa: E731
    else:
        call = lambda: MODEL.generate_ids(MODEL.encode("the"), n, **options)  # noqa: E731
    with pytest.raises(ValueError, match=message):
        call()


def test_generate_ids_names_an_unknown_option():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['temprature'\]; expected temperature, top_k"):
        MODEL.generate_ids([5], 2, temprature=1.0)


# --- unusual but correct input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids",
    [
        [86, 260, 223, 69],
        (86, 260, 223, 69),
        np.array([86, 260, 223, 69]),
        np.array([86, 260, 223, 69], np.int32),
        np.array([86, 260, 223, 69], np.uint16),
        [np.int64(86), np.int32(260), np.uint8(223), 69],
        torch.tensor([86, 260, 223, 69]),
        torch.tensor([86, 260, 223, 69], dtype=torch.int32),
    ],
    ids=["list", "tuple", "int64", "int32", "uint16", "numpy-scalars", "tensor", "tensor-int32"],
)
def test_token_ids_in_any_integer_form_give_the_same_results(ids):
    reference = [86, 260, 223, 69]
    np.testing.assert_array_equal(MODEL.logits(ids), MODEL.logits(reference))
    assert MODEL.decode(ids) == MODEL.decode(reference)
    assert MODEL.generate_ids(ids, 3) == MODEL.generate_ids(reference, 3)
    assert all(type(i) is int for i in MODEL.generate_ids(ids, 3))


@pytest.mark.parametrize("n", [np.int64(4), np.uint8(4), np.array(4), torch.tensor(4)], ids=repr)
def test_max_new_tokens_may_be_any_integer_scalar(n):
    assert MODEL.generate("the", n) == MODEL.generate("the", 4)


@pytest.mark.parametrize("use_cache", [True, False])
def test_no_new_tokens_give_an_empty_answer(use_cache):
    assert MODEL.generate("the", 0, use_cache=use_cache) == ""
    assert MODEL.generate_ids([5], 0, use_cache=use_cache) == []
    assert MODEL.chat("hi", 0, temperature=1.0, seed=0, use_cache=use_cache) == ""
    assert MODEL.generate_ids([5] * 64, 0) == []  # a full context leaves room for nothing, which is what was asked


def test_a_one_token_prompt_and_a_full_context_are_fine():
    assert MODEL.encode("t") == [86]
    one = MODEL.generate_ids([86], 5)
    assert len(one) == 5 and one == MODEL.generate_ids([86], 5, use_cache=False)
    assert MODEL.logits([86]).shape == (1, V)
    assert MODEL.attentions("t").shape == (2, 4, 1, 1)
    np.testing.assert_array_equal(MODEL.attentions(np.array([86])), MODEL.attentions("t"))
    assert len(MODEL.generate_ids([86] * 60, 4)) == 4  # 60 + 4 = the context of 64


def test_decode_takes_no_ids_and_more_ids_than_the_context():
    assert MODEL.decode([]) == "" and MODEL.decode(np.array([], np.int64)) == ""
    assert MODEL.decode(MODEL.encode("")) == ""
    text = "the cat in the hat " * 20  # more tokens than the context of 64: decoding does not run the model
    assert len(MODEL.encode(text)) > CONFIG.context_length
    assert MODEL.decode(MODEL.encode(text)) == text


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40))
def test_any_text_round_trips_through_the_tokenizer(text):
    ids = MODEL.encode(text)
    assert MODEL.decode(ids) == text
    assert len(MODEL.tokens(text)) == len(ids)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, V + 3), max_size=70))
def test_any_list_of_integers_is_decoded_and_scored_or_refused_by_name(ids):
    valid = all(0 <= i < V for i in ids)
    if valid:
        assert isinstance(MODEL.decode(ids), str)
    else:
        with pytest.raises(ValueError, match=r"^ids must be token ids in \[0, 264\)"):
            MODEL.decode(ids)
    if valid and 1 <= len(ids) <= CONFIG.context_length:
        logits = MODEL.logits(ids)
        assert logits.shape == (len(ids), V) and logits.dtype == np.float32 and np.isfinite(logits).all()
    else:
        with pytest.raises(ValueError, match=r"^ids must "):
            MODEL.logits(ids)


def test_float64_weights_give_float64_logits_that_agree_with_float32():
    model64 = tiny_llama(WEIGHTS.astype(np.float64))
    assert model64.weights.dtype == np.float64 and WEIGHTS.astype("float64").dtype == np.float64
    assert all(array.dtype == np.float64 for _, array in model64.weights.named_arrays())
    ids = MODEL.encode("the cat in the hat")
    logits64 = model64.logits(ids)
    assert logits64.dtype == np.float64
    # float32 rounding of a 2-block forward on logits of order 10: well below 1e-4
    np.testing.assert_allclose(MODEL.logits(ids), logits64, atol=1e-4)
    assert model64.generate_ids(ids, 8) == model64.generate_ids(ids, 8, use_cache=False)
    back = model64.weights.astype(np.float32)
    for (name, a), (_, b) in zip(back.named_arrays(), WEIGHTS.named_arrays(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize(
    "dtype",
    ["garbage", "flaot32", None, np.float16, "float16", int, [1], torch.float32, torch.float64],
    ids=repr,
)
def test_astype_refuses_anything_but_float32_and_float64(dtype):
    # np.dtype(None) is float64 and None == np.dtype("float64") holds: neither may turn a typo into float64
    with pytest.raises(ValueError, match=r"dtype must be float32 or float64; got "):
        WEIGHTS.astype(dtype)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("part", ["embedding", "final_norm", "attention_norm", "mlp_norm"])
def test_weights_with_a_non_finite_number_are_refused_when_built(part, value):
    # a NaN in final_norm used to give NaN logits, whose argmax is token 0: greedy decoding then wrote
    # token 0 again and again without a word
    with pytest.raises(ValueError, match=rf"{part} must hold only finite numbers"):
        if part in ("embedding", "final_norm"):
            dataclasses.replace(WEIGHTS, **{part: _with_nan(getattr(WEIGHTS, part), value)})
        else:
            _block(**{part: _with_nan(getattr(BLOCK, part), value)})


def test_rms_norm_computes_float16_in_float32_and_float32_with_a_float64_scale_in_float64():
    x = np.full((2, 8), 300, np.float16)  # its squares, 90,000, pass float16's largest number, 65,504
    y = rms_norm(x, np.ones(8, np.float16))
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.ones((2, 8), np.float16))
    x16 = X.astype(np.float16)  # float16 in, the float32 computation rounded to float16 out
    expected = rms_norm(x16.astype(np.float32), np.ones(32, np.float32)).astype(np.float16)
    np.testing.assert_array_equal(rms_norm(x16, np.ones(32, np.float16)), expected)
    # float32 x whose squares pass float32's range is fine with a float64 scale: the result is float64
    big = X * np.float32(1e30)
    scaled = big.astype(np.float64) / 1e30
    expected64 = scaled / np.sqrt(np.mean(scaled**2, axis=-1, keepdims=True) + 1e-5 / 1e60)
    np.testing.assert_allclose(rms_norm(big, np.ones(32)), expected64, rtol=1e-12)


def test_quantization_takes_matrices_without_rows_and_round_trips_within_half_a_level():
    assert quantize_q4_1(np.zeros((0, 64))).shape == (0, 40)
    assert dequantize_q4_1(np.zeros((0, 40), np.uint8)).shape == (0, 64)
    assert dequantize_q8_0(np.zeros((0, 34), np.uint8)).shape == (0, 32)
    w = np.random.default_rng(2).normal(size=(3, 64)) * 100
    w[0, :32] = 65504.0  # the largest float16 is allowed: a constant block
    w[1, 32:] = -65504.0
    back = dequantize_q4_1(quantize_q4_1(w))
    assert np.all(np.abs(back - w) <= q4_1_error_bound(w))
    assert quantize_q4_1(torch.zeros(32)).shape == (20,)
    assert dequantize_q8_0(torch.zeros(34, dtype=torch.uint8)).shape == (32,)


# --- generation: repeatable, the same with and without the cache, and the model untouched ---------------


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"temperature": 1.0, "seed": 3},
        {"temperature": 0.7, "top_k": 20, "seed": 4},
        {"temperature": 1.3, "top_p": 0.9, "seed": 5},
    ],
    ids=["greedy", "sampled", "top-k", "top-p"],
)
def test_the_cache_changes_the_cost_not_the_tokens(options):
    ids = MODEL.encode("the cat in the hat")
    cached = MODEL.generate_ids(ids, 30, **options)
    assert cached == MODEL.generate_ids(ids, 30, use_cache=False, **options)
    assert MODEL.generate("the cat in the hat", 30, **options) == MODEL.decode(
        cached[:-1] if cached[-1] in MODEL.stop_ids else cached
    )


def test_the_same_seed_gives_the_same_text_and_other_seeds_other_texts():
    first = MODEL.generate("the", 20, temperature=1.0, seed=11)
    assert all(MODEL.generate("the", 20, temperature=1.0, seed=11) == first for _ in range(3))
    assert MODEL.generate("the", 20, temperature=1.0, seed=np.int64(11)) == first
    others = {MODEL.generate("the", 20, temperature=1.0, seed=seed) for seed in range(5)}
    assert len(others) > 1


def test_generation_stops_at_a_stop_token_and_leaves_it_out_of_the_text():
    ids = MODEL.encode("the cat")
    greedy = MODEL.generate_ids(ids, 3)
    assert 2 not in greedy  # the tiny model does not end its answer by itself here
    stopper = tiny_llama(stop_ids={np.int64(greedy[0])})  # the first greedy token now ends the answer
    assert stopper.stop_ids == {2, greedy[0]}
    for use_cache in (True, False):
        assert stopper.generate_ids(ids, 3, use_cache=use_cache) == greedy[:1]
        assert stopper.generate("the cat", 3, use_cache=use_cache) == ""


def _snapshot(model):
    return [(name, array.copy(), array.flags.writeable) for name, array in model.weights.named_arrays()]


def test_nothing_the_model_does_changes_it():
    model = tiny_llama(WEIGHTS.astype(np.float64).astype(np.float32))  # its own arrays
    before, stop_ids = _snapshot(model), model.stop_ids
    model.generate("the cat", 10)
    model.generate("the cat", 10, use_cache=False)
    model.generate("the cat", 10, temperature=1.0, top_k=5, top_p=0.9, seed=0)
    model.chat("hi", 5)
    model.logits([5, 6, 7])
    model.attentions("the cat")
    model.decode([5, 6])
    caches = model.new_caches(8)
    llama_block(X, model.weights.blocks[0], 4, cache=caches[0])
    for (name, array, writeable), (_, now, now_writeable) in zip(before, _snapshot(model), strict=True):
        np.testing.assert_array_equal(now, array, err_msg=name)
        assert now_writeable == writeable, name
    assert model.stop_ids == stop_ids


def test_a_failed_llama_block_call_leaves_the_cache_as_it_was():
    cache = KVCache(8)
    llama_block(X, BLOCK, 4, cache=cache)
    position = cache.position
    keys, values = cache._keys[:, :position].copy(), cache._values[:, :position].copy()  # (Hkv, S, Dh)
    # queries and keys of order 1e20: their dot products pass float32's range inside the attention, after
    # this call's keys and values have been written to the cache
    huge = dataclasses.replace(
        BLOCK.attention, q=Linear(BLOCK.attention.q.weight * 1e20), k=Linear(BLOCK.attention.k.weight * 1e20)
    )
    with pytest.raises(ValueError, match=r"the attention overflowed float32"):
        llama_block(X[:2], _block(attention=huge), 4, cache=cache)
    assert cache.position == position
    np.testing.assert_array_equal(cache._keys[:, :position], keys)
    np.testing.assert_array_equal(cache._values[:, :position], values)
    # and decoding goes on as if the failed call had never been made
    fresh = KVCache(8)
    llama_block(X, BLOCK, 4, cache=fresh)
    np.testing.assert_array_equal(llama_block(X[:1], BLOCK, 4, cache=cache), llama_block(X[:1], BLOCK, 4, cache=fresh))
    # a call refused before it starts leaves it as well: a full cache, or positions that do not fit
    with pytest.raises(ValueError, match=r"the cache is full"):
        llama_block(np.ones((5, 32), np.float32), BLOCK, 4, cache=cache)
    with pytest.raises(ValueError, match=r"positions must hold one position per token"):
        llama_block(X[:1], BLOCK, 4, cache=cache, positions=[0, 1])
    assert cache.position == position + 1


def test_attentions_refuses_a_text_whose_weights_would_not_fit_in_memory(monkeypatch):
    # the real limit, 2**27 numbers (512 MiB of float32), is T = 705 tokens for SmolLM2's 30 blocks of 9 heads;
    # a smaller one here shows the check without a long text
    monkeypatch.setattr("selfattention.llm.model._MAX_ATTENTION_NUMBERS", 2**12)
    assert MODEL.attentions("x" * 22).shape == (2, 4, 22, 22)  # 2 * 4 * 22**2 = 3,872 numbers
    for text in ("x" * 23, MODEL.encode("x" * 23)):
        with pytest.raises(
            ValueError, match=r"of 23 tokens would hold L\*H\*T\*T = 4,232 numbers; .* at most 22 tokens"
        ):
            MODEL.attentions(text)


# --- GGUF files ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", CONTENTS)


def test_a_tiny_llama_written_as_gguf_reads_back_as_the_same_model(tiny_file, tmp_path, monkeypatch):
    monkeypatch.setenv("SELFATTENTION_CACHE", str(tmp_path))
    contents = llm.read_gguf(tiny_file)  # parsed, and kept in tmp_path
    assert len(list(tmp_path.glob("gguf-*/tensors.npz"))) == 1
    cached = llm.read_gguf(tiny_file)  # from the cache
    for read in (contents, cached):
        assert read.tokens == TOKENS and read.merges == MERGES and read.chat_template == TEMPLATE
        assert dataclasses.replace(read.config, rms_norm_eps=1e-5) == CONFIG  # the file stores eps as float32
        for name, (kind, data) in CONTENTS.tensors.items():
            assert read.tensors[name][0] == kind
            np.testing.assert_array_equal(read.tensors[name][1], data, err_msg=name)
    model = llm.load_smollm2(tiny_file, sha256=None)
    expected = weights_from_gguf(CONTENTS)
    for (name, a), (_, b) in zip(model.weights.named_arrays(), expected.named_arrays(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # the permutation undone, the weights are the ones written, up to Q4_1's rounding of each stored row
    for (name, a), (_, b) in zip(model.weights.named_arrays(), WEIGHTS.named_arrays(), strict=True):
        bound = q4_1_error_bound(b.T).T if b.ndim == 2 and name != "embedding" else 0.0  # stored as (d_out, d_in)
        if "attention.q" in name or "attention.k" in name:  # quantized in llama.cpp's order, bounded in ours
            heads = CONFIG.num_heads if "attention.q" in name else CONFIG.num_kv_heads
            bound = undo_rope_permutation(q4_1_error_bound(rope_permutation(b, heads).T).T, heads)
        assert np.all(np.abs(a - b) <= bound), name
    assert model.generate_ids([86, 260], 4) == tiny_llama(expected).generate_ids([86, 260], 4)
    assert model.eos_id == 2 and model.stop_ids == {0, 2}


def test_another_gguf_file_is_refused_by_its_checksum(tiny_file):
    with pytest.raises(ValueError, match=r"the file has SHA-256 [0-9a-f]{64}, not the expected b179c952.*sha256=None"):
        llm.load_smollm2(tiny_file, use_cache=False)


def _broken(tmp_path, name, **kwargs):
    return write_gguf(tmp_path / name, CONTENTS, **kwargs)


def _file(tmp_path, name, data: bytes):
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d, r"path must be an existing GGUF file; got PosixPath"),
        (lambda d: _file(d, "empty.gguf", b""), r"empty.gguf is not a GGUF file"),
        (lambda d: _file(d, "text.gguf", b"GGUF, or is it?"), r"text.gguf is not a GGUF file"),
        (lambda d: _broken(d, "gpt2.gguf", architecture="gpt2"), r"expected a Llama-architecture model; .* 'gpt2'"),
        (lambda d: _broken(d, "sizes.gguf", header=False), r"the GGUF header has no 'llama\.\w+'"),
        (
            lambda d: _broken(d, "notok.gguf", tokenizer=False),
            r"the GGUF header has no 'tokenizer.ggml.tokens': notok.gguf holds no tokenizer vocabulary",
        ),
        (
            lambda d: write_gguf(
                d / "heads.gguf", dataclasses.replace(CONTENTS, config=dataclasses.replace(CONFIG, num_heads=0))
            ),
            r"the sizes in heads.gguf must be positive; got \{.*'attention.head_count': 0",
        ),
        (
            lambda d: write_gguf(
                d / "odd.gguf", dataclasses.replace(CONTENTS, config=dataclasses.replace(CONFIG, num_heads=3))
            ),
            r"inconsistent sizes in odd.gguf: D = 32, H = 3, Hkv = 2",
        ),
        (
            lambda d: _broken(d, "f16.gguf", extra=[("x", np.ones(4, np.float16))]),
            r"f16.gguf: x is stored as F16; chapter 14 reads F32, Q8_0 and Q4_1",
        ),
    ],
    ids=["directory", "empty", "text", "gpt2", "no-sizes", "no-tokenizer", "no-heads", "odd-heads", "float16"],
)
def test_a_file_that_is_not_a_llama_gguf_chapter_14_can_read_is_a_value_error(tmp_path, monkeypatch, make, message):
    monkeypatch.setenv("SELFATTENTION_CACHE", str(tmp_path / "cache"))
    path = make(tmp_path)
    for read in (
        llm.read_config,
        lambda p: llm.read_gguf(p, use_cache=False),
        lambda p: llm.load_smollm2(p, sha256=None),
    ):
        if read is llm.read_config and "F16" in message:
            continue  # the header alone is fine
        with pytest.raises(ValueError, match=message):
            read(path)


# --- transformers' model from the arrays ----------------------------------------------------------------


@pytest.mark.slow  # imports torch's and transformers' Llama
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (None, r"weights must be shaped like selfattention.llm.LlamaWeights; it has no config"),
        ({}, r"it has no config"),
        (
            _shaped_like_weights(config=3),
            r"weights.config must be a selfattention.llm.LlamaConfig; it has no vocab_size, d_model",
        ),
        (
            _shaped_like_weights(config=dataclasses.replace(CONFIG, d_model=64)),
            r"the weights do not have the shapes their config states",
        ),
        (
            _shaped_like_weights(config=dataclasses.replace(CONFIG, num_layers=1)),
            r"the state dict does not fit LlamaForCausalLM",
        ),
    ],
    ids=["none", "dict", "config-int", "config-wider", "config-fewer-layers"],
)
def test_transformers_llama_refuses_weights_that_do_not_fit(weights, message):
    with pytest.raises(ValueError, match=message):
        transformers_llama(weights)


@pytest.mark.slow
def test_transformers_llama_of_float64_weights_is_float64_and_agrees():
    weights = WEIGHTS.astype(np.float64)
    model = transformers_llama(weights)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    ids = MODEL.encode("the cat in the hat")
    with torch.no_grad():
        reference = model(torch.tensor([ids])).logits[0].numpy()
    # transformers' RMSNorm computes in float32 even for float64 weights: agreement to float32's rounding
    np.testing.assert_allclose(tiny_llama(weights).logits(ids), reference, atol=1e-5)


# --- SmolLM2 itself --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    return llm.load_smollm2()


@pytest.mark.slow
def test_smollm2_refuses_what_it_cannot_continue_before_any_work(smollm2):
    with pytest.raises(ValueError, match=r"prompt must hold at least one token"):
        smollm2.generate("", 5)
    with pytest.raises(ValueError, match=r"max_new_tokens=1000000000 passes the model's context of 8192"):
        smollm2.generate("Hello", 10**9)
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict"):
        smollm2.chat([{"role": "user"}], 5)
    with pytest.raises(ValueError, match=r"ids must be token ids in \[0, 49152\); got values from 0 to 49152"):
        smollm2.logits([0, 49152])
    assert smollm2.generate("Hello", 0) == "" and smollm2.chat("Hello", 0) == ""
    assert smollm2.decode([]) == ""


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"temperature": 0.8, "top_p": 0.95, "seed": 1}], ids=["greedy", "sampled"])
def test_smollm2_chooses_the_same_tokens_with_and_without_the_cache_and_for_the_same_seed(smollm2, options):
    ids = np.array(smollm2.encode("The capital of France is"), np.int32)  # any integer array
    cached = smollm2.generate_ids(ids, 3, **options)
    assert cached == smollm2.generate_ids(torch.from_numpy(ids), 3, use_cache=False, **options)
    assert cached == smollm2.generate_ids(ids.tolist(), np.int64(3), **options)
