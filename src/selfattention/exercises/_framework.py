r"""The checkers' machinery: declared exercises, the runner and the comparisons.

An :class:`Exercise` declares its cases (built from a seeded generator), a
reference function that computes the expected answer from a case's arguments,
a comparison that says what is wrong with an answer, and the known
:class:`Mistake`\ s, each a function computing a wrong answer and the hint it
earns. Every declared exercise is listed in :data:`REGISTRY`, which the tests
walk: the reference passes, a stub shows TODO and each mistake fails with its
own hint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import check_positive_int

CaseList = list[tuple[str, tuple[Any, ...]]]  # [(description, arguments)]
Compare = Callable[[Any, Any], "str | None"]  # (answer, expected) -> what is wrong, or None

REGISTRY: dict[str, Exercise] = {}  # every declared exercise, by name

# Loose enough for an answer computed in float32, tight enough to catch a wrong
# scale, axis or transpose (those are off by 1e-2 or more).
RTOL, ATOL = 1e-5, 1e-6


@dataclass(frozen=True, repr=False)
class CheckResult:
    """Outcome of an exercise check; truthy when the check passed.

    Attributes
    ----------
    exercise : str
        Which exercise was checked.
    status : str
        ``"PASS"`` (every case matched the reference), ``"FAIL"`` (a case did
        not), or ``"TODO"`` (the function is still the stub).
    detail : str
        What was checked, or the first case that failed and why.
    """

    exercise: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"{self.status} {self.exercise}: {self.detail}"


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer and the hint it earns.

    Attributes
    ----------
    answer : callable
        Computes the wrong answer from a case's arguments, as a learner who
        made the mistake would.
    hint : str
        Appended to the failure when the learner's answer matches ``answer``;
        starts with "It matches ...".
    """

    answer: Callable[..., Any]
    hint: str


@dataclass(frozen=True)
class Exercise:
    """One exercise, declared: its cases, the reference answer, the comparison and the known mistakes.

    Declaring one adds it to :data:`REGISTRY`.

    Attributes
    ----------
    name : str
        Shown in every result: ``PASS <name>: ...``.
    chapter, number : int
        Where the exercise is ("See chapter N, exercise M"); the cases are
        drawn from ``np.random.default_rng(100 * chapter + number)``.
    cases : callable
        ``cases(rng) -> [(description, args), ...]``, in the order they run.
    reference : callable
        ``reference(*args)``: the expected answer, from the package's own functions.
    compare : callable
        ``compare(answer, expected)``: what is wrong with ``answer``, or None.
    mistakes : tuple of Mistake
        Tried in order on a failing case; the first that ``answer`` matches names the mistake.
    float32 : bool, default True
        Whether an answer computed from float32 copies of the arguments passes
        (the tests check that it does).
    """

    name: str
    chapter: int
    number: int
    cases: Callable[[np.random.Generator], CaseList]
    reference: Callable[..., Any]
    compare: Compare
    mistakes: tuple[Mistake, ...] = ()
    float32: bool = True

    def __post_init__(self) -> None:
        REGISTRY.setdefault(self.name, self)  # the declaration; a copy made with dataclasses.replace is not

    def check(self, candidate: Any) -> CheckResult:
        """Run ``candidate`` on every case; stop at the first that fails and name the mistake it matches.

        Returns
        -------
        CheckResult
            PASS, FAIL with the first failing case and why, or TODO while
            ``candidate`` itself raises ``NotImplementedError``.

        Raises
        ------
        ValueError
            If ``candidate`` is not callable.
        """
        if not callable(candidate):
            raise ValueError(f"expected the function to check for {self.name}; got {type(candidate).__name__}")
        cases = self.cases(np.random.default_rng(100 * self.chapter + self.number))
        expected = [self.reference(*args) for _, args in cases]  # first: the candidate may change its arguments
        for number, ((description, args), want) in enumerate(zip(cases, expected, strict=True), start=1):
            where = f"case {number} ({description})"
            try:
                got = candidate(*args)
            except NotImplementedError as exc:
                raised_in = _innermost_code(exc)
                if raised_in is None or raised_in is getattr(candidate, "__code__", None):
                    return CheckResult(self.name, "TODO", "not implemented yet")
                stub = f"{raised_in.co_name}(), which your function calls, raised NotImplementedError"
                return CheckResult(self.name, "FAIL", f"{where}: {stub}; finish that exercise first")
            except Exception as exc:  # the learner's code may raise anything; report it
                hint = _hint_for_error(exc)
                detail = f"{where} raised {type(exc).__name__}: {exc}"
                return CheckResult(self.name, "FAIL", detail if hint is None else f"{detail}. Hint: {hint}")
            problem = self.compare(got, want)
            if problem is not None:
                hint = next((m.hint for m in self.mistakes if self.compare(got, m.answer(*args)) is None), None)
                return CheckResult(self.name, "FAIL", f"{where}: {problem}" + ("" if hint is None else f". {hint}"))
        return CheckResult(self.name, "PASS", f"matches the reference on all {len(cases)} cases")


