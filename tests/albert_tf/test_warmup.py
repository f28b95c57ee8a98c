"""TF Serving warm-up records (assets.extra/tf_serving_warmup_requests) of albert-export.

The records must parse with tensorflow-serving-api's own protos, name every signature of the
export once, and each request must run through its signature the way TF Serving replays it: in a
fresh process that imports only tensorflow, tensorflow_text and the serving protos, through the
TF1 session loader TF Serving uses, feeding the request's tensors by the signature's tensor names.

Run as a script (`python test_warmup.py JOBS.json RESULTS.json`) this module is that process.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAX_LEN = 24
VOCAB = 120
WARMUP = os.path.join("assets.extra", "tf_serving_warmup_requests")


def replay(saved_dir, warmup_file):
    """Every record of `warmup_file` through the SavedModel at `saved_dir` -> a list of results.

    Each result: the signature named, the input names, and the outputs' shapes, or "error" (a
    record naming no signature of the model, other inputs than the signature's, another dtype,
    or a failing run) so that the test names each bad record.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops of the text signatures)
    from tensorflow_serving.apis import prediction_log_pb2

    results = []
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], saved_dir)
        for raw in tf.compat.v1.io.tf_record_iterator(warmup_file):
            log = prediction_log_pb2.PredictionLog.FromString(raw)
            request = log.predict_log.request
            name = request.model_spec.signature_name
            result = {"signature": name, "kind": log.WhichOneof("log_type"), "inputs": sorted(request.inputs)}
            results.append(result)
            if name not in meta.signature_def:
                result["error"] = f"no signature {name!r}"
                continue
            sig = meta.signature_def[name]
            if set(request.inputs) != set(sig.inputs):
                result["error"] = f"inputs {sorted(request.inputs)} != {sorted(sig.inputs)}"
                continue
            if any(request.inputs[k].dtype != sig.inputs[k].dtype for k in sig.inputs):
                result["error"] = "dtype differs"
                continue
            feeds = {sig.inputs[k].name: tf.make_ndarray(v) for k, v in request.inputs.items()}
            outputs = sorted(sig.outputs)
            try:
                values = sess.run([sig.outputs[k].name for k in outputs], feeds)
            except Exception as e:  # noqa: BLE001 - reported per record
                result["error"] = str(e).splitlines()[0]
                continue
            result["batch"] = [int(tf.make_ndarray(v).shape[0]) for v in request.inputs.values()]
            result["outputs"] = {k: list(v.shape) for k, v in zip(outputs, values)}
        result_signatures = sorted(meta.signature_def)
    return {"signatures": [s for s in result_signatures if not s.startswith("__")], "records": results}


def _train_spm(folder):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    corpus = write_corpus(os.path.join(folder, "corpus.txt"), num_docs=40)
    return tokenizer.train_sentencepiece([corpus], os.path.join(folder, "sp"), vocab_size=VOCAB, seed=1)


