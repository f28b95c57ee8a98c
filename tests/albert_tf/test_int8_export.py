"""albert-export --format=openvino --quantize=int8: NNCF int8 exports of every OpenVINO head, their cost re-measured.

Three albert-finetune runs (tiny config, a few steps) give a single-text classifier (glue/sst-2), a pair
classifier (csv with text_b) and a regression head (csv); the pair folder's encoder is the encoder row. Each is
exported by albert-export as a user does: the classifiers from their own task data (no calibration flag: the
train split their run recorded calibrates, the dev split measures), the encoder from --calibration_file. The
figures the export writes (assets/quantization.json) are then re-derived here independently: the float and the
int8 OpenVINO models, compiled in float32 inference, answer the dev file read with the csv module, and the
accuracy / Pearson / cosine is computed with NumPy. CI runs this file in the [openvino] environment.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ov = pytest.importorskip("openvino", reason="--quantize=int8 needs the [openvino] extra")
pytest.importorskip("openvino_tokenizers", reason="--quantize=int8 needs the [openvino] extra")
pytest.importorskip("nncf", reason="--quantize=int8 needs the [openvino] extra")

from tests.albert_tf import finetune_heads  # noqa: E402
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = {  # folder -> (--task, data maker, extra albert-finetune flags)
    "single": ("glue/sst-2", lambda d: finetune_heads.sst2(d, n_train=60, n_dev=30), []),
    "pair": ("csv", lambda d: finetune_heads.pairs(d, n_train=60, n_dev=30), ["--text_b_column=text_b"]),
    "regression": ("csv", lambda d: finetune_heads.regression(d, n_train=60, n_dev=30), ["--regression"]),
}
# Each export: (name, folder, extra albert-export flags).
EXPORTS = [
    ("single_int8", "single", ["--head=classifier", "--quantize=int8", "--int8_max_accuracy_drop=100"]),
    ("single_float", "single", ["--head=classifier"]),
    ("pair_int8", "pair", ["--head=classifier", "--quantize=int8", "--notext_signatures",
                           "--int8_max_accuracy_drop=100"]),
    ("regression_int8", "regression", ["--head=classifier", "--quantize=int8", "--int8_max_accuracy_drop=100"]),
    ("encoder_int8", "pair", ["--head=encoder", "--quantize=int8", "--calibration_file={calibration}"]),
    ("encoder_float", "pair", ["--head=encoder"]),
    ("regression_float", "regression", ["--head=classifier"]),
    ("pair_float", "pair", ["--head=classifier", "--notext_signatures"]),
]
# Several runs of a binary's main in one process (each main is what the console script runs).
_LOOP = r"""
import json, sys
from absl import flags
from albert_tf.bin import {module}
{module}._define_flags()
for argv in json.load(open(sys.argv[1])):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["albert-{module}", *argv])
    {module}.main(["albert-{module}"])
