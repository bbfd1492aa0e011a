"""Draw the course's logo and favicon with matplotlib.

Usage: python scripts/make_logo.py [OUTPUT_DIR]   (default: book/_static)

The motif is a causal attention matrix: each row a query, weights only on and
below the diagonal, brightest on the key each query attends to most. The
images are committed; tests/test_logo.py checks that this script still draws
exactly them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

SIZE = 6


def motif() -> np.ndarray:
    """A (6, 6) causal weight matrix with a recognisable, fixed pattern."""
    scores = np.add.outer(np.arange(SIZE), -np.arange(SIZE)) * -0.6 + np.eye(SIZE) * 1.2
    scores[3, 1] = scores[5, 2] = 2.5  # a few long-range looks
    scores[np.triu_indices(SIZE, k=1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def draw_grid(ax: plt.Axes) -> None:
    weights = motif()
    ax.imshow(np.where(weights > 0, weights, np.nan), cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(np.arange(-0.5, SIZE, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, SIZE, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)
    for side in ax.spines.values():
        side.set_visible(False)


def main(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    metadata = {"Software": None}  # keep the bytes independent of the matplotlib version string

    fig, ax = plt.subplots(figsize=(1, 1), dpi=64)
    fig.subplots_adjust(0, 0, 1, 1)
    draw_grid(ax)
    fig.savefig(output / "favicon.png", transparent=True, metadata=metadata)
    plt.close(fig)

    fig = plt.figure(figsize=(4.0, 1.3), dpi=100)
    grid_ax = fig.add_axes((0.02, 0.05, 0.27, 0.9))
    draw_grid(grid_ax)
    fig.text(0.33, 0.62, "Self-Attention", fontsize=20, fontweight="bold", color="#2b2b2b", va="center")
    fig.text(0.33, 0.28, "from Scratch", fontsize=16, color="#3b6a8f", va="center")
    fig.savefig(output / "logo.png", transparent=True, metadata=metadata)
    plt.close(fig)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("book/_static"))
