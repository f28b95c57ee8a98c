"""bench.run: plan, FLOP and parameter counts, worker round trip, tables.

Needs neither torch nor keras-hub (CI installs only the test extra): the
peers' modules are never imported here.
"""

import json
import os
import sys

import pytest

from bench import run
from bench.systems import common


def _matmuls(shape, seq, preds):
    """The forward pass's matmuls, listed one by one as (m, k, n)."""
    h, e, i, v, n = (shape["hidden_size"], shape["embedding_size"], shape["intermediate_size"],
                     shape["vocab_size"], shape["num_hidden_layers"])
    heads = shape["num_attention_heads"]
    d = h // heads
    per_layer = ([(seq, h, h)] * 4                       # Q, K, V, output projections
                 + [(seq, d, seq)] * heads               # scores per head
                 + [(seq, seq, d)] * heads               # weighted values per head
                 + [(seq, h, i), (seq, i, h)])           # FFN
    out = per_layer * n + [(1, h, h)]                    # pooler
    if e != h:
        out.append((seq, e, h))                          # E -> H projection
    out += [(preds, h, e), (preds, e, v), (1, h, 2)]     # MLM transform, decoder; SOP
    return out


@pytest.mark.parametrize("preset,seq", [("albert_base_v2", 128), ("bert_large", 512)])
def test_forward_flops_equal_the_sum_over_the_models_matmuls(preset, seq):
    shape = common.model_shape(preset)
    want = sum(2 * m * k * n for m, k, n in _matmuls(shape, seq, 20))
    assert common.forward_flops(shape, seq, 20) == pytest.approx(want)
    assert common.training_flops(shape, seq, 20) == pytest.approx(3 * want)


def test_albert_base_training_flops_match_the_issue():
    # Issue 10 quotes 67.6 GFLOP per training sequence at length 128.
    assert common.training_flops(common.model_shape("albert_base_v2"), 128, 20) / 1e9 == pytest.approx(67.6, abs=0.05)


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_parameter_count_matches_the_built_model(sharing):
    import albert_tf

    cfg = albert_tf.AlbertConfig.tiny(sharing=sharing, num_hidden_groups=1 if sharing == "all" else 2,
                                      **({} if sharing == "all" else {"embedding_size": 32}))
    shape = {k: getattr(cfg, k) for k in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                                          "num_attention_heads", "intermediate_size",
                                          "max_position_embeddings", "type_vocab_size")}
    model = albert_tf.AlbertPretrainer(cfg)
    built = sum(int(v.numpy().size) for v in model.trainable_variables)
    assert common.parameter_count(shape, shared=sharing == "all") == built


def test_synthetic_batch_has_distinct_sorted_positions_inside_the_sequence():
    b = common.synthetic_pretraining_batch(4, 16, 5, 100)
    pos = b["masked_lm_positions"]
    assert pos.shape == (4, 5) and pos.min() >= 1 and pos.max() <= 14
    assert all(len(set(row)) == 5 and list(row) == sorted(row) for row in pos)
    assert b["input_ids"].min() >= 5 and b["input_ids"].max() < 100


def test_prose_filter():
    assert common._is_prose("Return the number of items in the queue.")
    assert not common._is_prose(">>> x = f(1)")
    assert not common._is_prose("An example:: T = TypeVar('T')")
    assert not common._is_prose("no full stop at the end")


