"""Chapter 11's training claims over seeds: train each of the chapter's models on 10 seeds and record what it did.

Usage: python scripts/record_ch11_seeds.py [--seeds 10] [--out src/selfattention/data/ch11_seeds.json]

It runs chapter 11's own code cells up to its training loop (the model sizes, the held-out set and
`train`), so the loop is the chapter's, then for each seed s builds every model from
`TinyEncoder.random(..., seed=s)`, trains it on batches from seed s + 1 (as the chapter does for s = 0)
and measures on the chapter's held-out set:

- "initial": the untrained reversal model (D = 32, H = 2): its held-out loss, and each head's mean
  weight on the mirrored position;
- "reverse": the same model after 400 steps at lr 3e-3: the held-out accuracy every 25 steps, each
  head's mean weight on the mirrored position, and the accuracy with uniform attention, with each
  row's weights shuffled (a generator seeded 3, as in the chapter) and with each head alone (the
  other made uniform);
- "lr": the same start trained 100 steps at lr 0.03 and at lr 1: accuracy and mean batch loss every
  25 steps;
- "no_positions": the model without a position table, 200 steps: accuracy every 25 steps;
- "wide": one head of width 64 with and without the 1/sqrt(Dh) scale, 120 steps: accuracy and mean
  batch loss every 20 steps; the size of dL/dW_q on a fixed batch at the start and at the end; the
  share of attention rows that put more than 99% on one key, and the share whose largest weight is on
  the mirrored position (the unscaled run is not stopped at 99%, so its end state is step 120's);
- "shift": chapter 11's exercise 3, the shift task with offset 3, 200 steps: accuracy, each head's
  mean weight on the predicted keys, and whether every query's most-attended key is the predicted one.

Floats are rounded to 6 significant digits. The record also holds the commit, the machine's numerics
and a SHA-256 of the chapter's code that it ran and of the package modules that code uses.
Training is float64 NumPy on one thread; about 15 s per seed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import nbformat  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "11_training.ipynb"
OUT = ROOT / "src" / "selfattention" / "data" / "ch11_seeds.json"
SEEDS = 10
STEPS, LR_STEPS, NO_POSITIONS_STEPS, WIDE_STEPS, SHIFT_STEPS = 400, 100, 200, 120, 200
LEARNING_RATES = (0.03, 1.0)
#: The package modules whose code the chapter's loop runs (their imports are followed by package_sources).
MODULES = ["tiny_encoder", "training"]


def chapter_cells() -> list[str]:
    """The source of chapter 11's code cells up to and including the one that defines `train`."""
    cells = []
    for cell in nbformat.read(CHAPTER, as_version=4).cells:
        if cell.cell_type != "code" or "remove-cell" in cell.metadata.get("tags", []):
            continue
        cells.append("\n".join(line for line in cell.source.splitlines() if not line.startswith(("%", "!"))))
        if "def train(" in cells[-1]:
            return cells
    raise SystemExit("chapter 11 defines no train(): the script must follow the chapter")


def chapter_namespace() -> dict:
    """Run chapter 11's code cells up to and including the one that defines `train`."""
    namespace: dict = {"__name__": "chapter11"}
    for source in chapter_cells():
        exec(compile(source, str(CHAPTER), "exec"), namespace)  # noqa: S102 - the chapter's own code
    return namespace


def sources() -> dict[str, str]:
    """SHA-256 of the chapter's code that the record ran and of the package files it uses."""
    from selfattention.recorded import package_sources, source_hashes

    chapter = hashlib.sha256("\n\n".join(chapter_cells()).encode()).hexdigest()
    return {"chapters/11_training.ipynb (code up to train)": chapter, **source_hashes(package_sources(MODULES))}


