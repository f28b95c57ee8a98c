"""bench/systems/ours_openvino.py: our encoder through `export_openvino`, compiled by
OpenVINO, answers as our Keras encoder does and is timed (tiny configurations).

Skips without openvino and openvino-tokenizers (the [bench] / [openvino] extras).
"""

import os

import numpy as np
import pytest

pytest.importorskip("openvino", reason="openvino is in the [bench] extra")
pytest.importorskip("openvino_tokenizers", reason="openvino-tokenizers is in the [openvino] extra")
pytest.importorskip("sentencepiece")

from bench.systems import common, onnx_runtimes, ours_openvino  # noqa: E402

SPM_VOCAB = 100
TIMING_KEYS = {"per_s", "best_per_s", "worst_per_s", "n_timed", "performance_hint", "inference_precision",
               "streams", "threads", "max_diff_vs_keras", "keras_bf16_max_diff", "within_bf16_tolerance"}


def _tiny(vocab):
    import albert_tf

    return albert_tf.AlbertConfig(vocab_size=vocab, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=common.TEXT_MAX_SEQ_LENGTH)


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    root = tmp_path_factory.mktemp("spm")
    return tokenizer.train_sentencepiece([write_corpus(str(root / "corpus.txt"), num_docs=60)], str(root / "sp"),
                                         vocab_size=SPM_VOCAB, seed=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("openvino-ours"))


def test_spm_is_padded_with_unused_pieces_for_a_larger_vocabulary(spm, cache):
    import sentencepiece

    assert ours_openvino.padded_spm(spm, SPM_VOCAB, cache) == spm
    padded = ours_openvino.padded_spm(spm, SPM_VOCAB + 20, cache)
    sp = sentencepiece.SentencePieceProcessor(model_file=padded)
    assert sp.get_piece_size() == SPM_VOCAB + 20 and sp.is_unused(SPM_VOCAB + 19)
    text = "the a of and in"
    assert sp.encode(text) == sentencepiece.SentencePieceProcessor(model_file=spm).encode(text)


@pytest.mark.parametrize("precision,tolerance", [("float32", 1e-4), ("bfloat16", None)])
def test_infer_equals_keras_and_times(precision, tolerance, spm, cache):
    result = ours_openvino.infer(precision, batch=2, seq=16, warmup=1, steps=2, config=_tiny(SPM_VOCAB + 20),
                                 spm_path=spm, cache_dir=cache)
    assert TIMING_KEYS <= set(result) and result["n_timed"] == 2 and result["per_s"] > 0
    assert result["within_bf16_tolerance"] is True
    assert result["inference_precision"] == onnx_runtimes.openvino_precision(precision)
    assert result["performance_hint"] == "LATENCY"
    if tolerance:
        assert result["max_diff_vs_keras"] < tolerance


def test_export_is_cached_per_weights(spm, cache):
    config = _tiny(SPM_VOCAB)
    encoder = ours_openvino._encoder(config)
    ours_openvino._reference(encoder, ours_openvino._check_ids(SPM_VOCAB))
    path = ours_openvino.export(encoder, spm, False, cache)
    stamp = os.path.getmtime(path)
    assert ours_openvino.export(encoder, spm, False, cache) == path and os.path.getmtime(path) == stamp
    encoder.set_weights([w + 1 for w in encoder.get_weights()])
    assert ours_openvino.export(encoder, spm, False, cache) != path


def test_text_tokens_and_outputs_equal_ours(spm, cache, tmp_path):
    pool = common.write_text_pool(str(tmp_path / "pool.json"), spm, count=16, batch=4)
    result = ours_openvino.text("bfloat16", spm, pool, common.GROUPED, warmup=1, steps=2, config=_tiny(SPM_VOCAB),
                                cache_dir=cache)
    assert TIMING_KEYS <= set(result) and result["n_timed"] == 2
    assert result["same_tokens"] is True and result["within_bf16_tolerance"] is True
    assert result["per_s"] > 0 and 0 < result["real_tokens"] <= result["padded_tokens"]
    sentences, _, timed = common.read_text_pool(pool, common.GROUPED, 1, 2)
    lengths = common.token_lengths(spm, sentences)
    assert result["padded_length"] == max(lengths[i] for batch in timed for i in batch)  # padded to the longest
