"""bench/systems/onnx_runtimes.py: Hugging Face's AlbertModel exported to ONNX and
run by OpenVINO and ONNX Runtime answers as torch does (tiny configuration).

Skips when torch/transformers, onnx, openvino or onnxruntime are missing
(they come with the [bench] extra, not with CI's [test,beam]).
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in the [bench] extra")
transformers = pytest.importorskip("transformers", reason="transformers is in the [bench] extra")
pytest.importorskip("onnx", reason="onnx is in the [bench] extra")
pytest.importorskip("onnxscript", reason="onnxscript (torch.onnx.export) is in the [bench] extra")

from bench.systems import common, onnx_runtimes  # noqa: E402

VOCAB = 100


def _tiny(vocab=VOCAB):
    return transformers.AlbertConfig(
        vocab_size=vocab, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=64, type_vocab_size=2)


def _need(runtime):
    pytest.importorskip(runtime, reason=f"{runtime} is in the [bench] extra")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("onnx"))


def _padded_batch():
    """3 rows of other lengths than the export's example (dynamic axes), one padded."""
    rng = np.random.default_rng(5)
    ids = rng.integers(5, VOCAB, size=(3, 11))
    mask = np.ones((3, 11), np.int64)
    mask[1, 6:] = 0
    segments = (np.arange(11)[None, :] >= 5).repeat(3, 0).astype(np.int64)
    return {"input_ids": ids.astype(np.int64), "attention_mask": mask, "token_type_ids": segments}


def _torch_reference(feeds):
    torch.manual_seed(0)  # the benchmark's weights: seed 0, as hf.infer
    model = transformers.AlbertModel(_tiny()).eval()
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


# (runtime, precision, largest difference allowed relative to each output's scale, make_runner's options)
CASES = [("openvino", "float32", 1e-5, {}), ("openvino", "bfloat16", 3e-2, {}),
         ("onnxruntime", "float32", 1e-5, {}), ("onnxruntime", "int8", 0.1, {}),
         ("onnxruntime", "float32", 1e-5, {"fused": True}),
         # OpenVINO's converter turns the PyTorch graph into its Gelu (tanh) and ScaledDotProductAttention ops,
         # whose float32 kernels differ from torch's by about 3.5e-4 of the output's scale on this model.
         ("openvino", "float32", 1e-3, {"source": "torch"})]


@pytest.mark.parametrize("runtime,precision,tolerance,options", CASES)
def test_runtime_outputs_equal_torch(runtime, precision, tolerance, options, cache):
    _need(runtime)
    feeds = _padded_batch()
    want_sequence, want_pooled = _torch_reference(feeds)
    run, info = onnx_runtimes.make_runner(runtime, precision, _tiny(), cache_dir=cache, **options)
    sequence, pooled = run(feeds)
    valid = feeds["attention_mask"].astype(bool)
    assert sequence.shape == want_sequence.shape and pooled.shape == want_pooled.shape
    for got, want in ((sequence[valid], want_sequence[valid]), (pooled, want_pooled)):
        assert np.max(np.abs(got - want)) <= tolerance * np.max(np.abs(want))
    if runtime == "openvino":
        assert info["inference_precision"] == onnx_runtimes.openvino_precision(precision)


@pytest.mark.parametrize("runtime,precision", [("openvino", "bfloat16"), ("onnxruntime", "float32")])
def test_check_outputs_reports_the_difference(runtime, precision, cache):
    _need(runtime)
    check = onnx_runtimes.check_outputs(runtime, precision, batch=3, seq=16, config=_tiny(), cache_dir=cache)
    assert check["within_bf16_tolerance"] is True
    assert check["max_diff_vs_hf"] == max(check["sequence_max_diff"], check["pooled_max_diff"])
    if precision == "float32" or onnx_runtimes.openvino_precision(precision) == "f32":  # no bf16 on this CPU
        assert check["max_diff_vs_hf"] < 1e-4
    else:  # bfloat16 arithmetic: not exact, and of the size of torch's own bfloat16
        assert 1e-5 < check["max_diff_vs_hf"] <= 3 * check["hf_bf16_max_diff"]


