"""Chapter 11's claims over seeds: train the chapter's models on 8 seeds and record what each learned.

Usage: python scripts/record_ch11_seeds.py [--seeds 8] [--out src/selfattention/data/ch11_seeds.json]

It runs chapter 11's own code cells up to its training loop (the model sizes, the held-out set and
`train`), so the loop is the chapter's, then for each seed s:
- trains the reversal model (D = 32, H = 2) from `TinyEncoder.random(..., seed=s)` for 400 steps on
  batches from seed s + 1, as the chapter does for s = 0, and measures on the held-out set: the token
  accuracy, each head's mean weight on the mirrored position, the accuracy with uniform attention and
  with each head alone (the other made uniform);
- trains one head of width 64 with and without the 1/sqrt(Dh) scale for at most 120 steps and records
  the step at which the held-out accuracy reached 99% (checked every 20 steps), or None.
Training is float64 NumPy on one thread; a few seconds per seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import nbformat  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "11_training.ipynb"
STEPS, WIDE_STEPS = 400, 120


def chapter_namespace() -> dict:
    """Run chapter 11's code cells up to and including the one that defines `train`."""
    namespace: dict = {"__name__": "chapter11"}
    for cell in nbformat.read(CHAPTER, as_version=4).cells:
        if cell.cell_type != "code" or "remove-cell" in cell.metadata.get("tags", []):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.startswith(("%", "!")))
        exec(compile(source, str(CHAPTER), "exec"), namespace)  # noqa: S102 - the chapter's own code
        if "def train(" in source:
            return namespace
    raise SystemExit("chapter 11 defines no train(): the script must follow the chapter")


def one_seed(ns: dict, seed: int) -> dict:
    sa, V, T, x_test, y_test, train = (ns[k] for k in ("sa", "V", "T", "x_test", "y_test", "train"))
    model = sa.TinyEncoder.random(V, T, 32, 2, seed=seed)
    train(model, steps=STEPS, seed=seed + 1)

    def accuracy(edit=None) -> float:
        logits, _ = model.forward(x_test, edit_weights=edit)
        return float((logits.argmax(axis=-1) == y_test).mean())

    def only_head(keep):
        def edit(layer, w):
            w[:, [h for h in range(2) if h != keep]] = 1 / T
            return w

        return edit

    _, weights = model.forward(x_test)
    source = sa.source_positions("reverse", T)
    on_source = weights[0].mean(axis=0)[:, np.arange(T), source].mean(axis=1)
    result = {
        "seed": seed,
        "accuracy": accuracy(),
        "on_source": [float(x) for x in on_source],
        "uniform": accuracy(lambda layer, w: np.full_like(w, 1 / T)),
        "head_alone": [accuracy(only_head(h)) for h in range(2)],
        "steps_to_99": {},
    }
    for label, scale in (("1/sqrt(Dh)", None), ("none", 1.0)):
        wide = sa.TinyEncoder.random(V, T, 64, 1, scale=scale, seed=seed)
        run = train(wide, steps=WIDE_STEPS, seed=seed + 1, eval_every=20, stop_at=0.99)
        result["steps_to_99"][label] = run["step"][-1] if run["accuracy"][-1] >= 0.99 else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "src" / "selfattention" / "data" / "ch11_seeds.json")
    args = parser.parse_args()
    ns = chapter_namespace()
    runs = []
    for seed in range(args.seeds):
        runs.append(one_seed(ns, seed))
        print(json.dumps(runs[-1]), flush=True)
    record = {"steps": STEPS, "wide_steps": WIDE_STEPS, "runs": runs}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
