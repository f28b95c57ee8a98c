"""Instance building: truncation as the original, SOP/NSP pairing, balance,
one-sentence documents, independence from batching."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from pipelines import instances
from pipelines import masking
from pipelines import tfrecords
from pipelines import tokenizer

from .conftest import write_corpus


def original_truncate(len_a, len_b, max_tokens):
    """The original truncate_seq_pair's loop, counting removals."""
    cut_a = cut_b = 0
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a, cut_a = len_a - 1, cut_a + 1
        else:
            len_b, cut_b = len_b - 1, cut_b + 1
    return cut_a, cut_b


def test_truncation_counts_equal_the_original_loop():
    grid = list(itertools.product(range(0, 30), range(0, 30), [1, 5, 17, 40]))
    la, lb, m = (np.array(x) for x in zip(*grid))
    got_a, got_b = [], []
    for max_tokens in (1, 5, 17, 40):
        sel = m == max_tokens
        a, b = instances.truncation_counts(tf.constant(la[sel]), tf.constant(lb[sel]), max_tokens)
        got_a.append(a.numpy())
        got_b.append(b.numpy())
    got = list(zip(np.concatenate(got_a), np.concatenate(got_b)))
    order = [g for mt in (1, 5, 17, 40) for g in grid if g[2] == mt]
    want = [original_truncate(a, b, mt) for a, b, mt in order]
    assert [tuple(map(int, g)) for g in got] == want


def read_docs(path, do_lower_case=True):
    docs, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = tokenizer.preprocess_text_py(line, do_lower_case)
            if line:
                cur.append(line)
            elif cur:
                docs.append(cur)
                cur = []
    if cur:
        docs.append(cur)
    return docs


def build(vocab, docs, first_id=0, **kwargs):
    cfg = instances.InstanceConfig(
        masking=masking.MaskingConfig(vocab_size=vocab.vocab_size,
                                      max_predictions_per_seq=kwargs.pop("max_pred", 20)),
        **kwargs)
    builder = instances.InstanceBuilder(vocab, cfg)
    lines = tf.ragged.constant(docs, dtype=tf.string)
    ids = tf.range(first_id, first_id + len(docs), dtype=tf.int64)
    feats, stats = builder.build(lines, ids)
    return {k: v.numpy() for k, v in feats.items()}, {k: v.numpy() for k, v in stats.items()}, \
        tfrecords.unmasked_input_ids(feats).numpy()


def contains(haystack, needle):
    n = len(needle)
    return any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


@pytest.fixture(scope="module")
def docs(corpus_file):
    return read_docs(corpus_file)


def split_pair(ids_row, segment_row, mask_row):
    length = int(mask_row.sum())
    len_a = int((segment_row[:length] == 0).sum()) - 2
    ids = ids_row[:length].tolist()
    assert ids[0] == masking.CLS_ID and ids[len_a + 1] == masking.SEP_ID
    assert ids[-1] == masking.SEP_ID
    return ids[1:len_a + 1], ids[len_a + 2:length - 1]


def test_sop_pairs_are_consecutive_text_in_or_out_of_order(vocab, docs):
    # max_seq_length large enough that nothing is truncated: A+B (label 0) or
    # B+A (label 1) is a contiguous piece of the document's token stream.
    feats, stats, unmasked = build(vocab, docs[:40], max_seq_length=512, dupe_factor=3)
    tok = vocab.make_tokenizer()
    streams = [sum(tok.tokenize(tf.constant(d)).to_list(), []) for d in docs[:40]]
    assert len(feats["doc_id"]) > 100
    for r in range(len(feats["doc_id"])):
        a, b = split_pair(unmasked[r], feats["segment_ids"][r], feats["input_mask"][r])
        assert a and b
        stream = streams[int(feats["doc_id"][r])]
        first, second = (a, b) if feats["next_sentence_labels"][r] == 0 else (b, a)
        assert contains(stream, first + second), r
    assert stats["sentences"].tolist() == [len(d) for d in docs[:40]]


