"""Figures the chapters draw: reusable views, and a few one-chapter diagrams.

**When a figure belongs in the package.** A figure is a function here when at
least one of these holds:

* more than one chapter draws it, or one chapter draws it for several inputs;
* its input must be checked before it is drawn (a shape to match, a mask's
  polarity, a flattened grid to restore), so that a wrong call fails with a
  ``ValueError`` instead of drawing a wrong picture;
* a test must check what it draws (the order of the encoder's steps, the tiles
  blocked attention holds at each step).

A figure that one chapter draws once, from data the chapter has just computed,
with nothing to check and nothing for a test to assert, stays in the chapter as
plain matplotlib, where the reader sees every line.

The package's figures live in two modules:

* ``selfattention.plotting.views``: reusable pictures of the arrays the package
  computes (attention weights, masks, heads, per-patch values, images), for any
  chapter and any size;
* ``selfattention.plotting.diagrams``: pictures of one chapter's idea (the head
  split of chapter 4, the encoder block of chapter 5, the blocked traversal of
  chapter 7).

Every function draws on a matplotlib ``Axes`` (a new figure if none is given)
and returns it, or makes and returns its own ``Figure`` of several panels; the
chapters end the cell with ``plt.show()``. The heatmaps share one helper, so
they label their axes, colour bars and titles the same way. matplotlib is
imported when the first figure is drawn, not by ``import selfattention``.
"""

from __future__ import annotations

from . import diagrams, views
from .diagrams import *  # noqa: F403
from .views import *  # noqa: F403

__all__ = [*views.__all__, *diagrams.__all__]
