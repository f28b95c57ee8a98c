"""pipelines.finetune.common: length buckets for fine-tuning batches."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from pipelines.finetune import common


def test_group_by_length_hand_worked():
    # order 0..6, window 4: [0,1,2,3] has lengths [5,1,4,2] -> sorted 1,3,2,0 -> [1,3], [2,0];
    # then [4,5,6] with lengths [6,3,3] -> 5,6 (tie kept in order), 4 -> [5,6], [4].
    lengths = [5, 1, 4, 2, 6, 3, 3]
    batches = common.group_by_length(range(7), lengths, batch_size=2, window=4)
    assert [b.tolist() for b in batches] == [[1, 3], [2, 0], [5, 6], [4]]
    # Another order: the window decides who can share a batch.
    batches = common.group_by_length([6, 5, 4, 3, 2, 1, 0], lengths, batch_size=2, window=4)
    assert [b.tolist() for b in batches] == [[3, 6], [5, 4], [1, 2], [0]]


def test_group_by_length_rejects_a_window_that_is_not_a_multiple_of_the_batch():
    with pytest.raises(ValueError, match="window 5"):
        common.group_by_length(range(4), [1, 2, 3, 4], batch_size=2, window=5)


def test_each_pass_sees_every_example_once_in_batches_of_near_lengths():
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 120, size=1000)
    for pass_index in range(3):
        batches = common.length_bucketed_pass(lengths, 32, seed=7, pass_index=pass_index, batches_per_window=10)
        seen = np.concatenate(batches)
        assert sorted(seen.tolist()) == list(range(1000))  # each example exactly once
        assert [len(b) for b in batches].count(32) == 31 and sorted(len(b) for b in batches)[0] == 8
        # Padding: a batch's longest against its mean. Random batches of 32 from
        # 5..119 pad to ~115 for a mean of ~62; sorted windows of 320 keep each
        # batch within ~12 tokens.
        spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
        random_spread = np.mean([lengths[b].max() - lengths[b].min() for b in np.array_split(
            rng.permutation(1000), 32)])
        assert spread < 20 and random_spread > 90


def test_passes_are_seeded_and_differ():
    lengths = np.arange(200) % 37
    a = common.length_bucketed_pass(lengths, 8, seed=1, pass_index=0)
    b = common.length_bucketed_pass(lengths, 8, seed=1, pass_index=0)
    c = common.length_bucketed_pass(lengths, 8, seed=1, pass_index=1)
    d = common.length_bucketed_pass(lengths, 8, seed=2, pass_index=0)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert not all(np.array_equal(x, y) for x, y in zip(a, d))
    # The batch order is shuffled: lengths do not rise along the pass (one
    # window holds the whole pass here, so its sorted order would rise).
    maxima = [lengths[x].max() for x in a]
    assert maxima != sorted(maxima)


def test_dataset_follows_the_passes_and_keeps_columns_aligned():
    texts = tf.constant([f"t{i}" for i in range(10)])
    labels = tf.constant(np.arange(10, dtype=np.int32) * 10)
    lengths = [3, 9, 1, 7, 5, 2, 8, 4, 6, 10]
    ds = common.length_bucketed_dataset((texts, labels), lengths, batch_size=4, seed=5)
    got = list(ds.take(6).as_numpy_iterator())  # 3 batches a pass (4, 4, 2), two passes
    counts = collections.Counter()
    for pass_index in range(2):
        want = common.length_bucketed_pass(lengths, 4, 5, pass_index)
        for (t, y), idx in zip(got[3 * pass_index:3 * pass_index + 3], want):
            assert [s.decode() for s in t] == [f"t{i}" for i in idx]
            assert y.tolist() == [10 * i for i in idx]
            counts.update(idx.tolist())
    assert counts == {i: 2 for i in range(10)}
    # The same seed gives the same stream.
    again = list(common.length_bucketed_dataset((texts, labels), lengths, 4, 5).take(6).as_numpy_iterator())
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(got, again))


def test_dataset_rejects_lengths_of_another_size():
    with pytest.raises(ValueError, match="3 rows but there are 2 lengths"):
        common.length_bucketed_dataset(tf.constant(["a", "b", "c"]), [1, 2], 2, 0)