def _round(value):
    if isinstance(value, dict):
        return {key: _round(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(f"{float(value):.6g}")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def grad_wq(sa, model, T: int, V: int) -> float:
    """The size of dL/dW_q on one fixed batch (the chapter's `grad_wq`)."""
    ids, targets = sa.sequence_task("reverse", 64, T, V, np.random.default_rng(7))
    logits, _ = model.forward(ids)
    grads = model.backward(sa.cross_entropy_backward(1.0, logits, targets), ids)
    return float(np.linalg.norm(grads.attentions[0].q.weight))


def one_seed(ns: dict, seed: int, parts: tuple[str, ...] | None = None) -> dict:
    """Train chapter 11's models from seed ``seed`` and measure them (only ``parts``, if given)."""
    sa, V, T, x_test, y_test, train = (ns[k] for k in ("sa", "V", "T", "x_test", "y_test", "train"))
    source = sa.source_positions("reverse", T)
    result: dict = {"seed": seed}

    def wanted(part: str) -> bool:
        return parts is None or part in parts

    def on_source(model) -> list[float]:
        weights = model.forward(x_test)[1][0].mean(axis=0)  # (H, T, T)
        return weights[:, np.arange(T), source].mean(axis=1).tolist()

    def accuracy(model, edit=None) -> float:
        logits, _ = model.forward(x_test, edit_weights=edit)
        return float((logits.argmax(axis=-1) == y_test).mean())

    def only_head(keep: int, heads: int):
        def edit(layer, w):
            w[:, [h for h in range(heads) if h != keep]] = 1 / T
            return w

        return edit

    if wanted("initial"):
        model = sa.TinyEncoder.random(V, T, 32, 2, seed=seed)
        loss = sa.cross_entropy(model.forward(x_test)[0], y_test)
        result["initial"] = {"loss": loss, "on_source": on_source(model)}

    if wanted("reverse"):
        model = sa.TinyEncoder.random(V, T, 32, 2, seed=seed)
        history = train(model, steps=STEPS, seed=seed + 1)
        shuffle_rng = np.random.default_rng(3)
        result["reverse"] = {
            "step": history["step"],
            "accuracy": history["accuracy"],
            "on_source": on_source(model),
            "uniform": accuracy(model, lambda layer, w: np.full_like(w, 1 / T)),
            "shuffled": accuracy(model, lambda layer, w: shuffle_rng.permuted(w, axis=-1)),
            "head_alone": [accuracy(model, only_head(h, 2)) for h in range(2)],
        }

    if wanted("lr"):
        result["lr"] = {}
        for lr in LEARNING_RATES:
            run = train(sa.TinyEncoder.random(V, T, 32, 2, seed=seed), steps=LR_STEPS, lr=lr, seed=seed + 1)
            result["lr"][str(lr)] = {"step": run["step"], "accuracy": run["accuracy"], "loss": run["loss"]}

    if wanted("no_positions"):
        model = sa.TinyEncoder.random(V, T, 32, 2, positions=False, seed=seed)
        run = train(model, steps=NO_POSITIONS_STEPS, seed=seed + 1)
        result["no_positions"] = {"step": run["step"], "accuracy": run["accuracy"]}

    if wanted("wide"):
        result["wide"] = {}
        for label, scale in (("1/sqrt(Dh)", None), ("none", 1.0)):
            wide = sa.TinyEncoder.random(V, T, 64, 1, scale=scale, seed=seed)
            start = grad_wq(sa, wide, T, V)
            run = train(wide, steps=WIDE_STEPS, seed=seed + 1, eval_every=20)
            weights = wide.forward(x_test)[1][0, :, 0]  # (1000, T, T): the one head
            result["wide"][label] = {
                "step": run["step"],
                "accuracy": run["accuracy"],
                "loss": run["loss"],
                "grad_wq_start": start,
                "grad_wq_end": grad_wq(sa, wide, T, V),
                "sharp": float((weights.max(axis=-1) > 0.99).mean()),  # rows with > 99% on one key
                "top_is_mirrored": float((weights.argmax(axis=-1) == source).mean()),
            }

    if wanted("shift"):
        model = sa.TinyEncoder.random(V, T, 32, 2, seed=seed)
        run = train(model, steps=SHIFT_STEPS, task="shift", offset=3, seed=seed + 1)
        x_shift, _ = sa.sequence_task("shift", 1000, T, V, np.random.default_rng(2026), offset=3)
        learned = model.forward(x_shift)[1][0].mean(axis=0)  # (H, T, T)
        predicted = sa.source_positions("shift", T, offset=3)
        result["shift"] = {
            "accuracy": run["accuracy"][-1],
            "on_predicted": learned[:, np.arange(T), predicted].mean(axis=1).tolist(),
            "argmax_matches": bool((learned.argmax(axis=-1) == predicted).all()),
        }
    return _round(result)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from selfattention.machine import numerics

    ns = chapter_namespace()
    runs = []
    for seed in range(args.seeds):
        runs.append(one_seed(ns, seed))
        print(json.dumps(runs[-1]), flush=True)

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", "src", "scripts", str(CHAPTER)):
        commit += " with uncommitted changes"
    record = {
        "steps": {
            "reverse": STEPS,
            "lr": LR_STEPS,
            "no_positions": NO_POSITIONS_STEPS,
            "wide": WIDE_STEPS,
            "shift": SHIFT_STEPS,
        },
        "runs": runs,
        "commit": commit,
        "sources": sources(),
        "numerics": numerics(),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
