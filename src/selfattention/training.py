r"""Training tools: sequence tasks, the embedding lookup, cross-entropy and Adam, with their gradients.

Taught in chapter 11, which trains :class:`~selfattention.TinyEncoder` with
them in NumPy, and reused by the later chapters. Like the gradients of
chapter 10, each backward is named after its forward and checked against
``torch.autograd`` (``tests/test_training.py``).

For logits :math:`z` over V classes and N targets :math:`y`, with
:math:`p = \operatorname{softmax}(z)`:

.. math::

    L = -\frac{1}{N}\sum_{n} \log p_{n, y_n}, \qquad
    \frac{\partial L}{\partial z_n} = \frac{1}{N}\left(p_n - e_{y_n}\right).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._validation import (
    as_array,
    as_float_array,
    check_all_finite,
    check_bool,
    check_choice,
    check_min_ndim,
    check_nonnegative_int,
    check_positive_int,
    check_real_scalar,
)
from .params import _Container

__all__ = [
    "sequence_task",
    "source_positions",
    "embedding",
    "embedding_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "Adam",
    "minibatches",
]

TASKS = ("reverse", "shift", "sort")


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator, e.g. np.random.default_rng(0); got {type(rng).__name__}"
        )
    return rng


def sequence_task(
    kind: str, n: int, length: int, vocab_size: int, rng: np.random.Generator, offset: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random sequences of digits and the sequence a model must output for each.

    - ``"reverse"``: output ``i`` is input ``length - 1 - i`` (the mirrored position);
    - ``"shift"``: output ``i`` is input ``(i - offset) mod length`` (a copy, ``offset`` places back, wrapping);
    - ``"sort"``: the inputs in ascending order (which position to copy depends on the values).

    Parameters
    ----------
    kind : {"reverse", "shift", "sort"}
    n : int
        Number of sequences.
    length : int
        T, tokens per sequence.
    vocab_size : int
        V: tokens are drawn uniformly from ``0 … V-1``.
    rng : numpy.random.Generator
        The source of randomness; the same generator state gives the same sequences.
    offset : int, default 1
        Only for ``"shift"``.

    Returns
    -------
    inputs, targets : numpy.ndarray of int64, shape (n, length)

    Raises
    ------
    ValueError
        For an unknown kind, sizes that are not positive integers, or an ``rng`` that is not a Generator.

    Notes
    -----
    See chapter 11.
    """
    kind = check_choice(kind, TASKS, "kind")
    n = check_positive_int(n, "n", at_most=2**24)
    T = check_positive_int(length, "length", at_most=2**16)
    V = check_positive_int(vocab_size, "vocab_size", at_most=2**31)
    offset = check_nonnegative_int(offset, "offset")
    if n * T > 2**26:
        raise ValueError(f"n * length = {n * T:,} tokens is more than {2**26:,}; ask for fewer or shorter sequences")
    inputs = _check_rng(rng).integers(0, V, size=(n, T), dtype=np.int64)
    if kind == "sort":
        return inputs, np.sort(inputs, axis=1)
    return inputs, inputs[:, source_positions(kind, T, offset)]


def source_positions(kind: str, length: int, offset: int = 1) -> np.ndarray:
    """For a copying task, the input position each output position copies from: shape (length,).

    ``"reverse"`` gives ``[T-1, …, 1, 0]``; ``"shift"`` gives ``(i - offset) mod T``.
    ``"sort"`` has no fixed source (it depends on the values) and is refused.

    Raises
    ------
    ValueError
        For ``"sort"`` or an unknown kind, a length that is not a positive
        integer, or an offset that is not a non-negative integer.

    Notes
    -----
    See chapter 11, where a trained model's attention is compared with it.
    """
    kind = check_choice(kind, TASKS, "kind")
    T = check_positive_int(length, "length", at_most=2**16)
    offset = check_nonnegative_int(offset, "offset")
    if kind == "sort":
        raise ValueError("sort has no fixed source position: which input an output copies depends on the values")
    positions = np.arange(T)
    return positions[::-1].copy() if kind == "reverse" else (positions - offset % T) % T


