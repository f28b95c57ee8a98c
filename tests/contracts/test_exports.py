"""The export columns of the contract matrix (issue 29): every head x every export promise.

Rows (`ROWS`): encoder, pretrainer (fill-mask), classifier (single, pair,
regression, pooled and mean pooling), span QA v1 and v2, multiple choice,
tagging. Columns (`COLUMNS`):

- binary: `albert-export` writes the head's SavedModel (every export below
  is the binary's, from a saved checkpoint / fine-tuned folder);
- library: the SavedModel in a FRESH process (tensorflow + tensorflow_text
  only) equals the library on the shared edge texts (tests/contracts/edge_texts.py);
- empty: every signature answers a batch of no rows with no rows;
- hostile: invalid UTF-8, NUL and controls, a 2 MB word, emoji/CJK/combining
  marks (equal to the library where the library takes the input), and a
  batch of 5,000;
- metadata: label / tag names, task_config.json, preprocessing settings and
  the SentencePiece model in assets/;
- openvino_refusal: heads without an OpenVINO export refuse it by name.

Models get randomised weights (outputs of order 1) and float32 is compared at
1e-5; every numeric check also shows that a wrong answer (zeros, shuffled
rows) fails it (`assert_close`). One module fixture builds, saves and exports
every head once and runs one worker process.
"""

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.contracts import edge_texts as edge

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(REPO, "tests", "albert_tf", "export_worker.py")
MAX_LEN = 32
LABELS = ["negative", "neutral", "positive"]
TAGS = ["O", "B-X", "I-X", "B-Y"]
QA_MAX_ANSWER = 4  # the fine-tuned value, saved with the model; the export must serve it
# Issue 35 N11: fine-tuning decodes each window's top n starts x top n ends; the export must pick among the same.
QA_N_BEST = 2

ROWS = ("encoder", "pretrainer", "classifier_single", "classifier_pair", "classifier_regression",
        "classifier_mean_pooling", "span_qa_v1", "span_qa_v2", "multiple_choice", "tagging")
COLUMNS = ("binary", "library", "empty", "hostile", "metadata")
# The export each row serves (single and pair texts go to one classifier's two signatures).
EXPORT_OF = {row: row for row in ROWS}
EXPORT_OF["classifier_pair"] = "classifier_single"
EXPORTS = sorted(set(EXPORT_OF.values()))
OPENVINO_HEADS = {"encoder", "classifier_single", "classifier_pair", "classifier_regression",
                  "classifier_mean_pooling"}
HEAD_FLAG = {"encoder": "encoder", "pretrainer": "pretrainer", "span_qa_v1": "span_qa", "span_qa_v2": "span_qa",
             "multiple_choice": "multiple_choice", "tagging": "tagging"}

# Runs albert-export's main() once per command line, in ONE process (the binary's flags, parsed by absl).
RUNNER = r"""
import json, sys
from absl import flags
import albert_tf.bin.export as export
export._define_flags()
results = {}
for name, argv in json.load(open(sys.argv[1])).items():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["albert-export", *argv])
    try:
        export.main(["albert-export"])
        results[name] = {"ok": True}
    except Exception as e:
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
json.dump(results, open(sys.argv[2], "w"))
"""


# ---------------------------------------------------------------- helpers
def assert_close(got, want, atol=1e-5, what=""):
    """got == want to atol, and the check can fail: zeros and shuffled rows of `want` do not pass it."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=what)
    assert np.max(np.abs(want)) > 100 * atol, f"{what}: outputs too small to test ({np.max(np.abs(want))})"
    rows = want.reshape(len(want), -1)
    distinct = [i for i in range(1, len(rows)) if np.max(np.abs(rows[i] - rows[0])) > 100 * atol]
    if distinct:  # rows 0 and i swapped: a shuffled answer fails
        swapped = rows.copy()
        swapped[[0, distinct[0]]] = swapped[[distinct[0], 0]]
        assert not np.allclose(swapped, rows, atol=atol, rtol=0), what


def _randomize(model, seed):
    """Weights of std 0.3 (LayerNorm gains about 1, small biases): outputs of order 1 that vary by input."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        small = "bias" in v.path or "beta" in v.path
        value = rng.normal(0.0, 0.03 if small else 0.3, size=v.shape) + (1.0 if "gamma" in v.path else 0.0)
        v.assign(value.astype(np.float32))
    return model


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _b64(texts):
    return [base64.b64encode(t if isinstance(t, bytes) else t.encode("utf-8")).decode("ascii") for t in texts]


