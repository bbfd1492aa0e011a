"""Chapter 14's next-token explorer: a model's next token under the temperature, top-k and top-p a learner sets."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import (
    as_float_array,
    check_all_finite,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
    precision_of,
)
from ..plotting._common import check_drawable
from ..sampling import next_token_probabilities
from .figure import InteractiveFigure, _check_text, _png, _rounded

__all__ = ["next_token_explorer", "next_token_inputs"]


#: The settings a next-token explorer offers by default; top-k and top-p can be off as well.
TEMPERATURES = tuple(round(0.1 * i, 1) for i in range(1, 21))  # 0.1, 0.2, ..., 2.0
TOP_KS = (1, 3, 5, 10, 50)
TOP_PS = (0.5, 0.8, 0.9, 0.95)
MAX_PROMPTS, MAX_PROMPT_CHARS, MAX_SHOWN, MAX_OPTIONS = 6, 2_000, 20, 40
MAX_SETTINGS = 2_000  # temperatures x top-k choices x top-p choices: the rows of one prompt's table
# How far logits may lie from the same model's logits on another machine (another BLAS kernel, SIMD path or thread
# count). tests/test_llm.py finds SmolLM2's float32 logits within 3e-4 of its float64 ones, so two machines' within
# 6e-4; other precisions scale with their epsilon. float64 logits get 1e-9: NumPy's and transformers' agree to 1e-10.
FLOAT32_LOGIT_TOLERANCE = 6e-4
FLOAT64_LOGIT_TOLERANCE = 1e-9
# float64 arithmetic on the same logits (an exp, a sum in another order) moves a probability by far less than this.
_ARITHMETIC_NOISE = 1e-12
_VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}  # ␣ ↵ ⇥


def _per_mille(x: Any) -> np.ndarray:
    """``x`` in thousandths, rounded half up: the three decimals an explorer shows."""
    return np.floor(np.asarray(x, dtype=np.float64) * 1000 + 0.5).astype(int)


def _mass_bounds(mass: Any, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """Where the probability ``mass`` of a set of kept tokens (or each of an array of them) can go when every logit
    moves by at most δ.

    ``spread`` is 2δ/τ. The set's odds, mass / (1 - mass), are a sum of exp(z/τ) over the set divided by the same
    sum over the other kept tokens; each sum changes by a factor within exp(±δ/τ), so the odds by one within
    exp(±spread).
    """
    mass = np.clip(mass, 0.0, 1.0)
    low, high = (mass * math.exp(s) / (1 - mass + mass * math.exp(s)) for s in (-spread, spread))
    return low - _ARITHMETIC_NOISE, high + _ARITHMETIC_NOISE


def _visible(text: str) -> str:
    """A token's text with its whitespace shown: ␣ a space, ↵ a newline, ⇥ a tab, escapes for the invisible rest."""
    if not text:
        return "\u2205"  # ∅
    return "".join(_VISIBLE.get(c, c if c.isprintable() else repr(c)[1:-1]) for c in text)