def _token_ids(ids: Any, num_classes: int, name: str, what: str) -> np.ndarray:
    ids = as_array(ids, name)
    if ids.dtype == np.bool_ or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array of {what}; got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_classes):
        raise ValueError(f"{name} must lie in 0 … {num_classes - 1}; got values from {ids.min()} to {ids.max()}")
    return ids


def _table(table: Any) -> np.ndarray:
    table = as_float_array(table, "table")
    if table.ndim != 2 or 0 in table.shape:
        raise ValueError(f"table must be a (V, D) matrix with one row per token; got shape {table.shape}")
    check_all_finite(table, "table")
    return table


def embedding(ids: ArrayLike, table: ArrayLike) -> np.ndarray:
    """Look up one row of ``table`` per token id: ``table[ids]``, as ``torch.nn.functional.embedding``.

    Parameters
    ----------
    ids : array_like of int, any shape (...)
        Token ids in ``0 … V-1``.
    table : array_like, shape (V, D)

    Returns
    -------
    numpy.ndarray, shape (..., D)

    Raises
    ------
    ValueError
        If ``ids`` is not an integer array or an id is out of range, or ``table`` is not a finite matrix.

    Notes
    -----
    See chapter 11.
    """
    table = _table(table)
    return table[_token_ids(ids, table.shape[0], "ids", "token ids")]


def embedding_backward(grad_out: ArrayLike, ids: ArrayLike, table: ArrayLike) -> np.ndarray:
    r"""The gradient of :func:`embedding` with respect to the table (ids, being integers, have none).

    Row ``v`` of the result is the sum of the output gradients of every
    position whose id is ``v``; rows of ids that never occur are zero. A plain
    ``grad[ids] += grad_out`` would be wrong: NumPy writes a repeated id once,
    so ``np.add.at`` does the sum.

    Parameters
    ----------
    grad_out : array_like, shape (..., D)
        :math:`\partial L / \partial` the looked-up rows.
    ids, table
        The forward's arguments.

    Returns
    -------
    numpy.ndarray, shape (V, D)

    Raises
    ------
    ValueError
        As :func:`embedding`, or if ``grad_out`` is not the output's shape.

    Notes
    -----
    See chapter 11.
    """
    table = _table(table)
    ids = _token_ids(ids, table.shape[0], "ids", "token ids")
    grad_out = as_float_array(grad_out, "grad_out")
    expected = (*ids.shape, table.shape[1])
    if grad_out.shape != expected:
        raise ValueError(f"grad_out must have the output's shape ids.shape + (D,) = {expected}; got {grad_out.shape}")
    check_all_finite(grad_out, "grad_out")
    dtype = np.result_type(grad_out.dtype, table.dtype)
    grad = np.zeros(table.shape, dtype=np.promote_types(dtype, np.float32))  # float16 sums overflow at 65,504
    np.add.at(grad, ids, grad_out)  # a repeated id adds up; grad[ids] += grad_out would keep only one
    with np.errstate(over="ignore"):
        grad = grad.astype(dtype, copy=False)
    if not np.isfinite(grad).all():
        raise ValueError(f"the summed gradient of a repeated id overflowed {dtype}; compute in float32")
    return grad


