"""The record format and the training reader (static and dynamic masking,
per-worker sharding)."""

import os

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from pipelines import instances
from pipelines import masking
from pipelines import tfrecords

from .test_instances import read_docs

SEQ, PRED = 48, 8


@pytest.fixture(scope="module")
def record_files(tmp_path_factory, vocab, corpus_file):
    """Three files of records made by the instance builder (~100 records each)."""
    out = tmp_path_factory.mktemp("records")
    cfg = instances.InstanceConfig(
        masking=masking.MaskingConfig(vocab_size=vocab.vocab_size, max_predictions_per_seq=PRED),
        max_seq_length=SEQ, dupe_factor=1)
    builder = instances.InstanceBuilder(vocab, cfg)
    docs = read_docs(corpus_file)[:60]
    feats, _ = builder.build(tf.ragged.constant(docs), tf.range(len(docs), dtype=tf.int64))
    serialized = tfrecords.serialize_examples(feats).numpy()
    paths = []
    for i in range(3):
        path = str(out / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for record in serialized[i::3]:
                w.write(record)
        paths.append(path)
    return paths, {k: v.numpy() for k, v in feats.items()}, vocab.vocab_size


def test_serialized_examples_equal_python_protobuf():
    feats = {
        "input_ids": [[2, 40, 4, 3, 41, 3, 0]], "input_mask": [[1, 1, 1, 1, 1, 1, 0]],
        "segment_ids": [[0, 0, 0, 0, 1, 1, 0]], "token_boundary": [[1, 1, 1, 1, 1, 1, 0]],
        "masked_lm_positions": [[2, 0]], "masked_lm_ids": [[300, 0]],
        "masked_lm_weights": [[1.0, 0.0]], "next_sentence_labels": [1],
    }
    ours = tfrecords.serialize_examples({k: tf.constant(v) for k, v in feats.items()}).numpy()[0]
    want = tf.train.Example()
    for name in pipelines.FEATURE_NAMES:  # field by field: map order follows insertion here
        value = np.ravel(feats[name]).tolist()
        if name == "masked_lm_weights":
            want.features.feature[name].float_list.value.extend(value)
        else:
            want.features.feature[name].int64_list.value.extend(value)
    assert tf.train.Example.FromString(ours) == want
    parsed = tfrecords.parse_examples(tf.constant([ours]), 7, 2)
    assert parsed["next_sentence_labels"].shape == [1]
    assert parsed["masked_lm_ids"].dtype == tf.int32
    assert parsed["masked_lm_weights"].dtype == tf.float32
    np.testing.assert_array_equal(parsed["input_ids"].numpy(), feats["input_ids"])


def test_eval_reader_reads_everything_once_with_right_types(record_files):
    paths, feats, _ = record_files
    ds = pipelines.pretraining_dataset(",".join(paths), batch_size=32, max_seq_length=SEQ,
                                       max_predictions_per_seq=PRED, is_training=False)
    batches = list(ds)
    total = sum(int(b["input_ids"].shape[0]) for b in batches)
    assert total == len(feats["input_ids"])
    b = batches[0]
    assert b["input_ids"].dtype == tf.int32 and b["input_ids"].shape == [32, SEQ]
    assert b["masked_lm_weights"].dtype == tf.float32
    assert b["next_sentence_labels"].shape == [32]
    got = np.sort(np.concatenate([x["input_ids"].numpy() for x in batches]), axis=0)
    np.testing.assert_array_equal(got, np.sort(feats["input_ids"], axis=0))


def test_training_reader_shuffles_repeats_and_drops_remainder(record_files):
    paths, feats, _ = record_files
    ds = pipelines.pretraining_dataset(paths, batch_size=64, max_seq_length=SEQ,
                                       max_predictions_per_seq=PRED, seed=3)
    batches = [b["input_ids"].numpy() for b in ds.take(8)]  # more than one epoch
    assert all(b.shape == (64, SEQ) for b in batches)
    again = [b["input_ids"].numpy() for b in pipelines.pretraining_dataset(
        paths, batch_size=64, max_seq_length=SEQ, max_predictions_per_seq=PRED,
        seed=3).take(8)]
    np.testing.assert_array_equal(np.stack(batches), np.stack(again))  # seeded


def test_per_worker_sharding_is_disjoint_and_complete(record_files):
    paths, feats, _ = record_files
    seen = []
    for num_pipelines in (2, 5):  # 5 > 3 files: falls back to record sharding
        rows = []
        for i in range(num_pipelines):
            ctx = tf.distribute.InputContext(num_input_pipelines=num_pipelines,
                                             input_pipeline_id=i, num_replicas_in_sync=1)
            ds = pipelines.pretraining_dataset(paths, 16, SEQ, PRED, is_training=False,
                                               input_context=ctx)
            rows.append(np.concatenate([b["input_ids"].numpy() for b in ds]))
        allrows = np.concatenate(rows)
        assert len(allrows) == len(feats["input_ids"])
        np.testing.assert_array_equal(np.sort(allrows, axis=0),
                                      np.sort(feats["input_ids"], axis=0))
        seen.append(len(rows[0]))
    assert seen[0] < len(feats["input_ids"])


def test_dynamic_masking_restores_and_remasks(record_files):
    paths, feats, vocab_size = record_files
    n = len(feats["input_ids"])

    def epochs(seed, count=2):
        ds = pipelines.pretraining_dataset(
            paths[:1], batch_size=8, max_seq_length=SEQ, max_predictions_per_seq=PRED,
            is_training=True, masking="dynamic", seed=seed, vocab_size=vocab_size,
            shuffle_buffer_size=1)
        return [b for b in ds.take(count * (n // 3) // 8)]

    first = epochs(5)
    unmasked_ref = {tuple(r) for r in tfrecords.unmasked_input_ids(
        {k: tf.constant(v) for k, v in feats.items()}).numpy().tolist()}
    for b in first:
        ids = tfrecords.unmasked_input_ids(b).numpy()
        # Restoring the new masks gives back a sequence of the corpus.
        for row in ids.tolist():
            assert tuple(row) in unmasked_ref
        w = b["masked_lm_weights"].numpy()
        num = w.sum(axis=1)
        assert (num >= 1).all() and (num <= PRED).all()
        pos = b["masked_lm_positions"].numpy()
        special = np.isin(np.take_along_axis(ids, pos, 1), [2, 3]) & (w > 0)
        assert not special.any()
    # Same seed: same masks; another seed or another epoch: different masks.
    again = epochs(5)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a["masked_lm_positions"], b["masked_lm_positions"])
    other = epochs(6)
    assert any((a["masked_lm_positions"].numpy() != b["masked_lm_positions"].numpy()).any()
               for a, b in zip(first, other))
    per_epoch = len(first) // 2
    by_seq = {}
    changed = 0
    for b in first:
        for ids_row, pos_row in zip(tfrecords.unmasked_input_ids(b).numpy().tolist(),
                                    b["masked_lm_positions"].numpy().tolist()):
            key = tuple(ids_row)
            if key in by_seq:
                changed += by_seq[key] != pos_row
            by_seq[key] = pos_row
    assert per_epoch > 0 and changed > 0


def test_reader_errors(record_files, tmp_path):
    paths, _, _ = record_files
    with pytest.raises(ValueError, match="'sometimes'"):
        pipelines.pretraining_dataset(paths, 8, SEQ, PRED, masking="sometimes")
    with pytest.raises(ValueError, match="vocab_size"):
        pipelines.pretraining_dataset(paths, 8, SEQ, PRED, masking="dynamic")
    with pytest.raises(FileNotFoundError, match="none-"):
        pipelines.pretraining_dataset(os.path.join(str(tmp_path), "none-*"), 8, SEQ, PRED)


def hand_made_shard(path, **changes):
    """Two records of length 6 (P=2): [CLS] 10 [MASK] [SEP] 11 [SEP], valid for
    vocab_size >= 12 and type_vocab_size 2, with `changes` (feature -> (row, col, value))."""
    feats = {
        "input_ids": [[2, 10, 4, 3, 11, 3]] * 2, "input_mask": [[1] * 6] * 2,
        "segment_ids": [[0, 0, 0, 0, 1, 1]] * 2, "token_boundary": [[1] * 6] * 2,
        "masked_lm_positions": [[2, 0]] * 2, "masked_lm_ids": [[9, 0]] * 2,
        "masked_lm_weights": [[1.0, 0.0]] * 2, "next_sentence_labels": [0, 1],
    }
    feats = {k: np.array(v) for k, v in feats.items()}
    for name, (row, col, value) in changes.items():
        feats[name][row, col] = value
    with tf.io.TFRecordWriter(path) as w:
        for record in tfrecords.serialize_examples(
                {k: tf.constant(v) for k, v in feats.items()}).numpy():
            w.write(record)
    return path


@pytest.mark.parametrize("feature,value,limit,masking", [
    ("input_ids", 130, "vocab_size=120", "static"),
    ("masked_lm_ids", 120, "vocab_size=120", "static"),
    ("segment_ids", 2, "type_vocab_size=2", "static"),
    ("segment_ids", -1, "type_vocab_size=2", "static"),
    ("masked_lm_positions", 6, "max_seq_length=6", "static"),
    ("input_ids", 500, "vocab_size=120", "dynamic"),
])
def test_out_of_range_ids_stop_the_reader_naming_feature_value_and_limit(
        tmp_path, feature, value, limit, masking):
    # On GPU/TPU an embedding gather with such an id silently reads zeros.
    col = {"masked_lm_ids": 0, "masked_lm_positions": 1}.get(feature, 1)
    path = hand_made_shard(str(tmp_path / "bad.tfrecord"), **{feature: (1, col, value)})
    ds = pipelines.pretraining_dataset(path, 2, 6, 2, is_training=False, masking=masking,
                                       vocab_size=120, type_vocab_size=2)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(ds)
    assert f"{feature} holds {value}, outside [0, {limit})" in error.value.message


def test_in_range_ids_pass_and_limits_are_optional(tmp_path):
    good = hand_made_shard(str(tmp_path / "good.tfrecord"))
    batch = next(iter(pipelines.pretraining_dataset(good, 2, 6, 2, is_training=False,
                                                    vocab_size=12, type_vocab_size=2)))
    np.testing.assert_array_equal(batch["input_ids"].numpy()[0], [2, 10, 4, 3, 11, 3])
    # Without limits only the positions (always known) are checked.
    bad = hand_made_shard(str(tmp_path / "bad.tfrecord"), input_ids=(0, 1, 999))
    batch = next(iter(pipelines.pretraining_dataset(bad, 2, 6, 2, is_training=False)))
    assert batch["input_ids"].numpy()[0, 1] == 999
