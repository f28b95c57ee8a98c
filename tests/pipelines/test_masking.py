"""n-gram masking: exact equality with a transliteration of the original
`create_masked_lm_predictions` driven by the same random numbers, and the
statistics (p(n) ~ 1/n, 80/10/10, budget) with binomial tolerances."""

import random

import numpy as np
import pytest
import tensorflow as tf

from pipelines import masking
from pipelines import random_ops

CLS, SEP, MASK = masking.CLS_ID, masking.SEP_ID, masking.MASK_ID


def make_batch(rows, seq_len, vocab_size, seed, start_prob=0.7, min_len=5):
    """Random [CLS] A [SEP] B [SEP] sequences, 0-padded, with random word starts."""
    rng = np.random.default_rng(seed)
    ids = np.zeros([rows, seq_len], np.int32)
    is_start = np.zeros([rows, seq_len], bool)
    for r in range(rows):
        length = int(rng.integers(min_len, seq_len + 1))
        body = rng.integers(5, vocab_size, size=length).astype(np.int32)
        body[0] = CLS
        body[-1] = SEP
        body[int(rng.integers(2, length - 1))] = SEP
        ids[r, :length] = body
        is_start[r, :length] = rng.random(length) < start_prob
    return ids, is_start


def reference_mask(tokens, is_start, order_keys, n_draws, cfg, choose_n=None):
    """The original algorithm (reference section 2), one sequence, pure Python.

    The shuffle of the n-gram list is given by sorting `order_keys` (stable),
    the k-th drawn n by n_draws[k] (or `choose_n()` for an independent RNG).
    Returns the sorted masked positions.
    """
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token in (CLS, SEP):
            continue
        if cfg.do_whole_word_mask and cand_indexes and not is_start[i]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    num_to_predict = min(cfg.max_predictions_per_seq,
                         max(1, int(round(len(tokens) * cfg.masked_lm_prob))))
    ngrams = list(range(1, cfg.ngram + 1))
    ngram_indexes = [[cand_indexes[idx:idx + n] for n in ngrams]
                     for idx in range(len(cand_indexes))]
    order = sorted(range(len(cand_indexes)), key=lambda w: (order_keys[w], w))
    ngram_indexes = [ngram_indexes[w] for w in order]
    masked, covered = [], set()
    for k, cand_index_set in enumerate(ngram_indexes):
        if len(masked) >= num_to_predict:
            break
        n = choose_n() if choose_n else int(n_draws[k])
        index_set = sum(cand_index_set[n - 1], [])
        n -= 1
        while len(masked) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            n -= 1
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
        for i in index_set:
            covered.add(i)
            masked.append(i)
    return sorted(masked)


def run_mask(ids, is_start, cfg, seed=7):
    keys = random_ops.fold_in(random_ops.seed_key(seed), tf.range(ids.shape[0]))
    out = masking.mask_tokens(tf.constant(ids), tf.constant(ids > 0), tf.constant(is_start),
                              keys, cfg)
    draws = masking.random_draws(keys, ids.shape[1], cfg)
    return {k: v.numpy() for k, v in out.items()}, {k: v.numpy() for k, v in draws.items()}