def _innermost_code(exc: BaseException) -> Any:
    """The code object of the frame that raised ``exc``."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code


def _hint_for_error(exc: Exception) -> str | None:
    """A pointer to the usual cause of an error a learner's attention code raises."""
    text = str(exc)
    if not isinstance(exc, ValueError):
        return None
    if "matmul" in text:
        return "on a (B, T, Dk) array, .T reverses all three axes; swap only the last two with np.swapaxes(k, -1, -2)"
    if "axes don't match array" in text:
        return "transpose(0, 2, 1) assumes exactly three axes; np.swapaxes(k, -1, -2) works for any number"
    if "not enough values to unpack" in text:
        return "the function must also work without batch axes: unpack with *batch, T, D = x.shape"
    if "inhomogeneous" in text:
        return "a function you called returned a tuple; multihead_attention returns (y, weights), so take y"
    return None


def _compare_array(got: Any, expected: np.ndarray, name: str) -> str | None:
    if isinstance(got, tuple):
        return f"the {name} should be one array; got a tuple of {len(got)} (return only the {name})"
    try:
        got = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"the {name} should be an array of numbers; got {type(got).__name__}"
    plural = name.endswith("s")  # "the weights do", "the output does"
    if got.shape != expected.shape:
        return f"the {name} should have shape {expected.shape}; got {got.shape}"
    if not np.isfinite(got).all():
        return (
            f"the {name} {'contain' if plural else 'contains'} NaN or inf: did an exponential overflow to inf, "
            "or did a whole row underflow to 0 so that 0/0 = NaN? Subtract each row's own maximum"
        )
    if not np.allclose(got, expected, rtol=RTOL, atol=ATOL):
        worst = float(np.max(np.abs(got - expected)))
        return f"the {name} {'do' if plural else 'does'} not match the reference; the largest difference is {worst:.3g}"
    return None


def compare_array(name: str) -> Compare:
    """Compare one returned array, called ``name`` in the messages ("output", "weights")."""
    return lambda got, expected: _compare_array(got, expected, name)


def compare_pair(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> str | None:
    """Compare a returned ``(output, weights)`` pair, weights first: they are nearer the cause."""
    if not isinstance(got, tuple) or len(got) != 2:
        return f"should return a pair (output, weights); got {type(got).__name__}"
    out, weights = (np.shape(value) for value in got)
    if out == expected[1].shape and weights == expected[0].shape and out != weights:
        return "the pair looks swapped: return (output, weights), output first"
    return _compare_array(got[1], expected[1], "weights") or _compare_array(got[0], expected[0], "output")


def compare_count(name: str, wrong: str) -> Compare:
    """Compare a returned positive integer, the ``name`` ("the number of bytes"); ``wrong`` formats ``{got}``."""

    def compare(got: Any, expected: int) -> str | None:
        try:
            got = check_positive_int(got, name)
        except ValueError as exc:
            return str(exc)
        return None if got == expected else wrong.format(got=got)

    return compare
