"""AlbertTextPreprocessor and the packing helpers: hand-worked examples and a
pure-Python port of the original's normalisation, tokenisation and truncation
loops (`_truncate_seq_pair`, the single-text cut)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.layers import preprocessor as pp
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from pipelines import tokenizer
from tests.albert_tf.task_testlib import train_tiny_spm

TEXTS = [
    "Ka lo mi ten ser",
    "",
    "   \t ",
    "Caf\u00e9 na\u00efve \u00c0 KA",  # accents, stripped by NFKD
    "\u4e2d\u6587 text \U0001F600 emoji",  # Chinese and emoji: unknown pieces
    "qua vi don ka lo mi ten ser qua vi don ka lo mi ten ser 1, 2019 , the of",
    "``quoted'' TEXT with   spaces",
    "ka",
]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


@pytest.fixture(scope="module")
def python_ids(spm_model):
    """The original's Python path: preprocess_text, SentencePiece, re-split."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    vocab = tokenizer.SentencePieceVocab.from_file(spm_model)

    def encode(text, lower=True):
        ids = sp.EncodeAsIds(tokenizer.preprocess_text_py(text, lower))
        return [j for i in ids for j in vocab.resplit[i]]

    return encode


def original_pair_truncation(a, b, max_length):
    """The original `_truncate_seq_pair` loop, verbatim in logic."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max_length:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return a, b


def original_packing(a, b, max_seq_length):
    """[CLS] a [SEP] (b [SEP]) and segment ids, as the original's converters."""
    if b is None:
        a = a[:max_seq_length - 2]
        return [2] + a + [3], [0] * (len(a) + 2)
    a, b = original_pair_truncation(a, b, max_seq_length - 3)
    return [2] + a + [3] + b + [3], [0] * (len(a) + 2) + [1] * (len(b) + 1)


def padded(rows, length):
    return [row + [0] * (length - len(row)) for row in rows]


# ------------------------------------------------------------- hand-worked
def test_truncated_pair_lengths_hand_worked():
    # max 7: (10,2) cut a to 5; (3,9) cut b to 4; (5,5) both: tie pops b
    # first, then a, ... -> a 4, b 3; (4,3) fits already.
    a, b = pp.truncated_pair_lengths(tf.constant([10, 3, 5, 4, 0]), tf.constant([2, 9, 5, 3, 9]), 7)
    assert a.numpy().tolist() == [5, 3, 4, 4, 0]
    assert b.numpy().tolist() == [2, 4, 3, 3, 7]


def test_truncated_pair_lengths_equal_the_original_loop_exhaustively():
    cases = [(la, lb, m) for m in range(0, 10) for la in range(13) for lb in range(13)]
    la, lb, m = (np.array(c) for c in zip(*cases))
    for max_length in range(0, 10):
        sel = m == max_length
        got_a, got_b = pp.truncated_pair_lengths(tf.constant(la[sel]), tf.constant(lb[sel]), max_length)
        want = [original_pair_truncation(range(x), range(y), max_length) for x, y in zip(la[sel], lb[sel])]
        assert got_a.numpy().tolist() == [len(w[0]) for w in want]
        assert got_b.numpy().tolist() == [len(w[1]) for w in want]


def test_keep_first_and_keep_last():
    x = tf.ragged.constant([[1, 2, 3, 4], [5], []])
    assert pp.keep_first(x, 2).to_list() == [[1, 2], [5], []]
    assert pp.keep_first(x, tf.constant([3, 0, 1])).to_list() == [[1, 2, 3], [], []]
    assert pp.keep_last(x, 2).to_list() == [[3, 4], [5], []]
    assert pp.keep_last(x, tf.constant([1, 1, 5])).to_list() == [[4], [5], []]


def test_pack_segments_hand_worked():
    out = pp.pack_segments(tf.ragged.constant([[7, 8], [9], []]), tf.ragged.constant([[5], [], [6, 6]]))
    assert out["input_ids"].numpy().tolist() == [
        [2, 7, 8, 3, 5, 3], [2, 9, 3, 3, 0, 0], [2, 3, 6, 6, 3, 0]]
    assert out["segment_ids"].numpy().tolist() == [
        [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0], [0, 0, 1, 1, 1, 0]]
    assert out["input_mask"].numpy().tolist() == [
        [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]]
    single = pp.pack_segments(tf.ragged.constant([[7, 8]]), seq_length=6)
    assert single["input_ids"].numpy().tolist() == [[2, 7, 8, 3, 0, 0]]
    assert single["input_ids"].dtype == tf.int32


