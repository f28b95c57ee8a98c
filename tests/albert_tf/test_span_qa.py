"""AlbertSpanQA: the v1 head and loss, the v2 (XLNet-style) head's masking,
conditioning on the start, beam outputs and answerability loss."""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

IDS = {"input_ids": tf.constant([[2, 7, 3, 9, 10, 11, 3, 0], [2, 8, 8, 3, 12, 13, 3, 0]]),
       "input_mask": tf.constant([[1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 0]]),
       "segment_ids": tf.constant([[0, 0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 0]])}
LABELS = {"start_positions": tf.constant([3, 0]), "end_positions": tf.constant([5, 0]),
          "is_impossible": tf.constant([0, 1])}


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_v1_logits_and_loss_against_numpy():
    qa = albert_tf.AlbertSpanQA(tiny_config())
    out = qa(IDS)
    seq = qa.encoder(IDS)["sequence_output"].numpy()
    logits = seq @ qa.span_head.output_weights.numpy().T + qa.span_head.output_bias.numpy()
    np.testing.assert_allclose(out["start_logits"].numpy()[:, :7], logits[:, :7, 0], atol=1e-6)
    np.testing.assert_allclose(out["end_logits"].numpy()[:, :7], logits[:, :7, 1], atol=1e-6)
    assert (out["start_logits"].numpy()[:, 7] < -1e29).all()  # padding masked
    total, count = qa.loss_terms(IDS, LABELS, out)
    s, e = _log_softmax(out["start_logits"].numpy()), _log_softmax(out["end_logits"].numpy())
    want = -0.5 * (s[0, 3] + e[0, 5] + s[1, 0] + e[1, 0])
    assert float(count) == 2 and float(total) == pytest.approx(want, rel=1e-5)


def _randomized(model, seed):
    """`model` with weights drawn from a seeded NumPy generator (std 0.3, LayerNorm gains about 1): outputs of order
    one that depend on the input, whatever the process's random state (the test order under pytest-xdist)."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign((rng.normal(0.0, 0.3, size=v.shape) + (1.0 if "gamma" in v.path else 0.0)).astype(np.float32))
    return model


def test_v2_masks_conditions_on_start_and_beams():
    qa = albert_tf.AlbertSpanQA(tiny_config(), version_2=True, start_n_top=2, end_n_top=3)
    qa(IDS)  # built
    _randomized(qa, seed=5)
    p_mask = qa.answer_mask(IDS).numpy()
    # Only [CLS] and the second segment's non-[SEP] tokens may answer.
    assert p_mask.tolist() == [[0, 1, 1, 0, 0, 0, 1, 1], [0, 1, 1, 1, 0, 0, 1, 1]]
    out = qa(IDS)
    assert (out["start_logits"].numpy()[p_mask == 1] == -1e30).all()
    assert out["start_top_index"].shape == (2, 2) and out["end_top_index"].shape == (2, 2, 3)
    assert out["cls_logits"].shape == (2,)
    # The end logits at inference are those conditioned on the best start.
    best = out["start_top_index"][:, 0]
    forced = qa({**IDS, "start_positions": best})
    np.testing.assert_allclose(out["end_logits"].numpy(), forced["end_logits"].numpy(), atol=1e-5)
    other = qa({**IDS, "start_positions": tf.constant([4, 5])})
    allowed = p_mask == 0
    assert not np.allclose(other["end_logits"].numpy()[allowed], forced["end_logits"].numpy()[allowed])
    # The beam's end log-probs are the top of log_softmax(end logits) for each start.
    want = np.sort(_log_softmax(forced["end_logits"].numpy()), -1)[:, ::-1][:, :3]
    np.testing.assert_allclose(out["end_top_log_probs"].numpy()[:, 0], want, atol=1e-5)
    # Loss: (CE start + CE end) / 2 + BCE(cls, is_impossible) / 2, conditioned on the gold start.
    gold = qa._forward(IDS, LABELS, training=False)
    total, _ = qa.loss_terms(IDS, LABELS, gold)
    s, e = _log_softmax(gold["start_logits"].numpy()), _log_softmax(gold["end_logits"].numpy())
    c = gold["cls_logits"].numpy()
    bce = np.log1p(np.exp(-np.abs(c))) + np.maximum(c, 0) - c * np.array([0, 1])
    want = -0.5 * (s[0, 3] + e[0, 5] + s[1, 0] + e[1, 0]) + 0.5 * bce.sum()
    assert float(total) == pytest.approx(want, rel=1e-5)


def test_strings_pack_question_then_context(tmp_path):
    pre = albert_tf.AlbertTextPreprocessor(train_tiny_spm(str(tmp_path)), max_seq_length=12)
    qa = albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre, max_query_length=3)
    question, context = tf.constant(["ka lo mi ten ser"]), tf.constant(["qua vi don ka lo mi ten ser"])
    features = qa.features((question, context))
    q = pre.tokenize(question).to_list()[0][:3]
    c = pre.tokenize(context).to_list()[0][:12 - 3 - 3]
    assert features["input_ids"].numpy()[0].tolist() == [2] + q + [3] + c + [3]
    out = qa.predict((["ka lo mi ten ser"], ["qua vi don ka lo mi ten ser"]), verbose=0)
    assert out["start_logits"].shape == (1, 12)


def test_fit_v2_reduces_the_loss():
    qa = albert_tf.AlbertSpanQA(tiny_config(), version_2=True)
    qa.compile(optimizer=albert_tf.optimizers.adamw(1e-2))
    history = qa.fit(tf.data.Dataset.from_tensors((IDS, LABELS)).repeat(4), epochs=1, verbose=0,
                      shuffle=False)
    first = qa.evaluate(tf.data.Dataset.from_tensors((IDS, LABELS)), verbose=0)
    assert np.isfinite(history.history["loss"][0]) and first < history.history["loss"][0]


@pytest.mark.parametrize("version_2", [False, True])
def test_predict_on_an_empty_batch(tmp_path, version_2):
    """No rows in, no rows out (Keras's predict fails on an empty input)."""
    pre = albert_tf.AlbertTextPreprocessor(train_tiny_spm(str(tmp_path)), max_seq_length=16)
    qa = albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre, version_2=version_2, max_query_length=4)
    for x in (([], []), {"text": [], "text_pair": []}, {"input_ids": np.zeros([0, 0], np.int32)}):
        out = qa.predict(x, verbose=0)
        assert out["start_logits"].shape[0] == 0 and out["end_logits"].shape[0] == 0, x
        if version_2:
            assert out["cls_logits"].shape == (0,)


