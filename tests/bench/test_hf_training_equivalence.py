"""bench.studies.hf_training_equivalence: our fine-tuning steps against transformers' from one start."""

import numpy as np
import pytest

import albert_tf
from albert_tf import checkpoints
from albert_tf.config import AlbertConfig
from bench.studies.hf_training_equivalence import compare_finetuning_with_transformers, random_batches


def test_random_batches_are_padded_rows_with_labels():
    batches = random_batches(vocab_size=40, max_length=10, batch_size=6, count=3, num_classes=4, seed=1)
    assert len(batches) == 3
    for b in batches:
        lengths = b["input_mask"].sum(1)
        assert lengths.min() >= 3 and lengths.max() <= 10
        for row, n in enumerate(lengths):  # [CLS] ... [SEP], then padding of id 0 and mask 0
            assert b["input_ids"][row, 0] == 2 and b["input_ids"][row, n - 1] == 3
            assert not b["input_ids"][row, n:].any() and not b["input_mask"][row, n:].any()
        np.testing.assert_array_equal(b["labels"], b["input_ids"][:, 1] % 4)
    assert not np.array_equal(batches[0]["input_ids"], batches[1]["input_ids"])


@pytest.mark.parametrize("steps,warmup", [(0, 0), (5, 5)])
def test_bad_schedule_is_refused(steps, warmup):
    with pytest.raises(ValueError, match=f"steps={steps}"):
        compare_finetuning_with_transformers("unused", steps=steps, warmup_steps=warmup)


def test_finetuning_steps_match_transformers(tmp_path):
    pytest.importorskip("torch", reason="torch is in the [bench] extra, not the test extra")
    pytest.importorskip("transformers", reason="transformers is in the [bench] extra, not the test extra")
    config = AlbertConfig.tiny(hidden_size=32, embedding_size=16, num_hidden_layers=2, intermediate_size=64,
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    folder = checkpoints.save_huggingface(albert_tf.AlbertPretrainer(config), str(tmp_path))
    report = compare_finetuning_with_transformers(folder, steps=12, warmup_steps=3, learning_rate=3e-3)
    # Training moved the model (measured: loss -0.043, logits ~0.12), and after 12 steps of Adam at a high
    # rate the two stay within float32 rounding (measured 9e-7). Weight decay alone moves these logits by
    # ~4e-5 over the run, Adam without bias correction by far more: either mistake fails the bound.
    assert report["loss_moved"] > 0.02
    assert report["logit_scale"] > 0.05
    assert report["max_logit_diff_overall"] < 1e-5, report
    assert len(report["max_logit_diff"]) == 12
