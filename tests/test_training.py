"""Chapter 11: the training tools and TinyEncoder, against torch (autograd, nn modules, torch.optim.Adam)."""

from __future__ import annotations

import dataclasses
import warnings

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import selfattention as sa

matplotlib.use("Agg")

RNG = np.random.default_rng(0)
V, T, D, H = 7, 5, 8, 2


def _model(num_layers=1, positions=True, scale=None, seed=0):
    return sa.TinyEncoder.random(V, T, D, H, num_layers, positions=positions, scale=scale, seed=seed)


def _twin(model):
    twin = sa.TinyEncoderModule(V, T, D, H, model.num_layers, positions=model.positions is not None).double()
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in sa.tiny_encoder_state_dict(model).items()})
    return twin


# --- tasks ---------------------------------------------------------------------------------------


def test_tasks_follow_their_definitions():
    x, y = sa.sequence_task("reverse", 4, 6, 10, np.random.default_rng(0))
    assert x.shape == y.shape == (4, 6) and x.dtype == np.int64 and (y == x[:, ::-1]).all()
    x, y = sa.sequence_task("shift", 3, 6, 10, np.random.default_rng(0), offset=2)
    assert all(y[b, i] == x[b, (i - 2) % 6] for b in range(3) for i in range(6))
    x, y = sa.sequence_task("sort", 3, 6, 10, np.random.default_rng(0))
    assert (y == np.sort(x, axis=1)).all()
    assert list(sa.source_positions("reverse", 4)) == [3, 2, 1, 0]
    assert list(sa.source_positions("shift", 4, 1)) == [3, 0, 1, 2]


def test_tasks_are_reproducible_from_the_generator():
    a = sa.sequence_task("reverse", 5, 7, 9, np.random.default_rng(3))
    b = sa.sequence_task("reverse", 5, 7, 9, np.random.default_rng(3))
    assert all((p == q).all() for p, q in zip(a, b, strict=True))
    assert a[0].min() >= 0 and a[0].max() < 9


# --- embedding and cross-entropy ------------------------------------------------------------------


def test_embedding_and_its_backward_match_autograd_with_repeated_ids():
    table = RNG.normal(size=(6, 3))
    ids = np.array([[1, 4, 1], [5, 1, 0]])  # id 1 three times, 2 and 3 never
    g = RNG.normal(size=(2, 3, 3))
    table_t = torch.tensor(table, requires_grad=True)
    F.embedding(torch.from_numpy(ids), table_t).backward(torch.from_numpy(g))
    np.testing.assert_array_equal(sa.embedding(ids, table), table[ids])
    grad = sa.embedding_backward(g, ids, table)
    np.testing.assert_allclose(grad, table_t.grad.numpy(), rtol=1e-12, atol=0)
    assert (grad[[2, 3]] == 0).all()


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4)])
def test_cross_entropy_and_its_gradient_match_torch(shape):
    logits = RNG.normal(scale=3.0, size=(*shape, 6))
    targets = RNG.integers(0, 6, size=shape)
    logits_t = torch.tensor(logits, requires_grad=True)
    loss_t = F.cross_entropy(logits_t.reshape(-1, 6), torch.from_numpy(targets).reshape(-1))
    loss_t.backward()
    assert sa.cross_entropy(logits, targets) == pytest.approx(loss_t.item(), rel=1e-12)
    np.testing.assert_allclose(
        sa.cross_entropy_backward(1.0, logits, targets), logits_t.grad.numpy(), rtol=1e-10, atol=1e-15
    )
    np.testing.assert_allclose(
        sa.cross_entropy_backward(2.5, logits, targets), 2.5 * logits_t.grad.numpy(), rtol=1e-10, atol=1e-15
    )