def test_int8_is_reported_outside_bf16_tolerance_when_it_is(cache):
    _need("onnxruntime")
    check = onnx_runtimes.check_outputs("onnxruntime", "int8", batch=3, seq=16, config=_tiny(), cache_dir=cache)
    scale_ok = all(check[f"{n}_max_diff"] <= 3e-2 * check[f"{n}_scale"] for n in ("sequence", "pooled"))
    assert check["within_bf16_tolerance"] is scale_ok
    assert check["max_diff_vs_hf"] > 1e-4  # quantized: not float32-exact


def test_export_is_cached_per_config(cache):
    first = onnx_runtimes.export_onnx(_tiny(), cache)
    stamp = os.path.getmtime(first)
    assert onnx_runtimes.export_onnx(_tiny(), cache) == first and os.path.getmtime(first) == stamp
    assert onnx_runtimes.export_onnx(_tiny(vocab=VOCAB + 1), cache) != first


@pytest.mark.parametrize("runtime", ["openvino", "onnxruntime"])
def test_infer_times_and_checks(runtime, cache):
    _need(runtime)
    result = onnx_runtimes.infer(runtime, "float32", batch=2, seq=16, warmup=1, steps=2, config=_tiny(),
                                 cache_dir=cache)
    assert result["n_timed"] == 2 and result["per_s"] > 0 and result["max_diff_vs_hf"] < 1e-4


def test_fused_file_holds_onnx_runtimes_fused_operators(cache):
    _need("onnxruntime")
    _, info = onnx_runtimes.make_runner("onnxruntime", "float32", _tiny(), cache_dir=cache, fused=True)
    # Two layers: a SkipLayerNormalization after attention and after the FFN of each, and each FFN's FastGelu.
    assert info["fused_operators"].get("SkipLayerNormalization") == 4, info["fused_operators"]
    assert info["fused_operators"].get("FastGelu") == 2, info["fused_operators"]
    plain = onnx_runtimes.fused_operators(onnx_runtimes.export_onnx(_tiny(), cache))
    assert plain == {}


def test_openvino_from_torch_attends_only_to_the_rows_tokens(cache):
    """The converted graph keeps the attention mask (it is traced on an example of ones): the padded row's
    outputs follow torch on that row, and differ from the same tokens unpadded by far more than that."""
    _need("openvino")
    feeds = _padded_batch()
    run, _ = onnx_runtimes.make_runner("openvino", "float32", _tiny(), cache_dir=cache, source="torch")
    unpadded = dict(feeds, attention_mask=np.ones_like(feeds["attention_mask"]))
    valid = feeds["attention_mask"][1].astype(bool)
    got, got_unpadded = run(feeds)[0][1][valid], run(unpadded)[0][1][valid]
    want = _torch_reference(feeds)[0][1][valid]
    mask_effect = np.max(np.abs(got_unpadded - got))
    assert np.max(np.abs(got - want)) < mask_effect / 3, mask_effect


def test_fused_and_from_torch_are_refused_for_the_other_runtime():
    with pytest.raises(ValueError, match="fused=True is ONNX Runtime's"):
        onnx_runtimes.make_runner("openvino", "float32", fused=True)
    with pytest.raises(ValueError, match="'torch' with OpenVINO; got 'torch' for 'onnxruntime'"):
        onnx_runtimes.make_runner("onnxruntime", "float32", source="torch")


def test_unknown_runtime_or_precision_is_refused():
    with pytest.raises(ValueError, match="runtime must be one of"):
        onnx_runtimes.make_runner("tvm", "float32")
    with pytest.raises(ValueError, match="onnxruntime precision must be one of"):
        onnx_runtimes.make_runner("onnxruntime", "bfloat16")


