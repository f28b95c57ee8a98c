"""Like-for-like raw text and training (issues 18 and 27): the pool's batches, the in-batch length sorting every
text path gets (and that it changes no output), and Hugging Face's training loss on the masked positions only.
Tests of a peer skip when it is not installed (CI's extras environment runs them)."""

import json

import numpy as np
import pytest

from bench.systems import common


def test_length_grouped_batches_follow_group_by_length_and_pad_less():
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 128, size=640).tolist()
    grouped = common.length_grouped_batches(lengths, 32, seed=0, mega=5)
    rand = common.random_batches(640, 32, seed=0)
    for batches in (grouped, rand):
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(640)) and {len(b) for b in batches} == {32}
    # Within a mega-batch of 5 x 32 every batch is a run of the length-sorted order.
    for b in grouped:
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)
    padded = lambda bs: sum(len(b) * max(lengths[i] for i in b) for b in bs)  # noqa: E731
    assert padded(grouped) < 0.8 * padded(rand)
    assert grouped == common.length_grouped_batches(lengths, 32, seed=0, mega=5)


def test_read_text_pool_gives_warmup_then_timed_batches(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text(json.dumps({"sentences": list("abcdefgh"), "lengths": [1] * 8, "batch": 2,
                                common.GROUPED: [[0, 1], [2, 3], [4, 5], [6, 7]],
                                common.RANDOM: [[7, 0], [1, 2], [3, 4], [5, 6]]}))
    sentences, warm, timed = common.read_text_pool(str(path), common.RANDOM, 1, 2)
    assert sentences == list("abcdefgh") and warm == [[7, 0]] and timed == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="4 batches"):
        common.read_text_pool(str(path), common.GROUPED, 2, 3)
    with pytest.raises(ValueError, match="feed"):
        common.read_text_pool(str(path), "sorted", 1, 1)


def test_text_pass_result_hand_worked():
    masks = [np.array([[1, 1, 0], [1, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 1, 0]])]
    r = common.text_pass_result([1.0, 3.0], masks)
    assert r["per_s"] == pytest.approx(4 / 4.0) and r["n_timed"] == 2
    assert r["padded_tokens"] == pytest.approx((6 + 8) / 4) and r["real_tokens"] == pytest.approx(10 / 4)
    assert r["padded_length"] == 4


def test_cpu_line_names_the_model_and_amx():
    cpu = {"model": "Some Xeon", "cores": 2, "flags": ["avx512f", "amx_bf16", "amx_tile"]}
    assert common.cpu_line(cpu).startswith("CPU: Some Xeon, 2 cores; AMX: yes")
    assert "AMX: no" in common.cpu_line(dict(cpu, flags=["amx_tile"]))
    assert "AMX: " in common.cpu_line()


def test_hugging_face_loss_runs_the_mlm_head_on_the_masked_positions_only():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bench.systems import hf

    config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.AlbertForPreTraining(config).eval()
    batch, seq, preds = 3, 12, 4
    inputs = hf.pretraining_inputs(common.synthetic_pretraining_batch(batch, seq, preds, 50, seed=2))
    seen = []
    model.predictions.register_forward_hook(lambda mod, args, out: seen.append(tuple(args[0].shape)))
    with torch.no_grad():
        ours = float(hf.masked_pretraining_loss(model, inputs))
        # Reference: transformers' own loss with labels -100 everywhere but the masked positions.
        labels = torch.full((batch, seq), -100, dtype=torch.long)
        labels[torch.arange(batch)[:, None], inputs["masked_lm_positions"]] = inputs["masked_lm_ids"]
        ref = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    token_type_ids=inputs["token_type_ids"], labels=labels,
                    sentence_order_label=inputs["sentence_order_label"]).loss
    assert seen[0] == (batch, preds, 16) and seen[1] == (batch, seq, 16)
    assert ours == pytest.approx(float(ref), rel=1e-5)


