"""The contract matrix's columns "text pairs" and "from an albert-finetune folder" (issue 35).

Every fine-tuning head (`HEADS`, conftest.py) is fine-tuned once by albert-finetune (a few steps, the matrix's
tiny data), and each output folder is exported by albert-export, as a user does; the SavedModels then answer the
shared edge texts in a FRESH process (tensorflow + tensorflow_text only, tests/albert_tf/export_worker.py) and
are compared with the library loaded from the same folder (`albert_tf.load_task_model`). The encoder row is the
classifier_pair folder's encoder (`--head=encoder`); the pretrainer row is refused: a fine-tuned folder holds no
masked-LM head, and albert-export says so in one line (before, it exported a random fill-mask head).

Text pairs, by row:
- classifier_pair (trained on pairs, task_config.json "text_pairs": true): `serving_default` takes `text` and
  `text_pair` and answers as the library; its OpenVINO text model, which takes one text, is refused in one line
  naming --notext_signatures (issue 35 N8; tests/albert_tf/test_openvino_export.py has the OpenVINO cases).
- encoder and the classifiers trained on single texts: `serve_text_pair` answers as the library's pair packing.
- span_qa_v1/v2: the question and context are the pair: `serving_default` equals the library.
- multiple_choice: the context and its choices are the pairs: `serving_default` equals the library.
- tagging: refused (no pair signature: the tagging reader never packs a pair). The pretrainer's cell is
  tests/contracts/test_exports.py::test_fill_mask_takes_no_text_pair (refused the same way).

`test_python_answers_equal_the_saved_model` (issue 37 item 6): `model.answer(...)` in Python equals the SavedModel.
"""

import json
import os

import numpy as np
import pytest

from tests.contracts import edge_texts as edge
from tests.contracts.conftest import HEADS
from tests.contracts.test_exports import (RUNNER, WORKER, _run, _softmax, _span_reference, assert_close,
                                          word_starts)

ROWS_FINETUNED = ("encoder", "pretrainer", "classifier_single", "classifier_pair", "classifier_regression",
                  "classifier_mean_pooling", "span_qa_v1", "span_qa_v2", "multiple_choice", "tagging")
# The pretrainer's row has no cell here: fill-mask takes one text (its signatures: test_exports.py::test_empty).
ROWS_TEXT_PAIRS = tuple(row for row in ROWS_FINETUNED if row != "pretrainer")
HEAD_FLAG = {"encoder": "encoder", "pretrainer": "pretrainer", "span_qa_v1": "span_qa", "span_qa_v2": "span_qa",
             "multiple_choice": "multiple_choice", "tagging": "tagging"}
# The folder each row's export is made from.
FOLDER_OF = {row: row for row in HEADS}
FOLDER_OF.update(encoder="classifier_pair", pretrainer="classifier_pair")

@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, contract_assets, finetuned_heads):
    """head -> its albert-finetune output folder (`finetuned_heads`: one tiny run per head, read only); "root": a
    folder of this module's own for the exports."""
    return {"root": str(tmp_path_factory.mktemp("finetuned_exports")),
            "folders": {name: run["run"] for name, run in finetuned_heads.items()}, "spm": contract_assets["spm"]}