# -------------------------------------------------- against the reference
@pytest.mark.parametrize("max_seq_length", [5, 9, 40])
def test_single_text_matches_the_original(spm_model, python_ids, max_seq_length):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=max_seq_length)
    out = pre(tf.constant(TEXTS))
    rows = [original_packing(python_ids(t), None, max_seq_length) for t in TEXTS]
    length = max(len(r[0]) for r in rows)  # dynamic: the longest packed row
    assert out["input_ids"].shape == (len(TEXTS), length)
    assert out["input_ids"].numpy().tolist() == padded([r[0] for r in rows], length)
    assert out["segment_ids"].numpy().tolist() == padded([r[1] for r in rows], length)
    assert out["input_mask"].numpy().tolist() == padded([[1] * len(r[0]) for r in rows], length)


@pytest.mark.parametrize("max_seq_length", [3, 8, 13, 40])
def test_pairs_match_the_original(spm_model, python_ids, max_seq_length):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=max_seq_length, pad_to_max_length=True)
    firsts = TEXTS
    seconds = TEXTS[::-1]
    out = pre(tf.constant(firsts), tf.constant(seconds))
    rows = [original_packing(python_ids(a), python_ids(b), max_seq_length) for a, b in zip(firsts, seconds)]
    assert out["input_ids"].shape == (len(TEXTS), max_seq_length)
    assert out["input_ids"].numpy().tolist() == padded([r[0] for r in rows], max_seq_length)
    assert out["segment_ids"].numpy().tolist() == padded([r[1] for r in rows], max_seq_length)


def test_normalisation_lower_case_and_accents(spm_model, python_ids):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=32)
    same = pre(tf.constant(["Ka LO  mi", "k\u00e0 lo\tmi", "ka lo mi"]))["input_ids"].numpy()
    assert (same[0] == same[2]).all() and (same[1] == same[2]).all()
    cased = AlbertTextPreprocessor(spm_model, max_seq_length=32, do_lower_case=False)
    ids = cased(tf.constant(["KA lo"]))["input_ids"].numpy()[0]
    assert ids.tolist() == original_packing(python_ids("KA lo", lower=False), None, 32)[0]
    assert ids.tolist() != pre(tf.constant(["KA lo"]))["input_ids"].numpy()[0].tolist()


def test_empty_whitespace_and_batch_of_one(spm_model):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=16)
    out = pre(tf.constant(["", "  \n "]), tf.constant(["", ""]))
    assert out["input_ids"].numpy().tolist() == [[2, 3, 3]] * 2
    assert out["segment_ids"].numpy().tolist() == [[0, 0, 1]] * 2
    one = pre(tf.constant(["ka lo"]))
    assert one["input_ids"].shape[0] == 1
    assert pre("ka lo")["input_ids"].numpy().tolist() == one["input_ids"].numpy().tolist()  # scalar -> batch
    assert pre(["ka lo"])["input_ids"].numpy().tolist() == one["input_ids"].numpy().tolist()  # list


def test_tokenize_and_detokenize(spm_model, python_ids):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=16)
    ids = pre.tokenize(tf.constant(["Ka lo mi", ""]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == [python_ids("Ka lo mi"), []]
    assert pre.detokenize(ids).numpy().tolist() == [b"ka lo mi", b""]
    dense = pre(tf.constant(["ka lo mi"]))["input_ids"]  # specials are dropped
    assert pre.detokenize(dense).numpy().tolist() == [b"ka lo mi"]
    assert (pre.vocab_size, pre.cls_id, pre.sep_id, pre.mask_id, pre.pad_id) == (120, 2, 3, 4, 0)
    assert not pre.supports_jit  # keeps Keras's jit_compile="auto" off on GPU machines
    with open(spm_model, "rb") as f:
        assert pre.spm_model_proto == f.read()


def test_in_tf_function_and_tf_data(spm_model):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=12)
    texts, pairs = tf.constant(TEXTS), tf.constant(TEXTS[::-1])
    eager = pre(texts, pairs)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
    def packed(a, b):
        return pre(a, b)

    graph = packed(texts, pairs)
    ds = tf.data.Dataset.from_tensor_slices((texts, pairs)).batch(len(TEXTS)).map(pre)
    mapped = next(iter(ds))
    for key in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(graph[key].numpy(), eager[key].numpy())
        np.testing.assert_array_equal(mapped[key].numpy(), eager[key].numpy())


def test_config_round_trip(spm_model):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=11, do_lower_case=False,
                                 pad_to_max_length=True, normalization="xlnet", name="pre")
    config = json.loads(json.dumps(pre.get_config()))  # JSON-serialisable
    again = AlbertTextPreprocessor.from_config(config)
    assert (again.max_seq_length, again.do_lower_case, again.pad_to_max_length, again.normalization,
            again.name) == (11, False, True, "xlnet", "pre")
    text = tf.constant(TEXTS)
    np.testing.assert_array_equal(again(text)["input_ids"].numpy(), pre(text)["input_ids"].numpy())
    restored = keras.layers.deserialize(keras.layers.serialize(pre))
    assert isinstance(restored, AlbertTextPreprocessor)
    assert restored.spm_model_proto == pre.spm_model_proto


