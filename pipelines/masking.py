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
with all rows advancing together), and each step works only on the rows that
can still accept a span; the visit order comes from a partial sort, and only
the few rows that need more visits are fully sorted (see `_choose_spans`).

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
    draws = _replacement_draws(keys, seq_len, config)
    draws["order"] = random_ops.high_uniform(bits_a, 32, 32)
    draws["n"] = _ngram_lengths(bits_a, config)
    return draws


def _ngram_lengths(bits_a: tf.Tensor, config: MaskingConfig) -> tf.Tensor:
    """int32: n for each visit from the low 32 bits of its WORD_ORDER hash
    (any shape: the masking loop draws it only for the visits it makes)."""
    cdf = tf.constant(list(_cumsum(config.ngram_probs()))[:-1], tf.float64)
    draw_u = random_ops.high_uniform(bits_a, 0, 32)
    return 1 + tf.reduce_sum(tf.cast(draw_u[..., None] >= cdf, tf.int32), axis=-1)


def _replacement_draws(keys: tf.Tensor, seq_len: int,
                       config: MaskingConfig) -> Dict[str, tf.Tensor]:
    """to_mask, keep and random_id of `random_draws`."""
    bits_b = random_ops.stream(random_ops.fold_in(keys, random_ops.REPLACEMENT), seq_len)
    u_rand = random_ops.high_uniform(bits_b, 0, 32)
    return {
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
    words = _words(ids, input_mask, is_start, config)
    # The same numbers as random_draws, but n only for the visits made.
    bits_a = random_ops.stream(random_ops.fold_in(keys, random_ops.WORD_ORDER), seq_len)
    draws = _replacement_draws(keys, seq_len, config)
    covered = _choose_spans(words, random_ops.high_uniform(bits_a, 32, 32), bits_a, config)
    masked = words["cand"] & (
        tf.gather(covered, tf.maximum(words["word_of_pos"], 0), batch_dims=1) > 0)

    # 80% [MASK], 10% unchanged, 10% random id, drawn per masked token.
    replacement = tf.where(draws["to_mask"], MASK_ID,
                           tf.where(draws["keep"], ids, draws["random_id"]))
    out = _predictions(ids, masked, config.max_predictions_per_seq)
    out["input_ids"] = tf.where(masked, replacement, ids)
    out["token_boundary"] = tf.cast(words["special"] | words["start"], tf.int32)
    return out


def _words(ids: tf.Tensor, input_mask: tf.Tensor, is_start: tf.Tensor,
           config: MaskingConfig) -> Dict[str, tf.Tensor]:
    """The candidate words of every row and the masking budget.

    Returns:
        special, cand, start (bool [B, T]): [CLS]/[SEP], candidates, word
        starts; word_of_pos (int32 [B, T]): word number of each position;
        num_words, budget (int32 [B]); word_cum (int32 [B, T + 1]): the
        candidate pieces before each word.
    """
    seq_len = ids.shape[1]
    batch = tf.shape(ids)[0]
    real = tf.cast(input_mask, tf.bool)
    special = real & ((ids == CLS_ID) | (ids == SEP_ID))
    cand = real & ~special
    start = tf.cast(is_start, tf.bool) & cand
    cand_i = tf.cast(cand, tf.int32)
    length = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    budget = tf.gather(tf.constant(config.budget_table(seq_len), tf.int32), length)

    # Words: a new word at every start piece (and at the first candidate).
    if config.do_whole_word_mask:
        first_pos = tf.argmax(cand_i, axis=1, output_type=tf.int32)
        first = cand & (tf.range(seq_len)[None, :] == first_pos[:, None])
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

    return {"special": special, "cand": cand, "start": start, "word_of_pos": word_of_pos,
            "num_words": num_words, "budget": budget, "word_cum": word_cum}


def _choose_spans(words: Dict[str, tf.Tensor], order_u: tf.Tensor, bits_a: tf.Tensor,
                  config: MaskingConfig) -> tf.Tensor:
    """The greedy n-gram choice: int32 [B, T], 1 for every masked word.

    Words are visited in the order of their random keys (a uniform
    permutation; ties keep word order).  Most rows fill their budget within a
    few dozen visits, so the first `head` visits of every row come from a
    partial sort (top_k), and only the rows still short of their budget after
    them are fully sorted for the remaining visits: the visit order, hence
    the result, is that of one full stable argsort.
    """
    seq_len = words["cand"].shape[1]
    batch = tf.shape(words["cand"])[0]
    num_words = words["num_words"]
    positions_t = tf.range(seq_len, dtype=tf.int32)
    order_key = tf.where(positions_t[None, :] < num_words[:, None], order_u, 2.0)
    # top_k puts the lower index first among equal keys: a stable ascending order.
    head = min(seq_len, max(_MIN_HEAD_VISITS, config.max_predictions_per_seq + 4))
    head_order = tf.math.top_k(-order_key, k=head, sorted=True).indices
    state = (tf.zeros([batch, seq_len], tf.int32), tf.zeros([batch], tf.int32))
    all_rows = tf.range(batch)
    state = _visit_words(words, bits_a, head_order, all_rows, 0, head, state, config)
    if head < seq_len:
        covered, count = state
        short = tf.cast(tf.where((count < words["budget"]) & (head < num_words))[:, 0], tf.int32)
        tail_order = tf.cast(
            tf.argsort(tf.gather(order_key, short), axis=1, stable=True), tf.int32)
        state = _visit_words(words, bits_a, tail_order, short, head, seq_len, state, config)
    return state[0]


# Visits every row gets from the partial sort (at least; see _choose_spans): a
# row fills its budget of at most max_predictions_per_seq pieces in about
# that many visits, rarely more.
_MIN_HEAD_VISITS = 16


def _visit_words(words: Dict[str, tf.Tensor], bits_a: tf.Tensor, order: tf.Tensor,
                 order_rows: tf.Tensor, first_visit: int, end_visit: int, state,
                 config: MaskingConfig):
    """Visits `first_visit` <= k < `end_visit` of the rows `order_rows`.

    Args:
        words: `_words` output.
        bits_a: uint64 [B, T]: the WORD_ORDER hashes (n of visit k: column k).
        order: int32 [R, >= end_visit]: the word of visit k in column k,
            row r for row order_rows[r] of the batch.
        order_rows: int32 [R]: the batch rows `order` covers.
        first_visit, end_visit: the visit range.
        state: (covered int32 [B, T], count int32 [B]).

    Returns:
        The updated (covered, count).
    """
    ngram = config.ngram
    seq_len = words["cand"].shape[1]
    budget = tf.gather(words["budget"], order_rows)
    num_words = tf.gather(words["num_words"], order_rows)
    word_cum = words["word_cum"]
    n_range = tf.range(1, ngram + 1, dtype=tf.int32)
    j_range = tf.range(ngram, dtype=tf.int32)
    last = tf.minimum(tf.reduce_max(tf.concat([num_words, [0]], axis=0)), end_visit)

    def alive(k, count):
        # A full budget fits no word (every word has >= 1 piece), and visits
        # past the last word accept nothing: only other rows can change.
        return (tf.gather(count, order_rows) < budget) & (k < num_words)

    def cond(k, covered, count):
        del covered
        return (k < last) & tf.reduce_any(alive(k, count))

    def body(k, covered, count):
        local = tf.cast(tf.where(alive(k, count))[:, 0], tf.int32)
        rows = tf.gather(order_rows, local)
        w = tf.gather_nd(order, tf.stack([local, tf.fill(tf.shape(local), k)], 1))
        n0 = _ngram_lengths(
            tf.gather_nd(bits_a, tf.stack([rows, tf.fill(tf.shape(rows), k)], 1)), config)
        # Pieces of the n-gram of n = 1..ngram words from w (fewer at the row's end).
        ends = tf.minimum(w[:, None] + n_range[None, :], tf.gather(num_words, local)[:, None])
        rows_n = tf.broadcast_to(rows[:, None], tf.shape(ends))
        pieces = (tf.gather_nd(word_cum, tf.stack([rows_n, ends], axis=-1))
                  - tf.gather_nd(word_cum, tf.stack([rows, w], axis=1))[:, None])
        remaining = tf.gather(budget, local) - tf.gather(count, rows)
        fits = (n_range[None, :] <= n0[:, None]) & (pieces <= remaining[:, None])
        n1 = tf.reduce_max(tf.where(fits, n_range[None, :], 0), axis=1)
        span = w[:, None] + j_range[None, :]
        in_span = (j_range[None, :] < n1[:, None]) & (span < tf.gather(num_words, local)[:, None])
        span = tf.minimum(span, seq_len - 1)
        index = tf.stack([tf.broadcast_to(rows[:, None], tf.shape(span)), span], axis=-1)
        blocked = tf.reduce_any((tf.gather_nd(covered, index) > 0) & in_span, axis=1)
        accept = (n1 > 0) & ~blocked
        covered = tf.tensor_scatter_nd_max(
            covered, tf.reshape(index, [-1, 2]),
            tf.reshape(tf.cast(accept[:, None] & in_span, tf.int32), [-1]))
        gain = tf.gather(pieces, tf.maximum(n1 - 1, 0), batch_dims=1)
        count = tf.tensor_scatter_nd_add(count, rows[:, None], tf.where(accept, gain, 0))
        return k + 1, covered, count

    _, covered, count = tf.while_loop(cond, body, (tf.constant(first_visit),) + tuple(state))
    return covered, count


def _predictions(ids: tf.Tensor, masked: tf.Tensor, num_preds: int) -> Dict[str, tf.Tensor]:
    """masked_lm_positions (ascending, 0-padded), masked_lm_ids,
    masked_lm_weights and num_masked of the masked positions.

    A row never has more masked tokens than its budget, which is at most
    num_preds, so every masked position has a slot.
    """
    batch = tf.shape(ids)[0]
    num_masked = tf.reduce_sum(tf.cast(masked, tf.int32), axis=1)
    where = tf.cast(tf.where(masked), tf.int32)  # row-major: positions ascend per row
    positions = tf.RaggedTensor.from_value_rowids(
        where[:, 1], where[:, 0], nrows=batch).to_tensor(default_value=0, shape=[None, num_preds])
    weights = tf.cast(tf.range(num_preds)[None, :] < num_masked[:, None], tf.float32)
    labels = tf.gather(ids, positions, batch_dims=1) * tf.cast(weights, tf.int32)
    return {
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "num_masked": num_masked,
    }


def _cumsum(values):
    total = 0.0
    for v in values:
        total += v
        yield total