def _models(spm):
    import keras
    import tensorflow as tf

    import albert_tf
    from tests.albert_tf.task_testlib import tiny_config

    keras.utils.set_random_seed(11)  # before any SentencePiece op exists (tf-keras-notes.md)
    config = tiny_config()
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    qa = dict(preprocessor=pre, max_query_length=8, doc_stride=5, max_answer_length=QA_MAX_ANSWER,
              n_best_size=QA_N_BEST)
    models = {
        "pretrainer": albert_tf.AlbertPretrainer(config),
        "classifier_single": albert_tf.AlbertClassifier(config, 3, preprocessor=pre, label_names=LABELS),
        "classifier_regression": albert_tf.AlbertClassifier(config, 1, preprocessor=pre),
        "classifier_mean_pooling": albert_tf.AlbertClassifier(config, 3, preprocessor=pre, pooling="mean",
                                                              label_names=LABELS),
        "span_qa_v1": albert_tf.AlbertSpanQA(config, **qa),
        "span_qa_v2": albert_tf.AlbertSpanQA(config, version_2=True, **qa),
        "multiple_choice": albert_tf.AlbertMultipleChoice(config, 3, preprocessor=pre, max_qa_length=8),
        "tagging": albert_tf.AlbertTokenClassifier(config, len(TAGS), preprocessor=pre, tag_names=TAGS),
    }
    for i, model in enumerate(models.values()):
        _randomize(model, seed=i)
    # A random tagger puts nearly every piece in one tag; centred logits make the tags vary (so a constant fails).
    texts = tf.constant(edge.TEXTS)
    mask = pre(texts)["input_mask"].numpy() > 0
    logits = models["tagging"](texts).numpy()[mask]
    bias = next(v for v in models["tagging"].weights if "bias" in v.path and tuple(v.shape) == (len(TAGS),))
    bias.assign(bias.numpy() - logits.mean(axis=0))
    models["encoder"] = models["pretrainer"].encoder
    return pre, models


def _export_commands(root, spm, models):
    """Saves every model as albert-export reads it; the command line of each export (and of each refusal)."""
    import albert_tf

    pretrained = os.path.join(root, "pretrained")
    albert_tf.save_pretrained(models["pretrainer"], pretrained, spm_model_file=spm)
    commands = {}
    for name in EXPORTS:
        checkpoint = pretrained
        if name not in ("encoder", "pretrainer"):
            checkpoint = albert_tf.save_task_model(models[name], os.path.join(root, "finetuned", name))
        base = [f"--checkpoint={checkpoint}", f"--head={HEAD_FLAG.get(name, 'classifier')}"]
        extra = ["--max_seq_length=32", "--top_k=4"] if name in ("encoder", "pretrainer") else []
        commands[name] = base + extra + [f"--export_dir={os.path.join(root, 'exports', name)}"]
        if name not in OPENVINO_HEADS:
            commands["openvino_" + name] = base + ["--format=openvino",
                                                   f"--export_dir={os.path.join(root, 'ov', name)}"]
    # An explicit --max_answer_length wins over the fine-tuned value.
    commands["span_qa_v1_flag"] = commands["span_qa_v1"][:-1] + [
        "--max_answer_length=7", f"--export_dir={os.path.join(root, 'exports', 'span_qa_v1_flag')}"]
    return commands