def _logits_and_targets(logits: Any, targets: Any) -> tuple[np.ndarray, np.ndarray]:
    logits = as_float_array(logits, "logits")
    check_min_ndim(logits, "logits", 1, "(..., V)")
    if logits.shape[-1] == 0 or logits.size == 0:
        raise ValueError(f"logits must hold at least one score per class and one row; got shape {logits.shape}")
    check_all_finite(logits, "logits")
    targets = _token_ids(targets, logits.shape[-1], "targets", "class indices")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets must have the shape of logits without its class axis, {logits.shape[:-1]}; got {targets.shape}"
        )
    return logits, targets


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    if logits.dtype == np.float16:  # a sum of 65,504 or more exponentials (a 70k vocabulary) overflows float16
        return _log_softmax(logits.astype(np.float32))
    with np.errstate(over="ignore"):
        shifted = logits - logits.max(axis=-1, keepdims=True)  # the largest score becomes 0: exp cannot overflow
    if not np.isfinite(shifted).all():
        raise ValueError(
            f"logits span more than {logits.dtype}'s range within a row (from {logits.min():.3g} to "
            f"{logits.max():.3g}); scale them down"
        )
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy(logits: ArrayLike, targets: ArrayLike) -> float:
    r"""The mean negative log-probability of the targets, as ``torch.nn.functional.cross_entropy``.

    :math:`L = -\frac{1}{N}\sum_n \log \operatorname{softmax}(z_n)_{y_n}`, over
    every position of every sequence, computed through the log-sum-exp so
    that large logits do not overflow. Guessing uniformly among V classes
    gives :math:`\log V`.

    Parameters
    ----------
    logits : array_like, shape (..., V)
        Unnormalised scores.
    targets : array_like of int, shape (...)
        The right class at each position, in ``0 … V-1``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the shapes do not fit, a target is out of range, or a logit is not finite.

    Notes
    -----
    See chapter 11.
    """
    logits, targets = _logits_and_targets(logits, targets)
    log_p = _log_softmax(logits)
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)  # (..., 1)
    return float(-picked.mean())


def cross_entropy_backward(grad_loss: float, logits: ArrayLike, targets: ArrayLike) -> np.ndarray:
    r"""The gradient of :func:`cross_entropy` with respect to the logits: :math:`(p - e_y)/N`, times ``grad_loss``.

    Softmax and the log cancel: the gradient at a position is its predicted
    probabilities minus 1 at the right class, divided by the number of
    positions N the loss averages over. Targets, being integers, have none.

    Parameters
    ----------
    grad_loss : float
        :math:`\partial(\text{final loss}) / \partial L`; 1.0 when the cross-entropy is the loss.
    logits, targets
        The forward's arguments.

    Returns
    -------
    numpy.ndarray, shape of ``logits``

    Raises
    ------
    ValueError
        As :func:`cross_entropy`, or if ``grad_loss`` is not a finite number.

    Notes
    -----
    See chapter 11.
    """
    grad_loss = check_real_scalar(grad_loss, "grad_loss")
    logits, targets = _logits_and_targets(logits, targets)
    grad = np.exp(_log_softmax(logits))  # p, in float32 for float16 logits
    np.put_along_axis(grad, targets[..., None], np.take_along_axis(grad, targets[..., None], axis=-1) - 1, axis=-1)
    with np.errstate(over="ignore"):
        grad = (grad * (grad_loss / targets.size)).astype(logits.dtype, copy=False)
    if not np.isfinite(grad).all():
        raise ValueError(
            f"grad_loss={grad_loss:g} times the gradient overflows {logits.dtype}; use a smaller loss scale"
        )
    return grad


def _named(tree: Any, name: str, *, read_only: bool = False) -> dict[str, np.ndarray]:
    """The arrays of a container or dict by name. ``read_only`` (gradients): lists and tensors are read too."""
    if isinstance(tree, _Container):
        return dict(tree.named_arrays())
    if isinstance(tree, Mapping):
        arrays = {}
        for key, value in tree.items():
            if not isinstance(key, str):
                raise ValueError(f"{name} must be keyed by parameter names (strings); got the key {key!r}")
            if read_only:
                value = as_array(value, f"{name}[{key!r}]")  # a gradient is only read: any array-like will do
            elif not isinstance(value, np.ndarray):
                raise ValueError(
                    f"{name}[{key!r}] must be a NumPy array (it is updated in place); got {type(value).__name__}"
                )
            arrays[key] = value
        return arrays
    raise ValueError(
        f"{name} must be a weight container (such as a TinyEncoder) or a dict of name -> array; "
        f"got {type(tree).__name__}"
    )


