"""Training instances from documents: SOP/NSP pairing, truncation, masking.

The original's `create_instances_from_document` (google-research/albert
create_pretraining_data.py), run for all `dupe_factor` passes of a *batch* of
documents at once with vectorised ops:

* per (document, pass): target length = max_seq_length - 3, or with
  probability short_seq_prob a uniform integer in [2, max_seq_length - 3]
  (chosen once per document and pass, as the original);
* sentences accumulate into a chunk until its length reaches the target or
  the document ends (a tf.while_loop over chunk number, all pairs at once,
  finding each chunk end with a search in the cumulative sentence lengths);
* a_end uniform in [1, len(chunk)-1] (1 for one-segment chunks);
* SOP (default): B is the rest of the chunk; with probability 1/2 A and B are
  swapped (label 1), else label 0.  NSP (`random_next_sentence`): with
  probability 1/2 B is taken from a random other document (label 1) and the
  unused segments of the chunk are put back, as the original;
* one-segment chunks: the original always turns them into random-document
  negatives labelled 1 (its issue #234: about 10% of its "SOP" data is NSP),
  available with `single_segment_random_negatives`.  By default (pure SOP) the
  segment is split at a random word start inside it (any interior token when it
  is a single word) and the two halves are an ordinary SOP pair;
* truncation as `truncate_seq_pair`: remove from the longer side (B on ties),
  each removed token from the front or back with probability 1/2;
* [CLS] A [SEP] B [SEP], segment ids 0/1, then `masking.mask_tokens`.

Documents with fewer than two sentences give no instance (counted).  The
random other document is drawn from the documents of the same batch (the
batch holds documents of one shard, so shards stay independent of workers);
the original draws from the whole corpus held in memory.  All random numbers
are keyed by (seed, document number, pass, chunk number), see random_ops.

Example:

>>> builder = InstanceBuilder(vocab, InstanceConfig(max_seq_length=128))  # doctest: +SKIP
>>> feats, stats = builder.build(doc_lines, doc_ids)                      # doctest: +SKIP
"""

import dataclasses
from typing import Dict, Tuple

import tensorflow as tf

from pipelines import masking as masking_lib
from pipelines import random_ops
from pipelines import tokenizer as tokenizer_lib


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    """How instances are built (names as the original's flags).

    Args:
        max_seq_length: sequence length, [CLS] and two [SEP] included.
        dupe_factor: passes over every document (different random choices).
        short_seq_prob: probability of a shorter random target length.
        random_next_sentence: NSP instead of SOP.
        single_segment_random_negatives: the original's behaviour for
            one-segment chunks (random-document B, label 1) instead of a split.
        random_seed: the seed every random choice derives from.
        masking: the n-gram masking settings.
    """

    masking: masking_lib.MaskingConfig
    max_seq_length: int = 512
    dupe_factor: int = 40
    short_seq_prob: float = 0.1
    random_next_sentence: bool = False
    single_segment_random_negatives: bool = False
    random_seed: int = 12345

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise ValueError(
                f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with one token each), "
                f"got {self.max_seq_length}.")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1, got {self.dupe_factor}.")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}.")

    @property
    def uses_random_documents(self) -> bool:
        return self.random_next_sentence or self.single_segment_random_negatives


def truncation_counts(len_a: tf.Tensor, len_b: tf.Tensor, max_tokens: int):
    """Tokens the original `truncate_seq_pair` removes from A and from B.

    Its loop removes one token at a time from the longer side (B on ties); the
    counts follow in closed form: first the difference is removed from the
    longer side, then the two sides alternate.
    """
    excess = tf.maximum(len_a + len_b - max_tokens, 0)
    a_longer = len_a > len_b
    first = tf.where(a_longer, tf.minimum(excess, len_a - len_b),
                     tf.minimum(excess, len_b - len_a + 1))
    rest = excess - first
    half_up = (rest + 1) // 2
    half_down = rest // 2
    # A longer: A loses `first`, then B, A, B, ... ; otherwise B loses `first`, then A, B, ...
    cut_a = tf.where(a_longer, first + half_down, half_up)
    cut_b = tf.where(a_longer, half_up, first + half_down)
    return cut_a, cut_b


