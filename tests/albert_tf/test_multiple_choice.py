"""AlbertMultipleChoice: reshaping, the original RACE packing, the loss."""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from pipelines import tokenizer
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


def race_packing(context, qa, max_seq_length, max_qa_length):
    """The original race_utils loop on id lists."""
    if len(qa) > max_qa_length:
        qa = qa[-max_qa_length:]
    if len(context) + len(qa) > max_seq_length - 3:
        context = context[:max_seq_length - 3 - len(qa)]
    return [2] + context + [3] + qa + [3]


def test_each_choice_is_scored_as_its_own_sequence():
    mc = albert_tf.AlbertMultipleChoice(tiny_config(), 3)
    rng = np.random.default_rng(0)
    ids = tf.constant(rng.integers(5, 120, size=(2, 3, 5)), tf.int32)
    logits = mc({"input_ids": ids})
    assert logits.shape == (2, 3) and logits.dtype == tf.float32
    pooled = mc.encoder({"input_ids": tf.reshape(ids, [6, 5])})["pooled_output"].numpy()
    want = pooled @ mc.head.output_weights.numpy().T + mc.head.output_bias.numpy()
    np.testing.assert_allclose(logits.numpy(), want.reshape(2, 3), atol=1e-6)
    total, count = mc.loss_terms(None, tf.constant([2, 0]), logits)
    lg = logits.numpy()
    log_p = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    assert float(count) == 2
    assert float(total) == pytest.approx(-(log_p[0, 2] + log_p[1, 0]), rel=1e-5)


def test_string_packing_matches_the_original(spm_model):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    vocab = tokenizer.SentencePieceVocab.from_file(spm_model)

    def encode(text):
        return [j for i in sp.EncodeAsIds(tokenizer.preprocess_text_py(text, True)) for j in vocab.resplit[i]]

    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=14)
    mc = albert_tf.AlbertMultipleChoice(tiny_config(), 2, preprocessor=pre, max_qa_length=5)
    contexts = ["Ka lo mi ten ser qua vi don ka lo mi", "don"]
    choices = [["what is qua vi don ka lo mi ten", "lo"], ["", "ser ser"]]
    features = mc.features({"text": tf.constant(contexts), "choices": tf.constant(choices)})
    got = features["input_ids"].numpy()
    for b in range(2):
        for n in range(2):
            want = race_packing(encode(contexts[b]), encode(choices[b][n]), 14, 5)
            row = got[b, n]
            assert row[:len(want)].tolist() == want and not row[len(want):].any()
    assert mc({"text": tf.constant(contexts), "choices": tf.constant(choices)}).shape == (2, 2)
    with pytest.raises(ValueError, match="'choices'"):
        mc(tf.constant(contexts))


def test_a_10mb_context_and_choice_answer_within_bounded_time_and_memory(spm_model):
    """The context is cut before it is copied once per choice, and a long choice keeps its end (issue 16)."""
    import time

    from tests.albert_tf.test_preprocessor import _peak_rss_growth_mb

    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    mc = albert_tf.AlbertMultipleChoice(tiny_config(), 4, preprocessor=pre, max_qa_length=5)
    unit = "ka lo mi ten ser qua vi don "
    huge = (unit * (10_000_000 // len(unit) + 1))[:10_000_000]
    choices = [[huge + " the end", "lo", "mi", huge]]
    mc.predict({"text": ["ka"], "choices": [["a", "b", "c", "d"]]}, verbose=0)  # warm-up
    start = time.process_time()  # CPU seconds (every thread): load on shared cores does not change them
    growth = _peak_rss_growth_mb(lambda: mc.features({"text": tf.constant([huge]), "choices": tf.constant(choices)}))
    seconds = time.process_time() - start
    # Before: 10 MB normalised and tokenized five times and the context's pieces copied per choice (minutes, GBs).
    assert seconds < 3.0 and (growth is None or growth < 300), (seconds, growth)
    features = mc.features({"text": tf.constant([huge]), "choices": tf.constant(choices)})
    short = mc.features({"text": tf.constant([unit * 10]), "choices": tf.constant([[unit * 10 + " the end", "lo", "mi",
                                                                                    unit * 10]])})
    # Only the first pieces of the context and the last of a choice are kept: the same rows as for a shorter
    # text with the same start and end (the last choice ends otherwise: "vi" there, "don" here).
    np.testing.assert_array_equal(features["input_ids"].numpy()[0, :3], short["input_ids"].numpy()[0, :3])
    assert features["input_ids"].shape == (1, 4, 16)


def test_predict_on_an_empty_batch(spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    mc = albert_tf.AlbertMultipleChoice(tiny_config(), 3, preprocessor=pre)
    assert mc.predict({"text": [], "choices": np.zeros([0, 3], str)}, verbose=0).shape == (0, 3)
    assert mc.predict({"input_ids": np.zeros([0, 3, 0], np.int32)}, verbose=0).shape == (0, 3)