class Adam:
    r"""The Adam optimiser (Kingma & Ba 2015), written out: it updates the parameters in place.

    For each parameter :math:`\theta` with gradient :math:`g`, at step :math:`t = 1, 2, \dots`:

    .. math::

        m \leftarrow \beta_1 m + (1-\beta_1) g, \qquad v \leftarrow \beta_2 v + (1-\beta_2) g^2,

        \theta \leftarrow \theta - \eta\, \frac{m / (1-\beta_1^t)}{\sqrt{v / (1-\beta_2^t)} + \epsilon}.

    The same update as ``torch.optim.Adam`` (without weight decay): the
    tests take several steps of both and compare.

    Parameters
    ----------
    lr : float, default 1e-3
        :math:`\eta`, the largest step any one weight takes, roughly.
    betas : (float, float), default (0.9, 0.999)
        Decay rates of the running mean of the gradient and of its square; each in [0, 1).
    eps : float, default 1e-8
        Keeps the division finite where :math:`v` is 0.

    Raises
    ------
    ValueError
        If a setting is out of range.

    Notes
    -----
    See chapter 11 and :cite:`kingma2015adam`.
    """

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.lr = check_real_scalar(lr, "lr", positive=True)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), e.g. (0.9, 0.999); got {betas!r}")
        self.betas = tuple(check_real_scalar(b, f"betas[{i}]") for i, b in enumerate(betas))
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"each beta must lie in [0, 1); got {self.betas}")
        self.eps = check_real_scalar(eps, "eps", positive=True)
        self.t = 0
        self._m: dict[str, np.ndarray] = {}
        self._v: dict[str, np.ndarray] = {}
        self._params: dict[str, np.ndarray] | None = None  # the arrays of the first step: the same ever after

    def step(self, params: Any, grads: Any) -> None:
        """Take one step: update every array of ``params`` in place from the same-named array of ``grads``.

        Parameters
        ----------
        params : weight container or dict of name -> numpy.ndarray
            The model's own arrays (not copies): they are changed in place.
        grads : weight container or dict of name -> array_like
            One gradient per parameter, with its shape, e.g. what
            :meth:`TinyEncoder.backward` returns; NumPy arrays, lists and
            torch tensors are all read.

        Raises
        ------
        ValueError
            If the names or shapes of ``grads`` differ from those of
            ``params`` (or from earlier steps), or a gradient is not finite
            (the loss diverged: lower the learning rate). Nothing is updated then.
        """
        weights, gradients = _named(params, "params"), _named(grads, "grads", read_only=True)
        if set(weights) != set(gradients):
            missing, extra = sorted(set(weights) - set(gradients)), sorted(set(gradients) - set(weights))
            raise ValueError(f"grads must have one array per parameter; missing {missing}, unexpected {extra}")
        if self._m and set(self._m) != set(weights):
            raise ValueError("params changed since the last step; use one Adam per model")
        if len({id(w) for w in weights.values()}) != len(weights):
            raise ValueError("params holds the same array under two names; each would be stepped twice")
        names = list(weights)
        for i, first in enumerate(names):  # views of one buffer that overlap would be stepped twice too
            for second in names[i + 1 :]:
                if np.shares_memory(weights[first], weights[second]):
                    raise ValueError(
                        f"params {first!r} and {second!r} share memory (views of one array); the shared "
                        "numbers would be stepped twice"
                    )
        for name, weight in weights.items():  # every check first: a refused step updates nothing
            grad = gradients[name]
            if grad.shape != weight.shape:
                raise ValueError(f"the gradient of {name} has shape {grad.shape}; the parameter has {weight.shape}")
            if name in self._m and self._m[name].shape != weight.shape:
                raise ValueError(
                    f"parameter {name} has shape {weight.shape} but had {self._m[name].shape} at the last step; "
                    "use one Adam per model"
                )
            if not np.issubdtype(weight.dtype, np.floating):
                raise ValueError(f"parameter {name} must be a float array to be updated; got dtype {weight.dtype}")
            if not weight.flags.writeable:
                raise ValueError(f"parameter {name} is read-only; Adam updates the model's own arrays in place")
            check_all_finite(weight, f"parameter {name}")  # a NaN weight would stay NaN, stepped or not
            if grad.dtype == np.bool_ or grad.dtype.kind not in "iuf":
                raise ValueError(f"the gradient of {name} must be an array of real numbers; got dtype {grad.dtype}")
            with np.errstate(over="ignore", invalid="ignore"):
                square_finite = np.isfinite(np.square(grad, dtype=_state_dtype(weight))).all()
            if not square_finite:
                raise ValueError(
                    f"the gradient of {name} is not finite (or its square overflows {weight.dtype}) at step "
                    f"{self.t + 1}: the loss diverged; lower the learning rate"
                )
        if self._params is not None and any(weights[name] is not self._params[name] for name in weights):
            changed = next(name for name in weights if weights[name] is not self._params[name])
            raise ValueError(
                f"params[{changed!r}] is not the array this Adam stepped before: its moments belong to another "
                "model (or a copy); use one Adam per model"
            )
        t = self.t + 1
        beta1, beta2 = self.betas
        steps = {}  # every parameter's new moments and values, kept until all are known to be finite
        for name, weight in weights.items():
            zeros = np.zeros(weight.shape, dtype=_state_dtype(weight)) if name not in self._m else None
            m, v = (self._m[name], self._v[name]) if zeros is None else (zeros, zeros)
            grad = gradients[name]
            if m.dtype != weight.dtype:  # float16 parameters: the gradient's square in float32, not rounded to 0
                grad = grad.astype(m.dtype)
            m = m * beta1 + (1 - beta1) * grad  # running mean of the gradient
            v = v * beta2 + (1 - beta2) * grad * grad  # running mean of its square
            m_hat = m / (1 - beta1**t)  # both start at 0: undo that bias
            v_hat = v / (1 - beta2**t)
            update = self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
            with np.errstate(over="ignore", invalid="ignore"):
                new = weight - (update if update.dtype == weight.dtype else update.astype(weight.dtype))
            if not np.isfinite(new).all():
                raise ValueError(
                    f"step {t} would make parameter {name} overflow {weight.dtype} (largest step "
                    f"{float(np.abs(update).max()):.3g}); lower the learning rate. Nothing was updated"
                )
            steps[name] = (m, v, new)
        self.t = t
        for name, (m, v, new) in steps.items():
            self._m[name], self._v[name] = m, v
            weights[name][...] = new  # in place: the model's own array
        if self._params is None:
            self._params = weights