def test_sop_balance_and_lengths(vocab, docs):
    feats, _, _ = build(vocab, docs, max_seq_length=64, dupe_factor=4)
    n = len(feats["next_sentence_labels"])
    frac = feats["next_sentence_labels"].mean()
    # Binomial(n, 1/2): 4 standard deviations.
    assert abs(frac - 0.5) <= 4 * np.sqrt(0.25 / n), (frac, n)
    lengths = feats["input_mask"].sum(axis=1)
    assert lengths.max() == 64 and lengths.min() >= 5
    np.testing.assert_array_equal(feats["length"], lengths)
    # Most instances fill the target (max_seq_length - 3 tokens + 3 specials).
    assert (lengths == 64).mean() > 0.5


def test_one_sentence_documents_give_no_instances(vocab):
    docs = [["ka lo mi ten ser."], ["vi don pra el.", "nu ros tia ge bar."], ["el nu ros."]]
    feats, stats, _ = build(vocab, docs, max_seq_length=32, dupe_factor=5)
    assert stats["sentences"].tolist() == [1, 2, 1]
    assert set(feats["doc_id"].tolist()) == {1}


def test_single_segment_chunks_are_split_at_a_word_start(vocab):
    # Long sentences and short random targets (short_seq_prob=1): many chunks
    # hold one segment, which pure SOP splits at a word start. Nothing is
    # truncated at length 512, so every pair is contiguous text and its second
    # half (in text order) begins with a word-start piece.
    words = ["kaloser", "tenmi", "quavi", "donpra", "nuros", "tiage", "barel"]
    sentences = [" ".join(words[(i + j) % 7] for j in range(30)) + "." for i in range(4)]
    feats, _, unmasked = build(vocab, [sentences], max_seq_length=512, dupe_factor=20,
                               short_seq_prob=1.0)
    per_sentence = vocab.make_tokenizer().tokenize(tf.constant(sentences)).to_list()
    stream = sum(per_sentence, [])
    start = vocab.is_start_table()
    sentence_len = max(len(s) for s in per_sentence)
    labels = feats["next_sentence_labels"]
    short_pairs = 0
    for r in range(len(labels)):
        a, b = split_pair(unmasked[r], feats["segment_ids"][r], feats["input_mask"][r])
        first, second = (a, b) if labels[r] == 0 else (b, a)
        assert contains(stream, first + second), r
        assert start[second[0]], r
        short_pairs += len(first) + len(second) <= sentence_len
    assert short_pairs > 5  # pairs made of one sentence: the split case happened
    assert 0 < labels.sum() < len(labels)


def test_original_single_segment_negatives_and_nsp(vocab, docs):
    sop, _, _ = build(vocab, docs, max_seq_length=64, dupe_factor=2)
    orig, _, unmasked = build(vocab, docs, max_seq_length=64, dupe_factor=2,
                              single_segment_random_negatives=True)
    # The original's behaviour adds random-document negatives: more label 1.
    assert orig["next_sentence_labels"].mean() > sop["next_sentence_labels"].mean() + 0.02
    nsp, _, _ = build(vocab, docs, max_seq_length=64, dupe_factor=4, random_next_sentence=True)
    frac = nsp["next_sentence_labels"].mean()
    assert 0.5 <= frac < 0.75, frac


def test_instances_do_not_depend_on_batching(vocab, docs):
    whole, _, _ = build(vocab, docs[:30], max_seq_length=48, dupe_factor=2)
    first, _, _ = build(vocab, docs[:13], max_seq_length=48, dupe_factor=2)
    rest, _, _ = build(vocab, docs[13:30], first_id=13, max_seq_length=48, dupe_factor=2)
    for name in ("input_ids", "segment_ids", "masked_lm_positions", "next_sentence_labels"):
        np.testing.assert_array_equal(whole[name], np.concatenate([first[name], rest[name]]))


def test_config_errors():
    mcfg = masking.MaskingConfig(vocab_size=100)
    with pytest.raises(ValueError, match="max_seq_length must be >= 5.*got 4"):
        instances.InstanceConfig(masking=mcfg, max_seq_length=4)
    with pytest.raises(ValueError, match="dupe_factor.*0"):
        instances.InstanceConfig(masking=mcfg, dupe_factor=0)


def test_generated_corpus_helper_is_deterministic(tmp_path):
    a = write_corpus(str(tmp_path / "a.txt"), num_docs=5, seed=3)
    b = write_corpus(str(tmp_path / "b.txt"), num_docs=5, seed=3)
    assert open(a).read() == open(b).read()
