"""ALBERT n-gram masking as vectorised TensorFlow ops (one implementation for
static masking at data-creation time and dynamic masking in the reader).

The algorithm is the original's `create_masked_lm_predictions`
(google-research/albert create_pretraining_data.py):

* candidates are all real tokens except [CLS] and [SEP]; with whole-word
  masking a candidate is a whole word: a start piece plus the non-start pieces
  that follow it (the grouping ignores [CLS]/[SEP], so a word can continue
  across [SEP], as in the original);
* budget = min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))
  with len counting [CLS] and [SEP] (Python's round, half to even);
* the candidate word starts are visited in a uniformly random order; for each,
  n is drawn with p(n) proportional to 1/n (reversed without
  favor_shorter_ngram); the n-gram is n consecutive words (fewer at the end);
  if it does not fit in the remaining budget n-1, ..., 1 are tried, else it is
  skipped; it is skipped if any of its words is already masked;
* every masked token independently becomes [MASK] (80%), stays (10%) or
  becomes a uniformly random id of the whole vocabulary (10%);
* positions are sorted; labels are the original ids.

Differences from the original, on purpose: every random number is a keyed
hash (pipelines.random_ops), so the result is reproducible (the original draws
n with the unseeded global NumPy generator), and the random id comes from the
same keyed generator instead of Python's `random`.

The loop over visit ranks runs once per *batch* (a tf.while_loop over ranks
with all rows advancing together), so its cost is per batch, not per example.

Example:

>>> cfg = MaskingConfig(vocab_size=100, max_predictions_per_seq=4)
>>> ids = tf.constant([[2, 10, 11, 12, 3, 13, 14, 3, 0]])
>>> out = mask_tokens(ids, ids > 0, tf.ones_like(ids, tf.bool),
...                   random_ops.seed_key(1)[None], cfg)
>>> int(out["num_masked"][0])
1
"""

import dataclasses
from typing import Dict, List

import tensorflow as tf

from pipelines import random_ops