def test_plans_cover_every_measure_and_keys_are_unique():
    quick = run.plan(True, "sp.model", "pool.json")
    full = run.plan(False, "sp.model", "pool.json")
    for p in (quick, full):
        assert len({m.key for m in p}) == len(p)
        assert {m.group for m in p} == {"matmul", "train", "infer", "text", "finetune", "large"}
        assert {m.system for m in p if m.group == "train"} == {
            "albert-tf step", "albert-tf fit", "keras-hub fit", "Hugging Face", run.HF_COMPILED}
        assert {m.system for m in p if m.group == "text"} >= {run.OPENVINO, run.ONNXRUNTIME}
    assert len(quick) < len(full)
    assert {m.kwargs["seq"] for m in full if m.group == "train"} == {128, 512}
    assert {m.kwargs["batch"] for m in full if m.group == "infer"} == {1, 8, 32}
    assert {(m.kwargs["precision"], m.kwargs["xla"]) for m in full if m.system == "albert-tf step"} == {
        ("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)}


@pytest.mark.parametrize("quick", [True, False])
def test_every_training_figure_times_at_least_20_steps(quick):
    rows = [m for m in run.plan(quick, "sp.model", "pool.json") if m.group in ("train", "large")]
    assert rows and min(m.kwargs["steps"] for m in rows) >= 20


def test_large_models_train_with_the_same_dropout():
    for quick in (True, False):
        large = run._large(quick, 4)
        assert {m.system for m in large} == {"albert_large_v2", "bert_large"}
        assert {m.kwargs["dropout"] for m in large} == {0.0}


def test_hugging_face_training_rows_run_the_masked_position_loss_eager_and_compiled():
    rows = [m for m in run.plan(False, "sp.model", "pool.json") if m.system.startswith("Hugging Face")
            and m.group == "train"]
    assert {(m.system, m.kwargs["compile"]) for m in rows} == {("Hugging Face", False), (run.HF_COMPILED, True)}
    assert all(m.module == "hf" and m.function == "train" for m in rows)


def test_onnx_rows_skip_with_a_note_when_the_runtime_is_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("openvino", "onnxruntime") else real(name, *a))
    rows = [m for m in run.plan(True, "sp.model", "pool.json") if m.module == "onnx_runtimes"
            or m.function == "onnx_text"]
    assert rows and all(m.skip.startswith("not installed: ") for m in rows)
    ran = []
    run.run_all(rows[:2], reps=2, timeout=1, python="no-such-python", log=ran.append)
    assert not rows[0].runs and not rows[0].errors and len(ran) == 2 and "skipped" in ran[0]
    assert run._spread(rows[0]) == rows[0].skip


def test_worker_round_trip_and_errors():
    ok = run.Measurement("matmul", "machine", "common", "cpu_description", {})
    run.run_one(ok, timeout=120, python=sys.executable)
    assert not ok.errors and ok.runs[0]["cores"] == os.cpu_count() and ok.runs[0]["peak_rss_mb"] > 0
    bad = run.Measurement("matmul", "machine", "common", "no_such_function", {})
    run.run_one(bad, timeout=120, python=sys.executable)
    assert not bad.runs and "no_such_function" in bad.errors[0] and bad.errors[0].startswith("exit 1")


def _measured(group, system, module, function, kwargs, values, **extra):
    m = run.Measurement(group, system, module, function, kwargs)
    m.runs = [dict(per_s=v, peak_rss_mb=1000.0, **extra) for v in values]
    return m


def test_tables_show_medians_mfu_and_ratios():
    base = common.model_shape("albert_base_v2")
    flops = common.training_flops(base, 128, 20)
    matmul = run.Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates", {"precision": "bfloat16"})
    matmul.runs = [{f"tf {m}x{k}x{n}": 100.0 for m, k, n in __import__("bench.systems.matmul").systems.matmul.SHAPES}]
    matmul.runs[0]["tf 2048x2048x2048"] = 400.0
    kw = dict(precision="bfloat16", xla=False, batch=8, seq=128)
    ours = _measured("train", "albert-tf step", "ours", "train_step", kw, [3.0, 4.0, 5.0])
    peer = _measured("train", "keras-hub fit", "kerashub", "train_fit", kw, [2.0, 2.0, 1.0])
    header = dict(command="python -m bench.run --quick", date="today", minutes=1.0, load_start=0.5,
                  load_end=0.6, cpu={"model": "Test CPU", "cores": 2, "flags": ["avx512f", "avx512_bf16"]},
                  versions={"tensorflow": "2.21.0"}, reps=3, data_note="cited")
    text = run.render([matmul, ours, peer], header)
    assert run.matmul_limits([matmul]) == {"bfloat16": 400.0}
    # median 4.0 seq/s x 67.6 GFLOP / 400 GFLOP/s = 68 %
    assert f"| 4.00 | 3.00, 4.00, 5.00 | {100 * 4.0 * flops / 1e9 / 400:.0f}% |" in text
    assert "**2.00x**" in text  # 4.0 / 2.0
    assert "Test CPU" in text and "AMX: no" in text and "avx512_bf16: yes" in text
    header["cpu"]["flags"] += ["amx_bf16", "amx_tile"]
    assert "AMX: yes" in run.render([matmul], header)


def test_mfu_limit_is_the_better_of_tensorflow_and_openvino_not_torch():
    tf_rates = run.Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates", {"precision": "bfloat16"})
    tf_rates.runs = [{"tf 4096x4096x4096": 400.0, "xla 4096x4096x4096": 200.0, "wall_s": 9.0}]
    ov = run.Measurement("matmul", "openvino", "onnx_runtimes", "matmul", {"precision": "bfloat16"})
    ov.runs = [{"openvino 4096x4096x4096": 450.0}, {"openvino 4096x4096x4096": 500.0}]
    torch_rates = run.Measurement("matmul", "torch", "matmul", "torch_rates", {"precision": "bfloat16"})
    torch_rates.runs = [{"torch 4096x4096x4096": 900.0}]
    assert run.matmul_limits([tf_rates, torch_rates]) == {"bfloat16": 400.0}
    assert run.matmul_limits([tf_rates, ov, torch_rates]) == {"bfloat16": 500.0}
    table = "\n".join(run.matmul_section([tf_rates, ov, torch_rates], run.matmul_limits([tf_rates, ov])))
    assert "| openvino (openvino) | bfloat16 | 500 |" in table and "| torch (torch) | bfloat16 | 900 |" in table


@pytest.mark.parametrize("quick", [True, False])
def test_plan_has_our_openvino_export_next_to_openvino(quick):
    rows = [m for m in run.plan(quick, "sp.model", "pool.json") if m.system in (run.OURS_OPENVINO,
                                                                                run.OURS_OPENVINO_PADDED)]
    infer = [m for m in rows if m.group == "infer"]
    assert [(m.module, m.function, m.kwargs["batch"], m.kwargs["seq"], m.kwargs["precision"], m.kwargs["hint"])
            for m in infer] == [("ours_openvino", "infer", 32, 128, "bfloat16", "LATENCY")]
    assert infer[0].kwargs["spm_path"] == "sp.model"
    text = [m for m in rows if m.group == "text"]
    assert all(m.function == "text" and m.kwargs["precision"] == "bfloat16" for m in text)
    # Packed tokens (the export's default) in both tables, padded as the peers on random batches.
    assert [(m.system, m.kwargs["feed"], run.comparison(m), m.kwargs.get("pack_tokens", True)) for m in text] == [
        (run.OURS_OPENVINO, common.GROUPED, run.BEST_USE, True), (run.OURS_OPENVINO, common.RANDOM, run.AS_SERVED, True),
        (run.OURS_OPENVINO_PADDED, common.RANDOM, run.AS_SERVED, False)]
    assert run._is_ours(run.OURS_OPENVINO) and run._is_ours(run.OURS_OPENVINO_PADDED)
    import inspect

    from bench.systems import ours_openvino  # numpy-only at import: the worker's call binds

    for m in rows:
        inspect.signature(getattr(ours_openvino, m.function)).bind(**m.kwargs)


def test_our_openvino_rows_skip_without_openvino(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    present = real("json")  # any spec: openvino counts as installed (CI's main environment has none)

    def only_tokenizers_missing(name, *a):
        if name == "openvino_tokenizers":
            return None
        return present if name == "openvino" else real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", only_tokenizers_missing)
    rows = {m.group: m for m in run.plan(True, "sp.model", "pool.json") if m.system == run.OURS_OPENVINO}
    assert rows["text"].skip == "not installed: openvino_tokenizers (pip install -e '.[bench]')"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    rows = [m for m in run.plan(True, "sp.model", "pool.json") if m.system == run.OURS_OPENVINO]
    assert rows and all(m.skip.startswith("not installed: openvino") for m in rows)


def test_check_lines_name_the_reference():
    kw = dict(precision="bfloat16", batch=32, seq=128)
    hf_row = _measured("infer", run.OPENVINO, "onnx_runtimes", "infer", kw, [1.0])
    hf_row.runs[0].update(max_diff_vs_hf=0.01, within_bf16_tolerance=True)
    ours = _measured("infer", run.OURS_OPENVINO, "ours_openvino", "infer", kw, [1.0])
    ours.runs[0].update(max_diff_vs_keras=0.02, within_bf16_tolerance=False)
    other = _measured("text", run.OURS_OPENVINO, "ours_openvino", "text", kw, [1.0])
    other.runs[0].update(max_diff_vs_keras=None, same_tokens=False, within_bf16_tolerance=False)
    lines = run.check_lines([hf_row, ours, other])
    assert lines[0] == f"Outputs against Hugging Face torch (float32) on one padded batch: {run.OPENVINO} bfloat16: " \
        "largest difference 0.01."
    assert lines[2] == (f"Outputs against our Keras encoder (float32) on one padded batch: {run.OURS_OPENVINO} "
                        "bfloat16: largest difference 0.02 (OUTSIDE bf16 tolerance); "
                        f"{run.OURS_OPENVINO} bfloat16: OTHER TOKENS than our TensorFlow preprocessor.")


def test_saved_results_name_the_cache_folder_not_this_machine(tmp_path):
    from bench.run import portable_json

    cache = str(tmp_path / "bench cache")
    text = portable_json({"kwargs": {"spm_path": os.path.join(cache, "sp.model"), "steps": 3}}, cache + os.sep)
    assert str(tmp_path) not in text
    assert json.loads(text) == {"kwargs": {"spm_path": "<cache_dir>" + os.sep + "sp.model", "steps": 3}}


@pytest.mark.parametrize("quick", [True, False])
def test_plan_measures_the_exported_frozen_graph_beside_ours(quick):
    rows = [m for m in run.plan(quick, "", "") if m.group == "infer" and m.kwargs.get("frozen")]
    assert [(m.module, m.kwargs["batch"], m.kwargs["precision"], m.kwargs["xla"]) for m in rows] == [
        ("ours", 32, "bfloat16", False)]


def test_select_keeps_groups_and_the_first_priority_classes_in_plan_order():
    rows = run.plan(True, "sp.model", "pool.json")
    top = run.select(rows, priorities=5)
    # TF's matmul limit, OpenVINO's at 4096, bf16 training, raw text, bf16 inference at batch 32.
    assert {m.group for m in top} == {"matmul", "train", "text", "infer"}
    assert all(m.kwargs.get("precision") == "bfloat16" and not m.kwargs.get("xla") for m in top
               if m.group in ("train", "infer")) and all(m.kwargs["batch"] == 32 for m in top if m.group == "infer")
    assert len([m for m in top if m.group == "text"]) == len([m for m in rows if m.group == "text"])
    assert top == [m for m in rows if m in top]  # the plan's order
    assert run.select(rows, only="text") == [m for m in rows if m.group == "text"]
    assert run.select(rows, only="text,infer", priorities=4) == [m for m in rows if m.group == "text"]
    assert run.select(rows) == list(rows)
