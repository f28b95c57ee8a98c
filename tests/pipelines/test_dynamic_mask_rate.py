"""Dynamic masking at a higher rate than the records' (albert-pretrain
--masking=dynamic --masked_lm_prob): more masked positions per row, same
n-gram masking rules."""

import numpy as np
import pytest

import pipelines
from pipelines import masking, tfrecords

from .test_tfrecords import PRED, SEQ, record_files  # noqa: F401 (fixture)


@pytest.mark.parametrize("length, records, prob, expected", [
    (128, 20, 0.15, 20),   # round(19.2) = 19 < 20: the records' count
    (128, 20, 0.4, 51),    # round(51.2)
    (64, 10, 0.25, 16),
    (48, 8, 0.1, 8),
])
def test_dynamic_predictions_per_seq_by_hand(length, records, prob, expected):
    assert tfrecords.dynamic_predictions_per_seq(length, records, prob) == expected


def _batches(paths, vocab_size, prob):
    ds = pipelines.pretraining_dataset(
        paths, batch_size=16, max_seq_length=SEQ, max_predictions_per_seq=PRED, is_training=True,
        masking="dynamic", seed=3, vocab_size=vocab_size, masked_lm_prob=prob, shuffle_buffer_size=1)
    return list(ds.take(6))


def test_higher_rate_masks_more_positions_per_row(record_files):  # noqa: F811
    paths, feats, vocab_size = record_files
    corpus_rows = {tuple(r) for r in tfrecords.unmasked_input_ids(
        {k: np.asarray(v) for k, v in feats.items()}).numpy().tolist()}
    num_preds = tfrecords.dynamic_predictions_per_seq(SEQ, PRED, 0.4)
    assert num_preds == 19 > PRED
    budget = masking.MaskingConfig(vocab_size=vocab_size, max_predictions_per_seq=num_preds,
                                   masked_lm_prob=0.4).budget_table(SEQ)
    fractions = {}
    for prob in (0.15, 0.4):
        masked, real = 0, 0
        for batch in _batches(paths, vocab_size, prob):
            weights = batch["masked_lm_weights"].numpy()
            assert weights.shape[1] == (num_preds if prob == 0.4 else PRED)
            ids = tfrecords.unmasked_input_ids(batch).numpy()
            lengths = batch["input_mask"].numpy().sum(axis=1)
            for row, w, n, pos in zip(ids.tolist(), weights, lengths, batch["masked_lm_positions"].numpy()):
                assert tuple(row) in corpus_rows  # restoring the new masks gives the record back
                count = int(w.sum())
                if prob == 0.4:
                    # The original's rule: whole n-grams up to the budget, so at most the budget.
                    assert 1 <= count <= budget[n]
                assert not np.isin(np.asarray(row)[pos[w > 0]], [2, 3]).any()  # never [CLS]/[SEP]
                masked += count
                real += n
        fractions[prob] = masked / real
    # n-gram spans that would overshoot the budget are skipped, so a row may end a little
    # short of rate x length (words of 1-3 pieces: well above 3/4 of it); the budget's
    # rounding adds at most half a position per row (rows of ~48 tokens: +1%).
    assert 0.3 < fractions[0.4] <= 0.41
    assert fractions[0.4] > 2 * fractions[0.15]
