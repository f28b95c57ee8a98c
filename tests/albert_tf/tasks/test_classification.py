"""ClassificationTask.train_dataset: length-bucketed batches of raw strings."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf.tasks.base import TaskOptions
from albert_tf.tasks.classification import ClassificationData, CsvTask, packed_lengths
from tests.albert_tf import task_testlib


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return task_testlib.train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


def _data(n, pairs=False, seed=0):
    rng = np.random.default_rng(seed)
    words = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(n)]
    text_pairs = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(n)] if pairs else None
    return ClassificationData(texts, text_pairs, rng.integers(0, 2, size=n).astype(np.int32), ["0", "1"],
                              [str(i) for i in range(n)])


@pytest.mark.parametrize("pairs", [False, True])
def test_packed_lengths_equal_the_preprocessors_masks(spm_model, pairs):
    data = _data(40, pairs)
    options = TaskOptions(spm_model_file=spm_model, max_seq_length=24)
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=24)
    features = pre(*[tf.constant(x) for x in ([data.texts] + ([data.text_pairs] if pairs else []))])
    want = features["input_mask"].numpy().sum(axis=1)
    assert want.max() == 24 and want.min() < 24  # some truncated, some not
    np.testing.assert_array_equal(packed_lengths(data, options, chunk=7), want)


def test_train_dataset_batches_similar_lengths_and_each_example_once_a_pass(spm_model):
    data = _data(70)
    task = CsvTask("csv", TaskOptions(spm_model_file=spm_model, max_seq_length=64))
    lengths = packed_lengths(data, task.options)
    by_text = collections.defaultdict(list)
    for i, (text, label) in enumerate(zip(data.texts, data.labels)):
        by_text[text].append((i, int(label)))
    ds = task.train_dataset(data, batch_size=8, seed=3)
    # 70 examples: 9 batches a pass (seven of 8, two of 7); two passes.
    batches = list(ds.take(18).as_numpy_iterator())
    for pass_batches in (batches[:9], batches[9:]):
        seen = []
        for texts, labels in pass_batches:
            rows = [by_text[t.decode()] for t in texts]
            assert all(int(y) in [lab for _, lab in r] for r, y in zip(rows, labels))
            seen.extend(r[0][0] if len(r) == 1 else None for r in rows)
        assert sorted(len(t) for t, _ in pass_batches) == [7] * 2 + [8] * 7
        unique = [i for i in seen if i is not None]
        assert len(set(unique)) == len(unique) and len(seen) == 70
    # Each batch pads to its longest: far fewer padded tokens than random batches.
    index = {t: i for i, t in enumerate(data.texts)}
    padded = sum(len(t) * max(lengths[index[s.decode()]] for s in t) for t, _ in batches[:9])
    rng = np.random.default_rng(0)
    random_padded = np.mean([sum(len(b) * lengths[b].max() for b in np.array_split(rng.permutation(70), 9))
                             for _ in range(20)])
    assert padded < 0.8 * random_padded
    # Seeded: the same stream again.
    again = list(task.train_dataset(data, batch_size=8, seed=3).take(18).as_numpy_iterator())
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(batches, again))


def test_a_mix_of_pairs_and_single_texts_names_the_example():
    from albert_tf.tasks.classification import from_text_examples
    from pipelines.finetune.common import TextExample

    examples = [TextExample("a", "x", "y", "0", "f.tsv:2"), TextExample("b", "x", None, "0", "f.tsv:3")]
    with pytest.raises(ValueError, match="f.tsv:3: example 'b' has no second text"):
        from_text_examples(examples, ["0"], regression=False)


def test_pairs_and_the_mixed_length_fallback(spm_model):
    data = _data(20, pairs=True)
    task = CsvTask("csv", TaskOptions(spm_model_file=spm_model))
    (texts, pairs), labels = next(iter(task.train_dataset(data, batch_size=4, seed=0)))
    assert texts.shape == pairs.shape == labels.shape == (4,)
    pair_of = dict(zip(data.texts, data.text_pairs))
    assert all(pair_of[t.decode()] == p.decode() for t, p in zip(texts.numpy(), pairs.numpy()))
    plain = CsvTask("csv", TaskOptions(spm_model_file=spm_model, length_buckets=False))
    # Random batches: 20 examples, 5 batches of 4 a pass, each example once a pass.
    first_pass = list(plain.train_dataset(data, batch_size=4, seed=0).take(5).as_numpy_iterator())
    assert [len(t) for (t, _), _ in first_pass] == [4] * 5
    assert sorted(s.decode() for (t, _), _ in first_pass for s in t) == sorted(data.texts)


_MIRRORED = '''
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import albert_tf
from albert_tf.tasks.base import TaskOptions
from albert_tf.tasks.classification import ClassificationData, CsvTask
from tests.albert_tf import task_testlib
spm = sys.argv[1]
texts, labels = task_testlib.sentences(9)
data = ClassificationData(texts, None, labels, ["0", "1"], [str(i) for i in range(9)])
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = albert_tf.AlbertClassifier(task_testlib.tiny_config(), 2,
                                       preprocessor=albert_tf.AlbertTextPreprocessor(spm))
    model.compile(optimizer=albert_tf.optimizers.adamw(1e-3, num_train_steps=10))
ds = CsvTask("csv", TaskOptions(spm_model_file=spm)).train_dataset(data, 8, seed=0)
history = model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)
print("LOSS", history.history["loss"][-1])
'''


def test_batches_of_a_pass_split_over_two_replicas(spm_model):
    # 9 examples in batches of at most 8 are [5, 4], never [8, 1]: a batch of
    # one would leave a replica without rows (the encoder fails on it).
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _MIRRORED, spm_model], capture_output=True, text=True,
                          env=env, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loss = float(proc.stdout.split("LOSS")[-1])
    assert 0.0 < loss < 5.0
