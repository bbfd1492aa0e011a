"""Draw the course's road map for the intro page with matplotlib.

Usage: python scripts/make_roadmap.py [OUTPUT_DIR]   (default: book/_static)

Seven boxes, left to right: token -> Q, K, V -> weights -> heads -> block ->
stack -> in use, each labelled with the chapter that builds it. The image is committed
as book/_static/roadmap.png.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

STEPS = [
    ("token", "a row of X (T, D)\n+ its position", "ch. 1, 6, 8"),
    ("Q, K, V", "X W_Q, X W_K,\nX W_V", "ch. 1, 2"),
    ("weights", "softmax(QKᵀ/√d_k)\n+ masks", "ch. 1–3"),
    ("heads", "H heads side\nby side, W_O", "ch. 4"),
    ("block", "attention,\nfeed-forward,\nLayerNorm", "ch. 5"),
    ("stack", "L blocks;\ncost as T grows", "ch. 5, 7"),
    ("in use", "generate, train,\nbackprop, a real\nBERT and LLM", "ch. 9–14"),
]


def draw(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(14, 2.6), dpi=100)
    width, gap = 1.7, 0.45
    for i, (name, detail, chapter) in enumerate(STEPS):
        x = i * (width + gap)
        ax.add_patch(FancyBboxPatch((x, 0), width, 1.6, boxstyle="round,pad=0.05", fc="#e8f0fb", ec="#2f5d9e", lw=1.5))
        ax.text(x + width / 2, 1.25, name, ha="center", va="center", fontsize=14, weight="bold")
        ax.text(x + width / 2, 0.7, detail, ha="center", va="center", fontsize=9)
        ax.text(x + width / 2, 0.18, chapter, ha="center", va="center", fontsize=10, color="#2f5d9e")
        if i < len(STEPS) - 1:
            ax.annotate(
                "",
                xy=(x + width + gap - 0.05, 0.8),
                xytext=(x + width + 0.05, 0.8),
                arrowprops={"arrowstyle": "->", "lw": 1.8, "color": "#444444"},
            )
    ax.set_xlim(-0.15, len(STEPS) * (width + gap) - gap + 0.15)
    ax.set_ylim(-0.15, 1.75)
    ax.axis("off")
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "book" / "_static"
    out.mkdir(parents=True, exist_ok=True)
    draw(out / "roadmap.png")


if __name__ == "__main__":
    main(sys.argv)
