"""pipelines.finetune.common: length buckets for fine-tuning batches."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from pipelines.finetune import common


def test_batch_sizes_of_a_pass_are_equal_up_to_one():
    assert common.pass_batch_sizes(7, 2) == [2, 2, 2, 1]
    assert common.pass_batch_sizes(9, 8) == [5, 4]  # not [8, 1]: no replica left without rows
    assert common.pass_batch_sizes(64, 32) == [32, 32]
    for n, b in [(1, 4), (33, 32), (1000, 32), (70, 8)]:
        sizes = common.pass_batch_sizes(n, b)
        assert sum(sizes) == n and max(sizes) <= b and max(sizes) - min(sizes) <= 1
        assert len(sizes) == -(-n // b)


def test_group_by_length_hand_worked():
    # 7 examples in batches of at most 2: sizes [2, 2, 2, 1]; 2 batches a window.
    # Window 1, order[0:4] = [0,1,2,3], lengths [5,1,4,2] -> sorted 1,3,2,0 -> [1,3], [2,0];
    # window 2, [4,5,6], lengths [6,3,3] -> 5,6 (tie kept in order), 4 -> [5,6], [4].
    lengths = [5, 1, 4, 2, 6, 3, 3]
    batches = common.group_by_length(range(7), lengths, batch_size=2, batches_per_window=2)
    assert [b.tolist() for b in batches] == [[1, 3], [2, 0], [5, 6], [4]]
    # Another order: the window decides who can share a batch.
    batches = common.group_by_length([6, 5, 4, 3, 2, 1, 0], lengths, batch_size=2, batches_per_window=2)
    assert [b.tolist() for b in batches] == [[3, 6], [5, 4], [1, 2], [0]]


def test_group_by_length_rejects_an_empty_window():
    with pytest.raises(ValueError, match="batches_per_window 0"):
        common.group_by_length(range(4), [1, 2, 3, 4], batch_size=2, batches_per_window=0)


def test_each_pass_sees_every_example_once_in_batches_of_near_lengths():
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 120, size=1000)
    for pass_index in range(3):
        batches = common.length_bucketed_pass(lengths, 32, seed=7, pass_index=pass_index, batches_per_window=10)
        seen = np.concatenate(batches)
        assert sorted(seen.tolist()) == list(range(1000))  # each example exactly once
        assert sorted(len(b) for b in batches) == [31] * 24 + [32] * 8
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
    got = list(ds.take(6).as_numpy_iterator())  # 3 batches a pass (4, 3, 3), two passes
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