def _library(models, spm):
    """row -> (signature, inputs, the library's outputs) on the edge texts, from the models of the folders."""
    import tensorflow as tf

    texts, pairs = tf.constant(edge.TEXTS), tf.constant(edge.PAIRS)
    want = {}
    pair_model = models["classifier_pair"]
    ids = pair_model.preprocessor(texts, pairs)
    out = pair_model.encoder(ids)
    want["encoder"] = ("serve_text_pair", {"text": edge.TEXTS, "text_pair": edge.PAIRS},
                       {"pooled_output": out["pooled_output"].numpy(), "sequence_output": out["sequence_output"].numpy()})
    want["classifier_pair"] = ("serving_default", {"text": edge.TEXTS, "text_pair": edge.PAIRS},
                               {"logits": pair_model((texts, pairs)).numpy()})
    for row in ("classifier_single", "classifier_mean_pooling"):
        want[row] = ("serving_default", {"text": edge.TEXTS}, {"logits": models[row](texts).numpy()})
    want["classifier_regression"] = ("serving_default", {"text": edge.TEXTS},
                                     {"value": models["classifier_regression"](texts).numpy()[:, 0]})
    for row in ("span_qa_v1", "span_qa_v2"):
        want[row] = ("serving_default", {"text": edge.QUESTIONS, "text_pair": edge.CONTEXTS},
                     _span_reference(models[row], spm, edge.QUESTIONS, edge.CONTEXTS))
    mc = models["multiple_choice"]
    choices = [(c + ["ka", "lo mi", "vi"])[:mc.num_choices] for c in edge.CHOICES]
    logits = mc({"text": tf.constant(edge.CONTEXTS), "choices": tf.constant(choices)}).numpy()
    want["multiple_choice"] = ("serving_default", {"text": edge.CONTEXTS, "choices": choices},
                               {"probabilities": _softmax(logits)})
    tagger = models["tagging"]
    tag_ids = tagger.preprocessor(texts)
    starts = word_starts(spm, tag_ids["input_ids"].numpy(), tag_ids["input_mask"].numpy())
    want["tagging"] = ("serving_default", {"text": edge.TEXTS},
                       {"tag_ids": np.where(starts, tagger(texts).numpy().argmax(-1), -1)})
    return want