@pytest.mark.parametrize("wwm,favor,ngram,prob,max_pred", [
    (True, True, 3, 0.15, 20),
    (True, False, 4, 0.3, 12),
    (False, True, 3, 0.15, 5),
])
def test_matches_original_algorithm_with_same_draws(wwm, favor, ngram, prob, max_pred):
    cfg = masking.MaskingConfig(vocab_size=500, max_predictions_per_seq=max_pred,
                                masked_lm_prob=prob, ngram=ngram, favor_shorter_ngram=favor,
                                do_whole_word_mask=wwm)
    ids, is_start = make_batch(150, 48, 500, seed=ngram)
    out, draws = run_mask(ids, is_start, cfg)
    for r in range(ids.shape[0]):
        length = int((ids[r] > 0).sum())
        tokens = ids[r, :length].tolist()
        want = reference_mask(tokens, is_start[r], draws["order"][r], draws["n"][r], cfg)
        num = int(out["num_masked"][r])
        assert out["masked_lm_positions"][r, :num].tolist() == want, r
        assert (out["masked_lm_positions"][r, num:] == 0).all()
        assert out["masked_lm_weights"][r].tolist() == [1.0] * num + [0.0] * (max_pred - num)
        assert out["masked_lm_ids"][r, :num].tolist() == [tokens[i] for i in want]
        expect_ids = ids[r].copy()
        for i in want:
            if draws["to_mask"][r, i]:
                expect_ids[i] = MASK
            elif not draws["keep"][r, i]:
                expect_ids[i] = draws["random_id"][r, i]
        np.testing.assert_array_equal(out["input_ids"][r], expect_ids)
        special = np.isin(ids[r], [CLS, SEP]) & (ids[r] > 0)
        np.testing.assert_array_equal(out["token_boundary"][r],
                                      (special | (is_start[r] & (ids[r] > 0) & ~special)))


def test_budget_is_filled_exactly_with_single_piece_words():
    # Every piece starts a word: unigrams always fit, so the count equals
    # min(max_pred, max(1, round(len * 0.15))) (Python's round: 30 * 0.15 -> 4).
    cfg = masking.MaskingConfig(vocab_size=300, max_predictions_per_seq=20)
    ids, _ = make_batch(300, 128, 300, seed=3)
    out, _ = run_mask(ids, np.ones_like(ids, bool), cfg)
    lengths = (ids > 0).sum(axis=1)
    want = np.minimum(20, np.maximum(1, [int(round(n * 0.15)) for n in lengths]))
    np.testing.assert_array_equal(out["num_masked"], want)
    assert cfg.budget_table(30)[30] == 4 and cfg.budget_table(128)[128] == 19


def test_special_and_padding_never_masked_and_positions_sorted():
    cfg = masking.MaskingConfig(vocab_size=300, max_predictions_per_seq=30, masked_lm_prob=0.5)
    ids, is_start = make_batch(200, 40, 300, seed=4)
    out, _ = run_mask(ids, is_start, cfg)
    for r in range(ids.shape[0]):
        num = int(out["num_masked"][r])
        pos = out["masked_lm_positions"][r, :num]
        assert list(pos) == sorted(set(pos))
        assert not np.isin(ids[r, pos], [CLS, SEP, 0]).any()
        # Everything outside the masked positions is unchanged.
        keep = np.ones(ids.shape[1], bool)
        keep[pos] = False
        np.testing.assert_array_equal(out["input_ids"][r][keep], ids[r][keep])


def _binomial_ok(count, total, p, sigmas=4.0):
    """|count/total - p| within `sigmas` binomial standard deviations."""
    std = np.sqrt(p * (1 - p) / total)
    return abs(count / total - p) <= sigmas * std, (count / total, p, std)


def test_ngram_draws_follow_inverse_n():
    for favor, probs in [(True, [6 / 11, 3 / 11, 2 / 11]), (False, [2 / 11, 3 / 11, 6 / 11])]:
        cfg = masking.MaskingConfig(vocab_size=100, favor_shorter_ngram=favor)
        keys = random_ops.fold_in(random_ops.seed_key(11), tf.range(400))
        n = masking.random_draws(keys, 128, cfg)["n"].numpy().ravel()
        for value, p in zip([1, 2, 3], probs):
            ok, info = _binomial_ok(int((n == value).sum()), n.size, p)
            assert ok, (favor, value, info)