def _options(values: Any, name: str, check: Any, *, empty: bool) -> list[Any]:
    """The distinct values of a sequence, each passed through ``check``, in increasing order."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or (not values and not empty):
        what = "a sequence" if empty else "a non-empty sequence"
        raise ValueError(f"{name} must be {what} of numbers; got {values!r:.60}")
    checked = sorted({check(value, f"each of {name}") for value in values})
    if len(checked) > MAX_OPTIONS:
        raise ValueError(f"{name} may offer at most {MAX_OPTIONS} values; got {len(checked)}")
    return checked


def _temperature_option(value: Any, name: str) -> float:
    # to 6 significant digits, as shown: 0.1 * 3 is offered, computed with and shown as 0.3
    return _rounded(check_real_scalar(value, name, positive=True))


def _top_p_option(value: Any, name: str) -> float:
    p = _rounded(check_real_scalar(value, name, positive=True))
    if p >= 1:
        raise ValueError(f"{name} must lie in (0, 1): top-p of 1 keeps every token, which 'off' offers; got {p}")
    return p


def _position(value: Any, offered: list[Any], name: str) -> int:
    """Where ``value`` (None: off) is among the ``offered`` settings."""
    if value is not None:
        value = _rounded(check_real_scalar(value, name))
    if value not in offered:
        raise ValueError(f"{name} must be one of the offered {offered} (None is off); got {value!r}")
    return offered.index(value)


@dataclass(frozen=True)
class _Table:
    """One prompt's numbers: the shown tokens (most likely first), the distinct rows, and each setting's row."""

    order: np.ndarray
    rows: list[list[int]]
    settings: list[int]


def _next_token_table(
    z: np.ndarray,
    grid: tuple[list[float], list[int | None], list[float | None]],
    shown: int,
    tolerance: float,
    where: str,
    vocabulary: Sequence[str],
) -> _Table:
    """Every setting's row for one prompt's logits ``z``: [kept, rest, cut, the probability of each shown token kept].

    The shown tokens a cut drops are the last ones, from the ``kept``-th on: a row lists min(kept, shown)
    probabilities.

    Every cut keeps the most likely tokens, so a setting comes down to a count ``kept``, read off the running sums of
    the ranked softmax, which :func:`next_token_probabilities` computes once per temperature. Raises a
    ValueError if moving a logit by ``tolerance`` could change a number shown.
    """
    temperatures, ks, ps = grid
    V = z.size
    order = np.argsort(z, kind="stable")[::-1]  # most likely first; equal logits: the higher index first, as top-p
    ranked = z[order]
    N = min(shown, V)

    def unstable(setting: tuple[Any, ...] | None, what: str) -> ValueError:
        at = "" if setting is None else " at temperature {:g}, top-k {}, top-p {}".format(*setting)
        return ValueError(
            f"{where}{at}: {what}. Its logits may differ by {tolerance:g} on another machine (logit_tolerance), "
            "so the figure could show other numbers there: compute the logits in float64, or offer other settings"
        )

    def token(j: int) -> str:  # the token ranked j + 1, for a message
        return f"token {order[j]} ({vocabulary[order[j]]!r})"

    def close(j: int) -> bool:  # could the tokens ranked j and j + 1 swap places on another machine?
        return tolerance > 0 and ranked[j] - ranked[j + 1] <= 2 * tolerance

    for j in range(min(N, V - 1)):  # the shown tokens, in order, and the first one not shown
        if close(j):
            raise unstable(
                None,
                f"{token(j)} and {token(j + 1)}, ranked {j + 1} and {j + 2}, have logits "
                f"{ranked[j] - ranked[j + 1]:.2g} apart",
            )
    scaled = ranked[None, :] / np.asarray(temperatures)[:, None]  # (T, V): z / τ, as next_token_probabilities divides
    probabilities = next_token_probabilities(scaled)  # (T, V): softmax(z / τ), the most likely token first
    cumulative = np.cumsum(probabilities, axis=-1)  # (T, V): the mass of the j + 1 most likely tokens
    rows: dict[tuple[int, ...], int] = {}
    known: dict[tuple[int, int], tuple[int, ...]] = {}  # (temperature, kept): the row, the same for every cut
    settings = []

    def row_of(t: int, kept: int, setting: tuple[Any, ...]) -> tuple[int, ...]:
        total = cumulative[t, kept - 1]
        listed = min(N, kept)  # the shown tokens the cut keeps: the first ones
        rest = (total - cumulative[t, listed - 1]) / total  # the kept tokens not shown
        values = np.concatenate([[rest, 1 - total], probabilities[t, :listed] / total])  # 1 - total: the cut's
        low, high = _mass_bounds(values, 2 * tolerance / temperatures[t])
        edges = np.flatnonzero(_per_mille(low) != _per_mille(high))
        if edges.size:
            i = int(edges[0])
            names = ["the probability of the kept tokens not shown", "the probability the cut removes"]
            what = names[i] if i < 2 else f"the probability of {token(i - 2)}"
            raise unstable(setting, f"{what}, {values[i]:.9f}, is too close to a rounding edge at 3 decimals")
        return (kept, *_per_mille(values).tolist())

    for t, tau in enumerate(temperatures):
        spread, mass, ascending = 2 * tolerance / tau, cumulative[t], -scaled[t]
        for k in ks:
            # top-k keeps the k highest logits and any tied with the k-th
            top_k = V if k is None or k >= V else int(np.searchsorted(ascending, ascending[k - 1], side="right"))
            if top_k < V and close(top_k - 1):
                raise unstable(
                    (tau, k, "off"),
                    f"top-k's cut falls between {token(top_k - 1)} and {token(top_k)}, whose logits are "
                    f"{ranked[top_k - 1] - ranked[top_k]:.2g} apart",
                )
            for p in ps:
                setting = (tau, "off" if k is None else k, "off" if p is None else p)
                kept = top_k
                if p is not None:
                    # top-p keeps a token while the tokens ranked above it hold less than p of what top-k kept
                    kept = 1 + int(np.searchsorted(mass[: top_k - 1], p * mass[top_k - 1]))
                    above_last = mass[kept - 2] / mass[top_k - 1] if kept > 1 else 0.0
                    above_next = mass[kept - 1] / mass[top_k - 1]
                    if _mass_bounds(above_last, spread)[1] >= p or (
                        kept < top_k and (_mass_bounds(above_next, spread)[0] <= p or close(kept - 1))
                    ):
                        raise unstable(
                            setting,
                            f"top-p's cut after {kept} tokens is a close call: the tokens above "
                            f"the last one kept hold {above_last:.9f}, with it {above_next:.9f}",
                        )
                if (t, kept) not in known:
                    known[t, kept] = row_of(t, kept, setting)
                settings.append(rows.setdefault(known[t, kept], len(rows)))
    return _Table(order[:N], [list(row) for row in rows], settings)


def _next_token_png(
    title: str, label: str, tokens: list[str], row: list[int], before: list[int], setting: str, V: int
) -> bytes:
    """A bar per shown token, from the embedded (rounded) numbers; a dropped token grey and hatched."""
    from ..plotting._common import pyplot

    N = len(tokens)
    kept = [j < row[0] for j in range(N)]
    widths = [(row if keep else before)[3 + j] / 1000 for j, keep in enumerate(kept)]
    fig, ax = pyplot().subplots(figsize=(6, 1.2 + 0.3 * N))
    colours, hatches = ["C0" if keep else "0.8" for keep in kept], [None if keep else "//" for keep in kept]
    ax.barh(np.arange(N), widths, color=colours, hatch=hatches)
    for j, (width, keep) in enumerate(zip(widths, kept, strict=True)):
        ax.text(width + 0.01, j, f"{width:.3f}" if keep else "dropped", va="center", fontsize="small")
    ax.set_yticks(np.arange(N), [token.replace("$", r"\$") for token in tokens])  # a token's $ is a dollar
    ax.invert_yaxis()  # the most likely at the top
    ax.set(xlim=(0, 1.15), xlabel="probability of the next token")
    ax.set_title(f"{title}\n{label}: {setting}; {row[0]:,} of {V:,} tokens kept", fontsize="medium")
    return _png(fig)


def next_token_explorer(
    prompts: Mapping[str, tuple[str, ArrayLike]],
    vocabulary: Sequence[str],
    *,
    title: str,
    alt: str,
    temperatures: Sequence[float] = TEMPERATURES,
    top_ks: Sequence[int] = TOP_KS,
    top_ps: Sequence[float] = TOP_PS,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    shown: int = 10,
    logit_tolerance: float | None = None,
    probes: Sequence[tuple[int, float, int | None, float | None]] = (),
) -> InteractiveFigure:
    r"""Pick a prompt, set the temperature, top-k and top-p, and read the distribution a sampler draws from.

    For each prompt and each setting on the grid (``temperatures`` × top-k
    choices × top-p choices, where top-k and top-p can also be off), the
    figure lists the ``shown`` most likely next tokens with the probability
    :func:`~selfattention.next_token_probabilities` gives them: the softmax of
    :math:`z / \tau`, cut by top-k, then by top-p, the kept tokens
    renormalised. A token the cut drops is greyed and drawn at its probability
    before the cut. Below the list: how many tokens are kept, the probability
    the cut removed (before renormalising) and the probability of the kept
    tokens not listed.

    Every number is computed here, in float64, from all V logits, and only
    the numbers shown are embedded, to three decimals: the page does not grow
    with V. The softmax is ``next_token_probabilities``' own, once per
    temperature, in ranked order; each cut keeps the most likely tokens, so
    its kept set is read off the running sums (``expected`` holds the
    function's direct results for the ``probes``, and the tests compare every
    setting).

    Parameters
    ----------
    prompts : mapping of str to (str, array_like)
        For each label (shown in the figure's menu), the prompt's text and the
        logits of the token after it, shape (V,). :func:`next_token_inputs`
        makes this from a model.
    vocabulary : sequence of str
        The text of each of the V tokens. Spaces, newlines and tabs are shown
        as ␣, ↵ and ⇥.
    title, alt : str
        The figure's title, and the alt text of its static image.
    temperatures, top_ks, top_ps : sequences of numbers
        The settings offered: temperatures above 0, top-k values from 1,
        top-p values in (0, 1). "off" is offered for top-k and top-p too.
    temperature, top_k, top_p : optional
        The setting shown first (and in the static image): by default the
        offered temperature nearest 1, top-k and top-p off.
    shown : int, default 10
        How many of the most likely tokens are listed (at most 20).
    logit_tolerance : float, optional
        How far the logits may lie from the same computation on another
        machine. Default: ``FLOAT32_LOGIT_TOLERANCE`` (6e-4) for float32
        logits, scaled by the epsilon for other precisions, and
        ``FLOAT64_LOGIT_TOLERANCE`` (1e-9) for float64 ones; 0 for exact data.
        A model's float32 logits converted to float64 are still float32's.
    probes : sequence of (prompt, temperature, top_k, top_p)
        Settings whose numbers go into ``expected["rows"]``, computed by
        ``next_token_probabilities`` directly, for a browser test to compare.
        ``prompt`` is an index into ``prompts``; None is off.

    Returns
    -------
    InteractiveFigure

    Raises
    ------
    ValueError
        If the logits are not V finite numbers, a setting is out of range or
        not offered, or a number shown could round differently on another
        machine: a logit moving by ``logit_tolerance`` could change a shown
        token's third decimal, swap two shown tokens, or move a top-k or
        top-p cut. Float32 logits of a real model usually fail this; compute
        them in float64.

    Notes
    -----
    See chapter 14 (and chapter 9 for the sampling itself).
    """
    _check_text(title, "title")
    _check_text(alt, "alt")
    if isinstance(vocabulary, (str, bytes)) or not isinstance(vocabulary, Sequence) or not vocabulary:
        raise ValueError(f"vocabulary must be a non-empty list of the tokens' texts; got {vocabulary!r:.60}")
    V = len(vocabulary)
    wrong = next((i for i, token in enumerate(vocabulary) if not isinstance(token, str)), None)
    if wrong is not None:
        raise ValueError(f"vocabulary must hold one str per token; vocabulary[{wrong}] is {vocabulary[wrong]!r:.60}")
    if not isinstance(prompts, Mapping) or not prompts:
        raise ValueError(f"prompts must be a non-empty dict {{label: (text, logits)}}; got {prompts!r:.60}")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"an explorer offers at most {MAX_PROMPTS} prompts; got {len(prompts)}")
    temperatures = _options(temperatures, "temperatures", _temperature_option, empty=False)
    ks = [None, *_options(top_ks, "top_ks", check_positive_int, empty=True)]
    ps = [None, *_options(top_ps, "top_ps", _top_p_option, empty=True)]
    if len(temperatures) * len(ks) * len(ps) > MAX_SETTINGS:
        raise ValueError(
            f"an explorer offers at most {MAX_SETTINGS:,} settings per prompt; got {len(temperatures)} temperatures "
            f"x {len(ks)} top-k choices x {len(ps)} top-p choices"
        )
    if temperature is None:
        temperature = min(temperatures, key=lambda tau: (abs(tau - 1), tau))
    start = [
        _position(temperature, temperatures, "temperature"),
        _position(top_k, ks, "top_k"),
        _position(top_p, ps, "top_p"),
    ]
    shown = check_positive_int(shown, "shown", at_most=MAX_SHOWN)
    if logit_tolerance is not None:
        logit_tolerance = check_real_scalar(logit_tolerance, "logit_tolerance")
        if logit_tolerance < 0:
            raise ValueError(f"logit_tolerance must be 0 or more; got {logit_tolerance}")
    if isinstance(probes, (str, bytes)) or not isinstance(probes, Sequence):
        raise ValueError(f"probes must be a list of (prompt, temperature, top_k, top_p); got {type(probes).__name__}")

    entries = []  # (label, text, logits in float64, table)
    for label, entry in prompts.items():
        _check_text(label, "prompts' label")
        where = f"prompts[{label!r}]"
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise ValueError(f"{where} must be a (text, logits) pair; got {entry!r:.60}")
        text, logits = entry
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_PROMPT_CHARS:
            raise ValueError(
                f"{where}'s text must be a non-blank string of at most {MAX_PROMPT_CHARS:,} characters; "
                f"got {text!r:.60}"
            )
        check_drawable(text.replace("$", r"\$"), f"{where}'s text")  # written to UTF-8 HTML: no lone surrogate
        eps, _ = precision_of(logits)
        z = as_float_array(logits, f"{where}'s logits")
        if z.shape != (V,):
            raise ValueError(f"{where}'s logits must have shape (V,) = ({V},), one per vocabulary entry; got {z.shape}")
        check_all_finite(z, f"{where}'s logits")
        tolerance = logit_tolerance
        if tolerance is None:  # float32: 6e-4; float16 and bfloat16 more; float64 (and integers) 1e-9
            tolerance = max(FLOAT64_LOGIT_TOLERANCE, FLOAT32_LOGIT_TOLERANCE * eps / float(np.finfo(np.float32).eps))
        table = _next_token_table(z.astype(np.float64), (temperatures, ks, ps), shown, tolerance, where, vocabulary)
        for i in table.order:
            check_drawable(vocabulary[i].replace("$", r"\$"), f"vocabulary[{i}]")  # drawn literally, $ included
        entries.append((label, text, z.astype(np.float64), table))

    expected = []
    for probe in probes:
        if not isinstance(probe, (tuple, list)) or len(probe) != 4:
            raise ValueError(f"each probe must be a (prompt, temperature, top_k, top_p) quadruple; got {probe!r:.60}")
        n = check_nonnegative_int(probe[0], "a probe's prompt")
        if n >= len(entries):
            raise ValueError(f"a probe's prompt must be an index in [0, {len(entries)}); got {n}")
        tau = temperatures[_position(probe[1], temperatures, "a probe's temperature")]
        k, p = ks[_position(probe[2], ks, "a probe's top_k")], ps[_position(probe[3], ps, "a probe's top_p")]
        z, order = entries[n][2], entries[n][3].order
        q = next_token_probabilities(z, temperature=tau, top_k=k, top_p=p)  # (V,): what the sampler draws from
        before = next_token_probabilities(z, temperature=tau)  # (V,): before the cut
        kept, listed = q > 0, np.zeros(V, dtype=bool)
        listed[order] = True
        expected.append(
            {
                "prompt": n,
                "temperature": tau,
                "top_k": k,
                "top_p": p,
                "probabilities": [_per_mille(q[i]) / 1000 if kept[i] else None for i in order],
                "kept": int(kept.sum()),
                "rest": _per_mille(q[kept & ~listed].sum()) / 1000,
                "cut": _per_mille(before[~kept].sum()) / 1000,
            }
        )

    data = {
        "vocabulary": V,
        "temperatures": temperatures,
        "top_k": ks,
        "top_p": ps,
        "start": start,
        "prompts": [
            {
                "label": label,
                "text": text,
                "tokens": [_visible(vocabulary[i]) for i in table.order],
                "rows": table.rows,
                # rows[settings[(t * len(top_k) + k) * len(top_p) + p]]: [kept, rest, cut, then the kept tokens'
                # probabilities, most likely first], in thousandths
                "settings": table.settings,
            }
            for label, text, _, table in entries
        ],
    }
    # The static image: the first prompt at the first setting.
    t0, k0, p0 = start
    first = data["prompts"][0]
    row = first["rows"][first["settings"][(t0 * len(ks) + k0) * len(ps) + p0]]
    before_row = first["rows"][first["settings"][t0 * len(ks) * len(ps)]]  # the same temperature, no cut
    setting = f"temperature {temperatures[t0]:g}, top-k {ks[k0] or 'off'}, top-p {ps[p0] or 'off'}"
    png = _next_token_png(title, first["label"], first["tokens"], row, before_row, setting, V)
    return InteractiveFigure("next", title, data, {"rows": expected}, png, alt)


def next_token_inputs(
    model: Any, prompts: Mapping[str, str], dtype: Any = None
) -> tuple[dict[str, tuple[str, np.ndarray]], list[str]]:
    """What :func:`next_token_explorer` needs from a language model: each prompt's next-token logits, each token's text.

    Parameters
    ----------
    model : selfattention.llm.Llama
        Or any model with ``encode(text)``, ``logits(ids, dtype=None)`` and a
        ``tokenizers.Tokenizer`` as ``tokenizer``.
    prompts : mapping of str to str
        A label (for the figure's menu) and the text of each prompt, e.g.
        ``{"chat": model.chat_prompt("Hi!")}``.
    dtype : optional
        Passed to ``model.logits``: ``np.float64`` for numbers that are the
        same on every machine (float32 logits differ in their last bits from
        one CPU to another). Default: the model's own dtype.

    Returns
    -------
    prompts : dict of str to (str, numpy.ndarray of shape (V,))
        Each label's text and the logits of the token after it.
    vocabulary : list of str
        Each token's text, as the tokenizer decodes it alone (a token that is
        part of a character decodes to �).

    Raises
    ------
    ValueError
        If ``prompts`` is not a non-empty mapping of labels to texts, or
        ``model`` lacks the methods above.

    Notes
    -----
    See chapter 14.
    """
    missing = [name for name in ("encode", "logits", "tokenizer") if not hasattr(model, name)]
    if missing:
        raise ValueError(
            "model must be a language model such as selfattention.llm.Llama, with encode, logits and a tokenizer; "
            f"got {type(model).__name__}, without {', '.join(missing)}"
        )
    if not isinstance(prompts, Mapping) or not prompts:
        raise ValueError(f"prompts must be a non-empty dict {{label: text}}; got {prompts!r:.60}")
    if len(prompts) > MAX_PROMPTS:
        raise ValueError(f"an explorer offers at most {MAX_PROMPTS} prompts; got {len(prompts)}")
    for label, text in prompts.items():
        _check_text(label, "prompts' label")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"prompts[{label!r}] must be the prompt's text, a non-blank string; got {text!r:.60}")
    V = model.tokenizer.get_vocab_size()
    vocabulary = model.tokenizer.decode_batch([[i] for i in range(V)], skip_special_tokens=False)
    options = {} if dtype is None else {"dtype": dtype}
    logits = {label: (text, model.logits(model.encode(text), **options)[-1]) for label, text in prompts.items()}
    return logits, vocabulary