@pytest.fixture(scope="module")
def served(finetuned):
    """albert-export of every folder (and of the refusals), the library's answers, the worker's answers."""
    import albert_tf

    root, folders = finetuned["root"], finetuned["folders"]
    commands = {}
    for row in ROWS_FINETUNED:
        commands[row] = [f"--checkpoint={folders[FOLDER_OF[row]]}", f"--head={HEAD_FLAG.get(row, 'classifier')}",
                         f"--export_dir={os.path.join(root, 'exports', row)}"]
    # The encoder of a fine-tuned folder is read as a pretrained one: its length is the model's positions (64)
    # unless given; the fine-tuning's 32 is given here, as the library's preprocessor has it.
    commands["encoder"].append("--max_seq_length=32")
    with open(os.path.join(root, "commands.json"), "w", encoding="utf-8") as f:
        json.dump(commands, f)
    _run(["-c", RUNNER, os.path.join(root, "commands.json"), os.path.join(root, "binary.json")])
    with open(os.path.join(root, "binary.json"), encoding="utf-8") as f:
        binary = json.load(f)
    models = {name: albert_tf.load_task_model(folder) for name, folder in folders.items()}
    library = _library(models, finetuned["spm"])
    paths = {row: os.path.join(root, "exports", row, "1") for row in ROWS_FINETUNED if binary[row]["ok"]}
    jobs = [{"id": row, "path": paths[row], "signature": library[row][0], "inputs": library[row][1]}
            for row in library if row in paths]
    # Every row's signatures (a pair signature or none), from one call of its serving_default on no rows.
    jobs += [{"id": "empty_" + row, "path": path, "empty": True} for row, path in paths.items()]
    # The classifiers of single texts also take pairs (serve_text_pair).
    jobs += [{"id": "pair_" + row, "path": paths[row], "signature": "serve_text_pair",
              "inputs": {"text": edge.TEXTS, "text_pair": edge.PAIRS}}
             for row in ("classifier_single", "classifier_regression", "classifier_mean_pooling")]
    with open(os.path.join(root, "jobs.json"), "w", encoding="utf-8") as f:
        json.dump(jobs, f)
    _run([WORKER, os.path.join(root, "jobs.json"), os.path.join(root, "results.json")])
    with open(os.path.join(root, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    return {"binary": binary, "library": library, "results": results, "models": models, "paths": paths}


def _compare(got_outputs, want, row):
    for key, value in want.items():
        got = got_outputs[key]["values"]
        if np.asarray(value).dtype.kind in "iu":
            assert got == np.asarray(value).tolist(), (row, key)
            # (A tagger fine-tuned for 12 steps may put every word in one tag: then the -1 of the pieces that
            # are not a word's first must still be where the library has them.)
            assert len(set(np.asarray(value).ravel().tolist())) > 1, f"{row}/{key}: a constant would pass"
        else:
            assert_close(got, value, what=f"{row}/{key}")


def _check_row(served, row):
    """The export of the row's fine-tuned folder answers the edge texts as the library loaded from that folder."""
    outputs = served["results"][row]["outputs"]
    want = served["library"][row][2]
    if row.startswith("span_qa"):
        assert outputs["answer"]["values"] == want["answer"], row
        if row == "span_qa_v1":
            assert any(outputs["answer"]["values"]), row
        else:  # a v2 model fine-tuned 12 steps without dev answers nothing: its null odds are compared
            kept = [i for i, odds in enumerate(want["null_odds"]) if odds is not None and np.isfinite(odds)]
            assert len(kept) >= 3, want["null_odds"]
            assert_close(np.take(outputs["null_odds"]["values"], kept), np.take(want["null_odds"], kept), what=row)
        return
    _compare(outputs, want, row)


@pytest.mark.parametrize("row", ROWS_FINETUNED)
def test_export_from_an_albert_finetune_folder(served, row):
    """albert-export of albert-finetune's output folder = the library on that folder, in a fresh process."""
    result = served["binary"][row]
    if row == "pretrainer":  # a fine-tuned folder has no masked-LM head: refused in one line (not random fill-mask)
        assert not result["ok"] and "\n" not in result["error"], result
        assert result["error"].startswith("ValueError: --head=pretrainer: --checkpoint=") and \
            "has no masked-LM head" in result["error"], result
        return
    assert result == {"ok": True}, result
    _check_row(served, row)


@pytest.mark.parametrize("row", ROWS_TEXT_PAIRS)
def test_text_pairs(served, row):
    """Pairs are served as the library answers them, or refused (see the module docstring)."""
    signatures = served["results"]["empty_" + row]["empty"]
    if row == "tagging":  # refused: no pair signature, and serving_default takes `text` alone
        assert set(signatures) == {"serving_default", "serve_token_ids"}, signatures
        return
    if row in ("classifier_single", "classifier_regression", "classifier_mean_pooling"):
        import tensorflow as tf

        model = served["models"][row]
        logits = model((tf.constant(edge.TEXTS), tf.constant(edge.PAIRS))).numpy()
        want = {"value": logits[:, 0]} if row == "classifier_regression" else {"logits": logits}
        _compare(served["results"]["pair_" + row]["outputs"], want, row)
        return
    if row == "classifier_pair":  # trained on pairs (albert-finetune recorded it): serving_default takes the pair
        assert served["models"]["classifier_pair"].text_pairs is True
        assert served["models"]["classifier_single"].text_pairs is False
        assert served["results"][row]["inputs"] == ["text", "text_pair"]
        assert set(signatures) == {"serving_default", "serve_text_pair", "serve_token_ids"}, signatures
    _check_row(served, row)


@pytest.mark.parametrize("row", [row for row in ROWS_FINETUNED if row not in ("encoder", "pretrainer")])
def test_python_answers_equal_the_saved_model(served, row):
    """Issue 37 item 6: `model.answer(...)` on raw text in Python gives the SavedModel's outputs (labels, answers
    with character offsets, tags per word, probabilities), from the same serving code."""
    _, inputs, _ = served["library"][row]
    got = served["models"][FOLDER_OF[row]].answer(**inputs)
    want = served["results"][row]["outputs"]
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for key, value in want.items():
        if value["dtype"].startswith("float"):
            assert_close(got[key], value["values"], what=f"{row}/{key}")
        else:
            assert np.asarray(got[key]).tolist() == value["values"], (row, key)
