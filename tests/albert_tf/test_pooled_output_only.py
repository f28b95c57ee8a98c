"""The last block at a few positions: `pooled_output_only` ([CLS] alone, for the heads that read nothing else)
and `output_positions` ([CLS] and the masked positions, for pretraining).

The promise: the same outputs there (against the NumPy reference in every sharing mode, packed or not, in the
OpenVINO int8 form's rank-3 tokens), the same logits, losses and gradients for every head that uses it, and less
work: the last block's dense layers see those rows only. The original's golden outputs are checked in
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
from albert_tf.models.pretrainer import pretraining_loss_terms

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


# Real positions of _inputs()'s first two rows; row 2 is all padding (position 0 always counts).
POSITIONS = np.array([[1, 6], [3, 2], [0, 0]], np.int32)


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
                                   inputs["segment_ids"], np.zeros([3, 1], np.int32))
    want_positions = np.take_along_axis(want["sequence_output"], POSITIONS[:, :, None], axis=1)
    pre.encoder.inference_packs_tokens = packs_tokens
    for form in (fused.tracing_layer_norms_for_openvino, fused.tracing_tokens_in_rank3):
        with form():
            pooled_only = pre.encoder(inputs, pooled_output_only=True)
            at_positions = pre.encoder(inputs, output_positions=POSITIONS)
        assert sorted(pooled_only) == ["pooled_output"] and sorted(at_positions) == ["pooled_output", "position_output"]
        for got in (pooled_only, at_positions):
            np.testing.assert_allclose(got["pooled_output"].numpy(), want["pooled_output"], atol=2e-4, rtol=1e-4,
                                       err_msg=form.__name__)
        np.testing.assert_allclose(at_positions["position_output"].numpy(), want_positions, atol=2e-4, rtol=1e-4,
                                   err_msg=form.__name__)


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
    encoder(_inputs(), output_positions=POSITIONS)
    assert rows == [real] * 5 + [3 * 3]  # [CLS] and two positions a row
    rows.clear()
    encoder(_inputs())
    assert rows == [real] * 6


def test_a_few_positions_refuse_all_layers():
    encoder = albert_tf.AlbertEncoder(AlbertConfig.tiny())
    for selected in ({"pooled_output_only": True}, {"output_positions": POSITIONS}):
        with pytest.raises(ValueError, match="return_all_layers"):
            encoder(_inputs(), return_all_layers=True, **selected)


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


def _pretraining_batch():
    batch = _inputs()
    batch.update(masked_lm_positions=POSITIONS, masked_lm_ids=np.array([[7, 9], [11, 13], [0, 0]], np.int32),
                 masked_lm_weights=np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]], np.float32),
                 next_sentence_labels=np.array([1, 0, 1], np.int32))
    return batch


def test_pretraining_computes_the_full_models_losses_and_gradients():
    cfg = tiny_config(num_hidden_layers=3, inner_group_num=2)
    pre = albert_tf.AlbertPretrainer(cfg)
    batch = _pretraining_batch()

    def whole_last_block():  # as the pretrainer computed before: every position, then the masked ones gathered
        out = dict(pre.encoder(batch, training=True))
        gathered = tf.gather(out["sequence_output"], POSITIONS, batch_dims=1)
        out["mlm_logits"] = pre.mlm_head(gathered, pre.encoder.embeddings.word_embeddings)
        out["sop_logits"] = pre.sop_head(out["pooled_output"])
        return out

    def terms_and_gradients(forward):
        with tf.GradientTape() as tape:
            out = forward()
            terms = pretraining_loss_terms(batch, out)
            loss = terms["mlm_nll_sum"] / terms["mlm_weight_sum"] + terms["sop_nll_sum"] / terms["num_examples"]
        return out, terms, tape.gradient(loss, pre.trainable_weights)

    got, got_terms, got_grads = terms_and_gradients(lambda: pre(batch, training=True))
    want, want_terms, want_grads = terms_and_gradients(whole_last_block)
    assert "sequence_output" not in got  # the last block ran at [CLS] and the masked positions only
    for key in ("mlm_logits", "sop_logits", "pooled_output"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), atol=1e-5, rtol=1e-5, err_msg=key)
    for key in want_terms:
        np.testing.assert_allclose(float(got_terms[key]), float(want_terms[key]), rtol=1e-5, err_msg=key)
    assert len(got_grads) == len(want_grads) >= 20
    for variable, g, w in zip(pre.trainable_weights, got_grads, want_grads):
        assert (g is None) == (w is None), variable.path
        if w is not None:
            np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(w).numpy(),
                                       atol=1e-5, rtol=1e-4, err_msg=variable.path)
    # Outside training the pretrainer returns every position, as before.
    assert "sequence_output" in pre(batch)
