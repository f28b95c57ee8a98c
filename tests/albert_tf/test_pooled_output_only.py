"""`pooled_output_only`: the last block computes [CLS] alone, for the heads that read nothing else.

The promise: the same pooled output (against the NumPy reference in every sharing mode, packed or not, in the
OpenVINO int8 form's rank-3 tokens), the same logits and gradients for every head that uses it, and less work:
the last block's dense layers see one row per sequence. The original's golden outputs are checked in
test_checkpoints.
"""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.checkpoints import original_variable_map
from albert_tf.config import AlbertConfig
from albert_tf.layers import fused
from albert_tf.layers.feed_forward import AlbertFeedForward

from . import numpy_reference
from .task_testlib import tiny_config


def _inputs():
    rng = np.random.default_rng(3)
    ids = rng.integers(5, 100, size=(3, 7)).astype(np.int32)
    # A full row, a padded one and an all-padding filler row.
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [0] * 7], np.int32)
    segments = np.zeros_like(ids)
    segments[:, 4:] = 1
    return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments}


def _randomize(model, seed=1):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))


@pytest.mark.parametrize("packs_tokens", [False, True])
@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_the_pooled_output_matches_the_numpy_reference(sharing, packs_tokens):
    cfg = AlbertConfig.tiny(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2, sharing=sharing)
    pre = albert_tf.AlbertPretrainer(cfg)
    _randomize(pre)
    inputs = _inputs()
    weights = {name: v.numpy().astype(np.float64) for name, v in original_variable_map(pre).items()}
    ref_cfg = dict(hidden_size=cfg.hidden_size, num_hidden_layers=4, num_attention_heads=cfg.num_attention_heads,
                   inner_group_num=2, attention_groups=cfg.num_attention_groups, ffn_groups=cfg.num_ffn_groups)
    want = numpy_reference.forward(weights, ref_cfg, inputs["input_ids"], inputs["input_mask"],
                                   inputs["segment_ids"], np.zeros([3, 1], np.int32))["pooled_output"]
    pre.encoder.inference_packs_tokens = packs_tokens
    for form in (fused.tracing_layer_norms_for_openvino, fused.tracing_tokens_in_rank3):
        with form():
            got = pre.encoder(inputs, pooled_output_only=True)
        assert sorted(got) == ["pooled_output"]
        np.testing.assert_allclose(got["pooled_output"].numpy(), want, atol=2e-4, rtol=1e-4, err_msg=form.__name__)


@pytest.mark.parametrize("packs_tokens", [False, True])
def test_the_last_block_runs_its_dense_layers_on_one_row_per_sequence(monkeypatch, packs_tokens):
    cfg = AlbertConfig.tiny(num_hidden_layers=3, inner_group_num=2)
    encoder = albert_tf.AlbertEncoder(cfg)
    encoder.inference_packs_tokens = packs_tokens
    rows = []
    original = AlbertFeedForward.call

    def recording(self, x, training=None):
        rows.append(int(np.prod(x.shape[:-1])))
        return original(self, x, training=training)

    monkeypatch.setattr(AlbertFeedForward, "call", recording)
    encoder(_inputs(), pooled_output_only=True)
    real = 7 + 4 + 7 if packs_tokens else 3 * 7  # packing: position 0 and an all-padding row count as real
    assert rows == [real] * 5 + [3]
    rows.clear()
    encoder(_inputs())
    assert rows == [real] * 6


def test_pooled_output_only_refuses_all_layers():
    encoder = albert_tf.AlbertEncoder(AlbertConfig.tiny())
    with pytest.raises(ValueError, match="return_all_layers"):
        encoder(_inputs(), pooled_output_only=True, return_all_layers=True)


def _heads():
    cfg = tiny_config(num_hidden_layers=3, inner_group_num=2)
    return {
        "classifier": (albert_tf.AlbertClassifier(cfg, 3, dropout_rate=0.0), tf.constant([2, 0, 1])),
        "regression": (albert_tf.AlbertClassifier(cfg, 1, dropout_rate=0.0), tf.constant([0.5, -1.0, 2.0])),
        "multiple choice": (albert_tf.AlbertMultipleChoice(cfg, 2, dropout_rate=0.0), tf.constant([1, 0, 1])),
    }


def _head_inputs(name):
    inputs = _inputs()
    if name == "multiple choice":  # two choices a question: rows 0-1 and 2-3 (the filler row twice)
        return {k: np.stack([v[[0, 1]], v[[1, 2]], v[[2, 0]]]) for k, v in inputs.items()}
    return inputs


@pytest.mark.parametrize("name", ["classifier", "regression", "multiple choice"])
def test_every_pooled_head_gives_the_full_computations_logits_and_gradients(name):
    model, labels = _heads()[name]
    assert model.reads_pooled_output_only
    inputs = _head_inputs(name)

    def logits_and_gradients():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss, _ = model.loss_terms(inputs, labels, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        return [model(inputs, training=False).numpy(), logits.numpy()], grads

    got, got_grads = logits_and_gradients()
    # The whole last block, in one batch (the classifier's inference buckets ask for the pooled output only).
    model.reads_pooled_output_only = False
    model.inference_rows_per_bucket = None
    want, want_grads = logits_and_gradients()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)
    checked = 0
    for variable, g, w in zip(model.trainable_weights, got_grads, want_grads):
        if w is None:
            assert g is None, variable.path
            continue
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(w).numpy(),
                                   atol=1e-5, rtol=1e-4, err_msg=variable.path)
        checked += 1
    assert checked >= 20  # embeddings, every block's weights, pooler and head


def test_mean_pooling_reads_the_whole_sequence():
    model = albert_tf.AlbertClassifier(tiny_config(), 2, pooling="mean")
    assert not model.reads_pooled_output_only
    inputs = _inputs()
    sequence = model.encoder(inputs)["sequence_output"].numpy()
    mask = inputs["input_mask"][:, :, None]
    mean = (sequence * mask).sum(1) / np.maximum(mask.sum(1), 1)
    want = mean @ model.head.output_weights.numpy().T + model.head.output_bias.numpy()
    np.testing.assert_allclose(model(inputs).numpy(), want, atol=1e-5)