"""


def _loop(module, runs, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(runs, f)
    done = subprocess.run([sys.executable, "-c", _LOOP.format(module=module), path], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """name -> the version folder albert-export wrote; also the data folders and albert-export's log."""
    root = str(tmp_path_factory.mktemp("int8"))
    spm = train_tiny_spm(root)
    config = os.path.join(root, "albert_config.json")
    tiny_config(hidden_size=32, intermediate_size=64).to_json_file(config)
    data, folders, runs = {}, {}, []
    for name, (task, make, extra) in RUNS.items():
        data[name] = make(os.path.join(root, "data", name))
        folders[name] = os.path.join(root, "runs", name)
        runs.append([f"--task={task}", f"--data_dir={data[name]}", f"--output_dir={folders[name]}",
                     f"--albert_config_file={config}", f"--spm_model_file={spm}", "--max_seq_length=32",
                     "--train_batch_size=8", "--learning_rate=2e-3", "--num_train_epochs=4", "--warmup_step=2",
                     "--strategy=default", "--mixed_precision=float32", "--seed=1", "--do_train", "--nodo_eval",
                     "--nodo_predict", "--pooling=mean", *extra])
    _loop("finetune", runs, os.path.join(root, "finetune.json"))
    calibration = os.path.join(root, "calibration.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        f.writelines(f"{text}\n" for text in finetune_heads._texts(40, 9))
    exported, argvs = {}, []
    for name, folder, extra in EXPORTS:
        target = os.path.join(root, "exports", name)
        argvs.append([f"--checkpoint={folders[folder]}", f"--export_dir={target}", "--format=openvino",
                      *(flag.format(calibration=calibration) for flag in extra)])
        exported[name] = os.path.join(target, "1")
    log = _loop("export", argvs, os.path.join(root, "export.json"))
    return {"root": root, "exports": exported, "data": data, "folders": folders, "calibration": calibration,
            "log": log, "spm": spm}


def _compiled(path, precision="f32"):
    import openvino_tokenizers  # noqa: F401  (the tokenizer's ops)

    return ov.Core().compile_model(os.path.join(path, "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": precision})


def _report(path):
    with open(os.path.join(path, "assets", "quantization.json"), encoding="utf-8") as f:
        return json.load(f)


def _rows(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t" if path.endswith(".tsv") else ","))


def _pearson(x, y):
    return float(np.corrcoef(np.asarray(x, np.float64), np.asarray(y, np.float64))[0, 1])


def _int8_ops(path):
    """(FakeQuantize ops, int8 weight constants as arrays) in the saved IR."""
    import openvino_tokenizers  # noqa: F401  (the text models' tokenizer ops: reading without them crashes)

    # One Core for the test session: a model with extension ops outliving the Core that read it crashes.
    global _CORE
    _CORE = _CORE or ov.Core()
    ops = _CORE.read_model(os.path.join(path, "model.xml")).get_ops()
    return (sum(op.get_type_name() == "FakeQuantize" for op in ops),
            [op.get_data() for op in ops if op.get_type_name() == "Constant" and op.get_output_element_type(0) == ov.Type.i8])


_CORE = None


def _quantizer_input_ranks(path):
    """The input rank of each FakeQuantize in the transformer blocks of the saved IR that feeds a dense layer
    (a MatMul by a weight, not attention's matmuls)."""
    import openvino_tokenizers  # noqa: F401

    def feeds_dense_layer(op):
        return any(t.get_node().get_type_name() == "MatMul" for t in op.output(0).get_target_inputs())

    return [op.input(0).get_source_output().get_partial_shape().rank.get_length()
            for op in _CORE.read_model(os.path.join(path, "model.xml")).get_ops()
            if op.get_type_name() == "FakeQuantize" and "transformer" in op.get_friendly_name()
            and feeds_dense_layer(op)]


@pytest.mark.parametrize("name", ["single_int8", "pair_int8", "regression_int8", "encoder_int8"])
def test_int8_model_holds_int8_matmuls(exports, name):
    fake, weights = _int8_ops(exports["exports"][name])
    # The dense layers of the blocks (q, k, v, attention output: 32 x 32; FFN in and out: 32 x 64, 64 x 32) hold
    # int8 weights, each once: the tiny config's 2 layers share one set (sharing="all"), so 6 kernels, not 12;
    # the encoder row adds its pooler (32 x 32; the classifiers pool by mean). No two int8 constants are equal.
    blocks = [w for w in weights if w.shape in ((32, 32), (32, 64), (64, 32))]
    assert len(blocks) == 6 + (name == "encoder_int8"), [w.shape for w in weights]
    assert len({(w.shape, w.tobytes()) for w in weights}) == len(weights), [w.shape for w in weights]
    # Each layer quantizes at least the 4 distinct inputs of its dense layers.
    assert fake >= 2 * 4, fake
    # The dense layers' inputs reach their quantizers rank-3 ([1, tokens, hidden]), not as a 2-D [tokens, hidden]
    # matrix, on which OpenVINO left every quantizer a stand-alone node (openvino_form): q, k, v and FFN in and
    # out in each layer (the attention output's quantizer sits on the attention's rank-4 output).
    ranks = _quantizer_input_ranks(exports["exports"][name])
    assert len(ranks) >= 2 * 4 and set(ranks) == {3}, ranks
    assert _int8_ops(exports["exports"][name.replace("int8", "float")]) == (0, [])


def test_single_text_classifier_cost_is_its_dev_accuracy(exports):
    """Calibrated on the run's own train split (no flag), measured on its dev split: both accuracies re-derived."""
    path = exports["exports"]["single_int8"]
    report = _report(path)
    dev = _rows(os.path.join(exports["data"]["single"], "dev.tsv"))
    texts, labels = [r["sentence"] for r in dev], [r["label"] for r in dev]
    got = {}
    for kind in ("float", "int8"):
        answers = _compiled(exports["exports"][f"single_{kind}"])({"text": np.array(texts)})
        got[kind] = 100.0 * float(np.mean(np.array([str(x) for x in answers["label"]]) == np.array(labels)))
    cost = report["cost"]
    assert cost["metric"] == "accuracy" and cost["examples"] == len(dev)
    assert cost["float"] == pytest.approx(got["float"], abs=1e-9)
    assert cost["int8"] == pytest.approx(got["int8"], abs=1e-9)
    assert cost["drop"] == pytest.approx(got["float"] - got["int8"], abs=1e-9)
    assert report["calibration"]["examples"] == 60 and "train split" in report["calibration"]["source"]


def _pair_inputs(pre, rows):
    ids = pre([r["text"] for r in rows], [r["text_b"] for r in rows])
    return {key: value.numpy().astype(np.int32) for key, value in ids.items()}


def test_pair_classifier_is_calibrated_on_pairs_and_measured_on_dev_pairs(exports):
    import albert_tf

    model = albert_tf.load_task_model(exports["folders"]["pair"])
    dev = _rows(os.path.join(exports["data"]["pair"], "dev.csv"))
    inputs = _pair_inputs(model.preprocessor, dev)
    names = model.label_names
    labels = np.array([names.index(r["label"]) for r in dev])
    got = {kind: 100.0 * float(np.mean(np.argmax(
        _compiled(exports["exports"][f"pair_{kind}"])(inputs)["logits"], -1) == labels)) for kind in ("float", "int8")}
    cost = _report(exports["exports"]["pair_int8"])["cost"]
    assert (cost["float"], cost["int8"]) == (pytest.approx(got["float"], abs=1e-9), pytest.approx(got["int8"],
                                                                                                  abs=1e-9))


def test_regression_cost_is_pearson(exports):
    dev = _rows(os.path.join(exports["data"]["regression"], "dev.csv"))
    texts, targets = np.array([r["text"] for r in dev]), [float(r["label"]) for r in dev]
    got = {kind: 100.0 * _pearson(_compiled(exports["exports"][f"regression_{kind}"])({"text": texts})["logits"][:, 0],
                                  targets) for kind in ("float", "int8")}
    cost = _report(exports["exports"]["regression_int8"])["cost"]
    assert cost["metric"] == "pearson"
    assert cost["float"] == pytest.approx(got["float"], abs=1e-6) and cost["int8"] == pytest.approx(got["int8"],
                                                                                                     abs=1e-6)


def test_encoder_cost_is_pooled_cosine_on_the_calibration_file(exports):
    with open(exports["calibration"], encoding="utf-8") as f:
        texts = np.array([line.rstrip("\n") for line in f])
    a, b = (_compiled(exports["exports"][f"encoder_{kind}"])({"text": texts})["pooled_output"]
            for kind in ("float", "int8"))
    cosine = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    report = _report(exports["exports"]["encoder_int8"])
    assert report["calibration"] == {"examples": 40, "source": f"--calibration_file={exports['calibration']}"}
    assert report["cost"]["mean_cosine"] == pytest.approx(float(np.mean(cosine)), abs=1e-6)
    assert report["cost"]["min_cosine"] == pytest.approx(float(np.min(cosine)), abs=1e-6)
    assert 0.9 < report["cost"]["min_cosine"] <= 1.0 + 1e-6  # int8 keeps the direction of the pooled output


def test_drop_past_the_threshold_is_refused_and_nothing_is_written(exports, tmp_path):
    """The same export as single_int8 with a threshold just under its measured drop: refused in one line naming
    the flag and both figures, and no version folder appears."""
    drop = _report(exports["exports"]["single_int8"])["cost"]["drop"]
    target = tmp_path / "refused"
    done = subprocess.run(
        [sys.executable, "-m", "albert_tf.bin.export", f"--checkpoint={exports['folders']['single']}",
         f"--export_dir={target}", "--format=openvino", "--head=classifier", "--quantize=int8",
         f"--int8_max_accuracy_drop={drop - 0.01}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("albert-export: --quantize=int8: int8 vs float on 30 texts"), last
    assert f"--int8_max_accuracy_drop={drop - 0.01:g}" in last and "nothing was written" in last
    assert not os.path.exists(target / "1")


def test_cost_as_this_cpu_serves_it(exports):
    """Where OpenVINO's CPU plugin infers in bfloat16 by default (AVX-512 BF16, AMX), the report also holds the
    figures of both graphs inferring as this CPU serves them (`on_this_cpu`), re-derived here in that precision;
    on a float32 CPU it has no such part. bfloat16 results move with the batch's composition (the export
    measures in batches of 16, this test in one call), so accuracy may differ by one dev text."""
    served = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    reports = {name: _report(exports["exports"][name])["cost"] for name in ("single_int8", "encoder_int8")}
    if served == "f32":
        assert all("on_this_cpu" not in cost for cost in reports.values())
        return
    dev = _rows(os.path.join(exports["data"]["single"], "dev.tsv"))
    texts, labels = np.array([r["sentence"] for r in dev]), np.array([r["label"] for r in dev])
    cost = reports["single_int8"]["on_this_cpu"]
    assert cost["precision"] == served and cost["examples"] == len(dev)
    for kind in ("float", "int8"):
        answers = _compiled(exports["exports"][f"single_{kind}"], served)({"text": texts})["label"]
        accuracy = 100.0 * float(np.mean(np.array([str(x) for x in answers]) == labels))
        assert cost[kind] == pytest.approx(accuracy, abs=100.0 / len(dev) + 1e-9), kind
    assert cost["drop"] == pytest.approx(cost["float"] - cost["int8"], abs=1e-9)
    with open(exports["calibration"], encoding="utf-8") as f:
        calibration = np.array([line.rstrip("\n") for line in f])
    a, b = (_compiled(exports["exports"][f"encoder_{kind}"], served)({"text": calibration})["pooled_output"]
            for kind in ("float", "int8"))
    cosine = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    cost = reports["encoder_int8"]["on_this_cpu"]
    assert cost["precision"] == served
    assert cost["mean_cosine"] == pytest.approx(float(np.mean(cosine)), abs=1e-2)
    assert 0.9 < cost["min_cosine"] <= 1.0 + 1e-6