def test_serving_settings_saved_and_loaded(tmp_path):
    """doc_stride, the v2 threshold, max_answer_length and the normalisation go to task_config.json and back."""
    import json

    pre = albert_tf.AlbertTextPreprocessor(train_tiny_spm(str(tmp_path)), max_seq_length=16, normalization="xlnet")
    qa = albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre, version_2=True, doc_stride=3,
                                null_score_diff_threshold=-1.5, max_answer_length=6)
    albert_tf.save_task_model(qa, str(tmp_path / "qa"))
    with open(tmp_path / "qa" / "task_config.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert (saved["doc_stride"], saved["null_score_diff_threshold"], saved["normalization"]) == (3, -1.5, "xlnet")
    assert saved["max_answer_length"] == 6  # issue 29: the export serves the fine-tuned value
    again = albert_tf.load_task_model(str(tmp_path / "qa"))
    assert (again.doc_stride, again.null_score_diff_threshold, again.preprocessor.normalization) == (3, -1.5, "xlnet")
    assert again.max_answer_length == 6
    with pytest.raises(ValueError, match="max_answer_length must be >= 1, got 0"):
        albert_tf.AlbertSpanQA(tiny_config(), max_answer_length=0)
    with pytest.raises(ValueError, match="doc_stride must be >= 1, got 0"):
        albert_tf.AlbertSpanQA(tiny_config(), doc_stride=0)


# Contexts whose pieces' characters the served answers use (issue 29): case, accents, CJK and emoji outside the
# vocabulary, extra whitespace, compatibility characters, digit-comma pieces, combining marks.
OFFSET_CONTEXTS = ["Ka Café 中文 Lo", "😀 ka ÀÉÎ naïve", "ka  lo mi ten ser qua", "ka ``quoted'' lo", "ＡＢ ka ﬁ x",
                   "ka 12,3 lo", "vi don ✓ ka ™ lo", "e\u0301 a \u0301 b", "", "   ", "  ka   lo\tmi  "]


@pytest.mark.parametrize("normalization", ["original", "xlnet"])
def test_piece_offsets_are_the_squad_readers_alignment(tmp_path, normalization):
    """Each piece's first/last character in the original context equals the library's alignment (the SQuAD
    reader's, which postprocess_predictions answers from), wherever the reader keeps the context."""
    import tensorflow_text as tf_text

    from albert_tf.export.char_offsets import normalized_segments, piece_offsets
    from pipelines import tokenizer
    from pipelines.finetune import squad
    from pipelines.finetune.sp_text import PieceText

    spm = train_tiny_spm(str(tmp_path))
    vocab = tokenizer.SentencePieceVocab.from_file(spm)
    sp = tf_text.SentencepieceTokenizer(model=vocab.model_proto, out_type=tf.int32)
    texts = tf.constant(OFFSET_CONTEXTS)
    off = piece_offsets(sp, None, texts, 100, True, normalization)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=16, normalization=normalization)
    assert off.ids.to_list() == pre.tokenize(texts, 100).to_list()  # the pieces the model sees
    segments, _ = normalized_segments(tf.strings.unicode_split(texts, "UTF-8"), True, normalization)
    joined = [s.decode("utf-8") for s in tf.strings.reduce_join(segments, axis=-1).numpy()]
    assert joined == [tokenizer.preprocess_text_py(t, True, normalization) for t in OFFSET_CONTEXTS]
    assert off.aligned.numpy().all()
    compared = 0
    for i, context in enumerate(OFFSET_CONTEXTS):
        alignment = squad.align_paragraph(context, PieceText(vocab, True, normalization))
        if alignment is None:  # the reader drops it (alignment below 80%)
            continue
        assert off.first_char.to_list()[i] == alignment.tok_start_to_orig, context
        assert off.last_char.to_list()[i] == alignment.tok_end_to_orig, context
        compared += 1
    assert compared >= 6  # the reader drops four (xlnet: five, its quote pairs)


