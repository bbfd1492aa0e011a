"""Training chapter 12's TinyViT on the digits, and the recorded run every reader's numbers come from.

Training amplifies rounding. Two machines that train the same TinyViT from the
same seed (another CPU's kernels, another thread count) end 40 epochs with
logits that differ by up to about 1e-3: enough to flip a digit whose top two
logits are that close, and so to change an accuracy in its last printed
digit. Chapter 12 therefore trains a model live (its accuracy is printed only
where no test digit is that close a call), checks that the live model agrees
with the *recorded* run of the same recipe to within ``AGREEMENT``, and
computes everything after that from the recorded weights in float64, which
every machine evaluates to the same printed digits.

``scripts/record_digit_vits.py`` makes the record (``data/digit_vits.npz``):
the three models of :data:`DIGIT_VIT_RUNS`, trained by :func:`train_tiny_vit`
on one thread, their float32 weights, and the commit, machine and accuracies
of the run.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_nonnegative_int, check_positive_int, check_real_scalar
from .vision_modules import TinyViT

__all__ = ["TINY_VIT_CONFIG", "DIGIT_VIT_RUNS", "AGREEMENT", "digit_vit", "train_tiny_vit", "load_digit_vits"]

#: Chapter 12's model: 16 patches of 2 x 2 pixels, width 32, four heads, two pre-norm blocks (TinyViT's arguments).
TINY_VIT_CONFIG = {
    "image_size": 8,
    "patch_size": 2,
    "d_model": 32,
    "num_heads": 4,
    "num_layers": 2,
    "dim_feedforward": 64,
}
#: The recorded runs, seed -> training settings: seed 0 is the chapter's main model, 1 and 2 a shorter recipe.
DIGIT_VIT_RUNS = {0: {"epochs": 40, "lr": 3e-3}, 1: {"epochs": 12, "lr": 6e-3}, 2: {"epochs": 12, "lr": 6e-3}}
#: How far (largest absolute logit difference on the test set) a model retrained anywhere may be from the record:
#: about ten times the largest difference measured between thread counts and CPU kernels (8e-4).
AGREEMENT = 1e-2
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


def _images_and_labels(x: Any, y: Any, name: str, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = next(model.parameters()).dtype
    if not isinstance(x, np.ndarray) or x.ndim != 4 or not np.issubdtype(x.dtype, np.floating):
        got = f"{x.dtype} array of shape {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise ValueError(f"x_{name} must be a float array of images (N, C, H, W); got {got}")
    if not isinstance(y, np.ndarray) or y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
        got = f"{y.dtype} array of shape {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
        raise ValueError(f"y_{name} must be an integer array of {len(x)} labels, one per image; got {got}")
    if len(x) == 0:
        raise ValueError(f"x_{name} holds no images")
    classes = model.head.out_features
    if y.min() < 0 or y.max() >= classes:
        raise ValueError(f"y_{name} must hold class labels in [0, {classes}); got {y.min()} to {y.max()}")
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
    smoothing 0.1. If a test set is given, its accuracy is recorded after each
    epoch: it is only watched, never trained on.

    Parameters
    ----------
    model : TinyViT
        Trained in its own dtype and left in eval mode.
    x_train : numpy.ndarray, shape (N, C, H, W)
    y_train : numpy.ndarray of int, shape (N,)
    epochs, seed, batch_size : int
    lr : float
        The peak learning rate.
    x_test, y_test : numpy.ndarray, optional
        Both or neither.

    Returns
    -------
    dict
        ``"step"`` (epoch numbers), ``"loss"`` (each epoch's mean training
        loss) and ``"accuracy"`` (each epoch's test accuracy; empty without a
        test set).

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
        model.eval()
        history["step"].append(epoch)
        history["loss"].append(float(np.mean(losses)))
        if test is not None:
            with torch.no_grad():
                history["accuracy"].append(float((model(test[0]).argmax(-1) == test[1]).double().mean()))
    return history


def load_digit_vits(dtype: torch.dtype = torch.float64) -> tuple[dict[int, TinyViT], dict[str, Any]]:
    """The recorded runs of :data:`DIGIT_VIT_RUNS`: trained TinyViTs, in eval mode, and the record.

    Parameters
    ----------
    dtype : torch.dtype, default torch.float64
        The models' dtype. The weights were stored in float32, as trained;
        float64 evaluates them with rounding far below any printed digit.

    Returns
    -------
    models : dict
        seed -> TinyViT.
    record : dict
        ``runs`` (the settings each model was trained with), ``test_accuracy``
        (per seed, as recorded), ``commit``, ``numerics`` (the machine) and
        ``seconds`` (training time per seed).

    Raises
    ------
    ValueError
        If ``dtype`` is not torch.float32 or torch.float64, or the record no
        longer matches :data:`DIGIT_VIT_RUNS` or :data:`TINY_VIT_CONFIG` (re-run
        ``scripts/record_digit_vits.py``).

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
    if runs != DIGIT_VIT_RUNS or record["config"] != TINY_VIT_CONFIG:
        raise ValueError(
            f"{_RECORD} was recorded for runs {runs} and config {record['config']}, but the package now defines "
            f"{DIGIT_VIT_RUNS} and {TINY_VIT_CONFIG}; re-run scripts/record_digit_vits.py"
        )
    models = {}
    for seed in runs:
        model = TinyViT(**TINY_VIT_CONFIG)
        prefix = f"seed{seed}/"
        state = {key[len(prefix) :]: torch.from_numpy(value) for key, value in stored.items() if key.startswith(prefix)}
        model.load_state_dict(state)
        models[seed] = model.to(dtype).eval()
    record["runs"], record["test_accuracy"] = runs, {int(s): a for s, a in record["test_accuracy"].items()}
    return models, record
