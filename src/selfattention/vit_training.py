"""Training chapter 12's TinyViT on the digits, and the recorded runs every reader's numbers come from.

Every choice is made on a validation split: :func:`split_validation` holds a
stratified fifth of the training images out, and the settings of
:data:`VIT_GRID` are each trained on the rest from the seeds of
:data:`GRID_SEEDS` and scored on it. The best mean validation accuracy picks
the recipe of :data:`DIGIT_VIT_RUNS`, which five seeds are then trained with;
the test set is scored once, from the recorded weights.

Training amplifies rounding. Two machines that train the same TinyViT from the
same seed (another CPU's kernels, another thread count) end with logits that
differ by up to about 1e-3: enough to flip a digit whose top two logits are
that close, and so to change an accuracy in its last printed digit. Chapter 12
therefore trains a model live, checks that it agrees with the *recorded* run
of the same recipe to within :data:`AGREEMENT`, and computes everything after
that from the recorded weights in float64, which every machine evaluates to
the same printed digits.

``scripts/record_digit_vits.py`` makes the record (``data/digit_vits.npz``):
the validation grid, the five models of :data:`DIGIT_VIT_RUNS` trained by
:func:`train_tiny_vit` on one thread (their float32 weights), the classical
baselines chosen on the same validation split, and the commit and machine of
the run.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import as_array, check_nonnegative_int, check_positive_int, check_real_scalar
from .vision_modules import TinyViT

__all__ = [
    "TINY_VIT_CONFIG",
    "VALIDATION_FRACTION",
    "VIT_GRID",
    "GRID_SEEDS",
    "DIGIT_VIT_RUNS",
    "AGREEMENT",
    "digit_vit",
    "split_validation",
    "train_tiny_vit",
    "load_digit_vits",
]

#: Chapter 12's model: 16 patches of 2 x 2 pixels, width 32, four heads, two pre-norm blocks (TinyViT's arguments).
TINY_VIT_CONFIG = {
    "image_size": 8,
    "patch_size": 2,
    "d_model": 32,
    "num_heads": 4,
    "num_layers": 2,
    "dim_feedforward": 64,
}
#: The share of the training images :func:`split_validation` holds out, stratified, for every choice.
VALIDATION_FRACTION = 0.2
#: The settings tried on the validation split: every pair of these epoch counts and peak learning rates. At most 40
#: epochs, so that chapter 12 can train its model live in seconds.
VIT_GRID = {"epochs": (10, 20, 40), "lr": (1e-3, 3e-3, 1e-2)}
#: The seeds each setting of :data:`VIT_GRID` is trained from; the best mean validation accuracy wins.
GRID_SEEDS = (0, 1, 2)
#: The recorded runs, seed -> training settings: the setting the validation grid chose, from five seeds.
DIGIT_VIT_RUNS = {seed: {"epochs": 40, "lr": 3e-3} for seed in range(5)}
#: How far (largest absolute logit difference on the test set) a model retrained anywhere may be from the record:
#: about five times the largest difference measured between thread counts and CPU kernels (3.8e-3: two threads
#: against one, and MKL's reproducible path against its default).
AGREEMENT = 2e-2
_RECORD = "digit_vits.npz"


def digit_vit(seed: int) -> TinyViT:
    """Chapter 12's untrained TinyViT (:data:`TINY_VIT_CONFIG`), its weights drawn after ``torch.manual_seed(seed)``.

    The global torch generator is left as it was.

    Raises
    ------
    ValueError
        If ``seed`` is not a non-negative integer below 2**63.
    """
    seed = check_nonnegative_int(seed, "seed")
    if seed >= 2**63:
        raise ValueError(f"seed must be below 2**63 (torch.manual_seed); got {seed}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyViT(**TINY_VIT_CONFIG)


def split_validation(
    x: np.ndarray, y: np.ndarray, fraction: float = VALIDATION_FRACTION, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hold out a stratified ``fraction`` of training images for validation: every choice is made on it.

    Parameters
    ----------
    x : array_like, shape (N, ...)
        The training images (or any rows).
    y : array_like of int, shape (N,)
        Their labels; each class keeps its share on both sides.
    fraction : float, default ``VALIDATION_FRACTION``
        The share held out, strictly between 0 and 1.
    seed : int, default 0
        Fixes the split (``train_test_split``'s ``random_state``).

    Returns
    -------
    x_fit, x_val, y_fit, y_val : numpy.ndarray
        The rows to train on and the rows to choose on.

    Raises
    ------
    ValueError
        If ``x`` or ``y`` is not an array, they differ in length, ``y`` is not
        integer, ``fraction`` is not strictly between 0 and 1, either side
        would miss a class, or ``seed`` is not an integer in [0, 2**32).

    Notes
    -----
    See chapter 12.
    """
    x, y = as_array(x, "x"), as_array(y, "y")  # NumPy arrays, tensors and nested lists alike
    if x.ndim < 1:
        raise ValueError(f"x must be an array of rows; got a scalar {x!r}")
    if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"y must be an integer array of {len(x)} labels, one per row of x; got {y.dtype} array of shape {y.shape}"
        )
    fraction = check_real_scalar(fraction, "fraction", positive=True)
    if not fraction < 1:
        raise ValueError(f"fraction must be strictly between 0 and 1; got {fraction}")
    seed = check_nonnegative_int(seed, "seed")
    if seed >= 2**32:
        raise ValueError(f"seed must be below 2**32 (scikit-learn's random_state); got {seed}")
    classes = len(np.unique(y))
    n_val = int(np.ceil(fraction * len(y)))
    if n_val < classes or len(y) - n_val < classes:
        raise ValueError(
            f"fraction={fraction} of {len(y)} rows leaves {n_val} for validation and {len(y) - n_val} to train on; "
            f"a stratified split needs at least one row of each of the {classes} classes on both sides"
        )
    from sklearn.model_selection import train_test_split

    x_fit, x_val, y_fit, y_val = train_test_split(x, y, test_size=fraction, random_state=seed, stratify=y)
    return x_fit, x_val, y_fit, y_val


