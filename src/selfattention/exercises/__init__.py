"""Checkers for the chapters' exercises.

Each ``check_*`` function calls the learner's function on a fixed set of cases
(the chapter's own example plus seeded random inputs), compares the answer with
the package's reference implementation, and returns a :class:`CheckResult`.
A notebook cell that ends with the check shows ``PASS ...``, ``FAIL ...`` with
the first case that went wrong and why, or ``TODO ...`` while the function
still raises ``NotImplementedError``.

What passes: any correct answer, in any form -- a NumPy array, a torch tensor
(with or without gradients), a list or tuple of the right numbers, a count
written as ``196608.0``. Answers in float64 must match to ``rtol=1e-5,
atol=1e-6``; answers in float32 to ``rtol=1e-4`` and ``atol=1e-5`` times the
answer's largest magnitude (at least 1), which float32 rounding stays well
inside while a wrong scale, axis or transpose does not. A float16 answer is
held to the float32 tolerance, too tight for its 3 significant digits, and its
FAIL says to compute in float32. A dtype is
checked only where the exercise states a rule. Every case calls the learner's
function with fresh copies of its arguments, and an answer that changes an
argument in place fails with a message that says so.

Each chapter's exercises are declared in a module of their own
(``ch01_word_vectors`` to ``ch14_llm``, and ``ch90_bug_zoo`` for the
bug zoo appendix) as cases, a reference function and the known mistakes,
each with the hint it earns; ``_framework`` runs them.
"""

from __future__ import annotations

from . import (
    ch01_word_vectors,
    ch02_single_head,
    ch03_batched,
    ch04_multihead,
    ch05_encoder,
    ch06_vision,
    ch07_cost,
    ch08_positions,
    ch09_decoding,
    ch10_backward,
    ch11_training,
    ch12_vision_training,
    ch13_pretrained,
    ch14_llm,
    ch90_bug_zoo,
)
from ._framework import CheckResult
from .ch01_word_vectors import *  # noqa: F403
from .ch02_single_head import *  # noqa: F403
from .ch03_batched import *  # noqa: F403
from .ch04_multihead import *  # noqa: F403
from .ch05_encoder import *  # noqa: F403
from .ch06_vision import *  # noqa: F403
from .ch07_cost import *  # noqa: F403
from .ch08_positions import *  # noqa: F403
from .ch09_decoding import *  # noqa: F403
from .ch10_backward import *  # noqa: F403
from .ch11_training import *  # noqa: F403
from .ch12_vision_training import *  # noqa: F403
from .ch13_pretrained import *  # noqa: F403
from .ch14_llm import *  # noqa: F403
from .ch90_bug_zoo import *  # noqa: F403

_CHAPTERS = (
    ch01_word_vectors,
    ch02_single_head,
    ch03_batched,
    ch04_multihead,
    ch05_encoder,
    ch06_vision,
    ch07_cost,
    ch08_positions,
    ch09_decoding,
    ch10_backward,
    ch11_training,
    ch12_vision_training,
    ch13_pretrained,
    ch14_llm,
    ch90_bug_zoo,
)

__all__ = ["CheckResult", *(name for chapter in _CHAPTERS for name in chapter.__all__)]