def _bad_records(path, model_name):
    """Records a checker must refuse: an unknown signature, a misspelt input, a wrong dtype."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    def record(signature, inputs):
        request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name,
                                                                            signature_name=signature))
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        return prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))

    with tf.io.TFRecordWriter(path) as writer:
        for log in (record("serve_nothing", {"text": ["a"]}), record("serving_default", {"txt": ["a"]}),
                    record("serving_default", {"text": [1.5]})):
            writer.write(log.SerializeToString())
    return path


def test_warmup_records_parse_and_run_in_a_fresh_process(tmp_path):
    import keras
    import pytest

    pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")
    import albert_tf

    spm = _train_spm(str(tmp_path))
    keras.utils.set_random_seed(3)  # before any SentencePiece op exists (tf-keras-notes.md)
    config = albert_tf.AlbertConfig(vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    models = {
        "classifier": albert_tf.AlbertClassifier(config, 2, preprocessor=pre, label_names=["no", "yes"]),
        "multiple_choice": albert_tf.AlbertMultipleChoice(config, 3, preprocessor=pre, max_qa_length=8),
    }
    paths = {head: albert_tf.export_saved_model(model, str(tmp_path / f"albert_{head}"))
             for head, model in models.items()}
    paths["pretrainer"] = albert_tf.export_saved_model(albert_tf.AlbertPretrainer(config), str(tmp_path / "fill"),
                                                       spm_model_file=spm, max_seq_length=MAX_LEN)
    paths["classifier_ids"] = albert_tf.export_saved_model(models["classifier"], str(tmp_path / "albert_ids"),
                                                           text_signatures=False)
    jobs = {head: [path, os.path.join(path, WARMUP)] for head, path in paths.items()}
    jobs["bad"] = [paths["classifier"], _bad_records(str(tmp_path / "bad_warmup"), "albert_classifier")]
    with open(tmp_path / "jobs.json", "w") as f:
        json.dump(jobs, f)
    done = subprocess.run([sys.executable, __file__, str(tmp_path / "jobs.json"), str(tmp_path / "out.json")],
                          cwd=str(tmp_path), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "out.json") as f:
        results = json.load(f)

    expected_signatures = {
        "classifier": ["serve_text_pair", "serve_token_ids", "serving_default"],
        "multiple_choice": ["serve_token_ids", "serving_default"],
        "classifier_ids": ["serve_token_ids", "serving_default"],
        "pretrainer": ["serve_token_ids", "serving_default"],
    }
    for head, signatures in expected_signatures.items():
        got = results[head]
        assert got["signatures"] == signatures, (head, got["signatures"])
        records = got["records"]
        # One record per signature, serving_default first.
        assert [r["signature"] for r in records] == ["serving_default"] + [s for s in signatures
                                                                          if s != "serving_default"], head
        for r in records:
            assert "error" not in r, (head, r)
            assert r["kind"] == "predict_log" and r["batch"] and set(r["batch"]) == {2}, (head, r)
            # Every output answers the two rows of the request.
            assert r["outputs"] and all(shape[:1] == [2] for shape in r["outputs"].values()), (head, r)
    assert results["classifier"]["records"][0]["inputs"] == ["text"]
    assert results["classifier"]["records"][1]["inputs"] == ["text", "text_pair"]
    assert results["multiple_choice"]["records"][0]["inputs"] == ["choices", "text"]
    assert set(results["classifier"]["records"][0]["outputs"]) == {"label", "logits", "probabilities"}
    assert "top_k_pieces" in results["pretrainer"]["records"][0]["outputs"]
    # The companion: the same checker refuses wrong records.
    bad = results["bad"]["records"]
    assert len(bad) == 3 and all("error" in r for r in bad), bad


def test_no_serving_api_no_warmup_file(tmp_path, monkeypatch, caplog):
    """Without tensorflow-serving-api the export still works: no warm-up file, one log line."""
    import tensorflow as tf

    from albert_tf.export import warmup

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(text):
        return {"length": tf.strings.length(text)}

    signatures = {"serving_default": serve.get_concrete_function()}
    for module in ("tensorflow_serving", "tensorflow_serving.apis"):
        monkeypatch.setitem(sys.modules, module, None)  # the import fails
    with caplog.at_level("INFO"):
        assert warmup.write_warmup_requests(str(tmp_path), signatures) is None
    assert not (tmp_path / "assets.extra").exists()
    assert "tensorflow-serving-api is not installed" in caplog.text


def test_warmup_inputs_follow_the_signature():
    """Shapes and dtypes from the specs: texts [B] and [B, N], ids [B, T] and [B, N, T]."""
    import numpy as np
    import pytest
    import tensorflow as tf

    from albert_tf.export import warmup

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([None, 4], tf.string, name="choices")])
    def choices(text, choices):
        return {"n": tf.shape(choices)}

    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.int32, name=n)
                                  for n in ("input_ids", "input_mask", "segment_ids")])
    def ids(input_ids, input_mask, segment_ids):
        return {"n": tf.shape(input_ids)}

    got = warmup.warmup_inputs(choices.get_concrete_function())
    assert got["text"].shape == (2,) and got["choices"].shape == (2, 4)
    got = warmup.warmup_inputs(ids.get_concrete_function())
    assert {k: v.shape for k, v in got.items()} == {k: (2, 2, 4) for k in got}
    np.testing.assert_array_equal(got["input_ids"][0, 0], [2, 4, 3, 0])
    np.testing.assert_array_equal(got["input_mask"][0, 0], [1, 1, 1, 0])
    assert got["input_ids"].dtype == np.int32 and not got["segment_ids"].any()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="score")])
    def floats(score):
        return {"s": score}

    with pytest.raises(ValueError, match="'score' of dtype float32"):
        warmup.warmup_inputs(floats.get_concrete_function())


def test_docs_batching_file_is_one_tf_serving_accepts():
    """docs/serving.md's batching_parameters_file: allowed_batch_sizes increase and end at max_batch_size (TF
    Serving refuses the file otherwise), and pad_variable_length_inputs stays off (it pads input_mask with 1)."""
    import re

    text = open(os.path.join(REPO, "docs", "serving.md"), encoding="utf-8").read()
    block = re.search(r"```(?:text)?\n(max_batch_size \{.*?)```", text, re.S).group(1)
    scalars = dict(re.findall(r"^(\w+) \{ value: (\d+) \}$", block, re.M))
    allowed = [int(v) for v in re.findall(r"^allowed_batch_sizes: (\d+)$", block, re.M)]
    assert set(scalars) == {"max_batch_size", "batch_timeout_micros", "num_batch_threads", "max_enqueued_batches"}
    assert allowed == sorted(set(allowed)) and allowed[-1] == int(scalars["max_batch_size"]), (allowed, scalars)
    assert "pad_variable_length_inputs" not in block
    assert len(block.strip().splitlines()) == len(scalars) + len(allowed)  # nothing else in the file


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    out = {head: replay(saved_dir, warmup_file) for head, (saved_dir, warmup_file) in jobs.items()}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
