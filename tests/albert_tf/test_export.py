"""SavedModel export: every head exports, reloads in a fresh process with only
tensorflow + tensorflow_text, and answers as the Keras model does.

One module fixture exports every head once (tiny models, max_seq_length 32)
and computes the expected answers here, from the Keras models and NumPy /
SentencePiece references; ONE fresh subprocess (export_worker.py) then loads
every export and answers all requests, including TF Serving REST bodies and
the TF1 session loader that TF Serving and saved_model_cli use.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "export_worker.py")
MAX_LEN = 32
VOCAB = 120
LONG = "Ka lo mi ten ser, qua vi don. " * 60  # far longer than MAX_LEN pieces
TEXTS = ["The quick brown fox ka lo.", "", "   \t  ", "Café naïve résumé ÀÉÎ", "中文的句子很好", "emoji 😀🎉 ok", LONG]
PAIRS = ["ten ser qua", "vi don", "", "Crème brûlée", "更多中文", "🙂", LONG]
LABELS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-X", "I-X", "B-Y"]
FILL_MASK = ["the [MASK] of ka [MASK] lo.", "no mask here", "[MASK]", "", "[MASK][MASK] end", LONG + " [MASK]"]
QUESTIONS = ["what is ka?", "", "where is 中文?", "x " * 80]
CONTEXTS = ["ka lo mi ten ser qua vi don.", "vi don", "", "ten ser qua " * 30]
DOC_STRIDE = 7  # span QA windows overlap: the max-context rule matters
CHOICES = [["ka lo", "mi ten", "ser"], ["", "😀", "qua vi don"], ["a", "b", "c"], [LONG, "x", "y"]]

# 10 MB requests (the worker puts a 10 MB string where "__10MB__" stands) answered within bounded time and memory.
HUGE = "__10MB__"
HUGE_REQUESTS = {
    "classifier": {"text": [HUGE, "short"]},
    "pretrainer": {"text": [HUGE]},
    "span_qa": {"text": [HUGE], "text_pair": [HUGE]},
    "multiple_choice": {"text": [HUGE], "choices": [[HUGE, "x", "y"]]},
}

# docs/serving.md's TF Serving REST bodies (POST /v1/models/MODEL_NAME:predict) and the
# output keys the page documents for them (tests/test_docs.py holds the page to them).
REST_REQUESTS = {
    "encoder": {"instances": [{"text": "A sentence to embed."}]},
    "encoder_pair": {"signature_name": "serve_text_pair",
                     "instances": [{"text": "First segment.", "text_pair": "Second segment."}]},
    "pretrainer": {"instances": [{"text": "The [MASK] sat on the mat."}]},
    "classifier": {"instances": [{"text": "A fine, moving film."}, {"text": "Dull and far too long."}]},
    "classifier_bare": {"instances": ["A fine, moving film.", "Dull and far too long."]},
    "regression": {"instances": [{"text": "A man is playing a guitar."}]},
    "span_qa": {"instances": [{"text": "Who wrote the letter?", "text_pair": "The letter was written by Ann."}]},
    "span_qa_v2": {"instances": [{"text": "Who wrote the letter?", "text_pair": "The letter was written by Ann."}]},
    "multiple_choice": {"instances": [{"text": "Ann wrote a letter to Tom.",
                                       "choices": ["Ann wrote it", "Tom wrote it", "Nobody wrote it"]}]},
    "tagging": {"instances": [{"text": "Ann lives in Paris."}]},
    "classifier_ids": {"signature_name": "serve_token_ids",
                       "instances": [{"input_ids": [2, 30, 41, 3], "input_mask": [1, 1, 1, 1],
                                      "segment_ids": [0, 0, 0, 0]}]},
}
DOCUMENTED_OUTPUTS = {
    "encoder": {"pooled_output", "sequence_output", "input_mask"},
    "pretrainer": {"masked_positions", "top_k_ids", "top_k_pieces", "top_k_scores"},
    "classifier": {"probabilities", "label", "logits"},
    "regression": {"value", "logits"},
    "span_qa": {"answer", "start", "end", "start_char", "end_char", "score"},
    "span_qa_v2": {"answer", "start", "end", "start_char", "end_char", "score", "no_answer_probability", "null_odds"},
    "multiple_choice": {"probabilities", "logits", "choice"},
    "tagging": {"tags", "pieces", "tag_ids", "input_mask"},
}
REST_MODEL = {"encoder_pair": "encoder", "classifier_bare": "classifier", "classifier_ids": "classifier"}
# docs/serving.md's saved_model_cli commands (MODEL_DIR = the exported version folder).
README_CLI_RUN_IDS = ("saved_model_cli run --dir MODEL_DIR --tag_set serve --signature_def serve_token_ids "
                      "--input_exprs 'input_ids=[[2,30,41,3]];input_mask=[[1,1,1,1]];segment_ids=[[0,0,0,0]]'")
README_CLI_RUN_TEXT = ("python -c 'import sys, tensorflow_text; from tensorflow.python.tools.saved_model_cli "
                       "import main; sys.argv[0] = \"saved_model_cli\"; main()' run --dir MODEL_DIR --tag_set serve "
                       "--signature_def serving_default --input_exprs 'text=[\"A fine, moving film.\"]'")


# ---------------------------------------------------------------- fixtures
def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _train_spm(folder):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    corpus = write_corpus(os.path.join(folder, "corpus.txt"), num_docs=60)
    return tokenizer.train_sentencepiece([corpus], os.path.join(folder, "sp"), vocab_size=VOCAB, seed=1)


def _build_models(spm):
    import keras

    import albert_tf

    keras.utils.set_random_seed(7)  # before any SentencePiece op exists (tf-keras-notes.md)
    config = albert_tf.AlbertConfig(vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    pretrainer = albert_tf.AlbertPretrainer(config)
    regression = albert_tf.AlbertClassifier(config, 1, preprocessor=pre, dtype="mixed_bfloat16")
    # Randomised weights: values of order 1 (an untrained head gives about 0.005, which any bound passes).
    rng = np.random.default_rng(3)
    for v in regression.weights:
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))
    return config, pre, {
        "encoder": pretrainer.encoder,
        "pretrainer": pretrainer,
        "classifier": albert_tf.AlbertClassifier(config, 3, preprocessor=pre, label_names=LABELS),
        # Trained under mixed precision: served float32.
        "regression": regression,
        "span_qa": albert_tf.AlbertSpanQA(config, preprocessor=pre, max_query_length=8, doc_stride=DOC_STRIDE),
        "span_qa_v2": albert_tf.AlbertSpanQA(config, preprocessor=pre, version_2=True, max_query_length=8,
                                             doc_stride=DOC_STRIDE),
        "multiple_choice": albert_tf.AlbertMultipleChoice(config, 3, preprocessor=pre, max_qa_length=8),
        "tagging": albert_tf.AlbertTokenClassifier(config, len(TAGS), preprocessor=pre, tag_names=TAGS),
    }


def _ids_job(pre, texts, pairs=None):
    import tensorflow as tf

    ids = pre(tf.constant(texts), None if pairs is None else tf.constant(pairs))
    return {k: v.numpy().tolist() for k, v in ids.items()}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Exports every head, runs the binary, computes expectations, runs the worker once."""
    import tensorflow as tf

    import albert_tf

    root = str(tmp_path_factory.mktemp("export"))
    spm = _train_spm(root)
    config, pre, models = _build_models(spm)
    spans = {head: _span_expectation(models[head], spm) for head in ("span_qa", "span_qa_v2")}
    # The v2 threshold (task_config.json's null_score_diff_threshold): between the second and third smallest
    # null odds (away from both: the graph's float32 odds may differ in the last bit), so some answers are kept.
    threshold = float(np.mean(sorted(spans["span_qa_v2"]["null_odds"])[1:3]))
    models["span_qa_v2"].null_score_diff_threshold = float(threshold)
    for b, odds in enumerate(spans["span_qa_v2"]["null_odds"]):
        if odds > np.float32(threshold):
            spans["span_qa_v2"]["answer"][b], spans["span_qa_v2"]["start"][b], spans["span_qa_v2"]["end"][b] = "", -1, -1
    paths = {}
    for head, model in models.items():
        kwargs = {"spm_model_file": spm, "max_seq_length": MAX_LEN} if head in ("encoder", "pretrainer") else {}
        paths[head] = albert_tf.export_saved_model(model, os.path.join(root, "exports", head), top_k=4, **kwargs)
    paths["binary_classifier"] = _run_binary_classifier(root, models["classifier"])
    # Issue 16: with --spm_model_file (the same spm.model) the export died on an untracked SentencePiece resource.
    paths["binary_classifier_spm"] = _albert_export_ok(
        root, "binary_classifier_spm", "--spm_model_file=" + os.path.join(root, "finetuned", "spm.model"))
    paths["binary_classifier_options"] = _albert_export_ok(
        root, "binary_classifier_options", "--max_seq_length=16", "--nodo_lower_case", "--normalization=xlnet",
        "--nofreeze_weights")  # the variables graph, through the binary

    jobs, expected = [], {}

    def add(job_id, head, signature, inputs=None, rest=None, graph_mode=False, want=None):
        job = {"id": job_id, "path": paths[head], "signature": signature, "graph_mode": graph_mode}
        job.update({"inputs": inputs} if rest is None else {"rest": rest})
        jobs.append(job)
        expected[job_id] = want

    enc = models["encoder"]
    for job_id, texts, pairs in (("encoder", TEXTS, None), ("encoder_pair", TEXTS, PAIRS),
                                 ("encoder_1", ["one text"], None), ("encoder_64", (TEXTS * 10)[:64], None)):
        ids = pre(tf.constant(texts), None if pairs is None else tf.constant(pairs))
        out = enc(ids)
        want = {"pooled_output": out["pooled_output"].numpy(), "sequence_output": out["sequence_output"].numpy(),
                "input_mask": ids["input_mask"].numpy()}
        inputs = {"text": texts} if pairs is None else {"text": texts, "text_pair": pairs}
        add(job_id, "encoder", "serving_default" if pairs is None else "serve_text_pair", inputs,
            graph_mode=job_id == "encoder", want=want)
    add("encoder_ids", "encoder", "serve_token_ids", _ids_job(pre, TEXTS), want=expected["encoder"])

    add("pretrainer", "pretrainer", "serving_default", {"text": FILL_MASK}, graph_mode=True,
        want=_fill_mask_expectation(models["pretrainer"], spm, pre))
    add("classifier", "classifier", "serving_default", {"text": TEXTS}, graph_mode=True,
        want=_classifier_expectation(models["classifier"], tf.constant(TEXTS)))
    add("classifier_pair", "classifier", "serve_text_pair", {"text": TEXTS, "text_pair": PAIRS},
        want=_classifier_expectation(models["classifier"], (tf.constant(TEXTS), tf.constant(PAIRS))))
    # The binary's ids-only export: the same classifier on the ids of the same texts.
    add("binary_classifier", "binary_classifier", "serving_default", _ids_job(pre, TEXTS), graph_mode=True,
        want=expected["classifier"])
    add("regression", "regression", "serving_default", {"text": TEXTS}, graph_mode=True,
        want={"value": models["regression"](tf.constant(TEXTS)).numpy()[:, 0]})
    add("binary_classifier_spm", "binary_classifier_spm", "serving_default", {"text": TEXTS},
        want=expected["classifier"])
    options_pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=16, do_lower_case=False,
                                                   normalization="xlnet")
    add("binary_classifier_options", "binary_classifier_options", "serving_default", {"text": TEXTS},
        want=_classifier_expectation(models["classifier"], options_pre(tf.constant(TEXTS))))
    for head in ("span_qa", "span_qa_v2"):
        add(head, head, "serving_default", {"text": QUESTIONS, "text_pair": CONTEXTS}, graph_mode=True,
            want=spans[head])
    mc_logits = models["multiple_choice"]({"text": tf.constant([c for c in CONTEXTS]),
                                           "choices": tf.constant(CHOICES)}).numpy()
    add("multiple_choice", "multiple_choice", "serving_default", {"text": CONTEXTS, "choices": CHOICES},
        graph_mode=True, want={"probabilities": _softmax(mc_logits), "choice": mc_logits.argmax(-1)})
    add("tagging", "tagging", "serving_default", {"text": TEXTS}, graph_mode=True,
        want=_tagging_expectation(models["tagging"], spm, pre))
    for name, body in REST_REQUESTS.items():
        add("rest_" + name, REST_MODEL.get(name, name), body.get("signature_name", "serving_default"),
            rest=body, want=DOCUMENTED_OUTPUTS[REST_MODEL.get(name, name)])
    for head in paths:
        jobs.append({"id": "empty_" + head, "path": paths[head], "empty": True})
    for head, inputs in HUGE_REQUESTS.items():
        add("huge_" + head, head, "serving_default", inputs)

    jobs_path = os.path.join(root, "jobs.json")
    results_path = os.path.join(root, "results.json")
    with open(jobs_path, "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, WORKER, jobs_path, results_path], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(results_path, encoding="utf-8") as f:
        results = json.load(f)
    return {"root": root, "paths": paths, "results": results, "expected": expected, "spm": spm,
            "models": models, "pre": pre}


def _run_binary_classifier(root, classifier):
    """albert-export on a fine-tuned output directory (save_task_model), ids only."""
    import albert_tf

    task_dir = os.path.join(root, "finetuned")
    albert_tf.save_task_model(classifier, task_dir)
    export_dir = os.path.join(root, "exports", "binary_classifier")
    proc = _albert_export("--checkpoint=" + task_dir, "--head=classifier", "--export_dir=" + export_dir,
                          "--notext_signatures")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return os.path.join(export_dir, "1")


def _albert_export_ok(root, name, *flags):
    """The documented command on the fine-tuned folder, with more flags; its version folder."""
    export_dir = os.path.join(root, "exports", name)
    proc = _albert_export("--checkpoint=" + os.path.join(root, "finetuned"), "--head=classifier",
                          "--export_dir=" + export_dir, *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return os.path.join(export_dir, "1")


def _albert_export(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "albert_tf.bin.export", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------ references
def _sp(spm):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(spm)
    return sp


def _fill_mask_expectation(pretrainer, spm, pre):
    """Ids built by hand ([CLS] part [MASK] part ... [SEP], cut to MAX_LEN - 2), NumPy softmax."""
    import tensorflow as tf

    rows = []
    for text in FILL_MASK:
        body = []
        for i, part in enumerate(text.split("[MASK]")):
            if i:
                body.append(4)
            body.extend(pre.tokenize(tf.constant([part])).to_list()[0])
        rows.append([2] + body[:MAX_LEN - 2] + [3])
    width = max(len(r) for r in rows)
    input_ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    input_mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], np.int32)
    positions = [[i for i, t in enumerate(r) if t == 4] for r in rows]
    most = max(len(p) for p in positions)
    padded = np.array([p + [0] * (most - len(p)) for p in positions], np.int32).reshape(len(rows), most)
    logits = pretrainer({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": 0 * input_ids,
                         "masked_lm_positions": padded})["mlm_logits"].numpy()
    return {"positions": positions, "probs": _softmax(logits.astype(np.float64)),
            "pieces": [_sp(spm).IdToPiece(i) for i in range(VOCAB)]}


def _classifier_expectation(classifier, inputs):
    logits = classifier(inputs).numpy()
    return {"logits": logits, "probabilities": _softmax(logits), "label": [LABELS[i] for i in logits.argmax(-1)]}


def _windows(model, question, context):
    """The SQuAD reader's windows (its own doc_spans) as id rows, with each piece's max-context flag."""
    from pipelines.finetune.squad import features as squad_features

    pre = model.preprocessor
    query = pre.tokenize([question]).to_list()[0][:model.max_query_length]
    pieces = pre.tokenize([context]).to_list()[0]
    spans = squad_features.doc_spans(len(pieces), MAX_LEN - len(query) - 3, DOC_STRIDE) or [(0, 0)]
    rows = []
    for index, (start, length) in enumerate(spans):
        ids = [2] + query + [3] + pieces[start:start + length] + [3]
        is_max = [squad_features.is_max_context(spans, index, start + k) for k in range(length)]
        rows.append((ids, len(query) + 2, start, length, is_max))
    return rows


def _window_candidates(model, out, row, first, length, is_max):
    """(score, start, end) of every allowed span of one window, positions in the row."""
    in_context = lambda t: first <= t < first + length  # noqa: E731
    if model.version_2:
        top_s, top_e = out["start_top_index"][0], out["end_top_index"][0]
        spans = [(out["start_top_log_probs"][0, i] + out["end_top_log_probs"][0, i, j], top_s[i], top_e[i, j])
                 for i in range(top_s.shape[0]) for j in range(top_e.shape[1])]
    else:
        spans = [(out["start_logits"][0, s] + out["end_logits"][0, e], s, e)
                 for s in range(first, first + length) for e in range(first, first + length)]
    return [c for c in spans if in_context(c[1]) and in_context(c[2]) and is_max[c[1] - first]
            and 0 <= c[2] - c[1] < 30]


def _span_expectation(model, spm):
    """Brute force over the reader's windows: every allowed span, the best over all windows."""
    sp = _sp(spm)
    want = {"answer": [], "start": [], "end": [], "score": [], "null_odds": []}
    for question, context in zip(QUESTIONS, CONTEXTS):
        best, null = None, None
        for ids, first, offset, length, is_max in _windows(model, question, context):
            batch = np.array([ids], np.int32)
            out = {k: v.numpy() for k, v in model({"input_ids": batch, "input_mask": np.ones_like(batch),
                                                    "segment_ids": (np.arange(len(ids)) >= first)[None].astype(
                                                        np.int32)}).items()}
            if model.version_2:
                null = min(null, out["cls_logits"][0]) if null is not None else out["cls_logits"][0]
            for score, s, e in _window_candidates(model, out, 0, first, length, is_max):
                if best is None or score > best[0]:
                    best = (score, ids[s:e + 1], s - first + offset, e - first + offset)
        want["null_odds"].append(null)
        if best is None:
            best = (-1e9, [], -1, -1)
        want["score"].append(best[0])
        want["answer"].append(sp.DecodeIds([int(i) for i in best[1]]))
        want["start"].append(best[2])
        want["end"].append(best[3])
    if model.version_2:
        want["no_answer_probability"] = 1 / (1 + np.exp(-np.array(want["null_odds"], np.float64)))
    return want


def _tagging_expectation(tagger, spm, pre):
    import tensorflow as tf

    ids = pre(tf.constant(TEXTS))
    logits = tagger(tf.constant(TEXTS)).numpy()
    mask = ids["input_mask"].numpy().astype(bool)
    sp = _sp(spm)
    pieces = [[sp.IdToPiece(int(i)) if m else "" for i, m in zip(row, mrow)]
              for row, mrow in zip(ids["input_ids"].numpy(), mask)]
    # Issue 35 N9: a tag only where training puts a label, each word's first piece ("▁..."); not on [CLS],
    # [SEP], continuation pieces or padding.
    tags = [[TAGS[t] if p.startswith("\u2581") else "" for t, p in zip(row, prow)]
            for row, prow in zip(logits.argmax(-1), pieces)]
    return {"pieces": pieces, "tags": tags}


# ----------------------------------------------------------------- tests
def _out(exported, job_id, key, graph=False):
    outputs = exported["results"][job_id]["graph_outputs" if graph else "outputs"]
    return outputs[key]


def _values(exported, job_id, key, graph=False):
    return np.array(_out(exported, job_id, key, graph)["values"])


def test_worker_imported_no_albert_tf(exported):
    assert [m for m in exported["results"]["__modules__"] if not m.startswith("keras")] == []


@pytest.mark.parametrize("job_id", ["encoder", "encoder_pair", "encoder_1", "encoder_64", "encoder_ids"])
def test_encoder_outputs_equal_keras(exported, job_id):
    want = exported["expected"][job_id]
    for key in ("pooled_output", "sequence_output"):
        assert _out(exported, job_id, key)["dtype"] == "float32"
        np.testing.assert_allclose(_values(exported, job_id, key), want[key], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(_values(exported, job_id, "input_mask"), want["input_mask"])


def test_edge_texts_and_truncation(exported):
    mask = _values(exported, "encoder", "input_mask")
    lengths = mask.sum(-1)
    # "" and whitespace pack to [CLS] [SEP]; the long text is cut to max_seq_length.
    assert lengths[1] == 2 and lengths[2] == 2
    assert lengths[TEXTS.index(LONG)] == MAX_LEN and mask.shape[1] == MAX_LEN
    assert all(n > 2 for i, n in enumerate(lengths) if TEXTS[i].strip())  # accents, Chinese, emoji give pieces
    assert _values(exported, "encoder_64", "pooled_output").shape == (64, 16)
    assert _values(exported, "encoder_1", "pooled_output").shape == (1, 16)
    pair_mask = _values(exported, "encoder_pair", "input_mask")
    assert pair_mask.sum(-1)[TEXTS.index(LONG)] == MAX_LEN


def test_graph_mode_loader_matches_eager(exported):
    """The TF1 session loader (TF Serving's way) restores every variable and gives the same answers."""
    for job_id in ("encoder", "pretrainer", "classifier", "regression", "span_qa", "span_qa_v2",
                   "multiple_choice", "tagging"):
        eager = exported["results"][job_id]["outputs"]
        graph = exported["results"][job_id]["graph_outputs"]
        assert set(graph) == set(eager), job_id
        for key in eager:
            a, b = np.array(eager[key]["values"]), np.array(graph[key]["values"])
            if a.dtype.kind == "f":
                # The bfloat16 regression model: other kernels round differently, within bfloat16 rounding of
                # values of order 1 (its randomised weights); float32 models at 1e-5.
                atol = 0.1 * np.ptp(a) if job_id == "regression" else 1e-5
                np.testing.assert_allclose(a, b, atol=atol, rtol=0, err_msg=f"{job_id}/{key}")
                if job_id == "regression":  # its bound is loose: the graph's rows shifted by one fall outside it
                    assert not np.allclose(a, np.roll(b, 1, axis=0), atol=atol, rtol=0), f"{job_id}/{key}"
            else:
                np.testing.assert_array_equal(a, b, err_msg=f"{job_id}/{key}")


def test_fill_mask_top_k(exported):
    want = exported["expected"]["pretrainer"]
    positions = _values(exported, "pretrainer", "masked_positions")
    ids = _values(exported, "pretrainer", "top_k_ids")
    scores = _values(exported, "pretrainer", "top_k_scores")
    pieces = _out(exported, "pretrainer", "top_k_pieces")["values"]
    assert _out(exported, "pretrainer", "top_k_scores")["dtype"] == "float32"
    assert positions.shape == (len(FILL_MASK), max(len(p) for p in want["positions"]))
    assert ids.shape[-1] == 4
    for b, row in enumerate(want["positions"]):
        assert positions[b].tolist() == row + [-1] * (positions.shape[1] - len(row))
        for m in range(len(row)):
            probs = want["probs"][b, m]
            # The returned ids carry the model's probabilities, in the top-4 order.
            np.testing.assert_allclose(scores[b, m], probs[ids[b, m]], atol=1e-5, rtol=0)
            np.testing.assert_allclose(scores[b, m], np.sort(probs)[::-1][:4], atol=1e-5, rtol=0)
            assert pieces[b][m] == [want["pieces"][i] for i in ids[b, m]]
        for m in range(len(row), positions.shape[1]):
            assert ids[b, m].tolist() == [-1] * 4 and pieces[b][m] == [""] * 4 and not scores[b, m].any()
    assert want["positions"][FILL_MASK.index("no mask here")] == []
    assert want["positions"][FILL_MASK.index("[MASK][MASK] end")] == [1, 2]
    assert want["positions"][FILL_MASK.index(LONG + " [MASK]")] == []  # truncated away, as in training


@pytest.mark.parametrize("job_id", ["classifier", "classifier_pair", "binary_classifier", "binary_classifier_spm",
                                    "binary_classifier_options"])
def test_classifier_outputs(exported, job_id):
    want = exported["expected"][job_id]
    np.testing.assert_allclose(_values(exported, job_id, "logits"), want["logits"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(_values(exported, job_id, "probabilities"), want["probabilities"], atol=1e-5, rtol=0)
    assert _out(exported, job_id, "label")["values"] == want["label"]


def test_mixed_precision_model_serves_float32(exported):
    value = _out(exported, "regression", "value")
    assert value["dtype"] == "float32" and value["shape"] == [len(TEXTS)]
    # The same bfloat16 computation in the graph: equal up to bfloat16 rounding, a bound set from the spread
    # of the values (randomised weights: of order 1); shifted rows do not pass it.
    want = np.asarray(exported["expected"]["regression"]["value"], np.float64)
    spread = np.ptp(want)
    assert spread > 0.2, want
    np.testing.assert_allclose(value["values"], want, atol=0.1 * spread, rtol=0)
    assert not np.allclose(np.roll(want, 1), want, atol=0.1 * spread, rtol=0)
    assert set(exported["results"]["regression"]["outputs"]) == {"value", "logits"}


@pytest.mark.parametrize("head", ["span_qa", "span_qa_v2"])
def test_span_qa_answers(exported, head):
    want = exported["expected"][head]
    assert _out(exported, head, "answer")["values"] == want["answer"]
    np.testing.assert_array_equal(_values(exported, head, "start"), want["start"])
    np.testing.assert_array_equal(_values(exported, head, "end"), want["end"])
    np.testing.assert_allclose(_values(exported, head, "score"), want["score"], atol=1e-4, rtol=1e-6)
    assert want["start"][CONTEXTS.index("")] == -1  # no context, no answer
    # The long context has several windows; the best span may lie in any of them.
    assert len(_windows(exported["models"][head], QUESTIONS[3], CONTEXTS[3])) > 3
    if head == "span_qa_v2":
        np.testing.assert_allclose(_values(exported, head, "no_answer_probability"),
                                   want["no_answer_probability"], atol=1e-5, rtol=0)
        np.testing.assert_allclose(_values(exported, head, "null_odds"), want["null_odds"], atol=1e-5, rtol=0)
        # The threshold from the model (task_config.json) applies: answers kept at odds <= it, others "".
        threshold = np.float32(exported["models"][head].null_score_diff_threshold)
        kept = [a != "" for a in want["answer"]]
        assert kept == [odds <= threshold and c != "" for odds, c in zip(want["null_odds"], CONTEXTS)], want
        assert 0 < kept.count(True) < len(CONTEXTS) - 1, want


def test_multiple_choice_probabilities(exported):
    want = exported["expected"]["multiple_choice"]
    np.testing.assert_allclose(_values(exported, "multiple_choice", "probabilities"), want["probabilities"],
                               atol=1e-5, rtol=0)
    np.testing.assert_array_equal(_values(exported, "multiple_choice", "choice"), want["choice"])


def test_tagging_tag_per_word_at_its_first_piece(exported):
    want = exported["expected"]["tagging"]
    assert _out(exported, "tagging", "pieces")["values"] == want["pieces"]
    assert _out(exported, "tagging", "tags")["values"] == want["tags"]


@pytest.mark.parametrize("name", sorted(REST_REQUESTS))
def test_rest_request_bodies(exported, name):
    """docs/serving.md's REST bodies, batched as TF Serving's row format does, give the documented keys."""
    result = exported["results"]["rest_" + name]
    assert set(result["outputs"]) == exported["expected"]["rest_" + name]
    batch = len(REST_REQUESTS[name]["instances"])
    assert all(out["shape"][0] == batch for out in result["outputs"].values())


def test_every_export_is_self_contained(exported):
    for head, path in exported["paths"].items():
        assets = sorted(os.listdir(os.path.join(path, "assets")))
        want = {"spm.model", "albert_config.json", "preprocessing.json"}
        if head not in ("encoder", "pretrainer"):
            want.add("task_config.json")
        if head.startswith(("classifier", "binary_classifier")):
            want.add("label_names.txt")
        if head == "tagging":
            want.add("tag_names.txt")
        assert set(assets) == want, head
        with open(exported["spm"], "rb") as f:
            assert open(os.path.join(path, "assets", "spm.model"), "rb").read() == f.read()
    labels = open(os.path.join(exported["paths"]["classifier"], "assets", "label_names.txt")).read()
    assert labels.splitlines() == LABELS
    # TF Serving ignores non-numeric folders; no temporary folder is left behind.
    for head in exported["paths"]:
        assert os.listdir(os.path.dirname(exported["paths"][head])) == ["1"]


def test_rest_predict_in_process(exported):
    import tensorflow as tf

    from albert_tf.export import rest_predict

    loaded = tf.saved_model.load(exported["paths"]["classifier"])
    answer = rest_predict(loaded, REST_REQUESTS["classifier"])
    worker = exported["results"]["rest_classifier"]["outputs"]
    assert [set(p) for p in answer["predictions"]] == [DOCUMENTED_OUTPUTS["classifier"]] * 2
    assert [p["label"] for p in answer["predictions"]] == worker["label"]["values"]
    np.testing.assert_allclose([p["probabilities"] for p in answer["predictions"]],
                               worker["probabilities"]["values"], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"instances\[0\] has keys \['txt'\]"):
        rest_predict(loaded, {"instances": [{"txt": "x"}]})
    with pytest.raises(ValueError, match="serve_text_pair"):
        rest_predict(loaded, {"signature_name": "nope", "instances": ["x"]})


def _cli(command, model_dir):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(command.replace("MODEL_DIR", model_dir), shell=True, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_saved_model_cli_show_lists_signatures_with_dynamic_batch(exported):
    proc = _cli("saved_model_cli show --dir MODEL_DIR --all", exported["paths"]["encoder"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    blocks = dict(re.findall(r"signature_def\['(\w+)'\]:\n(.*?)(?=\nsignature_def|\Z)", proc.stdout, re.S))
    assert {"serving_default", "serve_text_pair", "serve_token_ids"} <= set(blocks)
    for name in ("serving_default", "serve_text_pair", "serve_token_ids"):
        shapes = re.findall(r"shape: \(([-\d, ]*)\)", blocks[name])
        assert shapes and all(s.split(",")[0].strip() == "-1" for s in shapes), (name, shapes)
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in blocks["serving_default"]
    assert "shape: (-1, -1)" in blocks["serve_token_ids"]


def test_docs_saved_model_cli_run_commands(exported):
    text = _cli(README_CLI_RUN_TEXT, exported["paths"]["classifier"])
    assert text.returncode == 0, text.stderr[-2000:]
    label = re.search(r"Result for output key label:\n\[b'(\w+)'\]", text.stdout)
    assert label and label.group(1) in LABELS, text.stdout
    # The stock saved_model_cli (no tensorflow-text) loads an ids-only export.
    ids = _cli(README_CLI_RUN_IDS, exported["paths"]["binary_classifier"])
    assert ids.returncode == 0, ids.stderr[-2000:]
    probs = re.search(r"Result for output key probabilities:\n\[\[([^\]]*)\]\]", ids.stdout)
    assert probs and abs(sum(float(p) for p in probs.group(1).split()) - 1) < 1e-5, ids.stdout


def test_existing_version_never_overwritten(exported, tmp_path, monkeypatch):
    import albert_tf
    from albert_tf import export

    enc = exported["models"]["encoder"]
    export_dir = os.path.dirname(exported["paths"]["encoder"])
    pb = os.path.join(exported["paths"]["encoder"], "saved_model.pb")
    before = (os.path.getmtime(pb), open(pb, "rb").read())
    with pytest.raises(FileExistsError, match="never overwritten"):
        albert_tf.export_saved_model(enc, export_dir, version=1, spm_model_file=exported["spm"])
    assert (os.path.getmtime(pb), open(pb, "rb").read()) == before
    # The next free version follows the largest number; other names are ignored.
    for name in ("3", "10", "tmp", ".tmp-11-1"):
        os.makedirs(tmp_path / "m" / name)
    assert export.next_version(str(tmp_path / "m")) == 11
    assert export.next_version(str(tmp_path / "none")) == 1

    # A version that appears while exporting (another exporter) is not replaced either.
    def racing_save(obj, path, signatures=None):
        os.makedirs(os.path.join(path, "assets"))
        os.makedirs(tmp_path / "race" / "1")
        (tmp_path / "race" / "1" / "theirs").write_text("x")

    monkeypatch.setattr(export.tf.saved_model, "save", racing_save)
    with pytest.raises(FileExistsError, match="appeared while exporting"):
        albert_tf.export_saved_model(enc, str(tmp_path / "race"), spm_model_file=exported["spm"])
    assert sorted(os.listdir(tmp_path / "race")) == ["1"]  # the temporary folder is gone
    assert os.listdir(tmp_path / "race" / "1") == ["theirs"]


def test_ids_only_export_has_no_text_signature(exported):
    result = exported["results"]["binary_classifier"]
    assert result["inputs"] == ["input_ids", "input_mask", "segment_ids"]
    assert result["signatures"] == ["serve_token_ids", "serving_default"]
    with open(os.path.join(exported["paths"]["binary_classifier"], "saved_model.pb"), "rb") as f:
        assert b"SentencepieceOp" not in f.read()


def test_decode_pieces_matches_sentencepiece(exported):
    import tensorflow as tf

    from albert_tf.export import decode_pieces, decoding_table

    sp = _sp(exported["spm"])
    rows = [sp.EncodeAsIds(text) for text in ("ka lo mi ten", "the quick brown fox", "ser, qua. vi")] + [[]]
    rows += [[2] + rows[1] + [3, 0, 0], [1, 1], [5, 1]]  # special pieces decode to nothing; <unk>
    table = tf.constant(decoding_table([sp.IdToPiece(i) for i in range(VOCAB)]))
    got = decode_pieces(table, tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1)).numpy()
    assert [g.decode("utf-8") for g in got] == [sp.DecodeIds(r) for r in rows]


def test_binary_refuses_existing_version(exported):
    export_dir = os.path.dirname(exported["paths"]["binary_classifier"])
    proc = _albert_export("--checkpoint=" + os.path.join(exported["root"], "finetuned"), "--head=classifier",
                          "--export_dir=" + export_dir, "--version=1")
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.startswith("albert-export:")]
    assert len(lines) == 1 and "never overwritten" in lines[0], proc.stderr[-2000:]


def test_errors_name_the_problem(exported):
    import albert_tf

    enc = exported["models"]["encoder"]
    with pytest.raises(ValueError, match="spm_model_file"):
        albert_tf.export_saved_model(enc, exported["root"] + "/x")
    with pytest.raises(ValueError, match="does not match the model"):
        albert_tf.export_saved_model(enc, exported["root"] + "/x", head="classifier", spm_model_file=exported["spm"])
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        albert_tf.export_saved_model(enc, exported["root"] + "/x", max_seq_length=65, spm_model_file=exported["spm"])
    assert not os.path.exists(exported["root"] + "/x")


def test_every_signature_answers_an_empty_batch(exported):
    """Zero rows in, zero rows out, in every signature of every export (not a crash)."""
    for head in exported["paths"]:
        shapes = exported["results"]["empty_" + head]["empty"]
        assert "serve_token_ids" in shapes and "serving_default" in shapes, head
        for signature, outputs in shapes.items():
            assert outputs and all(shape[0] == 0 for shape in outputs.values()), (head, signature, outputs)


@pytest.mark.parametrize("head", sorted(HUGE_REQUESTS))
def test_a_10mb_request_answers_within_bounded_time_and_memory(exported, head):
    """Text is cut before it is normalised (CHARS_PER_PIECE per piece kept): a 10 MB request costs about what a
    short one does. Before the cut, normalising and tokenizing 10 MB took about 6 s and 900 MB on a classifier.
    "seconds" are the worker's CPU seconds for the call (export_worker.measured_call), not wall time."""
    result = exported["results"]["huge_" + head]
    assert result["seconds"] < 3.0 and result["peak_rss_growth_mb"] < 200, result
    assert all(out["shape"][0] == len(HUGE_REQUESTS[head]["text"]) for out in result["outputs"].values())


def test_serving_settings_are_recorded(exported):
    """assets/preprocessing.json says what the graph applies; task_config.json keeps the normalisation."""
    def read(head, name):
        with open(os.path.join(exported["paths"][head], "assets", name), encoding="utf-8") as f:
            return json.load(f)

    assert read("classifier", "preprocessing.json") == {
        "head": "classifier", "max_seq_length": MAX_LEN, "do_lower_case": True, "normalization": "original",
        "chars_per_piece": 64}
    assert read("binary_classifier_options", "preprocessing.json")["normalization"] == "xlnet"
    assert read("binary_classifier_options", "task_config.json")["normalization"] == "xlnet"
    qa = read("span_qa_v2", "preprocessing.json")
    assert qa["doc_stride"] == DOC_STRIDE and qa["max_context_length"] == 4096
    assert qa["null_score_diff_threshold"] == exported["models"]["span_qa_v2"].null_score_diff_threshold
    assert read("span_qa_v2", "task_config.json")["null_score_diff_threshold"] == qa["null_score_diff_threshold"]


def test_span_qa_finds_an_answer_in_the_last_window(exported, tmp_path):
    """A context many windows long whose answer is near its end: the export serves every window (issue 16)."""
    import tensorflow as tf

    import albert_tf

    pre = exported["pre"]
    target = next(i for i in pre.tokenize(["don"]).to_list()[0] if i > 4)

    class MarkerQA(albert_tf.AlbertSpanQA):
        """Start and end logits peak at the target piece only."""

        def _head(self, features, outputs, training):
            hit = 10.0 * tf.cast(tf.equal(tf.cast(features["input_ids"], tf.int32), target), tf.float32)
            return {"start_logits": hit, "end_logits": hit}

    model = MarkerQA(exported["models"]["span_qa"].config, preprocessor=pre, max_query_length=8, doc_stride=5)
    context = "ka lo mi ten ser qua vi " * 20 + "don ka lo."
    pieces = pre.tokenize([context]).to_list()[0]
    assert pieces.count(target) == 1 and len(pieces) > 4 * (MAX_LEN - 3)
    loaded = tf.saved_model.load(albert_tf.export_saved_model(model, str(tmp_path / "marker")))
    out = loaded.signatures["serving_default"](text=tf.constant(["where?", "where?"]),
                                               text_pair=tf.constant([context, ""]))
    want = pre.detokenize(tf.ragged.constant([[target]])).numpy()[0].decode("utf-8")
    assert [a.decode("utf-8") for a in out["answer"].numpy()] == [want, ""]
    assert out["start"].numpy().tolist() == [pieces.index(target), -1]
    assert out["end"].numpy().tolist() == [pieces.index(target), -1]


def test_predict_on_an_empty_batch(exported):
    """Task models' predict answers no rows with no rows (Keras's predict fails on an empty input)."""
    models = exported["models"]
    assert models["classifier"].predict([], verbose=0).shape == (0, 3)
    assert models["classifier"].predict(([], []), verbose=0).shape == (0, 3)
    assert models["regression"].predict([], verbose=0).shape == (0, 1)
    assert models["tagging"].predict([], verbose=0).shape[::2] == (0, len(TAGS))


def test_frozen_and_variables_exports_serve_the_same(exported, tmp_path, monkeypatch):
    import tensorflow as tf

    import albert_tf
    from albert_tf.export import saved_model

    enc, pre = exported["models"]["encoder"], exported["pre"]
    ids = pre(tf.constant(TEXTS))
    want = enc(ids)["sequence_output"].numpy()
    outputs, variables = {}, {}
    for freeze in (True, False):
        path = albert_tf.export_saved_model(enc, str(tmp_path / str(freeze)), spm_model_file=exported["spm"],
                                            freeze_weights=freeze, text_signatures=False)
        loaded = tf.saved_model.load(path)  # held: a signature does not keep its variables alive
        serve = loaded.signatures["serve_token_ids"]
        outputs[freeze] = serve(**ids)["sequence_output"].numpy()
        variables[freeze] = len(serve.variables)
    assert variables[True] == 0 and variables[False] == len(enc.weights), variables
    for freeze in (True, False):
        np.testing.assert_allclose(outputs[freeze], want, atol=1e-5, err_msg=f"freeze_weights={freeze}")
    # The default freezes what fits a graph; larger models keep variables, and asking to freeze them fails clearly.
    assert saved_model._should_freeze(enc, None) is True
    monkeypatch.setattr(saved_model, "FREEZE_WEIGHTS_MAX_BYTES", 1000)
    assert saved_model._should_freeze(enc, None) is False
    with pytest.raises(ValueError, match="freeze_weights=True: the weights take"):
        albert_tf.export_saved_model(enc, str(tmp_path / "big"), spm_model_file=exported["spm"], freeze_weights=True)


def test_albert_export_nofreeze_weights_keeps_the_variables(exported):
    def variables_bytes(head):
        folder = os.path.join(exported["paths"][head], "variables")
        return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith("variables.data"))

    weights = sum(int(np.prod(w.shape)) * 4 for w in exported["models"]["classifier"].weights)
    # --nofreeze_weights: the weights are in the variables files; by default they are graph constants (both
    # exports also save the same SentencePiece model there).
    assert variables_bytes("binary_classifier_options") >= variables_bytes("binary_classifier_spm") + weights