def test_replacement_is_80_10_10_per_token():
    vocab = 1000
    cfg = masking.MaskingConfig(vocab_size=vocab, max_predictions_per_seq=20)
    ids, is_start = make_batch(2000, 128, vocab, seed=5, min_len=100)
    out, _ = run_mask(ids, is_start, cfg)
    new, old, total = [], [], 0
    for r in range(ids.shape[0]):
        num = int(out["num_masked"][r])
        pos = out["masked_lm_positions"][r, :num]
        new.append(out["input_ids"][r, pos])
        old.append(ids[r, pos])
    new, old = np.concatenate(new), np.concatenate(old)
    total = new.size
    assert total > 30000
    # A random id equals [MASK] or the original with probability 1/vocab each.
    for count, p in [((new == MASK).sum(), 0.8 + 0.1 / vocab),
                     (((new == old) & (old != MASK)).sum(), 0.1 + 0.1 / vocab),
                     (((new != MASK) & (new != old)).sum(), 0.1 * (1 - 2 / vocab))]:
        ok, info = _binomial_ok(int(count), total, p)
        assert ok, info
    # Random replacements cover the vocabulary uniformly, specials included.
    random_ids = new[(new != MASK) & (new != old)]
    assert random_ids.min() < 50 and random_ids.max() > vocab - 50


def _runs(positions_per_row):
    """Lengths of runs of consecutive masked words (one word = one piece here)."""
    lengths = []
    for pos in positions_per_row:
        run = 0
        prev = None
        for p in pos:
            if prev is not None and p == prev + 1:
                run += 1
            else:
                if run:
                    lengths.append(run)
                run = 1
            prev = p
        if run:
            lengths.append(run)
    return np.array(lengths)


def test_span_lengths_match_original_with_an_independent_rng():
    # Sequences without [SEP] in the body and with single-piece words: masked
    # runs are the spans (or merged neighbours). The original algorithm run with
    # Python's `random` gives the expected distribution; ours must agree within
    # 4 binomial std of the difference of two proportions.
    cfg = masking.MaskingConfig(vocab_size=300, max_predictions_per_seq=20)
    rows, seq_len = 1500, 128
    ids = np.random.default_rng(6).integers(5, 300, size=[rows, seq_len]).astype(np.int32)
    ids[:, 0] = CLS
    ids[:, -1] = SEP
    starts = np.ones_like(ids, bool)
    out, _ = run_mask(ids, starts, cfg)
    ours = _runs([out["masked_lm_positions"][r, :out["num_masked"][r]] for r in range(rows)])
    rng = random.Random(0)
    probs = cfg.ngram_probs()

    def choose_n():
        return rng.choices([1, 2, 3], weights=probs)[0]

    ref_pos = []
    for r in range(rows):
        tokens = ids[r].tolist()
        keys = [rng.random() for _ in range(seq_len)]
        ref_pos.append(reference_mask(tokens, starts[r], keys, None, cfg, choose_n=choose_n))
    theirs = _runs(ref_pos)
    for length in (1, 2, 3, 4):
        p1 = (ours == length).mean()
        p2 = (theirs == length).mean()
        pooled = ((ours == length).sum() + (theirs == length).sum()) / (ours.size + theirs.size)
        std = np.sqrt(pooled * (1 - pooled) * (1 / ours.size + 1 / theirs.size))
        assert abs(p1 - p2) <= 4 * std + 1e-12, (length, p1, p2, std)
    # And the shape of p(n) ~ 1/n shows through: 1 > 2 > 3.
    assert (ours == 1).mean() > (ours == 2).mean() > (ours == 3).mean()


def test_same_keys_same_masks_and_keys_differ():
    cfg = masking.MaskingConfig(vocab_size=300)
    ids, is_start = make_batch(50, 64, 300, seed=8)
    a, _ = run_mask(ids, is_start, cfg, seed=1)
    b, _ = run_mask(ids, is_start, cfg, seed=1)
    c, _ = run_mask(ids, is_start, cfg, seed=2)
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    assert (a["masked_lm_positions"] != c["masked_lm_positions"]).any()


def test_config_errors_quote_the_value():
    with pytest.raises(ValueError, match="0.0"):
        masking.MaskingConfig(vocab_size=100, masked_lm_prob=0.0)
    with pytest.raises(ValueError, match="max_predictions_per_seq.*0"):
        masking.MaskingConfig(vocab_size=100, max_predictions_per_seq=0)
