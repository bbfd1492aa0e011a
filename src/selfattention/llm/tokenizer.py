r"""SmolLM2's tokenizer, rebuilt from the vocabulary and merges stored in its GGUF file.

Taught in chapter 14. The model reads byte-level BPE tokens (GPT-2's scheme):

1. **Pre-tokenize.** Split the text into pieces that BPE never merges across.
   SmolLM2's rules (llama.cpp calls them ``smollm``) first cut out every digit
   on its own, so "2024" is always four tokens, then apply GPT-2's pattern
   (words with their leading space, runs of punctuation, whitespace).
2. **Bytes to characters.** Each UTF-8 byte of a piece becomes one of 256
   printable characters (a space is ``Ġ``, a newline ``Ċ``), so every string,
   in any script, can be spelled with the vocabulary.
3. **Merge.** Repeatedly join the adjacent pair that comes first in the merge
   list, until no listed pair is left; each resulting string is a token.

Control tokens (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>`` and 14
others) are matched in the text before any of this, as whole tokens.

The ``tokenizers`` library does the work; this module only assembles it from
the file, as llama.cpp's loader does from the same fields.
"""

from __future__ import annotations

from typing import Any

from .files import GGUFContents

__all__ = ["CONTROL", "build_tokenizer", "render_chat"]

CONTROL = 3
"""The token type GGUF gives control (special) tokens; normal tokens have 1."""

_PRE_TOKENIZERS = ("smollm",)  # the rules implemented below


def build_tokenizer(contents: GGUFContents) -> Any:
    """A ``tokenizers.Tokenizer`` from a GGUF file's vocabulary, merges and control tokens.

    Parameters
    ----------
    contents : GGUFContents
        From :func:`selfattention.llm.read_gguf`.

    Returns
    -------
    tokenizers.Tokenizer
        Digits split one by one, then GPT-2's byte-level BPE; control tokens
        matched whole; no tokens added at the start or end.

    Raises
    ------
    ValueError
        If the file's tokenizer is not byte-level BPE with the ``smollm``
        pre-tokenizer, or its vocabulary, types and merges do not fit together.

    Notes
    -----
    See chapter 14 (the tokenizer).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    if not isinstance(contents, GGUFContents):
        raise ValueError(f"contents must be a GGUFContents from read_gguf; got {type(contents).__name__}")
    if contents.pre_tokenizer not in _PRE_TOKENIZERS:
        raise ValueError(
            f"this file's tokenizer splits text by llama.cpp's {contents.pre_tokenizer!r} rules; "
            f"build_tokenizer implements {', '.join(_PRE_TOKENIZERS)}"
        )
    if len(contents.token_types) != len(contents.tokens):
        raise ValueError(f"{len(contents.tokens)} tokens but {len(contents.token_types)} token types")
    vocab = {token: i for i, token in enumerate(contents.tokens)}
    if len(vocab) != len(contents.tokens):
        raise ValueError("the vocabulary lists a token twice")
    merges = [tuple(merge.split(" ")) for merge in contents.merges]
    if any(len(pair) != 2 or "".join(pair) not in vocab for pair in merges):
        raise ValueError("a merge is not two tokens whose join is in the vocabulary")
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),  # every digit its own piece
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),  # GPT-2's pattern, then bytes
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [token for token, kind in zip(contents.tokens, contents.token_types, strict=True) if kind == CONTROL]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in control])
    return tokenizer


def render_chat(template: str, messages: Any, *, add_generation_prompt: bool = True) -> str:
    """A conversation as the prompt text the model was tuned on, by the file's own Jinja template.

    Parameters
    ----------
    template : str
        The ``tokenizer.chat_template`` from the file.
    messages : list of dict
        Each ``{"role": "system" | "user" | "assistant", "content": str}``.
    add_generation_prompt : bool, default True
        End with the start of the assistant's turn, for the model to continue.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        If ``template`` is not a str, ``messages`` is not a non-empty list of
        such dicts, or the template fails to render them (a syntax error, or
        the template's own ``raise_exception``).

    Notes
    -----
    See chapter 14 (chatting). SmolLM2's template adds a default system
    message when the first message is not one. Templates written for
    ``transformers`` may call ``raise_exception(message)``; it is provided.
    """
    import jinja2.sandbox

    if not isinstance(template, str):
        raise ValueError(f"template must be a str (a Jinja chat template); got {type(template).__name__}")
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts; got {messages!r}"
        )
    for i, message in enumerate(messages):
        if (
            not isinstance(message, dict)
            or message.get("role") not in ("system", "user", "assistant")
            or not isinstance(message.get("content"), str)
        ):
            raise ValueError(
                f"messages[{i}] must be a dict with role 'system', 'user' or 'assistant' and a str content; "
                f"got {message!r}"
            )
    if not isinstance(add_generation_prompt, bool):
        raise ValueError(f"add_generation_prompt must be True or False; got {add_generation_prompt!r}")
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise_exception
    try:
        return environment.from_string(template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt
        )
    except Exception as exc:  # jinja2's own errors, or Python's from inside an expression (1/0)
        raise ValueError(f"the chat template failed on these messages: {type(exc).__name__}: {exc}") from None


def _raise_exception(message: str) -> None:
    """What ``raise_exception(message)`` in a chat template does (as in transformers): stop with the message."""
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)