def test_bad_arguments_name_the_value(spm_model):
    with pytest.raises(ValueError, match="exactly one of spm_model_file or spm_model_proto"):
        AlbertTextPreprocessor()
    with pytest.raises(ValueError, match="max_seq_length must be at least 3.*got 2"):
        AlbertTextPreprocessor(spm_model, max_seq_length=2)
    with pytest.raises(FileNotFoundError, match="nope.model"):
        AlbertTextPreprocessor("nope.model")
    pre = AlbertTextPreprocessor(spm_model)
    with pytest.raises(ValueError, match=r"shape \[batch\], got shape \(1, 1\)"):
        pre(tf.constant([["a"]]))


def test_normalisation_default_is_the_originals_and_xlnet_is_an_option(spm_model, python_ids):
    """The original keeps `` and ''; the xlnet option turns them into " (as Hugging Face's tokenizer)."""
    text = "``ka'' lo"
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=32)
    xlnet = AlbertTextPreprocessor(spm_model, max_seq_length=32, normalization="xlnet")
    assert pre.normalization == "original"
    assert pre.tokenize([text]).to_list() == [python_ids(text)]
    assert xlnet.tokenize([text]).to_list() == [python_ids('"ka" lo')]
    assert pre.tokenize([text]).to_list() != xlnet.tokenize([text]).to_list()
    with pytest.raises(ValueError, match="'hf'"):
        AlbertTextPreprocessor(spm_model, normalization="hf")


def test_empty_batch_packs_to_one_padding_column(spm_model):
    """No rows still have a position 0 (the encoder reads [CLS] there): [0, 1], not [0, 0]."""
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=16)
    for out in (pre(tf.constant([], tf.string)), pre(tf.constant([], tf.string), tf.constant([], tf.string))):
        assert {k: v.shape.as_list() for k, v in out.items()} == {k: [0, 1] for k in out}
    ids = pp.at_least_one_position({"input_ids": tf.zeros([0, 3, 0], tf.int32), "x": tf.ones([2, 2], tf.int32)})
    assert ids["input_ids"].shape.as_list() == [0, 3, 1] and ids["x"].numpy().tolist() == [[1, 1], [1, 1]]


def _peak_rss_growth_mb(fn):
    """Peak RSS growth of fn() in MB (Linux: VmHWM reset through clear_refs); None elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return None

    def status(key):
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

    before = status("VmRSS")
    fn()
    return (status("VmHWM") - before) / 1024


def test_a_10mb_text_is_cut_before_normalising(spm_model, python_ids):
    """10 MB costs about what a long text does, and gives the pieces the whole text gives."""
    import time

    pre = AlbertTextPreprocessor(spm_model, max_seq_length=32)
    unit = "Ka lo mi ten ser qua vi don. "
    huge = tf.constant([(unit * (10_000_000 // len(unit) + 1))[:10_000_000]])
    pre(tf.constant([unit]), tf.constant([unit]))  # warm-up
    start = time.process_time()  # CPU seconds (every thread): load on shared cores does not change them
    growth = _peak_rss_growth_mb(lambda: pre(huge, huge))
    seconds = time.process_time() - start
    # Before the cut: about 6 s and 900 MB for one 10 MB text (normalised and tokenized whole).
    assert seconds < 2.0 and (growth is None or growth < 150), (seconds, growth)
    want = original_packing(python_ids(unit * 20), python_ids(unit * 20), 32)[0]
    assert pre(huge, huge)["input_ids"].numpy().tolist() == [want]
    # The cut is CHARS_PER_PIECE characters per piece kept, from the start or the end.
    cut = pp.cut_text(tf.constant(["ab" * 100]), 1)
    assert cut.numpy().tolist() == [b"ab" * (pp.CHARS_PER_PIECE // 2)]
    assert pp.cut_text(tf.constant(["x" * 10 + "y" * 64]), 1, keep="last").numpy().tolist() == [b"y" * 64]
    with pytest.raises(ValueError, match="'middle'"):
        pp.cut_text(huge, 1, keep="middle")


def test_stray_bytes_and_nul_give_the_originals_ids(spm_model, python_ids):
    """A stray byte is dropped (the original's convert_to_unicode), a NUL is a character (<unk>), as the original.

    Before: the stray byte read as a word break ("ka lo"), and lower-casing cut the text at the NUL.
    """
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=32)
    got = pre.tokenize(tf.constant([b"ka\x85lo", b"Ka \x00 lo", b"\xffka\xc3"])).to_list()
    assert got == [python_ids("kalo"), python_ids("ka \x00 lo"), python_ids("ka")]
    assert got[0] != python_ids("ka lo") and pp.UNK_ID in got[1] and len(got[1]) > len(python_ids("ka"))