@pytest.fixture(scope="module")
def text_pool(tmp_path_factory):
    """(SentencePiece model of VOCAB pieces, a pool file of 4 sentences: two timed batches of 2 after one)."""
    pytest.importorskip("sentencepiece")
    import json

    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    root = tmp_path_factory.mktemp("text")
    spm = tokenizer.train_sentencepiece([write_corpus(str(root / "corpus.txt"), num_docs=60)], str(root / "sp"),
                                        vocab_size=VOCAB, seed=1)
    sentences = ["the a of", "and in the a of and in the a of and in the a", "the", "of and in the a of"]
    pool = root / "pool.json"
    pool.write_text(json.dumps({"sentences": sentences, common.GROUPED: [[0, 3], [1, 2], [0, 2]]}))
    return spm, str(pool), sentences


def _pieces(spm, sentences):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    return [len(sp.encode(s)) + 2 for s in sentences]  # [CLS] ... [SEP]


@pytest.mark.parametrize("runtime,tokenizer", [("openvino", "hf"), ("openvino", "openvino"), ("onnxruntime", "hf")])
def test_text_pads_each_batch_to_its_longest_row(runtime, tokenizer, text_pool, cache, monkeypatch):
    _need(runtime)
    if tokenizer == "openvino":
        _need("openvino_tokenizers")
    spm, pool, sentences = text_pool
    monkeypatch.setattr(common, "TEXT_VOCAB_SIZE", VOCAB)
    result = onnx_runtimes.text(runtime, "float32", spm, pool, common.GROUPED, warmup=1, steps=2, tokenizer=tokenizer,
                                config=_tiny(), cache_dir=cache)
    pieces = _pieces(spm, sentences)
    # Timed batches [1, 2] and [0, 2], each padded to its own longest row.
    assert result["padded_length"] == pieces[1]
    assert result["padded_tokens"] == (2 * max(pieces[1], pieces[2]) + 2 * max(pieces[0], pieces[2])) / 4
    assert result["real_tokens"] == (pieces[1] + pieces[2] + pieces[0] + pieces[2]) / 4
    assert result["per_s"] > 0
    if tokenizer == "openvino":
        assert result["same_tokens"] is True and result["threads"]["openvino"] >= 1


def test_openvino_tokenizer_with_sorted_rows_gives_hugging_faces_outputs(text_pool, cache, monkeypatch):
    _need("openvino")
    _need("openvino_tokenizers")
    spm, _, sentences = text_pool
    monkeypatch.setattr(common, "TEXT_VOCAB_SIZE", VOCAB)
    from bench.systems import hf

    hf_tokenizer = hf._tokenizer(spm)
    run, _ = onnx_runtimes.make_runner("openvino", "float32", _tiny(), cache_dir=cache)
    batch = list(range(len(sentences)))
    padded = onnx_runtimes._hf_encoder(hf_tokenizer, sentences, 0)(batch)[1][0]
    want = run(padded)[1]
    encode = onnx_runtimes._openvino_encoder(onnx_runtimes.openvino_tokenizer(hf_tokenizer), sentences, 2)
    chunks, feeds = encode(batch)
    assert [f["input_ids"].shape[1] for f in feeds] == [max(_pieces(spm, [sentences[i] for i in c])) for c in chunks]
    got = common.in_input_order(chunks, [run(f)[1] for f in feeds])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(np.concatenate([run(f)[1] for f in feeds]), want, atol=1e-3)  # chunk order differs


def test_openvino_matmul_rates_with_the_measurements_threads(monkeypatch):
    _need("openvino")
    from bench.systems import matmul

    monkeypatch.setenv("BENCH_THREADS", "1")
    rates = matmul.openvino_rates("float32", reps=2, tiny=True)
    assert {k for k in rates if " " in k} == {f"openvino {m}x{k}x{n}" for m, k, n in matmul.TINY_SHAPES}
    assert all(rates[k] > 0 for k in rates if " " in k) and rates["threads"] == {"openvino": 1}
