"""The bug zoo: attention code from public projects, in our own words, each with the bug its users found.

Every name here is one bug from a public issue or pull request, cited in its
docstring as ``owner/repository#number`` with the fix. Like the originals,
most run and return arrays of the right shape; two raise for some batch sizes,
and a few return inf or NaN. The bug zoo appendix shows
each one's symptom, the property test in :mod:`selfattention.bugs.properties`
that catches it against the package's own functions (with the smallest failing
input Hypothesis finds), why the project's own tests missed it, and an
exercise to fix it. The modules:

- ``masking``: the fill value, the order of mask and softmax, the mask's
  polarity and alignment, a sliding window's width;
- ``batching``: padding masks on the wrong axis, and batch masks that meet
  the heads;
- ``heads``: the scale, the softmax's axis, merging heads;
- ``positions``: rotary pairs, weight layouts, positions after a KV cache.

Importing it loads nothing beyond the package's core (no Hypothesis, no torch).
"""

from __future__ import annotations

from . import batching, heads, masking, positions
from .batching import *  # noqa: F403
from .heads import *  # noqa: F403
from .masking import *  # noqa: F403
from .positions import *  # noqa: F403

__all__ = [*masking.__all__, *batching.__all__, *heads.__all__, *positions.__all__]
