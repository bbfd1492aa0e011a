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

import copy
import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import as_array, check_positive_int, precision_of

CaseList = list[tuple[str, tuple[Any, ...]]]  # [(description, arguments)]
Compare = Callable[[Any, Any], "str | None"]  # (answer, expected) -> what is wrong, or None

REGISTRY: dict[str, Exercise] = {}  # every declared exercise, by name

#: What an exercise can ask for: write what the chapter describes, derive a formula and code it, count
#: parameters or bytes, find an input with a property, write a test, predict what training finds, or go
#: one step past the chapter.
KINDS = {
    "implement": "write what the chapter describes, without the package's function",
    "derive": "work out a formula the chapter does not give, then code it",
    "count": "count parameters, tokens or bytes from the shapes",
    "search": "find an input or a component with a given property",
    "test": "write a test that tells a right implementation from a wrong one",
    "predict": "say what a trained model must do, then check it",
    "extend": "go one step past what the chapter built",
    "debug": "find the bug in a real project's code, then fix it",
}

#: Pages after the chapters whose exercises continue the course's order, numbered past every chapter.
APPENDICES = {90: "the bug zoo"}


def place(chapter: int) -> str:
    """How a chapter's number reads in a message: "chapter 4", or an appendix's name."""
    return APPENDICES.get(chapter, f"chapter {chapter}")


# How close an answer must be. Tight for float64 answers; for answers in float32
# loose enough for its rounding (the reference computed in float32 stays within
# about 1e-5 of the float64 reference on every case), with the absolute part
# scaled by the answer's size. Both still catch a wrong scale, axis or transpose,
# which are off by 1e-2 or more. A float16 answer is held to the float32
# tolerance, which its 3 significant digits cannot meet; its FAIL says so.
RTOL, ATOL = 1e-5, 1e-6
RTOL_FLOAT32, ATOL_FLOAT32 = 1e-4, 1e-5


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
    detect : callable, optional
        ``detect(answer, args) -> bool``: recognises the mistake in an answer
        when many wrong answers share it (an exercise with many right answers
        cannot compare with one wrong one). Without it, the answer must equal
        ``answer(*args)`` under the exercise's comparison.
    """

    answer: Callable[..., Any]
    hint: str
    detect: Callable[[Any, tuple[Any, ...]], bool] | None = None


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
    passes : str, default "matches the reference"
        What a PASS says of every case; an exercise with many right answers,
        whose comparison checks a property instead, says which.
    kind : str
        What the exercise asks for, one of :data:`KINDS`.
    concept : str
        The idea it checks, for the course's index of exercises.
    """

    name: str
    chapter: int
    number: int
    cases: Callable[[np.random.Generator], CaseList]
    reference: Callable[..., Any]
    compare: Compare
    mistakes: tuple[Mistake, ...] = ()
    float32: bool = True
    passes: str = "matches the reference"
    kind: str = ""
    concept: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}; got {self.kind!r} for {self.name!r}")
        if not self.concept:
            raise ValueError(f"every exercise names the concept it checks; {self.name!r} has none")
        REGISTRY.setdefault(self.name, self)  # the declaration; a copy made with dataclasses.replace is not

    def next_exercise(self) -> str:
        """Where to go after this one: the next declared exercise in course order, or that there is none."""
        ordered = sorted(REGISTRY.values(), key=lambda e: (e.chapter, e.number))
        later = [e for e in ordered if (e.chapter, e.number) > (self.chapter, self.number)]
        if not later:
            return "That was the course's last exercise."
        following = later[0]
        return f"Next: {place(following.chapter)}, exercise {following.number} ({following.name})."

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
        _check_callable(candidate, self.name)
        cases = self.cases(np.random.default_rng(100 * self.chapter + self.number))
        expected = [self.reference(*copy.deepcopy(args)) for _, args in cases]
        names = _parameter_names(candidate, max((len(args) for _, args in cases), default=0))
        for number, ((description, args), want) in enumerate(zip(cases, expected, strict=True), start=1):
            where = f"case {number} ({description})"
            given = copy.deepcopy(args)  # fresh copies: a wrong answer cannot spoil the next case or the checker
            try:
                got = candidate(*given)
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
            changed = next((i for i, (a, b) in enumerate(zip(args, given, strict=True)) if not _same(a, b)), None)
            if changed is not None:
                return CheckResult(
                    self.name,
                    "FAIL",
                    f"{where}: your function changed its argument `{names[changed]}` in place; the caller's data must "
                    "stay as it was, so work on a copy (for example `x = x - m` instead of `x -= m`)",
                )
            problem = self._compare(got, want)
            if problem is not None:
                hint = next((m.hint for m in self.mistakes if self._matches(got, m, args)), None)
                return CheckResult(self.name, "FAIL", f"{where}: {problem}" + ("" if hint is None else f". {hint}"))
        return CheckResult(self.name, "PASS", f"{self.passes} on {_all_cases(len(cases))}. {self.next_exercise()}")

    def _compare(self, got: Any, want: Any) -> str | None:
        try:
            return self.compare(got, want)
        except Exception as exc:  # an answer of a shape or type no comparison foresaw
            return f"could not compare your answer ({type(got).__name__}) with the reference: {exc}"

    def _matches(self, got: Any, mistake: Mistake, args: tuple[Any, ...]) -> bool:
        try:
            if mistake.detect is not None:
                return bool(mistake.detect(got, copy.deepcopy(args)))
            return self.compare(got, mistake.answer(*copy.deepcopy(args))) is None
        except Exception:
            return False


