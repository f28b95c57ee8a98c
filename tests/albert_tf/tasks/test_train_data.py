"""The tasks' training streams: seeded per pass, resumable at any batch, SQuAD's step count."""

import numpy as np

from albert_tf.tasks import span_qa
from albert_tf.tasks.base import TaskOptions
from albert_tf.tasks.multiple_choice import RaceTask
from pipelines.finetune import common, squad
from pipelines.finetune.race import RaceExample


def _race(n):
    return [RaceExample(f"r{i}", f"context {i}", tuple(f"c{i}-{k}" for k in range(4)), i % 4, "high", f"f:{i}")
            for i in range(n)]


def _ids(batch):
    x, y = batch
    return [int(t.decode().split()[1]) for t in x["text"]], y.tolist()


def test_race_stream_is_each_pass_in_its_seeded_order_and_resumes_at_any_batch():
    task = RaceTask("race", TaskOptions())
    data = _race(7)  # batch 3: 3 batches a pass (3, 2, 2)
    assert task.batches_per_pass(data, 3) == 3
    stream = [_ids(b) for b in task.train_dataset(data, 3, seed=5).take(9).as_numpy_iterator()]
    for p in range(3):  # pass p is shuffled_pass(seed 5, pass p): every question once, labels aligned
        want = [b.tolist() for b in common.shuffled_pass(7, 3, 5, p)]
        assert [ids for ids, _ in stream[3 * p:3 * p + 3]] == want
        assert all(labels == [i % 4 for i in ids] for ids, labels in stream[3 * p:3 * p + 3])
    assert stream[0:3] != stream[3:6]  # the second pass is not the first one replayed
    for start in (1, 4, 5):  # a resumed run: the same batches from there on
        resumed = [_ids(b) for b in task.train_dataset(data, 3, seed=5, start_batch=start).take(9 - start)
                   .as_numpy_iterator()]
        assert resumed == stream[start:]
    first = next(task.train_dataset(data, 3, seed=5).as_numpy_iterator())[0]
    assert first["choices"].shape == (3, 4) and first["choices"][0, 2].decode().endswith("-2")


def _squad_data(num_examples, windows):
    examples = [squad.SquadExample(f"q{i}", "?", "c", "c", 0) for i in range(num_examples)]
    zeros = np.zeros((windows, 4), np.int32)
    features = squad.SquadFeatures(
        input_ids=zeros, input_mask=zeros, segment_ids=zeros, p_mask=zeros,
        start_positions=np.arange(windows, dtype=np.int32), end_positions=np.zeros(windows, np.int32),
        is_impossible=np.zeros(windows, np.int32), example_index=np.zeros(windows, np.int32),
        unique_ids=np.zeros(windows, np.int64), doc_offset=np.zeros(windows, np.int32),
        tok_start_to_orig=[], tok_end_to_orig=[], token_is_max_context=[], num_examples=num_examples)
    return span_qa.SquadData(examples, features)


def test_squad_schedule_counts_questions_and_the_stream_covers_windows():
    task = span_qa.SquadTask("squad_v2", TaskOptions())
    data = _squad_data(num_examples=2, windows=5)
    assert task.num_examples(data) == 2  # the original: len(train_examples), not the 5 windows
    assert task.num_train_items(data) == 5 and task.batches_per_pass(data, 2) == 3
    x, y = next(task.train_dataset(data, 2, seed=0).as_numpy_iterator())
    assert sorted(x) == ["input_ids", "input_mask", "p_mask", "segment_ids"]
    assert sorted(y) == ["end_positions", "is_impossible", "start_positions"]
    assert y["start_positions"].tolist() == common.shuffled_pass(5, 2, 0, 0)[0].tolist()