# Runs a script (argv[2:]) with albert_tf and pipelines unimportable: each attempt is appended to the file argv[1]
# and raises ImportError, so an export that needed the package to load fails (tests/albert_tf/export_worker.py).
BLOCKED_RUNNER = r"""
import runpy, sys
log, script = sys.argv[1], sys.argv[2]


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("albert_tf", "pipelines"):
            with open(log, "a", encoding="utf-8") as f:
                f.write(name + "\n")
            raise ImportError(f"blocked: {name} (an export must load without albert_tf and pipelines)")
        return None


sys.meta_path.insert(0, Blocker())
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def run_worker(jobs_path, results_path, blocked_log):
    """export_worker.py on `jobs_path` with albert_tf and pipelines blocked (attempts listed in `blocked_log`)."""
    _run(["-c", BLOCKED_RUNNER, blocked_log, WORKER, jobs_path, results_path])


def _run(args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]


# ------------------------------------------------------------ references
def _fill_mask_reference(pretrainer, pre, texts):
    """[CLS] part [MASK] part ... [SEP] (cut to MAX_LEN - 2), softmax of the MLM logits at the masks."""
    import tensorflow as tf

    rows = []
    for text in texts:
        body = []
        for i, part in enumerate(text.split(b"[MASK]" if isinstance(text, bytes) else "[MASK]")):
            body += ([4] if i else []) + pre.tokenize(tf.constant([part])).to_list()[0]
        rows.append([2] + body[:MAX_LEN - 2] + [3])
    width = max(len(r) for r in rows)
    ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    positions = [[i for i, t in enumerate(r) if t == 4] for r in rows]
    most = max(len(p) for p in positions)
    padded = np.array([p + [0] * (most - len(p)) for p in positions], np.int32).reshape(len(rows), most)
    logits = pretrainer({"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": 0 * ids,
                         "masked_lm_positions": padded})["mlm_logits"].numpy()
    return {"positions": positions, "probs": _softmax(logits.astype(np.float64))}


def _span_reference(model, spm, questions, contexts, n_best_size=None):
    """The library's answers: the SQuAD reader's windows, the model's logits, postprocess_predictions (at the
    model's n_best_size unless given)."""
    from pipelines import tokenizer
    from pipelines.finetune import squad
    from pipelines.finetune.sp_text import PieceText

    examples = [squad.SquadExample(str(i), q, c, None, -1) for i, (q, c) in enumerate(zip(questions, contexts))]
    features = squad.convert_examples_to_features(examples, PieceText(tokenizer.SentencePieceVocab.from_file(spm)),
                                                  MAX_LEN, model.doc_stride, model.max_query_length)
    outputs = {k: np.asarray(v) for k, v in model(features.model_inputs(), training=False).items()}
    result = squad.postprocess_predictions(examples, features, outputs, n_best_size=n_best_size or model.n_best_size,
                                           max_answer_length=QA_MAX_ANSWER, version_2=model.version_2,
                                           null_score_diff_threshold=model.null_score_diff_threshold)
    kept = {int(i) for i in features.example_index}  # the reader skips a context it cannot align
    return {"answer": [result.predictions[e.qas_id] for e in examples],
            "null_odds": [result.null_odds.get(e.qas_id) for e in examples],
            "kept": [i in kept for i in range(len(examples))]}