def _all_cases(n: int) -> str:
    return "its one case" if n == 1 else f"all {n} cases"


def _check_callable(candidate: Any, name: str) -> None:
    """Raise unless ``candidate`` is a function (not a class, not the result of calling one)."""
    if not callable(candidate) or isinstance(candidate, type):
        raise ValueError(
            f"expected the function to check for {name} (pass the function itself, without calling it); "
            f"got {type(candidate).__name__}"
        )


def _parameter_names(function: Callable[..., Any], count: int) -> list[str]:
    """The names of ``function``'s first ``count`` parameters, for messages; "argument N" where unknown."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    names = []
    for p in parameters:
        if p.kind is inspect.Parameter.VAR_POSITIONAL:  # *args: the rest are numbered
            break
        names.append(p.name)
    return [*names[:count], *(f"argument {i + 1}" for i in range(len(names), count))]


def _same(before: Any, after: Any) -> bool:
    """Whether an argument is unchanged: arrays element for element, dicts, sequences and containers recursively."""
    if isinstance(before, np.random.Generator):
        return True  # a generator handed to the learner is there to be drawn from
    if isinstance(before, np.ndarray):
        return (
            isinstance(after, np.ndarray)
            and before.shape == after.shape
            and before.dtype == after.dtype
            and np.array_equal(before, after, equal_nan=True)
        )
    if isinstance(before, dict):
        return (
            isinstance(after, dict)
            and before.keys() == after.keys()
            and all(_same(before[k], after[k]) for k in before)
        )
    if isinstance(before, (list, tuple)):
        return type(before) is type(after) and len(before) == len(after) and all(map(_same, before, after))
    if dataclasses.is_dataclass(before) and not isinstance(before, type):
        return type(before) is type(after) and all(
            _same(getattr(before, f.name), getattr(after, f.name)) for f in dataclasses.fields(before)
        )
    if type(before).__module__.split(".")[0] == "torch" and hasattr(before, "detach"):
        return _same(before.detach().cpu().numpy(), after.detach().cpu().numpy())
    try:
        return bool(before == after)
    except Exception:
        return True  # an object that cannot say whether it changed is taken as unchanged


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


def answer_array(got: Any) -> np.ndarray | None:
    """The learner's answer as a NumPy array of numbers, whatever its form, or None if it is not one.

    NumPy arrays, torch tensors (with or without gradients), lists and tuples
    of numbers, and scalars are all answers.
    """
    try:
        array = as_array(got, "the answer")
    except ValueError:
        return None
    return array if array.dtype.kind in "biuf" else None


def shaped_answer(
    got: Any, expected: np.ndarray, name: str, *, form: str = "an array", shape_note: str = ""
) -> tuple[np.ndarray | None, str | None]:
    """The learner's answer as an array, and what is wrong with its form: not an array, or the wrong shape.

    ``name`` names the answer in the message ("the mask"), ``form`` what it
    should be ("an integer array") and ``shape_note`` what the axes are.
    """
    answer = answer_array(got)
    if answer is None:
        return None, f"the {name} should be {form}; got {type(got).__name__}"
    if answer.shape != expected.shape:
        return answer, f"the {name} should have shape {expected.shape}{shape_note}; got {answer.shape}"
    return answer, None


# What a NaN or inf in an answer usually means: in attention code, an exponential that overflowed.
SOFTMAX_NAN_HINT = (
    "did an exponential overflow to inf, or did a whole row underflow to 0 so that 0/0 = NaN? "
    "Subtract each row's own maximum"
)


def _compare_array(got: Any, expected: np.ndarray, name: str, nan_hint: str = SOFTMAX_NAN_HINT) -> str | None:
    answer = answer_array(got)
    plural = name.endswith("s")  # "the weights do", "the output does"
    if answer is None or (isinstance(got, tuple) and answer.shape != expected.shape):
        if isinstance(got, tuple):
            return f"the {name} should be one array; got a tuple of {len(got)} (return only the {name})"
        return f"the {name} should be an array of numbers; got {type(got).__name__}"
    if answer.shape != expected.shape:
        return f"the {name} should have shape {expected.shape}; got {answer.shape}"
    _, precision = precision_of(got)  # before the conversion, which reads bfloat16 as float32
    low_precision, half = answer.dtype in (np.float32, np.float16), precision in ("float16", "bfloat16")
    answer = answer.astype(np.float64)
    if not np.isfinite(answer).all():
        return f"the {name} {'contain' if plural else 'contains'} NaN or inf: {nan_hint}"
    if low_precision:
        rtol, atol = RTOL_FLOAT32, ATOL_FLOAT32 * max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    else:
        rtol, atol = RTOL, ATOL
    with np.errstate(over="ignore", invalid="ignore"):  # answers near 1e308 overflow the difference
        close = np.allclose(answer, expected, rtol=rtol, atol=atol)
        worst = float(np.max(np.abs(answer - expected)))
    if not close:
        problem = (
            f"the {name} {'do' if plural else 'does'} not match the reference; the largest difference is {worst:.3g}"
        )
        largest, reference = float(np.max(np.abs(answer))), float(np.max(np.abs(expected), initial=0.0))
        if largest > 1e3 * max(reference, 1e-6):  # e.g. 1e30 where the reference stays below 10
            problem += (
                f" (your largest entry is {largest:.3g}, the reference's {reference:.3g}: is a division, "
                "normalisation or scale missing?)"
            )
        if half:  # float16 keeps about 3 significant digits, bfloat16 about 2: too few for the float32 tolerance
            digits = "3" if precision == "float16" else "2"
            problem += (
                f" (your answer is {precision}, which keeps only about {digits} significant digits; compute in float32)"
            )
        return problem
    return None


def compare_array(name: str, nan_hint: str = SOFTMAX_NAN_HINT) -> Compare:
    """Compare one returned array, called ``name`` in the messages ("output", "weights").

    ``nan_hint`` follows "contains NaN or inf:" when the answer is not finite;
    the default points at an overflowing exponential, the usual cause in attention code.
    """
    return lambda got, expected: _compare_array(got, expected, name, nan_hint)


def compare_verdict(got: Any, expected: bool) -> str | None:
    """Compare the verdict of a learner's test (True or False) with the one a good test gives."""
    if not isinstance(got, (bool, np.bool_)):
        return f"the test must return True or False; got {got!r}"
    return None if bool(got) == expected else f"got {bool(got)}"


def compare_count(name: str, wrong: str) -> Compare:
    """Compare a returned positive integer, the ``name`` ("the number of bytes"); ``wrong`` formats ``{got}``."""

    def compare(got: Any, expected: int) -> str | None:
        answer = answer_array(got)
        if answer is not None and answer.ndim == 0 and answer.dtype.kind == "f" and float(answer).is_integer():
            got = int(answer)  # 196608.0 is the right count, written as a float
        try:
            got = check_positive_int(got, name)
        except ValueError as exc:
            return str(exc)
        return None if got == expected else wrong.format(got=got)

    return compare