def test_length_sorted_chunks_follow_our_buckets_and_restore_the_order():
    lengths = [30, 5, 17, 5, 90, 12, 40, 3, 60]
    chunks = common.length_sorted_chunks(lengths, 4)
    # Stable ascending order (tf.argsort(stable=True), as albert_tf.models.length_buckets), cut into 4s.
    assert [c.tolist() for c in chunks] == [[7, 1, 3, 5], [2, 0, 6, 8], [4]]
    outputs = [np.array([lengths[i] for i in c]) for c in chunks]
    assert common.in_input_order(chunks, outputs).tolist() == lengths
    shuffled = [outputs[1], outputs[0], outputs[2]]  # the wrong chunk order does not restore the batch
    assert common.in_input_order(chunks, shuffled).tolist() != lengths
    with pytest.raises(ValueError, match="rows must be >= 1, got 0"):
        common.length_sorted_chunks(lengths, 0)


def _tiny_spm(tmp_path, vocab=100):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    return tokenizer.train_sentencepiece([write_corpus(str(tmp_path / "corpus.txt"), num_docs=60)],
                                         str(tmp_path / "sp"), vocab_size=vocab, seed=1)


SENTENCES = ["the a of", "and in the a of and in the a of and in the a", "the", "of and in the a of and",
             "a", "in the a of and in the a of", "the a", "and in"]


def test_hugging_face_sorted_rows_give_the_padded_batchs_outputs(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from bench.systems import hf

    monkeypatch.setattr(common, "TEXT_VOCAB_SIZE", 100)
    tokenizer = hf._tokenizer(_tiny_spm(tmp_path))
    chunks, encodings = hf.encode_sorted(tokenizer, SENTENCES, 3)
    lengths = [len(ids) for ids in tokenizer(SENTENCES)["input_ids"]]
    assert [c.tolist() for c in chunks] == [c.tolist() for c in common.length_sorted_chunks(lengths, 3)]
    assert [e["input_ids"].shape[1] for e in encodings] == [max(lengths[i] for i in c) for c in chunks]
    torch.manual_seed(0)
    model = __import__("transformers").AlbertModel(hf._config(100, "tiny")).eval()
    with torch.no_grad():
        (whole,) = hf.encode_sorted(tokenizer, SENTENCES, 0)[1]
        want = model(**whole).pooler_output.numpy()
        got = common.in_input_order(chunks, [model(**e).pooler_output.numpy() for e in encodings])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.max(np.abs(np.concatenate([model(**e).pooler_output.detach().numpy() for e in encodings]) - want)) > 1e-3


def test_keras_hub_sorted_rows_give_the_padded_batchs_outputs(tmp_path):
    pytest.importorskip("keras_hub")
    import keras
    import keras_hub
    import tensorflow as tf

    from bench.systems import kerashub

    spm = _tiny_spm(tmp_path)
    keras.utils.set_random_seed(0)
    backbone = kerashub._backbone("float32", vocab_size=100, shape="tiny")
    pre = keras_hub.models.AlbertTextClassifierPreprocessor(keras_hub.models.AlbertTokenizer(proto=spm),
                                                            sequence_length=64)
    texts = tf.constant(SENTENCES)
    want = backbone(pre(texts), training=False)["pooled_output"].numpy()
    got = kerashub._sorted_forward(backbone, pre, len(SENTENCES), 3)(texts).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(got[::-1], want, atol=1e-3)  # the rows come back in the input order, not another


def test_token_agreement_counts_the_rows_and_tokens_that_differ():
    from bench.systems import onnx_runtimes

    want = {"a (b)": [2, 10, 11, 12, 3], "c": [2, 13, 3]}

    def tokenizer(texts, **kwargs):  # Hugging Face's: unpadded ids per row
        return {"input_ids": [want[t] for t in texts]}

    def tokenize(texts, split=True):  # openvino-tokenizers' conversion: padded, "(" split off as "▁", "("
        rows = [want[t][:2] + [9] + want[t][2:] if split and "(" in t else want[t] for t in texts]
        width = max(map(len, rows))
        return {"input_ids": np.array([r + [0] * (width - len(r)) for r in rows]),
                "attention_mask": np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows])}

    assert onnx_runtimes.token_agreement(tokenize, tokenizer, ["a (b)", "c"]) == {
        "same_tokens": False, "rows_differing": 0.5, "extra_tokens": 0.5}
    same = onnx_runtimes.token_agreement(lambda t: tokenize(t, split=False), tokenizer, ["a (b)", "c"])
    assert same == {"same_tokens": True, "rows_differing": 0.0, "extra_tokens": 0.0}
