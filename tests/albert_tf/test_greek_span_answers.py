"""Served span answers are the context's own characters, with their offsets, on Greek contexts (issue 35, N3).

Lower-casing is context-dependent in one place: a capital sigma at the end of a word becomes ς ("ΟΔΟΣ" -> "οδος")
where a lone "Σ" becomes σ. The character offsets once lower-cased each character alone, marked such a context
unaligned, and the SavedModel then answered with decoded pieces ("ka  ⁇ afe", start_char -1). Here one exported
span-QA SavedModel whose logits peak at chosen pieces (so the right answer is known) answers Greek contexts,
upper-case, accented and mixed, with the vocabulary that knows the scripts (tests/script_vocab.py).
"""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.script_vocab import train_script_spm

MAX_LEN = 24
# (context, its answer): the answer is the context's "Café" where it has one, else its "οδος" word (no other
# piece of a marked kind after it).
CASES = [
    ("Ka Café lo mi", "Café"),
    ("ΟΔΟΣ Ka Café lo mi", "Café"),
    ("Οδός Ka Café lo mi", "Café"),
    ("ΟΔΟΣ ka lo mi", "ΟΔΟΣ"),
    ("ka Οδός lo mi", "Οδός"),
    ("ka lo ΚΑΙ ΟΔΟΣ. mi", "ΟΔΟΣ"),
    ("ΑΣ'Σ ΤΗΣ ΠΟΛΗΣ, ΣΑΣ: οδος", "οδος"),
    ("ΣΑΣ ΚΑΙ ΤΗΣ  \u00a0ΠΟΛΗΣ ka lo mi ten ser qua vi don ΑΣ ΕΣΣ ka Café.", "Café"),
]
ANSWERS = {"cafe": 20.0, "οδος": 10.0}  # the answer words, normalised, and their pieces' logits


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the span-QA SavedModel's serving_default, the preprocessor)."""
    import keras

    root = tmp_path_factory.mktemp("greek_span_qa")
    spm = train_script_spm(str(root))
    keras.utils.set_random_seed(3)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    pieces = [pre.tokenize([word]).to_list()[0] for word in ANSWERS]
    starts = tf.constant([p[0] for p in pieces], tf.int32)
    ends = tf.constant([p[-1] for p in pieces], tf.int32)
    logits = tf.constant(list(ANSWERS.values()))

    class MarkerQA(albert_tf.AlbertSpanQA):
        """Start logits peak at an answer word's first piece, end logits at its last ("cafe" higher)."""

        def _head(self, features, outputs, training):
            ids = tf.cast(features["input_ids"], tf.int32)[..., tf.newaxis]
            hit = lambda marks: tf.reduce_max(tf.cast(tf.equal(ids, marks), tf.float32) * logits, axis=-1)  # noqa
            return {"start_logits": hit(starts), "end_logits": hit(ends)}

    config = albert_tf.AlbertConfig(vocab_size=pre.vocab_size, embedding_size=4, hidden_size=8, num_hidden_layers=1,
                                    num_attention_heads=1, intermediate_size=8, max_position_embeddings=MAX_LEN)
    model = MarkerQA(config, preprocessor=pre, max_query_length=4, doc_stride=4)
    loaded = tf.saved_model.load(albert_tf.export_saved_model(model, str(root / "export")))
    return loaded, pre


def test_greek_contexts_are_answered_with_their_own_characters(served):
    loaded, pre = served
    contexts = [context for context, _ in CASES]
    for context, answer in CASES:
        assert context.count(answer) == 1, context
    out = loaded.signatures["serving_default"](text=tf.constant(["where?"] * len(CASES)),
                                               text_pair=tf.constant(contexts))
    got = [a.decode("utf-8") for a in out["answer"].numpy()]
    start, end = out["start_char"].numpy(), out["end_char"].numpy()
    want = [(answer, context.index(answer), context.index(answer) + len(answer)) for context, answer in CASES]
    assert list(zip(got, start.tolist(), end.tolist())) == want
    assert all(context[a:b] == text for context, text, a, b in zip(contexts, got, start, end))


def test_an_unaligned_context_gets_no_answer_not_decoded_pieces(served, monkeypatch):
    """Where the offsets cannot be trusted, the answer is empty with -1 offsets (never decoded pieces)."""
    from albert_tf.export import char_offsets

    loaded, pre = served
    text = tf.constant(["ka Café lo"])
    offsets = char_offsets.piece_offsets(_tokenizer(pre), None, text, 64, True, "original")
    assert offsets.aligned.numpy().tolist() == [True]
    # The per-character rebuild, made unequal to the text's normalisation, marks the row unaligned.
    monkeypatch.setattr(char_offsets, "_lowered_in_context", lambda segments: segments.flat_values)
    offsets = char_offsets.piece_offsets(_tokenizer(pre), None, text, 64, True, "original")
    assert offsets.aligned.numpy().tolist() == [False]
    answer, start_char, end_char = char_offsets.answer_text(offsets, tf.constant([0]), tf.constant([1]),
                                                            tf.constant([1]), tf.constant([True]))
    assert (answer.numpy().tolist(), start_char.numpy().tolist(), end_char.numpy().tolist()) == ([b""], [-1], [-1])


def _tokenizer(pre):
    import tensorflow_text as tf_text

    return tf_text.SentencepieceTokenizer(model=pre.spm_model_proto, out_type=tf.int32)


def test_lowered_segments_rebuild_the_normalisation_on_greek_text():
    """Each character's lower-cased part, cut from the whole row, rebuilds `preprocess_text` exactly."""
    from albert_tf.export.char_offsets import normalized_segments
    from pipelines.tokenizer import preprocess_text

    texts = ["ΟΔΟΣ", "ΟΔΟΣ ΟΔΟΣ.", "Σ", "ΑΣ'Σ", "ΣΑΣ\x00Σ", " Οδός  ΚΑΙ ΟΔΟΣ\u0301 x ", "AΣ1 ΣΣ ΣA"]
    segments, _ = normalized_segments(tf.strings.unicode_split(tf.constant(texts), "UTF-8"), True, "original")
    rebuilt = tf.strings.reduce_join(segments, axis=-1).numpy().tolist()
    assert rebuilt == preprocess_text(tf.constant(texts), True).numpy().tolist()
    assert np.array([s.decode("utf-8") for s in rebuilt[:1]]).tolist() == ["οδος"]