def test_cross_entropy_does_not_overflow_and_is_log_v_for_equal_logits():
    big = np.array([[1000.0, 0.0, -1000.0], [0.0, 800.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sa.cross_entropy(big, np.array([0, 1])) == pytest.approx(0.0, abs=1e-12)
        assert np.isfinite(sa.cross_entropy_backward(1.0, big, np.array([2, 0]))).all()
    assert sa.cross_entropy(np.zeros((4, 10)), np.arange(4)) == pytest.approx(np.log(10), rel=1e-12)


# --- Adam ----------------------------------------------------------------------------------------


def test_adam_matches_torch_optim_adam_over_several_steps():
    rng = np.random.default_rng(1)
    params = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=4)}
    tensors = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
    ours = sa.Adam(lr=0.05, betas=(0.8, 0.99), eps=1e-6)
    theirs = torch.optim.Adam(tensors.values(), lr=0.05, betas=(0.8, 0.99), eps=1e-6)
    for _ in range(7):
        grads = {k: rng.normal(size=v.shape) * 10.0 ** rng.integers(-4, 3) for k, v in params.items()}
        ours.step(params, grads)
        for k, t in tensors.items():
            t.grad = torch.from_numpy(grads[k])
        theirs.step()
    for k in params:
        np.testing.assert_allclose(params[k], tensors[k].detach().numpy(), rtol=1e-12, atol=1e-15)
    assert ours.t == 7


def test_adam_first_step_moves_every_weight_by_the_learning_rate():
    w = np.zeros(4)
    sa.Adam(lr=0.3).step({"w": w}, {"w": np.array([1e-4, -5.0, 3e4, -2e-3])})
    np.testing.assert_allclose(w, [-0.3, 0.3, -0.3, 0.3], rtol=1e-4)


def test_adam_refuses_a_non_finite_gradient_and_updates_nothing():
    model = _model()
    before = [a.copy() for _, a in model.named_arrays()]
    grads = model.backward(np.zeros((2, T, V)), np.zeros((2, T), dtype=int))
    grads.head.weight[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"gradient of head.weight is not finite .* at step 1: the loss diverged"):
        sa.Adam().step(model, grads)
    assert all((a == b).all() for (_, a), b in zip(model.named_arrays(), before, strict=True))


# --- minibatches ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "size", "drop_last", "sizes"), [(10, 4, False, [4, 4, 2]), (10, 4, True, [4, 4])])
def test_minibatches_cover_the_rows_once_in_a_seeded_order(n, size, drop_last, sizes):
    x, y = np.arange(n) * 10, np.arange(n)
    batches = list(sa.minibatches(x, y, batch_size=size, rng=np.random.default_rng(0), drop_last=drop_last))
    assert [len(b[1]) for b in batches] == sizes
    assert all((bx == by * 10).all() for bx, by in batches)  # the same rows of every array
    seen = np.concatenate([b[1] for b in batches])
    assert len(set(seen)) == len(seen) and (drop_last or sorted(seen) == list(range(n)))
    again = list(sa.minibatches(x, y, batch_size=size, rng=np.random.default_rng(0), drop_last=drop_last))
    assert all((a[1] == b[1]).all() for a, b in zip(batches, again, strict=True))


# --- TinyEncoder -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_layers", "positions"), [(1, True), (2, True), (2, False)])
def test_tiny_encoder_forward_and_backward_match_its_torch_twin(num_layers, positions):
    model = _model(num_layers, positions, seed=num_layers)
    ids = RNG.integers(0, V, size=(3, 4))  # fewer tokens than the position table holds
    targets = RNG.integers(0, V, size=(3, 4))
    twin = _twin(model)
    logits_t = twin(torch.from_numpy(ids))
    F.cross_entropy(logits_t.reshape(-1, V), torch.from_numpy(targets).reshape(-1)).backward()
    logits, weights = model.forward(ids)
    np.testing.assert_allclose(logits, logits_t.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert weights.shape == (num_layers, 3, H, 4, 4)
    grads = model.backward(sa.cross_entropy_backward(1.0, logits, targets), ids)
    autograd = sa.tiny_encoder_from_state_dict({n: p.grad for n, p in twin.named_parameters()}, num_heads=H)
    pairs = list(zip(grads.named_arrays(), autograd.named_arrays(), strict=True))
    assert sum(a.size for _, a in grads.named_arrays()) == sum(p.numel() for p in twin.parameters())
    for (name, ours), (name_t, theirs) in pairs:
        assert name == name_t
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-13, err_msg=name)


def test_tiny_encoder_backward_matches_central_differences_with_a_scale():
    model = _model(num_layers=2, scale=0.9, seed=4)  # a scale nn.MultiheadAttention cannot express
    ids = RNG.integers(0, V, size=(2, T))
    targets = RNG.integers(0, V, size=(2, T))
    grads = dict(model.backward(sa.cross_entropy_backward(1.0, model.forward(ids)[0], targets), ids).named_arrays())
    rng = np.random.default_rng(5)
    for name, array in model.named_arrays():
        for index in [tuple(rng.integers(0, n) for n in array.shape) for _ in range(2)]:
            old = array[index]
            array[index] = old + 1e-6
            up = sa.cross_entropy(model.forward(ids)[0], targets)
            array[index] = old - 1e-6
            down = sa.cross_entropy(model.forward(ids)[0], targets)
            array[index] = old
            assert grads[name][index] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-9), name