def _library(pre, models, spm):
    """Each row's library answer on the edge texts, as (job inputs, signature, expected outputs)."""
    import tensorflow as tf

    texts, pairs = tf.constant(edge.TEXTS), tf.constant(edge.PAIRS)
    ids = pre(texts)
    enc = models["encoder"](ids)
    mask = ids["input_mask"].numpy()
    clf = {name: models[name](texts).numpy() for name in ("classifier_single", "classifier_mean_pooling")}
    tag_logits = models["tagging"](texts).numpy()
    mc = models["multiple_choice"]({"text": tf.constant(edge.CONTEXTS), "choices": tf.constant(edge.CHOICES)})
    qa_inputs = {"text": edge.QUESTIONS, "text_pair": edge.CONTEXTS}
    return {
        "encoder": ({"text": edge.TEXTS}, "serving_default",
                    {"pooled_output": enc["pooled_output"].numpy(),
                     "sequence_output": enc["sequence_output"].numpy(), "input_mask": mask}),
        "pretrainer": ({"text": edge.FILL_MASK}, "serving_default",
                       _fill_mask_reference(models["pretrainer"], pre, edge.FILL_MASK)),
        "classifier_single": ({"text": edge.TEXTS}, "serving_default",
                              {"logits": clf["classifier_single"], "probabilities": _softmax(clf["classifier_single"]),
                               "label": [LABELS[i] for i in clf["classifier_single"].argmax(-1)]}),
        "classifier_pair": ({"text": edge.TEXTS, "text_pair": edge.PAIRS}, "serve_text_pair",
                            {"logits": models["classifier_single"]((texts, pairs)).numpy()}),
        "classifier_regression": ({"text": edge.TEXTS}, "serving_default",
                                  {"value": models["classifier_regression"](texts).numpy()[:, 0]}),
        "classifier_mean_pooling": ({"text": edge.TEXTS}, "serving_default",
                                    {"logits": clf["classifier_mean_pooling"]}),
        "span_qa_v1": (qa_inputs, "serving_default",
                       _span_reference(models["span_qa_v1"], spm, edge.QUESTIONS, edge.CONTEXTS)),
        "span_qa_v2": (qa_inputs, "serving_default",
                       _span_reference(models["span_qa_v2"], spm, edge.QUESTIONS, edge.CONTEXTS)),
        "multiple_choice": ({"text": edge.CONTEXTS, "choices": edge.CHOICES}, "serving_default",
                            {"probabilities": _softmax(mc.numpy())}),
        "tagging": ({"text": edge.TEXTS}, "serving_default",
                    {"tag_ids": np.where(word_starts(spm, ids["input_ids"].numpy(), mask), tag_logits.argmax(-1), -1)}),
    }


def word_starts(spm, input_ids, input_mask):
    """bool [B, T]: the real pieces that begin a word ("▁..."), where the tagging reader puts a word's label
    (sentencepiece's own piece names; `spm` a file or a serialized model)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    if isinstance(spm, bytes):
        sp.LoadFromSerializedProto(spm)
    else:
        sp.Load(spm)
    starts = np.vectorize(lambda i: sp.IdToPiece(int(i)).startswith("\u2581"), otypes=[bool])(input_ids)
    return starts & (np.asarray(input_mask) > 0)


HOSTILE_FILL_MASK = [t + b" [MASK] lo" for t in edge.HOSTILE]  # the hostile strings with a mask to fill
# Span QA's hostile contexts (the hostile strings reversed) but the 2 MB word, which the server cuts to
# max_context_length pieces where the reader makes windows over all of it: its answer is checked as the
# context's text only.
HOSTILE_CONTEXTS = edge.HOSTILE[::-1]
HOSTILE_QA_COMPARED = [i for i, c in enumerate(HOSTILE_CONTEXTS) if len(c) < 10_000]
# The hostile strings as questions about a context the reader aligns (it skips contexts it cannot align: most
# hostile ones), so that every row's answer is compared.
PLAIN_CONTEXT = "Ka lo MI ten. Ser qua, vi don! ka mi lo"


def _hostile_inputs(row):
    """The row's hostile request: the hostile strings wherever the head takes text."""
    texts = edge.HOSTILE
    if row == "pretrainer":
        return {"text": _b64(HOSTILE_FILL_MASK)}
    if row.startswith("span_qa"):
        return {"text": _b64(texts), "text_pair": _b64(texts[::-1])}
    if row == "multiple_choice":
        return {"text": _b64(texts), "choices": [_b64([t, b"ka", texts[0]]) for t in texts]}
    if row == "classifier_pair":
        return {"text": _b64(texts), "text_pair": _b64(texts[::-1])}
    return {"text": _b64(texts)}