PAD_ID = 0
UNK_ID = 1
CLS_ID = 2
SEP_ID = 3
MASK_ID = 4


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Settings of the n-gram masking (names as the original's flags).

    Args:
        vocab_size: size of the vocabulary random replacements are drawn from
            (the original draws from the whole vocabulary, specials included).
        max_predictions_per_seq: the cap on masked tokens per sequence.
        masked_lm_prob: fraction of the tokens (including [CLS]/[SEP]) to mask.
        ngram: the longest n-gram, in words.
        favor_shorter_ngram: p(n) proportional to 1/n if True, else reversed.
        do_whole_word_mask: mask whole words (start piece + continuations).
    """

    vocab_size: int
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True

    def __post_init__(self):
        if self.vocab_size < 5:
            raise ValueError(f"vocab_size must be >= 5 (5 special pieces), got {self.vocab_size}.")
        if self.max_predictions_per_seq < 1:
            raise ValueError(
                f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}.")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}.")
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}.")

    def budget_table(self, max_length: int) -> List[int]:
        """num_to_predict for every sequence length 0..max_length (Python round)."""
        return [
            min(self.max_predictions_per_seq, max(1, int(round(n * self.masked_lm_prob))))
            for n in range(max_length + 1)
        ]

    def ngram_probs(self) -> List[float]:
        """p(n) for n = 1..ngram."""
        weights = [1.0 / n for n in range(1, self.ngram + 1)]
        if not self.favor_shorter_ngram:
            weights = weights[::-1]
        total = sum(weights)
        return [w / total for w in weights]


def random_draws(keys: tf.Tensor, seq_len: int, config: MaskingConfig) -> Dict[str, tf.Tensor]:
    """Every random number the masking of a row uses, keyed by the row's key.

    Two 64-bit hashes per (row, position): 32 bits order the words and 32 bits
    draw n for the k-th visited start; 16 + 16 + 32 bits choose the token
    replacement.  Exposed so tests can drive a reference implementation with
    the same numbers.

    Returns:
        order: float64 [B, T] sort keys of the words (word w uses column w);
        n: int32 [B, T] the n drawn for the k-th visit (column k);
        to_mask, keep: bool [B, T] per position ([MASK] / else unchanged);
        random_id: int32 [B, T] the random replacement id per position.
    """
    bits_a = random_ops.stream(random_ops.fold_in(keys, random_ops.WORD_ORDER), seq_len)
    bits_b = random_ops.stream(random_ops.fold_in(keys, random_ops.REPLACEMENT), seq_len)
    cdf = tf.constant(list(_cumsum(config.ngram_probs()))[:-1], tf.float64)
    draw_u = random_ops.high_uniform(bits_a, 0, 32)
    n_draw = 1 + tf.reduce_sum(tf.cast(draw_u[:, :, None] >= cdf[None, None, :], tf.int32), axis=2)
    u_rand = random_ops.high_uniform(bits_b, 0, 32)
    return {
        "order": random_ops.high_uniform(bits_a, 32, 32),
        "n": n_draw,
        "to_mask": random_ops.high_uniform(bits_b, 48, 16) < 0.8,
        "keep": random_ops.high_uniform(bits_b, 32, 16) < 0.5,
        "random_id": tf.cast(tf.floor(u_rand * config.vocab_size), tf.int32),
    }


def mask_tokens(input_ids: tf.Tensor, input_mask: tf.Tensor, is_start: tf.Tensor,
                keys: tf.Tensor, config: MaskingConfig) -> Dict[str, tf.Tensor]:
    """Applies n-gram masking to a batch of unmasked sequences.

    Args:
        input_ids: int [B, T] unmasked ids, 0-padded, [CLS]=2 and [SEP]=3 in place.
        input_mask: [B, T] 1/True for real tokens.
        is_start: bool [B, T], True where the piece starts a word (the
            original's `_is_start_piece_sp`; `token_boundary` works too).
        keys: uint64 [B] random keys, one per sequence (pipelines.random_ops).
        config: the masking settings.

    Returns:
        A dict with input_ids (masked, int32 [B, T]), masked_lm_positions and
        masked_lm_ids (int32 [B, P]), masked_lm_weights (float32 [B, P]),
        token_boundary (int32 [B, T]) and num_masked (int32 [B]), where P is
        config.max_predictions_per_seq.
    """
    ids = tf.cast(input_ids, tf.int32)
    seq_len = ids.shape[1]
    if seq_len is None:
        raise ValueError("mask_tokens needs a static sequence length (input_ids.shape[1]).")
    num_preds = config.max_predictions_per_seq
    ngram = config.ngram
    batch = tf.shape(ids)[0]
    positions_t = tf.range(seq_len, dtype=tf.int32)

    real = tf.cast(input_mask, tf.bool)
    special = real & ((ids == CLS_ID) | (ids == SEP_ID))
    cand = real & ~special
    start = tf.cast(is_start, tf.bool) & cand
    cand_i = tf.cast(cand, tf.int32)
    length = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    budget = tf.gather(tf.constant(config.budget_table(seq_len), tf.int32), length)

    # Words: a new word at every start piece (and at the first candidate).
    if config.do_whole_word_mask:
        first = cand & (tf.cumsum(cand_i, axis=1) == 1)
        new_word = cand & (start | first)
    else:
        new_word = cand
    word_of_pos = tf.cumsum(tf.cast(new_word, tf.int32), axis=1) - 1
    num_words = tf.reduce_sum(tf.cast(new_word, tf.int32), axis=1)
    row = tf.range(batch)[:, None]
    segment = tf.where(cand, word_of_pos + row * seq_len, batch * seq_len)
    word_len = tf.math.unsorted_segment_sum(
        tf.reshape(cand_i, [-1]), tf.reshape(segment, [-1]), batch * seq_len + 1)
    word_len = tf.reshape(word_len[:-1], [batch, seq_len])
    word_cum = tf.concat([tf.zeros([batch, 1], tf.int32), tf.cumsum(word_len, axis=1)], axis=1)

    # span_pieces[b, w, n-1]: pieces in the n-gram of words starting at word w.
    n_range = tf.range(1, ngram + 1, dtype=tf.int32)
    ends = tf.minimum(positions_t[None, :, None] + n_range[None, None, :],
                      num_words[:, None, None])
    ends = tf.maximum(ends, positions_t[None, :, None])
    ends = tf.minimum(ends, seq_len)
    span_end = tf.gather(word_cum, tf.reshape(ends, [batch, -1]), batch_dims=1)
    span_pieces = (tf.reshape(span_end, [batch, seq_len, ngram])
                   - word_cum[:, :seq_len, None])

    draws = random_draws(keys, seq_len, config)
    # Visit order: a uniform permutation of the words of each row.
    order_u = tf.where(positions_t[None, :] < num_words[:, None], draws["order"], 2.0)
    order = tf.cast(tf.argsort(order_u, axis=1, stable=True), tf.int32)
    n_draw = draws["n"]

    j_range = tf.range(ngram, dtype=tf.int32)
    row_idx = tf.tile(row, [1, ngram])
    max_words = tf.reduce_max(tf.concat([num_words, [0]], axis=0))

    def cond(k, covered, count):
        del covered
        return (k < max_words) & tf.reduce_any((count < budget) & (k < num_words))

    def body(k, covered, count):
        w = order[:, k]
        n0 = n_draw[:, k]
        pieces = tf.gather(span_pieces, w, batch_dims=1)  # [B, ngram]
        remaining = budget - count
        fits = (n_range[None, :] <= n0[:, None]) & (pieces <= remaining[:, None])
        n1 = tf.reduce_max(tf.where(fits, n_range[None, :], 0), axis=1)
        words = w[:, None] + j_range[None, :]
        in_span = (j_range[None, :] < n1[:, None]) & (words < num_words[:, None])
        words = tf.minimum(words, seq_len - 1)
        hit = tf.gather(covered, words, batch_dims=1) > 0
        blocked = tf.reduce_any(hit & in_span, axis=1)
        accept = (k < num_words) & (n1 > 0) & ~blocked
        update = tf.cast(accept[:, None] & in_span, tf.int32)
        covered = tf.tensor_scatter_nd_max(
            covered, tf.reshape(tf.stack([row_idx, words], axis=-1), [-1, 2]),
            tf.reshape(update, [-1]))
        gain = tf.gather(pieces, tf.maximum(n1 - 1, 0), batch_dims=1)
        count = count + tf.where(accept, gain, 0)
        return k + 1, covered, count

    _, covered, _ = tf.while_loop(
        cond, body,
        (tf.constant(0), tf.zeros([batch, seq_len], tf.int32), tf.zeros([batch], tf.int32)))

    masked = cand & (tf.gather(covered, tf.maximum(word_of_pos, 0), batch_dims=1) > 0)

    # 80% [MASK], 10% unchanged, 10% random id, drawn per masked token.
    replacement = tf.where(draws["to_mask"], MASK_ID,
                           tf.where(draws["keep"], ids, draws["random_id"]))
    masked_ids = tf.where(masked, replacement, ids)

    num_masked = tf.reduce_sum(tf.cast(masked, tf.int32), axis=1)
    # Sorted positions without dynamic shapes (XLA-friendly): the P smallest of
    # pos (masked) / T + pos (not masked).
    rank_key = tf.where(masked, positions_t[None, :], seq_len + positions_t[None, :])
    k = min(num_preds, seq_len)
    smallest = -tf.math.top_k(-rank_key, k=k, sorted=True).values
    positions = tf.where(smallest < seq_len, smallest, 0)
    if num_preds > seq_len:
        positions = tf.pad(positions, [[0, 0], [0, num_preds - seq_len]])
    weights = tf.cast(tf.range(num_preds)[None, :] < num_masked[:, None], tf.float32)
    labels = tf.gather(ids, positions, batch_dims=1) * tf.cast(weights, tf.int32)
    return {
        "input_ids": masked_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "token_boundary": tf.cast(special | start, tf.int32),
        "num_masked": num_masked,
    }


def _cumsum(values):
    total = 0.0
    for v in values:
        total += v
        yield total