def _images_and_labels(x: Any, y: Any, name: str, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = next(model.parameters()).dtype
    x, y = as_array(x, f"x_{name}"), as_array(y, f"y_{name}")  # NumPy arrays, tensors and nested lists alike
    if x.ndim != 4 or not np.issubdtype(x.dtype, np.floating):
        raise ValueError(
            f"x_{name} must be a float array of images (N, C, H, W); got {x.dtype} array of shape {x.shape}"
        )
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"y_{name} must be an integer array of {len(x)} labels, one per image; got {y.dtype} array of shape "
            f"{y.shape}"
        )
    if len(x) == 0:
        raise ValueError(f"x_{name} holds no images")
    expected = (model.channels, model.image_size, model.image_size)
    if x.shape[1:] != expected:
        raise ValueError(f"x_{name} must hold images of shape (C, H, W) = {expected} for this model; got {x.shape[1:]}")
    if not np.isfinite(x).all():
        raise ValueError(f"x_{name} must hold finite pixel values; got {int((~np.isfinite(x)).sum())} NaN or inf")
    classes = model.head.out_features
    if y.min() < 0 or y.max() >= classes:
        raise ValueError(f"y_{name} must hold class labels in [0, {classes}); got {y.min()} to {y.max()}")
    x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))  # torch reads only the machine's byte order
    return torch.from_numpy(x).to(dtype), torch.from_numpy(y.astype(np.int64))