def _hostile_library(row, pre, models, spm):
    """What the library answers on the hostile strings (span QA: on the contexts of HOSTILE_QA_COMPARED, the
    text as the original's convert_to_unicode reads it: invalid bytes dropped)."""
    import tensorflow as tf

    texts = tf.constant(edge.HOSTILE)
    if row == "pretrainer":
        return _fill_mask_reference(models[row], pre, HOSTILE_FILL_MASK)
    if row.startswith("span_qa"):
        questions = [edge.HOSTILE[i].decode("utf-8", "ignore") for i in HOSTILE_QA_COMPARED]
        contexts = [HOSTILE_CONTEXTS[i].decode("utf-8", "ignore") for i in HOSTILE_QA_COMPARED]
        every = [t.decode("utf-8", "ignore") for t in edge.HOSTILE]
        return {"pairs": _span_reference(models[row], spm, questions, contexts),
                "questions": _span_reference(models[row], spm, every, [PLAIN_CONTEXT] * len(every))}
    if row == "encoder":
        return {"pooled_output": models["encoder"](pre(texts))["pooled_output"].numpy()}
    if row in ("classifier_single", "classifier_mean_pooling"):
        return {"logits": models[row](texts).numpy()}
    if row == "classifier_pair":
        return {"logits": models["classifier_single"]((texts, tf.constant(edge.HOSTILE[::-1]))).numpy()}
    if row == "classifier_regression":
        return {"value": models[row](texts).numpy()[:, 0]}
    if row == "multiple_choice":
        choices = tf.constant([[t, b"ka", edge.HOSTILE[0]] for t in edge.HOSTILE])
        return {"probabilities": _softmax(models[row]({"text": texts, "choices": choices}).numpy())}
    if row == "tagging":
        ids = pre(texts)
        starts = word_starts(pre.spm_model_proto, ids["input_ids"].numpy(), ids["input_mask"].numpy())
        return {"tag_ids": np.where(starts, models[row](texts).numpy().argmax(-1), -1)}
    return {}