def test_an_unbatched_sequence_gives_the_batch_of_one():
    model, ids = _model(num_layers=2), RNG.integers(0, V, size=T)
    logits, weights = model.forward(ids)
    batched, batched_weights = model.forward(ids[None])
    np.testing.assert_allclose(logits, batched[0], rtol=1e-12)
    np.testing.assert_allclose(weights, batched_weights[:, 0], rtol=1e-12)
    g = RNG.normal(size=logits.shape)
    for (name, a), (_, b) in zip(
        model.backward(g, ids).named_arrays(), model.backward(g[None], ids[None]).named_arrays(), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15, err_msg=name)


def test_the_scale_argument_matches_torch_sdpa_with_that_scale():
    x = RNG.normal(size=(2, 5, D))
    params = sa.AttentionParams.from_fused(RNG.normal(size=(D, 3 * D)), RNG.normal(size=(D, D)))
    y, _ = sa.multihead_attention(x, params, num_heads=H, scale=0.7)
    q, k, v = (torch.from_numpy(sa.split_heads(t, H)) for t in sa.project_qkv(x, params))
    expected = sa.merge_heads(F.scaled_dot_product_attention(q, k, v, scale=0.7).numpy()) @ params.w_out
    np.testing.assert_allclose(y, expected, rtol=1e-10)
    default, _ = sa.multihead_attention(x, params, num_heads=H)
    explicit, _ = sa.multihead_attention(x, params, num_heads=H, scale=1 / np.sqrt(D // H))
    np.testing.assert_allclose(default, explicit, rtol=1e-14)


def test_edit_weights_replaces_the_weights_and_leaving_them_changes_nothing():
    model, ids = _model(num_layers=2), RNG.integers(0, V, size=(3, T))
    logits, weights = model.forward(ids)
    same, same_weights = model.forward(ids, edit_weights=lambda layer, w: w)
    np.testing.assert_allclose(same, logits, rtol=1e-12)
    np.testing.assert_allclose(same_weights, weights, rtol=1e-12)
    uniform, uniform_weights = model.forward(ids, edit_weights=lambda layer, w: np.full_like(w, 1 / T))
    assert np.allclose(uniform_weights, 1 / T) and not np.allclose(uniform, logits)
    first_only = model.forward(ids, edit_weights=lambda layer, w: w if layer else np.full_like(w, 1 / T))[1]
    assert np.allclose(first_only[0], 1 / T) and not np.allclose(first_only[1], 1 / T)  # layer 1 left alone


def test_without_positions_the_model_is_permutation_equivariant():
    model, ids = _model(num_layers=2, positions=False), RNG.integers(0, V, size=(3, T))
    perm = np.random.default_rng(7).permutation(T)
    np.testing.assert_allclose(model.forward(ids[:, perm])[0], model.forward(ids)[0][:, perm], atol=1e-12)


def test_a_state_dict_round_trip_is_exact_and_copies():
    model = _model(num_layers=2)
    state = sa.tiny_encoder_state_dict(model)
    back = sa.tiny_encoder_from_state_dict(state, num_heads=H)
    for (name, a), (_, b) in zip(model.named_arrays(), back.named_arrays(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    state["head.weight"][0, 0] += 1.0
    assert model.head.weight[0, 0] != state["head.weight"][0, 0]
    assert set(state) == set(dict(sa.TinyEncoderModule(V, T, D, H, 2).named_parameters()))


def test_training_a_tiny_reversal_model_is_deterministic_and_learns():
    def run():
        model = sa.TinyEncoder.random(6, 4, 16, 2, seed=0)
        optimiser, rng = sa.Adam(lr=1e-2), np.random.default_rng(1)
        for _ in range(60):
            ids, targets = sa.sequence_task("reverse", 32, 4, 6, rng)
            logits, _ = model.forward(ids)
            optimiser.step(model, model.backward(sa.cross_entropy_backward(1.0, logits, targets), ids))
        x, y = sa.sequence_task("reverse", 200, 4, 6, np.random.default_rng(9))
        return model, float((model.predict(x) == y).mean())

    (first, accuracy), (second, _) = run(), run()
    assert accuracy > 0.95
    for (name, a), (_, b) in zip(first.named_arrays(), second.named_arrays(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_replace_checks_the_new_fields():
    model = _model()
    assert dataclasses.replace(model, scale=1.0).scale == 1.0
    with pytest.raises(ValueError, match=r"scale must be positive"):
        dataclasses.replace(model, scale=0.0)


def test_plot_learning_curves_draws_both_panels():
    run = {"step": [1, 2, 3], "loss": [2.0, 1.0, 0.5], "accuracy": [0.1, 0.5, 0.9]}
    fig = sa.plot_learning_curves({"a": run, "b": run}, chance=np.log(10))
    loss_ax, acc_ax = fig.axes
    assert loss_ax.get_yscale() == "log" and len(loss_ax.lines) == 3 and len(acc_ax.lines) == 2
    np.testing.assert_allclose(acc_ax.lines[0].get_ydata(), [10, 50, 90])
    matplotlib.pyplot.close(fig)


# --- bad input ----------------------------------------------------------------------------------

_GEN = np.random.default_rng(0)
_MODEL = _model()
_IDS = np.zeros((2, 3), dtype=int)
_RUN = {"step": [1, 2], "loss": [1.0, 0.5], "accuracy": [0.2, 0.4]}
_STATE2 = sa.tiny_encoder_state_dict(_model(num_layers=2))
_NO_POSITIONS = _model(positions=False)
_NO_HEAD_BIAS = dataclasses.replace(_MODEL, head=sa.Linear(_MODEL.head.weight))
_GQA = sa.AttentionParams(*(sa.Linear(np.ones((D, w))) for w in (D, D // 2, D // 2, D)))
_SHARED = np.ones(2)


def _without(state, key):
    return {k: v for k, v in state.items() if k != key}


BAD_INPUT = [
    (lambda: sa.sequence_task("mirror", 2, 3, 4, _GEN), r"kind must be one of \['reverse', 'shift', 'sort'\]"),
    (lambda: sa.sequence_task("reverse", 0, 3, 4, _GEN), r"n must be a positive integer; got 0"),
    (lambda: sa.sequence_task("reverse", 2**20, 2**10, 4, _GEN), r"tokens is more than"),
    (lambda: sa.sequence_task("reverse", 2, 3, 4, 0), r"rng must be a numpy.random.Generator"),
    (lambda: sa.source_positions("sort", 4), r"sort has no fixed source position"),
    (lambda: sa.source_positions("shift", 4, -1), r"offset must be a non-negative integer; got -1"),
    (lambda: sa.embedding([0.5, 1.0], np.ones((3, 2))), r"ids must be an integer array .* float64"),
    (lambda: sa.embedding([0, 3], np.ones((3, 2))), r"ids must lie in 0 … 2; got values from 0 to 3"),
    (lambda: sa.embedding([0, 1], np.ones(3)), r"table must be a \(V, D\) matrix"),
    (lambda: sa.embedding([True, False], np.ones((3, 2))), r"ids must be an integer array .* dtype bool"),
    (lambda: sa.embedding_backward(np.ones((2, 3)), [0, 1], np.ones((3, 2))), r"grad_out must have the output's"),
    (lambda: sa.cross_entropy(np.ones((2, 3)), [0, 3]), r"targets must lie in 0 … 2; got values from 0 to 3"),
    (lambda: sa.cross_entropy(np.ones((2, 3)), [0, 1, 2]), r"targets must have the shape of logits without"),
    (lambda: sa.cross_entropy(np.array([[np.nan, 0.0]]), [0]), r"logits must hold only finite"),
    (lambda: sa.cross_entropy(np.ones((0, 3)), np.zeros(0, int)), r"at least one score per class and one row"),
    (lambda: sa.cross_entropy_backward(np.inf, np.ones((2, 3)), [0, 1]), r"grad_loss must be finite"),
    (lambda: sa.Adam(lr=0), r"lr must be positive; got 0.0"),
    (lambda: sa.Adam(betas=(0.9, 1.0)), r"each beta must lie in \[0, 1\)"),
    (lambda: sa.Adam(betas=0.9), r"betas must be a pair"),
    (lambda: sa.Adam().step({"w": np.ones(2)}, {"v": np.ones(2)}), r"missing \['w'\], unexpected \['v'\]"),
    (lambda: sa.Adam().step({"w": np.ones(2)}, {"w": np.ones(3)}), r"the gradient of w has shape \(3,\)"),
    (lambda: sa.Adam().step([np.ones(2)], [np.ones(2)]), r"params must be a weight container .* got list"),
    (
        lambda: sa.Adam().step({"w": [1.0]}, {"w": [1.0]}),
        r"params\['w'\] must be a NumPy array \(it is updated in place\); got list",
    ),
    (lambda: sa.Adam().step({"w": np.ones(2, int)}, {"w": np.ones(2)}), r"parameter w must be a float array"),
    (lambda: sa.minibatches(batch_size=2, rng=_GEN), r"give at least one array"),
    (lambda: sa.minibatches(np.ones(3), np.ones(4), batch_size=2, rng=_GEN), r"the same number of examples"),
    (lambda: sa.minibatches(np.ones(3), batch_size=0, rng=_GEN), r"batch_size must be a positive integer; got 0"),
    (lambda: sa.TinyEncoder.random(10, 4, 6, 4), r"d_model=6 must be a multiple of num_heads=4"),
    (lambda: sa.TinyEncoder.random(10, 4, 8, 2, positions="yes"), r"positions must be True or False"),
    (lambda: sa.TinyEncoder.random(2**20, 2**16, 2**12, 2), r"more than 2\*\*27 weights"),
    (lambda: dataclasses.replace(_MODEL, num_heads=3), r"num_heads=3"),
    (lambda: dataclasses.replace(_MODEL, norms=()), r"norms must be a non-empty list of LayerNormParams"),
    (lambda: dataclasses.replace(_MODEL, positions=np.ones((4, 3))), r"positions must be a \(T_max, D=8\) table"),
    (lambda: dataclasses.replace(_MODEL, head=sa.Linear(np.ones((4, 7)))), r"must have the embedding's width D=8"),
    (lambda: _MODEL.forward(np.zeros((2, T + 1), int)), r"ids has 6 tokens but the position table covers 5"),
    (lambda: _MODEL.forward(np.zeros((2, 3))), r"ids must be integer token ids .* dtype float64"),
    (lambda: _MODEL.forward(np.zeros((1, 2, 3), int)), r"ids must be integer token ids of shape \(T,\) or \(B, T\)"),
    (lambda: _MODEL.forward(np.full((2, 3), V)), r"ids must lie in 0 … 6; got values from 7 to 7"),
    (lambda: _MODEL.forward(_IDS, edit_weights=3), r"edit_weights must be a function"),
    (lambda: _MODEL.forward(_IDS, edit_weights=lambda layer, w: w[..., :2]), r"edit_weights must return the"),
    (lambda: _MODEL.forward(_IDS, edit_weights=lambda layer, w: w * np.nan), r"the edited weights must hold only"),
    (lambda: _MODEL.backward(np.ones((2, 3, V + 1)), _IDS), r"grad_logits must have the logits' shape \(2, 3, 7\)"),
    (lambda: sa.tiny_encoder_from_state_dict([1], num_heads=2), r"state must be a mapping"),
    (lambda: sa.tiny_encoder_from_state_dict({}, num_heads=2), r"state is missing \['embedding.weight'"),
    (lambda: sa.tiny_encoder_state_dict("model"), r"model must be a TinyEncoder; got str"),
    (lambda: sa.TinyEncoderModule(10, 4, 6, 4), r"d_model=6 must be a multiple of num_heads=4"),
    (lambda: sa.TinyEncoderModule(10, 4, 8, 2)(torch.zeros(2, 3)), r"ids must be a \(B, T\) LongTensor"),
    (lambda: sa.TinyEncoderModule(10, 4, 8, 2)(torch.full((2, 3), 10)), r"ids must lie in 0 … 9"),
    (lambda: sa.TinyEncoderModule(10, 4, 8, 2)(torch.zeros(2, 5, dtype=torch.long)), r"ids has 5 tokens"),
    (lambda: sa.tiny_encoder_from_state_dict(_without(_STATE2, "norms.1.weight"), 2), r"missing \['norms.1.weight'\]"),
    (lambda: sa.tiny_encoder_from_state_dict({**_STATE2, "extra.weight": np.ones(2)}, 2), r"\['extra.weight'\]"),
    (lambda: sa.tiny_encoder_state_dict(_NO_HEAD_BIAS), r"every LayerNorm and the head must have a bias"),
    (lambda: sa.TinyEncoderModule(2**20, 4, 4096, 1), r"more than 2\*\*27 weights"),
    (lambda: sa.TinyEncoderModule(10, 4, 8, 2)(torch.zeros(0, 3, dtype=torch.long)), r"with B, T >= 1"),
    (
        lambda: _MODEL.forward(np.zeros((0, 3), int)),
        r"ids must be integer token ids .* with B, T >= 1; got shape \(0, 3\)",
    ),
    (lambda: _NO_POSITIONS.forward(np.zeros((1, 2**17), int)), r"attention weights per layer, more than"),
    (lambda: _MODEL.forward(_IDS, edit_weights=lambda layer, w: 1 / 0), r"edit_weights\(layer, weights\) raised Zero"),
    (lambda: _MODEL.forward(_IDS, edit_weights=lambda w: w), r"edit_weights\(layer, weights\) raised TypeError"),
    (lambda: dataclasses.replace(_MODEL, head=sa.Linear(np.ones((D, V + 1)))), r"the head must score the V=7 tokens"),
    (lambda: dataclasses.replace(_MODEL, attentions=(_GQA,), num_heads=4), r"TinyEncoder has no GQA"),
    (lambda: sa.sequence_task("sort", 2, 3, 4, _GEN, offset=-1), r"offset must be a non-negative integer; got -1"),
    (lambda: sa.Adam().step({"a": np.ones(2), "b": np.ones(2)}, {"a": np.ones(2), "b": np.ones(2) + 1j}), r"real"),
    (lambda: sa.Adam().step({"w": np.ones(2)}, {"w": np.array([True, False])}), r"got dtype bool"),
    (lambda: sa.Adam().step({"w": np.broadcast_to(1.0, (2,))}, {"w": np.ones(2)}), r"parameter w is read-only"),
    (lambda: sa.Adam().step({1: np.ones(2)}, {1: np.ones(2)}), r"keyed by parameter names \(strings\); got the key 1"),
    (lambda: sa.Adam().step({"a": _SHARED, "b": _SHARED}, {"a": _SHARED, "b": _SHARED}), r"the same array under"),
    (lambda: sa.Adam().step({"w": np.ones(2)}, {"w": np.full(2, 1e200)}), r"its square overflows float64"),
    (lambda: sa.cross_entropy([[1e308, -1e308, 0.0]], [1]), r"logits span more than float64's range"),
    (lambda: sa.plot_learning_curves({}), r"runs must be a non-empty mapping"),
    (lambda: sa.plot_learning_curves({"a": {"step": [1]}}), r"run 'a' must be a mapping with the keys"),
    (lambda: sa.plot_learning_curves({"a": {**_RUN, "loss": [1.0]}}), r"must have the same length"),
    (lambda: sa.plot_learning_curves({"a": {**_RUN, "loss": [1.0, 0.0]}}), r"every loss must be positive"),
    (lambda: sa.plot_learning_curves({"a": {**_RUN, "accuracy": [0.2, 40.0]}}), r"accuracy must lie between 0"),
    (lambda: sa.plot_learning_curves({"a": _RUN}, chance=-1), r"chance must be positive"),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_gets_a_clear_value_error(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=message):
            call()


def test_a_refused_adam_step_changes_nothing_and_a_shape_change_is_caught():
    adam, params = sa.Adam(), {"a": np.ones(2), "b": np.ones(2)}
    with pytest.raises(ValueError, match=r"gradient of b must be an array of real numbers"):
        adam.step(params, {"a": np.ones(2), "b": np.ones(2) + 1j})
    assert adam.t == 0 and (params["a"] == 1).all() and not adam._m
    adam.step(params, {"a": np.ones(2), "b": np.ones(2)})
    with pytest.raises(ValueError, match=r"parameter a has shape \(1,\) but had \(2,\) at the last step"):
        adam.step({"a": np.ones(1), "b": params["b"]}, {"a": np.ones(1), "b": np.ones(2)})


def test_a_large_shift_offset_wraps():
    assert list(sa.source_positions("shift", 4, 2**70)) == list(sa.source_positions("shift", 4, 2**70 % 4))


def test_minibatches_check_their_arguments_before_the_first_batch():
    with pytest.raises(ValueError, match=r"drop_last must be True or False"):
        sa.minibatches(np.ones(3), batch_size=2, rng=_GEN, drop_last="no")  # raised at the call, not at next()


def test_adam_steps_float16_parameters_without_nan_and_refuses_overlapping_views():
    """Issue 28: float16 moments rounded eps and small squares to 0 (NaN, -inf); overlapping views stepped twice."""
    for grad in (0.0, 1e-4, -0.5):
        w = {"w": np.ones(3, np.float16)}
        sa.Adam().step(w, {"w": np.full(3, grad, np.float16)})
        assert w["w"].dtype == np.float16 and np.isfinite(w["w"]).all()
        expected = 1.0 - (1e-3 * np.sign(grad) if grad else 0.0)
        np.testing.assert_allclose(w["w"], expected, rtol=1e-3)
    b = np.ones(4)
    with pytest.raises(ValueError, match=r"params 'a' and 'b' share memory \(views of one array\)"):
        sa.Adam(lr=0.1).step({"a": b, "b": b[:2]}, {"a": np.ones(4), "b": np.ones(2)})
    assert (b == 1).all()  # nothing was stepped
    halves = np.ones(4)
    sa.Adam(lr=0.1).step({"a": halves[:2], "b": halves[2:]}, {"a": np.ones(2), "b": np.ones(2)})  # disjoint: fine