def test_best_spans_skip_spans_without_text():
    """A span whose pieces hold only whitespace (a lone word-start piece) is skipped, as
    postprocess_predictions skips empty answers; the next best span with text is chosen."""
    from albert_tf.export.span_qa import best_beam_spans, best_spans

    start = tf.constant([[0.0, 5.0, 1.0, 0.0]])
    end = tf.constant([[0.0, 5.0, 0.5, 2.0]])
    context = tf.constant([[False, True, True, True]])
    text = tf.constant([[False, False, True, True]])  # position 1 is a bare word-start piece
    s, e, _ = best_spans(start, end, context, 30)
    assert (s.numpy().tolist(), e.numpy().tolist()) == ([1], [1])
    s, e, score = best_spans(start, end, context, 30, text_mask=text)
    assert (s.numpy().tolist(), e.numpy().tolist(), score.numpy().tolist()) == ([1], [3], [7.0])
    s, e, _ = best_spans(start, end, context, 2, text_mask=text)  # (1, 2) is the best with text at length 2
    assert (s.numpy().tolist(), e.numpy().tolist()) == ([1], [2])
    beam = (tf.constant([[-0.1, -1.0]]), tf.constant([[1, 2]]), tf.constant([[[-0.1, -0.5], [-0.2, -0.3]]]),
            tf.constant([[[1, 3], [2, 3]]]))
    s, e, _ = best_beam_spans(*beam, context, 30)
    assert (s.numpy().tolist(), e.numpy().tolist()) == ([1], [1])
    s, e, _ = best_beam_spans(*beam, context, 30, text_mask=text)
    assert (s.numpy().tolist(), e.numpy().tolist()) == ([1], [3])


def test_best_spans_at_n_best_size_pick_among_the_top_starts_and_ends():
    """Issue 35 N11, hand-worked: the row's every position is ranked, [CLS] included, as the SQuAD
    post-processing ranks a window's logits. Starts [9, 5, 4.8, 0, 0] and ends [8, 0, 0, 7, 0], context 1-4,
    answers of at most 2 positions: every span's best is (2, 3) = 11.8; the top 2 starts are 0 and 1 and the
    top 2 ends 0 and 3, whose only context span (1, 3) is too long: no answer; the top 3 starts hold 2 again."""
    from albert_tf.export.span_qa import best_spans

    start, end = tf.constant([[9.0, 5.0, 4.8, 0.0, 0.0]]), tf.constant([[8.0, 0.0, 0.0, 7.0, 0.0]])
    context = tf.constant([[False, True, True, True, True]])
    for n_best_size, want in ((None, (2, 3)), (2, (-1, -1)), (3, (2, 3)), (1, (-1, -1))):
        s, e, _ = best_spans(start, end, context, 2, n_best_size=n_best_size)
        assert (int(s[0]), int(e[0])) == want, n_best_size