@pytest.fixture(scope="module")
def exports(tmp_path_factory, contract_assets):
    """Saves and exports every head through albert-export, computes the library's answers, runs the worker."""
    root = str(tmp_path_factory.mktemp("contract_exports"))
    spm = contract_assets["spm"]
    pre, models = _models(spm)
    # The v2 threshold (task_config.json): amid the null odds, so that some answers are kept and others are "".
    odds = sorted(o for o in _span_reference(models["span_qa_v2"], spm, edge.QUESTIONS, edge.CONTEXTS)["null_odds"]
                  if o is not None and np.isfinite(o))
    models["span_qa_v2"].null_score_diff_threshold = float(np.mean(odds[len(odds) // 2 - 1:len(odds) // 2 + 1]))
    commands = _export_commands(root, spm, models)
    with open(os.path.join(root, "commands.json"), "w", encoding="utf-8") as f:
        json.dump(commands, f)
    _run(["-c", RUNNER, os.path.join(root, "commands.json"), os.path.join(root, "binary.json")])
    with open(os.path.join(root, "binary.json"), encoding="utf-8") as f:
        binary = json.load(f)
    paths = {name: os.path.join(root, "exports", name, "1") for name in list(EXPORTS) + ["span_qa_v1_flag"]}
    library = _library(pre, models, spm)
    jobs = []
    for row in ROWS:
        path = paths[EXPORT_OF[row]]
        inputs, signature, _ = library[row]
        jobs.append({"id": "library_" + row, "path": path, "signature": signature, "inputs": inputs})
        jobs.append({"id": "hostile_" + row, "path": path, "signature": signature,
                     "inputs_b64": _hostile_inputs(row)})
        if row.startswith("span_qa"):
            jobs.append({"id": "hostile_questions_" + row, "path": path, "signature": signature,
                         "inputs_b64": {"text": _b64(edge.HOSTILE),
                                        "text_pair": _b64([PLAIN_CONTEXT] * len(edge.HOSTILE))}})
        big = {name: ([[t, "ka", "lo"] for t in edge.big_batch()] if name == "choices" else edge.big_batch())
               for name in inputs}
        jobs.append({"id": "big_" + row, "path": path, "signature": signature, "inputs": big, "summary": True})
    for name in EXPORTS:
        jobs.append({"id": "empty_" + name, "path": paths[name], "empty": True})
    with open(os.path.join(root, "jobs.json"), "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    blocked = os.path.join(root, "blocked_imports.txt")
    run_worker(os.path.join(root, "jobs.json"), os.path.join(root, "results.json"), blocked)
    with open(os.path.join(root, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    hostile = {row: _hostile_library(row, pre, models, spm) for row in ROWS}
    return {"blocked": blocked, "paths": paths, "binary": binary, "library": library, "hostile": hostile, "results": results,
            "spm": spm, "models": models}


def _values(exports, job, key):
    return exports["results"][job]["outputs"][key]["values"]


# ----------------------------------------------------------------- tests
def test_worker_imported_no_albert_tf(exports):
    """The worker ran with albert_tf and pipelines blocked (an import would have failed it) and tried none."""
    assert [m for m in exports["results"]["__modules__"] if not m.startswith("keras")] == []
    assert not os.path.exists(exports["blocked"]) or open(exports["blocked"], encoding="utf-8").read() == ""


def test_worker_blocker_catches_an_import(tmp_path):
    """Companion: under the worker's blocker a script importing pipelines fails, and the attempt is listed."""
    script, log = tmp_path / "imports.py", tmp_path / "blocked.txt"
    script.write_text("import json\nimport pipelines.tokenizer\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", BLOCKED_RUNNER, str(log), str(script)], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "ImportError: blocked: pipelines" in proc.stderr, proc.stderr[-2000:]
    assert log.read_text(encoding="utf-8").split() == ["pipelines"]


@pytest.mark.parametrize("row", ROWS)
def test_binary(exports, row):
    """albert-export writes every head's SavedModel (the exports every other cell loads)."""
    assert exports["binary"][EXPORT_OF[row]] == {"ok": True}, exports["binary"][EXPORT_OF[row]]
    assert os.path.exists(os.path.join(exports["paths"][EXPORT_OF[row]], "saved_model.pb"))


@pytest.mark.parametrize("row", sorted(set(ROWS) - OPENVINO_HEADS))
def test_openvino_refusal(exports, row):
    """Heads without an OpenVINO export: the binary refuses by name, before loading anything."""
    result = exports["binary"]["openvino_" + EXPORT_OF[row]]
    assert not result["ok"]
    assert result["error"].startswith("UsageError: --format=openvino exports --head=encoder"), result
    assert result["error"].endswith(f", not {HEAD_FLAG[row]}."), result


def _check_span_answers(exports, row, job, contexts):
    """The served answer is the context's own text at the returned character offsets."""
    answers = _values(exports, job, "answer")
    starts, ends = _values(exports, job, "start_char"), _values(exports, job, "end_char")
    for answer, start, end, context in zip(answers, starts, ends, contexts):
        if answer:
            assert context[start:end] == answer and answer == answer.strip(), (answer, start, end, context)
        else:
            assert (start, end) == (-1, -1)


def _check_fill_mask(exports, job, want):
    """The served masks, top-k scores, ids and pieces are the library's (`_fill_mask_reference`)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(exports["spm"])
    scores = np.array(_values(exports, job, "top_k_scores"))
    ids, pieces = _values(exports, job, "top_k_ids"), _values(exports, job, "top_k_pieces")
    k = scores.shape[-1]
    top = np.zeros_like(scores)
    for b, positions in enumerate(want["positions"]):
        assert _values(exports, job, "masked_positions")[b] == positions + [-1] * (scores.shape[1] - len(positions))
        for m in range(scores.shape[1]):
            if m >= len(positions):  # no mask here: nothing served
                assert ids[b][m] == [-1] * k and pieces[b][m] == [""] * k, (b, m)
                continue
            order = np.argsort(-want["probs"][b, m], kind="stable")[:k]
            top[b, m] = want["probs"][b, m][order]
            assert ids[b][m] == order.tolist(), (b, m)
            assert pieces[b][m] == [sp.IdToPiece(int(i)) for i in order], (b, m)
    assert sum(len(p) for p in want["positions"]) >= 3, want["positions"]
    assert_close(scores.reshape(len(scores), -1), top.reshape(len(top), -1), what=job)


@pytest.mark.parametrize("row", ROWS)
def test_library(exports, row):
    """The SavedModel in a fresh process answers the edge texts as the library does."""
    want = exports["library"][row][2]
    job = "library_" + row
    if row.startswith("span_qa"):
        # Issue 29: the answers are the context's text (case, accents, CJK, emoji, whitespace), as
        # postprocess_predictions returns them, not decoded pieces ("ka ⁇ afe ⁇ lo").
        got = _values(exports, job, "answer")
        assert got == want["answer"]
        assert sum(1 for a in got if a) >= (3 if row == "span_qa_v1" else 2) and any(a != a.lower() for a in got), got
        if row == "span_qa_v2":  # the model's threshold applies: some questions answered, others not
            assert sum(1 for c, a in zip(edge.CONTEXTS, got) if c and not a) >= 2, got
        _check_span_answers(exports, row, job, edge.CONTEXTS)
        if row == "span_qa_v2":
            # Contexts the reader keeps (it drops an empty one): the same null odds.
            kept = [i for i, odds in enumerate(want["null_odds"]) if odds is not None and np.isfinite(odds)]
            assert len(kept) >= len(edge.CONTEXTS) - 1
            assert_close(np.take(_values(exports, job, "null_odds"), kept), np.take(want["null_odds"], kept),
                         what=row)
        return
    if row == "pretrainer":
        _check_fill_mask(exports, job, want)
        return
    for key, value in want.items():
        got = _values(exports, job, key)
        if isinstance(value, list) or np.asarray(value).dtype.kind in "iu":
            assert np.asarray(got).tolist() == np.asarray(value).tolist(), key
            if key != "label":  # (names follow the logits, checked at 1e-5)
                assert len(set(np.asarray(value).ravel().tolist()) - {-1}) > 1, f"{key}: a constant would pass"
        else:
            assert_close(got, value, what=f"{row}/{key}")


@pytest.mark.parametrize("row", ROWS)
def test_empty(exports, row):
    """Every signature answers zero rows with zero rows."""
    shapes = exports["results"]["empty_" + EXPORT_OF[row]]["empty"]
    assert "serving_default" in shapes and "serve_token_ids" in shapes
    for signature, outputs in shapes.items():
        assert outputs and "error" not in outputs and all(s[0] == 0 for s in outputs.values()), (signature, outputs)


@pytest.mark.parametrize("row", ROWS)
def test_hostile(exports, row):
    """Invalid UTF-8, NUL/controls, a 2 MB word, emoji/CJK/combining marks; a batch of 5,000."""
    result = exports["results"]["hostile_" + row]["outputs"]
    assert all(out["shape"][0] == len(edge.HOSTILE) for out in result.values()), result
    for out in result.values():
        if out["dtype"].startswith("float"):
            assert np.all(np.isfinite(np.asarray(out["values"], np.float64)))
    want = exports["hostile"][row]
    if row == "pretrainer":
        _check_fill_mask(exports, "hostile_" + row, want)
    elif row.startswith("span_qa"):
        # Hostile contexts: those the SQuAD reader keeps. It skips a context whose pieces it cannot align with
        # its characters (controls, zero widths, and here even "ka  lo "), which the server still answers from
        # the context's own text (checked below).
        kept = [j for j, k in enumerate(want["pairs"]["kept"]) if k]
        assert kept, want["pairs"]
        answers = result["answer"]["values"]
        assert ([answers[HOSTILE_QA_COMPARED[j]] for j in kept] == [want["pairs"]["answer"][j] for j in kept]), (
            answers, want["pairs"])
        # Hostile questions about a plain context: every row compared.
        questions = exports["results"]["hostile_questions_" + row]["outputs"]
        assert all(want["questions"]["kept"]) and any(want["questions"]["answer"]), want["questions"]
        assert questions["answer"]["values"] == want["questions"]["answer"]
        if row == "span_qa_v2":
            assert_close(questions["null_odds"]["values"], want["questions"]["null_odds"], what=row)
        contexts = [t.decode("utf-8", "ignore") for t in HOSTILE_CONTEXTS]
        _check_span_answers(exports, row, "hostile_" + row, contexts)
    else:
        for key, value in want.items():
            if value.dtype.kind in "iu":
                assert result[key]["values"] == value.tolist(), key
            else:
                assert_close(result[key]["values"], value, what=f"{row}/{key}")
    big = exports["results"]["big_" + row]
    assert all(out["shape"][0] == edge.BIG_BATCH for out in big["outputs"].values()), big
    assert all(out["finite"] in (True, None) for out in big["outputs"].values()), big


def _asset(exports, name, filename):
    with open(os.path.join(exports["paths"][name], "assets", filename), "rb") as f:
        return f.read()


@pytest.mark.parametrize("row", ROWS)
def test_metadata(exports, row):
    """assets/: the SentencePiece model, configs, serving settings, label or tag names."""
    name = EXPORT_OF[row]
    files = set(os.listdir(os.path.join(exports["paths"][name], "assets")))
    want = {"spm.model", "albert_config.json", "preprocessing.json"}
    if row not in ("encoder", "pretrainer"):
        want.add("task_config.json")
    if row in ("classifier_single", "classifier_pair", "classifier_mean_pooling"):
        want.add("label_names.txt")
    if row == "tagging":
        want.add("tag_names.txt")
    assert want <= files, files
    with open(exports["spm"], "rb") as f:
        assert _asset(exports, name, "spm.model") == f.read()
    settings = json.loads(_asset(exports, name, "preprocessing.json"))
    assert {k: settings[k] for k in ("max_seq_length", "do_lower_case", "normalization")} == {
        "max_seq_length": MAX_LEN, "do_lower_case": True, "normalization": "original"}
    assert settings["head"] == HEAD_FLAG.get(row, "classifier")
    if "task_config.json" in want:
        task = json.loads(_asset(exports, name, "task_config.json"))
        assert task == json.loads(json.dumps(exports["models"][name].task_config)), task
    if "label_names.txt" in want:
        assert _asset(exports, name, "label_names.txt").decode().splitlines() == LABELS
        assert set(_values(exports, "library_" + row, "label")) <= set(LABELS)
    if row == "tagging":
        assert _asset(exports, name, "tag_names.txt").decode().splitlines() == TAGS
        assert {t for r in _values(exports, "library_tagging", "tags") for t in r} - {""} <= set(TAGS)
    if row.startswith("span_qa"):
        # Issue 29: the fine-tuned max_answer_length is served (it was 30 whatever the fine-tuning used) ...
        assert settings["max_answer_length"] == QA_MAX_ANSWER
    if row == "span_qa_v1":
        # ... and an explicit --max_answer_length still wins.
        flagged = json.loads(_asset(exports, "span_qa_v1_flag", "preprocessing.json"))
        assert flagged["max_answer_length"] == 7


def test_span_qa_v1_n_best_size_changes_answers(exports):
    """Issue 35 N11 companion: at the fine-tuned n_best_size the library's answers differ from a search of every
    span on these texts, so `test_library[span_qa_v1]` fails on an export that searches every span."""
    model = exports["models"]["span_qa_v1"]
    every = _span_reference(model, exports["spm"], edge.QUESTIONS, edge.CONTEXTS, n_best_size=MAX_LEN)
    assert every["answer"] != exports["library"]["span_qa_v1"][2]["answer"]


def test_python_answer_of_the_pretrainer_equals_the_saved_model(exports):
    """Issue 37 item 6: fill-mask on raw text in Python (`albert_tf.export.answer`) = the SavedModel's."""
    from albert_tf.export import answer

    got = answer(exports["models"]["pretrainer"], edge.FILL_MASK, spm_model_file=exports["spm"],
                 max_seq_length=MAX_LEN, top_k=4)
    want = exports["results"]["library_pretrainer"]["outputs"]
    assert sorted(got) == sorted(want)
    assert_close(got["top_k_scores"].reshape(len(edge.FILL_MASK), -1),
                 np.reshape(want["top_k_scores"]["values"], (len(edge.FILL_MASK), -1)), what="fill-mask")
    for key in ("masked_positions", "top_k_ids", "top_k_pieces"):
        assert got[key].tolist() == want[key]["values"], key


def test_fill_mask_takes_no_text_pair(exports):
    """The "text pairs" cell of the pretrainer: refused, as fill-mask packs one text (no pair signature)."""
    assert set(exports["results"]["empty_pretrainer"]["empty"]) == {"serving_default", "serve_token_ids"}