def _pad1(x: tf.Tensor, value) -> tf.Tensor:
    """Appends one element so that index len(x) is valid (inactive rows)."""
    return tf.concat([x, tf.fill([1], tf.cast(value, x.dtype))], axis=0)


def _search(sorted_values: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """First index i with sorted_values[i] >= value (1-D, vectorised)."""
    return tf.searchsorted(sorted_values[None, :], values[None, :], side="left")[0]


class InstanceBuilder:
    """Builds masked instances from a batch of documents with graph ops.

    Args:
        vocab: the checked SentencePiece vocabulary.
        config: the instance settings.
    """

    def __init__(self, vocab: tokenizer_lib.SentencePieceVocab, config: InstanceConfig):
        if config.masking.vocab_size != vocab.vocab_size:
            raise ValueError(
                f"masking.vocab_size {config.masking.vocab_size} != vocabulary size "
                f"{vocab.vocab_size}.")
        self.config = config
        self.vocab = vocab
        self.tokenizer = vocab.make_tokenizer()
        self.is_start = self.tokenizer.is_start

    def build(self, doc_lines: tf.RaggedTensor,
              doc_ids: tf.Tensor) -> Tuple[Dict[str, tf.Tensor], Dict[str, tf.Tensor]]:
        """Instances of a batch of documents (all dupe passes).

        Args:
            doc_lines: string [D, None]: normalised sentences per document.
            doc_ids: int64 [D]: the corpus-order number of every document.

        Returns:
            (features, stats).  features: int32 input_ids, input_mask,
            segment_ids, token_boundary [C, T], masked_lm_positions,
            masked_lm_ids [C, P], float32 masked_lm_weights [C, P], int32
            next_sentence_labels [C], int64 doc_id [C], int32 num_masked and
            length [C], uint64 shuffle_key [C] (a random key of the instance).
            stats: int32 [D] sentences per document, and the scalar count of
            chunks too short to pair ("dropped_chunks").
        """
        doc_ids = tf.cast(doc_ids, tf.int64)
        sent = self._sentences(doc_lines, tf.shape(doc_ids)[0])
        pairs = self._pair_rows(sent, doc_ids)
        chunks = self._chunks(sent, pairs)
        spans = self._segment_spans(sent, chunks)
        if self.config.uses_random_documents:
            spans = self._random_segments_b(sent, chunks, spans)
        ok = (spans["a_hi"] > spans["a_lo"]) & (spans["b_hi"] > spans["b_lo"])
        dropped = tf.reduce_sum(tf.cast(~ok, tf.int32))
        kept = {name: tf.boolean_mask(value, ok) for name, value in spans.items()}
        features = self._features(sent["flat"], self._truncate(kept))
        features["doc_id"] = tf.gather(doc_ids, kept["doc"])
        stats = {"sentences": sent["nsent"], "dropped_chunks": dropped}
        return features, stats

    def _sentences(self, doc_lines: tf.RaggedTensor, num_docs: tf.Tensor) -> Dict[str, tf.Tensor]:
        """Tokenizes the batch: the flat token ids and the tables of its
        non-empty sentences (token ranges, per-document sentence ranges)."""
        tokens = self.tokenizer.tokenize(doc_lines)  # [D, S, None]
        sentences = tokens.values
        doc_of_sentence = tokens.value_rowids()
        keep = sentences.row_lengths() > 0
        sentences = tf.ragged.boolean_mask(sentences, keep)
        nsent = tf.math.unsorted_segment_sum(
            tf.cast(keep, tf.int32), tf.boolean_mask(doc_of_sentence, keep), num_docs)
        flat = sentences.flat_values
        num_tokens = tf.size(flat)
        sent_len = tf.cast(sentences.row_lengths(), tf.int32)
        sent_start = tf.cast(sentences.row_starts(), tf.int32)
        cum_incl = tf.cumsum(sent_len)
        doc_first = tf.cumsum(nsent, exclusive=True)
        return {
            "flat": flat, "num_tokens": num_tokens, "num_docs": num_docs, "nsent": nsent,
            "cum_incl": cum_incl, "doc_first": doc_first, "doc_end": doc_first + nsent,
            # Padded copies: index num_sent is valid and means "past the end".
            "p_cum_excl": _pad1(cum_incl - sent_len, num_tokens),
            "p_sent_start": _pad1(sent_start, num_tokens),
            "p_sent_end_tok": _pad1(sent_start + sent_len, num_tokens),
        }

    def _pair_rows(self, sent: Dict[str, tf.Tensor], doc_ids: tf.Tensor) -> Dict[str, tf.Tensor]:
        """One row per (document, dupe pass): its random target length, its
        chunk key base and the sentence range it walks."""
        cfg = self.config
        max_tokens = cfg.max_seq_length - 3
        dupes = cfg.dupe_factor
        doc_keys = random_ops.fold_in(random_ops.seed_key(cfg.random_seed), doc_ids)
        pair = tf.range(sent["num_docs"] * dupes)
        pair_doc = pair // dupes
        pair_pass = pair % dupes
        pair_key = random_ops.fold_in(
            random_ops.fold_in(tf.gather(doc_keys, pair_doc), random_ops.DUPE), pair_pass)
        pair_bits = random_ops.stream(pair_key, 2)
        is_short = random_ops.uniform_bits(pair_bits[:, 0]) < cfg.short_seq_prob
        short_len = random_ops.randint_bits(pair_bits[:, 1], 2, max_tokens)
        valid_doc = tf.gather(sent["nsent"], pair_doc) >= 2
        limit = tf.gather(sent["doc_end"], pair_doc)
        return {
            "pair": pair, "doc": pair_doc, "limit": limit,
            # Chunk i of a pair draws from stream(fold_in(chunk_base, i)):
            # columns 0-2 in the chunk loop, 3-10 after it.
            "chunk_base": random_ops.fold_in(pair_key, random_ops.CHUNK),
            "target": tf.where(is_short, short_len, max_tokens),
            "start0": tf.where(valid_doc, tf.gather(sent["doc_first"], pair_doc), limit),
        }

    def _chunks(self, sent: Dict[str, tf.Tensor], pairs: Dict[str, tf.Tensor]
                ) -> Dict[str, tf.Tensor]:
        """Cuts every pair row's sentences into chunks (a tf.while_loop over
        chunk numbers, all rows advancing together), in (document, pass,
        chunk) order: sentence range, A's sentence count, random-B and swap
        decisions, and each chunk's random bits."""
        cfg = self.config
        nsp = cfg.random_next_sentence
        single_random = cfg.uses_random_documents
        limit, target, chunk_base = pairs["limit"], pairs["target"], pairs["chunk_base"]
        cum_incl, p_cum_excl = sent["cum_incl"], sent["p_cum_excl"]

        def cond(i, start, *arrays):
            del arrays
            # At least one pass, so that the TensorArrays are never empty.
            return (i == 0) | tf.reduce_any(start < limit)

        def body(i, start, ta_start, ta_aend, ta_end, ta_random, ta_swap, ta_active):
            active = start < limit
            base = tf.gather(p_cum_excl, start)
            end = tf.minimum(_search(cum_incl, base + target), limit - 1)
            nseg = end - start + 1
            bits = random_ops.stream(random_ops.fold_in(chunk_base, i), 3)
            a_end = tf.where(
                nseg >= 2, random_ops.randint_bits(bits[:, 0], 1, tf.maximum(nseg - 1, 1)), 1)
            is_random = tf.zeros_like(active)
            if single_random:
                is_random = nseg == 1
            if nsp:
                is_random |= random_ops.uniform_bits(bits[:, 1]) < 0.5
                swap = tf.zeros_like(active)
            else:
                swap = (~is_random) & (random_ops.uniform_bits(bits[:, 2]) < 0.5)
            nxt = tf.where(is_random, start + a_end, end + 1)
            return (i + 1, tf.where(active, nxt, start),
                    ta_start.write(i, start), ta_aend.write(i, a_end), ta_end.write(i, end),
                    ta_random.write(i, is_random), ta_swap.write(i, swap),
                    ta_active.write(i, active))

        def ta(dtype):
            return tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=[None])

        loop = tf.while_loop(
            cond, body,
            (tf.constant(0), pairs["start0"], ta(tf.int32), ta(tf.int32), ta(tf.int32),
             ta(tf.bool), ta(tf.bool), ta(tf.bool)))
        iters = loop[0]
        num_pairs = tf.size(pairs["pair"])

        def stacked(t):
            # [iters, pairs] -> [pairs, iters]: chunks in (document, pass, chunk) order.
            return tf.transpose(tf.reshape(t.stack(), [iters, num_pairs]))

        active = stacked(loop[7])
        pick = lambda t: tf.boolean_mask(t, active)  # noqa: E731
        c_chunk = pick(tf.broadcast_to(tf.range(iters)[None, :], tf.shape(active)))
        c_pair = pick(tf.broadcast_to(pairs["pair"][:, None], tf.shape(active)))
        return {
            "start": pick(stacked(loop[2])), "aend": pick(stacked(loop[3])),
            "end": pick(stacked(loop[4])), "random": pick(stacked(loop[5])),
            "swap": pick(stacked(loop[6])),
            "doc": tf.gather(pairs["doc"], c_pair),
            "target": tf.gather(target, c_pair),
            "bits": random_ops.stream(
                random_ops.fold_in(tf.gather(chunk_base, c_pair), c_chunk), 11),
        }

    def _segment_spans(self, sent: Dict[str, tf.Tensor], chunks: Dict[str, tf.Tensor]
                       ) -> Dict[str, tf.Tensor]:
        """Token ranges of A (the first a_end sentences) and of the in-chunk B;
        a one-sentence chunk of pure SOP is split at a random word start."""
        p_sent_start, p_sent_end_tok = sent["p_sent_start"], sent["p_sent_end_tok"]
        c_start, c_aend, c_end = chunks["start"], chunks["aend"], chunks["end"]
        nseg = c_end - c_start + 1
        a_lo = tf.gather(p_sent_start, c_start)
        a_hi = tf.gather(p_sent_end_tok, c_start + c_aend - 1)
        b_lo = tf.gather(p_sent_start, c_start + c_aend)
        b_hi = tf.gather(p_sent_end_tok, c_end)

        split_case = (nseg == 1) & ~chunks["random"]
        num_tokens = sent["num_tokens"]
        start_flags = tf.cast(tf.gather(self.is_start, sent["flat"]), tf.int32)
        st_incl = tf.cumsum(start_flags)
        st_excl = _pad1(st_incl - start_flags, tf.reduce_sum(start_flags))
        seg_len = a_hi - a_lo
        first_inner = tf.minimum(a_lo + 1, num_tokens)
        n_starts = tf.gather(st_excl, a_hi) - tf.gather(st_excl, first_inner)
        n_starts = tf.where(seg_len >= 2, n_starts, 0)
        u_split = random_ops.uniform_bits(chunks["bits"][:, 3])
        rank = tf.cast(tf.floor(u_split * tf.cast(n_starts, tf.float64)), tf.int32)
        at_start = _search(st_incl, tf.gather(st_excl, first_inner) + rank + 1)
        anywhere = a_lo + 1 + tf.cast(
            tf.floor(u_split * tf.cast(tf.maximum(seg_len - 1, 0), tf.float64)), tf.int32)
        split = tf.where(n_starts > 0, at_start, anywhere)
        return {
            "a_lo": a_lo, "a_hi": tf.where(split_case, split, a_hi),
            "b_lo": tf.where(split_case, split, b_lo), "b_hi": tf.where(split_case, a_hi, b_hi),
            "swap": chunks["swap"], "random": chunks["random"], "bits": chunks["bits"],
            "doc": chunks["doc"],
        }

    def _random_segments_b(self, sent: Dict[str, tf.Tensor], chunks: Dict[str, tf.Tensor],
                           spans: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """B of the random-B chunks: from a random other document of the batch,
        from a random sentence on, until it reaches target - len(A) tokens."""
        c_bits, c_doc, c_random = chunks["bits"], chunks["doc"], chunks["random"]
        num_docs, nsent = sent["num_docs"], sent["nsent"]
        u_doc = random_ops.uniform_bits(c_bits[:, 4])
        others = tf.maximum(num_docs - 1, 1)
        offset = 1 + tf.cast(tf.floor(u_doc * tf.cast(others, tf.float64)), tf.int32)
        r_doc = tf.where(num_docs > 1, (c_doc + offset) % num_docs, c_doc)
        r_doc = tf.where(tf.gather(nsent, r_doc) > 0, r_doc, c_doc)
        r_n = tf.gather(nsent, r_doc)
        r_first = tf.gather(sent["doc_first"], r_doc)
        r_start = r_first + random_ops.randint_bits(c_bits[:, 5], 0, r_n - 1)
        target_b = chunks["target"] - (spans["a_hi"] - spans["a_lo"])
        r_end = _search(sent["cum_incl"], tf.gather(sent["p_cum_excl"], r_start) + target_b)
        r_end = tf.maximum(tf.minimum(r_end, r_first + r_n - 1), r_start)
        spans = dict(spans)
        spans["b_lo"] = tf.where(c_random, tf.gather(sent["p_sent_start"], r_start),
                                 spans["b_lo"])
        spans["b_hi"] = tf.where(c_random, tf.gather(sent["p_sent_end_tok"], r_end),
                                 spans["b_hi"])
        return spans

    def _truncate(self, spans: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """The SOP swap (before truncation, as the original), then the
        original's truncate_seq_pair with a random front/back split per side."""
        c_swap, c_bits = spans["swap"], spans["bits"]
        a_lo = tf.where(c_swap, spans["b_lo"], spans["a_lo"])
        b_lo = tf.where(c_swap, spans["a_lo"], spans["b_lo"])
        a_hi = tf.where(c_swap, spans["b_hi"], spans["a_hi"])
        b_hi = tf.where(c_swap, spans["a_hi"], spans["b_hi"])
        cut_a, cut_b = truncation_counts(a_hi - a_lo, b_hi - b_lo, self.config.max_seq_length - 3)
        front_a = random_ops.binomial_half_bits(c_bits[:, 6], c_bits[:, 7], cut_a)
        front_b = random_ops.binomial_half_bits(c_bits[:, 8], c_bits[:, 9], cut_b)
        return {
            "a_lo": a_lo + front_a, "a_hi": a_hi - (cut_a - front_a),
            "b_lo": b_lo + front_b, "b_hi": b_hi - (cut_b - front_b),
            "label": tf.cast(c_swap | spans["random"], tf.int32), "key": c_bits[:, 10],
        }

    def _features(self, flat: tf.Tensor, spans: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """[CLS] A [SEP] B [SEP], padded to max_seq_length, masked."""
        seq_len = self.config.max_seq_length
        a_lo, a_hi, b_lo, b_hi = spans["a_lo"], spans["a_hi"], spans["b_lo"], spans["b_hi"]
        len_a = a_hi - a_lo
        length = len_a + (b_hi - b_lo) + 3
        count = tf.shape(a_lo)[0]
        tok_a = tf.gather(flat, tf.ragged.range(a_lo, a_hi))
        tok_b = tf.gather(flat, tf.ragged.range(b_lo, b_hi))
        cls = tf.RaggedTensor.from_tensor(tf.fill([count, 1], masking_lib.CLS_ID))
        sep = tf.RaggedTensor.from_tensor(tf.fill([count, 1], masking_lib.SEP_ID))
        ids = tf.concat([cls, tok_a, sep, tok_b, sep], axis=1).to_tensor(
            default_value=0, shape=[None, seq_len])
        pos = tf.range(seq_len)[None, :]
        input_mask = pos < length[:, None]
        segment_ids = (pos >= (len_a + 2)[:, None]) & input_mask
        is_start = tf.gather(self.is_start, ids) & input_mask
        masked = masking_lib.mask_tokens(ids, input_mask, is_start, spans["key"],
                                         self.config.masking)
        return {
            "input_ids": masked["input_ids"],
            "input_mask": tf.cast(input_mask, tf.int32),
            "segment_ids": tf.cast(segment_ids, tf.int32),
            "token_boundary": masked["token_boundary"],
            "masked_lm_positions": masked["masked_lm_positions"],
            "masked_lm_ids": masked["masked_lm_ids"],
            "masked_lm_weights": masked["masked_lm_weights"],
            "next_sentence_labels": spans["label"],
            "num_masked": masked["num_masked"],
            "length": length,
            "shuffle_key": spans["key"],
        }