def _state_dtype(weight: np.ndarray) -> np.dtype:
    """Adam's moments in at least float32: in float16, eps and a small gradient's square round to 0 (NaN steps)."""
    return np.promote_types(weight.dtype, np.float32)


def minibatches(
    *arrays: ArrayLike, batch_size: int, rng: np.random.Generator, drop_last: bool = False
) -> Iterator[tuple[np.ndarray, ...]]:
    """One pass over a fixed dataset in a random order: yields batches of the same rows of every array.

    Parameters
    ----------
    *arrays : array_like
        Each with the same length along axis 0 (the examples).
    batch_size : int
    rng : numpy.random.Generator
        Shuffles the order; the same state gives the same batches.
    drop_last : bool, default False
        Skip the last batch if it is smaller than ``batch_size``.

    Yields
    ------
    tuple of numpy.ndarray
        One slice of each array, in the order given.

    Raises
    ------
    ValueError
        If no array is given, the lengths differ, or ``batch_size`` is not a positive integer.

    Notes
    -----
    See chapter 11 (for a task generated on the fly, :func:`sequence_task` makes each batch instead).
    """
    if not arrays:
        raise ValueError("give at least one array to batch, e.g. minibatches(x, y, batch_size=32, rng=rng)")
    data = [as_array(a, f"arrays[{i}]") for i, a in enumerate(arrays)]
    for i, a in enumerate(data):
        if a.ndim == 0:  # a string or a dict reads as a 0-d array
            raise ValueError(f"arrays[{i}] must have an axis of examples (axis 0); got {type(arrays[i]).__name__}")
    lengths = {a.shape[0] for a in data}
    if len(lengths) != 1:
        raise ValueError(f"every array must have the same number of examples along axis 0; got lengths {lengths}")
    size = check_positive_int(batch_size, "batch_size")
    drop_last = check_bool(drop_last, "drop_last")
    return _batches(data, size, _check_rng(rng).permutation(data[0].shape[0]), drop_last)


def _batches(data: list[np.ndarray], size: int, order: np.ndarray, drop_last: bool) -> Iterator[tuple[np.ndarray, ...]]:
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        if drop_last and len(rows) < size:
            return
        yield tuple(a[rows] for a in data)