def train_tiny_vit(
    model: TinyViT,
    x_train: np.ndarray,
    y_train: np.ndarray,
    *,
    epochs: int,
    lr: float,
    seed: int,
    batch_size: int = 64,
    x_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
) -> dict[str, list]:
    """Train ``model`` in place: AdamW, a one-cycle schedule, label smoothing 0.1, shuffled mini-batches.

    AdamW (weight decay 0.05) with ``OneCycleLR`` (warm up to ``lr``, then
    anneal) over ``epochs`` passes of ``x_train`` in batches of ``batch_size``,
    shuffled by a generator seeded with ``seed``; cross-entropy with label
    smoothing 0.1. If a held-out set is given (``x_test``, ``y_test``; chapter
    12 passes its validation images), its accuracy is recorded after each
    epoch: it is only watched, never trained on.

    Parameters
    ----------
    model : TinyViT
        Trained in its own dtype and left in eval mode.
    x_train : array_like, shape (N, C, H, W)
    y_train : array_like of int, shape (N,)
    epochs, seed, batch_size : int
    lr : float
        The peak learning rate.
    x_test, y_test : array_like, optional
        A held-out set to watch: both or neither.

    Returns
    -------
    dict
        ``"step"`` (epoch numbers), ``"loss"`` (each epoch's mean training
        loss) and ``"accuracy"`` (each epoch's accuracy on the held-out set;
        empty without one).

    Raises
    ------
    ValueError
        If ``model`` is not a TinyViT, an array has the wrong shape or type, a
        label is out of range, or a setting is not positive.

    Notes
    -----
    See chapter 12. Run it inside ``selfattention.machine.torch_threads(1)``:
    on this model one thread is about as fast as two, and a busy machine does
    not stall it.
    """
    if not isinstance(model, TinyViT):
        raise ValueError(f"model must be a TinyViT; got {type(model).__name__}")
    images, labels = _images_and_labels(x_train, y_train, "train", model)
    if (x_test is None) != (y_test is None):
        raise ValueError("give both x_test and y_test, or neither")
    test = None if x_test is None else _images_and_labels(x_test, y_test, "test", model)
    epochs = check_positive_int(epochs, "epochs", at_most=10_000)
    batch_size = check_positive_int(batch_size, "batch_size")
    seed = check_nonnegative_int(seed, "seed")
    lr = check_real_scalar(lr, "lr", positive=True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    steps_per_epoch = -(-len(images) // batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=lr, total_steps=epochs * steps_per_epoch)
    order = torch.Generator().manual_seed(seed)
    history: dict[str, list] = {"step": [], "loss": [], "accuracy": []}
    for epoch in range(1, epochs + 1):
        model.train()
        losses = []
        for batch in torch.randperm(len(images), generator=order).split(batch_size):
            loss = F.cross_entropy(model(images[batch]), labels[batch], label_smoothing=0.1)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            losses.append(loss.item())
            if not np.isfinite(losses[-1]):  # stop where it went wrong, not 40 epochs later with a NaN model
                raise ValueError(
                    f"the training loss is not finite ({losses[-1]}) at epoch {epoch}, step {len(losses)}: "
                    f"the run diverged; lower lr (got {lr})"
                )
        model.eval()
        history["step"].append(epoch)
        history["loss"].append(float(np.mean(losses)))
        if test is not None:
            with torch.no_grad():
                history["accuracy"].append(float((model(test[0]).argmax(-1) == test[1]).double().mean()))
    return history


def load_digit_vits(dtype: torch.dtype = torch.float64) -> tuple[dict[int, TinyViT], dict[str, Any]]:
    """The recorded runs of :data:`DIGIT_VIT_RUNS`: trained TinyViTs, in eval mode, and the record of the comparison.

    Parameters
    ----------
    dtype : torch.dtype, default torch.float64
        The models' dtype. The weights were stored in float32, as trained;
        float64 evaluates them with rounding far below any printed digit.

    Returns
    -------
    models : dict
        seed -> TinyViT, trained on ``split_validation``'s training part
        of ``load_digits_split(0.25, seed=0)``.
    record : dict
        ``runs`` (the settings each model was trained with), ``grid`` (each
        setting of ``VIT_GRID`` with its validation accuracy per seed of
        ``GRID_SEEDS``), ``chosen`` (the setting the grid picked),
        ``validation_accuracy`` and ``test_accuracy`` (per recorded seed),
        ``baselines`` (each classical method's validation grid, chosen setting
        and per-image test correctness), ``sizes``, ``commit``, ``numerics``
        (the machine), ``torch`` and ``seconds`` (training time per seed).

    Raises
    ------
    ValueError
        If ``dtype`` is not torch.float32 or torch.float64, or the record no
        longer matches :data:`DIGIT_VIT_RUNS`, ``VIT_GRID`` or
        :data:`TINY_VIT_CONFIG` (re-run ``scripts/record_digit_vits.py``).

    Notes
    -----
    See chapter 12.
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64; got {dtype!r}")
    with resources.files("selfattention").joinpath(f"data/{_RECORD}").open("rb") as file:
        stored = dict(np.load(file, allow_pickle=False))
    record = json.loads(str(stored.pop("record")))
    runs = {int(seed): settings for seed, settings in record["runs"].items()}
    grid = {"epochs": tuple(record["grid_axes"]["epochs"]), "lr": tuple(record["grid_axes"]["lr"])}
    if runs != DIGIT_VIT_RUNS or record["config"] != TINY_VIT_CONFIG or grid != VIT_GRID:
        raise ValueError(
            f"{_RECORD} was recorded for runs {runs}, grid {grid} and config {record['config']}, but the package now "
            f"defines {DIGIT_VIT_RUNS}, {VIT_GRID} and {TINY_VIT_CONFIG}; re-run scripts/record_digit_vits.py"
        )
    models = {}
    for seed in runs:
        model = TinyViT(**TINY_VIT_CONFIG)
        prefix = f"seed{seed}/"
        state = {key[len(prefix) :]: torch.from_numpy(value) for key, value in stored.items() if key.startswith(prefix)}
        model.load_state_dict(state)
        models[seed] = model.to(dtype).eval()
    record["runs"] = runs
    for key in ("test_accuracy", "validation_accuracy", "seconds"):
        record[key] = {int(s): value for s, value in record[key].items()}
    return models, record
