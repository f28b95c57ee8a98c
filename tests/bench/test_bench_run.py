"""bench.run and bench.plan: FLOP and parameter counts, the plans, the worker round trip with threads, the
budget's partial results, and the run file's tables.

Needs neither torch nor keras-hub (CI's main environment has only the test extra): the peers' modules are
never imported here.
"""

import json
import os
import sys

import pytest

from bench import estimate
from bench import plan as P
from bench import report, run, stats
from bench.systems import common, threads


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


@pytest.mark.parametrize("preset,seq", [("albert_base_v2", 128), ("bert_large", 512), ("tiny", 32)])
def test_forward_flops_equal_the_sum_over_the_models_matmuls(preset, seq):
    shape = common.model_shape(preset)
    want = sum(2 * m * k * n for m, k, n in _matmuls(shape, seq, 20))
    assert common.forward_flops(shape, seq, 20) == pytest.approx(want)
    assert common.training_flops(shape, seq, 20) == pytest.approx(3 * want)


def test_albert_base_training_flops_match_the_issue():
    # Issue 10 quotes 67.6 GFLOP per training sequence at length 128.
    assert common.training_flops(common.model_shape("base"), 128, 20) / 1e9 == pytest.approx(67.6, abs=0.05)


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


def test_cpu_kind_from_the_flags():
    assert common.cpu_kind({"flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]}) == "amx"
    assert common.cpu_kind({"flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile"]}) == "avx512-bf16"
    assert common.cpu_kind({"flags": ["avx2", "avx512f"]}) == "avx512"
    assert common.cpu_kind({"flags": ["avx2"]}) == "avx2" and common.cpu_kind({"flags": []}) == "other"


# ------------------------------------------------------------------- plans
@pytest.mark.parametrize("name", P.PLANS)
def test_plans_have_unique_keys_and_bind_to_their_systems_functions(name):
    rows = P.plan(name, "sp.model", "pool.json")
    assert len({m.key for m in rows}) == len(rows)
    expected = {"levers": {"matmul", "train", "infer", "finetune"}, "serving": {"latency", "sweep"}}
    assert {m.group for m in rows} >= expected.get(name, {"matmul", "train", "infer", "text", "finetune"})
    import importlib
    import inspect

    for m in rows:  # every system module imports without its framework (imported inside the functions)
        function = getattr(importlib.import_module(f"bench.systems.{m.module}"), m.function)
        inspect.signature(function).bind(**m.kwargs)
        assert function.frameworks is not None  # wrapped in threads.uses


def test_default_plan_is_bfloat16_and_compares_the_same_work():
    rows = P.plan("default", "sp.model", "pool.json")
    assert {m.precision for m in rows} == {"bfloat16"}
    assert {m.system for m in rows if m.group == "train"} == {"albert-tf step", "keras-hub fit", "Hugging Face",
                                                              P.HF_COMPILED}
    assert min(m.kwargs["steps"] for m in rows if m.group == "train") >= 20
    text = [m for m in rows if m.group == "text"]
    # Random batches for everyone; every peer sorts each batch's rows, as our task model's buckets do.
    assert {m.kwargs["feed"] for m in text} == {common.RANDOM}
    sorted_table = [m for m in text if P.table(m) == P.SORTED]
    assert {m.kwargs.get("sort_rows") for m in sorted_table if not P.is_ours(m)} == {P.SORT_ROWS}
    assert {m.kwargs.get("tokenizer") for m in sorted_table if m.module == "onnx_runtimes"} == {"openvino", "hf"}
    assert all(m.kwargs.get("padding") == "longest" for m in rows if "padding" in m.kwargs)
    # Packing: our export packed (sorted table) and the same model padded.
    assert {(m.system, P.table(m)) for m in text if m.module == "ours_openvino"} == {
        (P.OURS_OPENVINO, P.SORTED), (P.OURS_OPENVINO_PADDED, P.PADDED)}
    finetune = [m for m in rows if m.group == "finetune"]
    assert {m.kwargs["order"] for m in finetune} == {common.GROUPED}
    assert [m.kwargs.get("compile", False) for m in finetune if m.function == "hf"] == [False, True]


def test_a_cpus_kind_picks_the_plans_precision():
    assert [P.kind_precision(k) for k in ("amx", "avx512-bf16", "avx512", "avx2", "other")] == [
        "bfloat16", "bfloat16", "float32", "float32", "float32"]
    with pytest.raises(ValueError, match="'float16'"):
        P.plan("default", "s", "p", "float16")


def test_float32_default_plan_adds_the_levers_and_the_peers_that_lead_without_bfloat16():
    rows = P.plan("default", "sp.model", "pool.json", "float32")
    assert {m.precision for m in rows} == {"float32"}
    systems = {(m.group, m.system) for m in rows}
    # Ours with XLA beside ours without; ONNX Runtime, plain and fused, for serving and raw text.
    assert {("train", "albert-tf step"), ("train", P.TRAIN_XLA), ("infer", P.OURS), ("infer", P.INFER_XLA),
            ("infer", P.OURS_OPENVINO), ("infer", P.ONNXRUNTIME), ("infer", P.ONNXRUNTIME_FUSED),
            ("text", P.ONNXRUNTIME), ("text", P.OURS_OPENVINO)} <= systems
    xla = {m.system: m.kwargs["xla"] for m in rows if m.system in (P.TRAIN_XLA, P.INFER_XLA, "albert-tf step")}
    assert xla == {P.TRAIN_XLA: True, P.INFER_XLA: True, "albert-tf step": False}
    fused = [m for m in rows if m.system == P.ONNXRUNTIME_FUSED]
    assert [m.kwargs.get("fused") for m in fused] == [True]
    # The headline pairs exist: ours (with and without XLA) against torch.compile'd Hugging Face and ONNX Runtime.
    pairs = {(a.system, b.system) for a, b in P.pairs(rows)}
    assert {("albert-tf step", P.HF_COMPILED), (P.TRAIN_XLA, P.HF_COMPILED), (P.OURS_OPENVINO, P.ONNXRUNTIME_FUSED),
            (P.OURS_OPENVINO, P.OPENVINO_FROM_TORCH), (P.INFER_XLA, P.ONNXRUNTIME)} <= pairs
    assert len({m.key for m in rows}) == len(rows)


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_every_default_plan_serves_against_the_peers_at_their_best(precision):
    infer = {m.system: m for m in P.plan("default", "s", "p", precision) if m.group == "infer"}
    assert infer[P.HF_COMPILED].kwargs["compile"] is True and infer[P.HF_COMPILED].function == "infer"
    assert infer[P.OPENVINO_FROM_TORCH].kwargs["source"] == "torch"
    assert (P.ONNXRUNTIME in infer) is (precision == "float32")  # ONNX Runtime has no bfloat16


def test_full_plan_adds_float32_xla_large_and_the_other_tables():
    rows = P.plan("full", "sp.model", "pool.json")
    assert {m.kwargs["seq"] for m in rows if m.group == "train"} == {128, 512}
    assert {m.kwargs["batch"] for m in rows if m.group == "infer"} == {1, 8, 32}
    assert {(m.precision, m.kwargs["xla"]) for m in rows if m.system == "albert-tf step"} == {
        ("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)}
    assert {P.table(m) for m in rows if m.group == "text"} == {P.SORTED, P.PADDED, P.GROUPED}
    assert {m.system for m in rows if m.group == "large"} == {"albert_large_v2", "bert_large"}
    assert {m.kwargs["dropout"] for m in rows if m.group == "large"} == {P.LARGE_DROPOUT}
    bucketed = [m for m in rows if m.system == P.FINETUNE_BUCKETED]
    assert bucketed and not any(P.in_ratios(m) for m in bucketed)


def test_smoke_plan_is_the_default_plan_at_the_tiny_shape():
    default, smoke = P.plan("default", "s", "p"), P.plan("smoke", "s", "p")
    assert [(m.group, m.system) for m in smoke] == [(m.group, m.system) for m in default]
    for m in smoke:
        if m.group == "matmul":
            assert m.kwargs["tiny"]
        else:
            assert "tiny" in (m.kwargs.get("shape"), m.kwargs.get("preset")) and m.kwargs["steps"] == 2


def test_default_plan_fits_65_to_75_minutes_at_five_repetitions():
    import dataclasses

    rows = [dataclasses.replace(m, skip="") for m in P.plan("default", "s", "p")]  # as with every peer installed
    assert 60 <= estimate.expected_minutes(rows, P.DEFAULT_REPS) <= 75
    assert estimate.expected_minutes(rows, 1) < estimate.expected_minutes(rows, 5)


def test_pairs_only_within_a_table_precision_and_xla_setting():
    def row(system, precision="bfloat16", xla=None, batch=8, **kw):
        kwargs = dict(precision=precision, batch=batch, seq=128, **({"xla": xla} if xla is not None else {}), **kw)
        return P.Measurement("train", system, "ours" if system.startswith("albert") else "hf", "x", kwargs)

    ours, ours_xla, ours32 = row("albert-tf step", xla=False), row("albert-tf step", xla=True), row(
        "albert-tf step", "float32", xla=False)
    hf, hf32, other_batch = row("Hugging Face"), row("Hugging Face", "float32"), row("Hugging Face", batch=32)
    kh_xla = row("keras-hub fit", xla=True)
    kh_xla.module = "kerashub"
    got = {(a.key, b.key) for a, b in P.pairs([ours, ours_xla, ours32, hf, hf32, other_batch, kh_xla])}
    assert got == {(ours.key, hf.key), (ours_xla.key, hf.key), (ours32.key, hf32.key), (ours_xla.key, kh_xla.key)}


def test_rows_skip_with_a_note_when_a_peer_is_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("openvino", "onnxruntime") else real(name, *a))
    rows = [m for m in P.plan("full", "sp.model", "pool.json") if P.runtime(m) in ("openvino", "onnxruntime")]
    assert rows and all(m.skip.startswith("not installed: ") for m in rows)
    logged = []
    run.run_all(rows[:2], reps=2, timeout=1, python="no-such-python", log=logged.append)
    assert not rows[0].runs and not rows[0].errors and len(logged) == 2 and "skipped" in logged[0]


# ---------------------------------------------------------------- running
def test_worker_round_trip_records_the_repetition_and_errors():
    ok = P.Measurement("matmul", "machine", "common", "cpu_description", {})
    run.run_one(ok, timeout=120, python=sys.executable, rep=3, n_threads=1)
    assert not ok.errors and ok.runs[0]["cores"] == os.cpu_count() and ok.runs[0]["rep"] == 3
    assert ok.runs[0]["peak_rss_mb"] > 0
    bad = P.Measurement("matmul", "machine", "common", "no_such_function", {})
    run.run_one(bad, timeout=120, python=sys.executable, rep=1)
    assert not bad.runs and "no_such_function" in bad.errors[0] and bad.errors[0].startswith("rep 2: exit 1")


def test_a_worker_sets_and_reports_tensorflows_threads():
    # matmul.tensorflow_rates at the smoke shapes, in a fresh process with 1 thread (not the default 2).
    m = P.Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates",
                      dict(precision="float32", reps=1, xla=False, tiny=True))
    run.run_one(m, timeout=300, python=sys.executable, n_threads=1)
    assert not m.errors, m.errors
    assert m.runs[0]["threads"] == {"tensorflow_intra_op": 1, "tensorflow_inter_op": 1}
    assert threads.mismatches(m.runs[0]["threads"], 1) == {}
    assert threads.mismatches(m.runs[0]["threads"], 2) == {"tensorflow_intra_op": 1, "tensorflow_inter_op": 1}


def test_budget_stops_the_run_and_the_run_file_marks_what_was_not_measured(tmp_path):
    rows = [P.Measurement("matmul", "machine", "common", "cpu_description", {}),
            P.Measurement("train", "albert-tf step", "common", "cpu_description", {})]
    why = run.run_all(rows, reps=3, timeout=120, python=sys.executable, log=lambda s: None, budget_s=0.0)
    assert why.startswith("budget of 0 minutes spent in repetition 1 of 3") and not rows[0].runs
    why = run.run_all(rows, reps=2, timeout=120, python=sys.executable, log=lambda s: None, budget_s=None)
    assert why == "" and [len(m.runs) for m in rows] == [2, 2]
    rows[1].runs = [dict(per_s=2.0, rep=0)]
    rows[1].kwargs = dict(precision="bfloat16", batch=8, seq=128)
    text = report.render(rows, _header(reps=2, stopped="budget of 1 minutes spent"))
    assert "**PARTIAL RUN**: 1 of 2 measurements lack repetitions (budget of 1 minutes spent)" in text
    assert "## Not measured" in text and f"| {rows[1].key} | 1 of 2 | budget of 1 minutes spent |" in text
    # A saved partial run renders the same from its JSON alone.
    path = tmp_path / "kind.json"
    path.write_text(run.portable_json({"header": _header(reps=2, stopped="budget of 1 minutes spent"),
                                       "measurements": [dict(vars(m)) for m in rows]}, str(tmp_path)))
    assert run.main(["--render_only", str(path)]) == 0
    assert (tmp_path / "kind.md").read_text() == text


def test_extend_adds_repetitions_of_the_chosen_groups_to_a_saved_run(tmp_path, monkeypatch):

    kw = dict(precision="float32", batch=8, seq=128)
    rows = [_measured("train", "albert-tf step", "ours", kw, [2.0, 2.2]),
            _measured("train", "Hugging Face", "hf", kw, [2.1, 2.0]),
            _measured("infer", "albert-tf", "ours", kw, [5.0, 5.1])]
    ran = []  # the worker itself is tested above; here, which repetitions of which rows run

    def fake_run_one(m, timeout, python, rep=0, n_threads=None):
        ran.append((m.system, rep))
        m.runs.append(dict(per_s=2.0, peak_rss_mb=1000.0, rep=rep))

    monkeypatch.setattr(run, "run_one", fake_run_one)
    monkeypatch.setattr(run, "text_files", lambda cache_dir: None)  # the text rows' files: made by bench.run
    cpu = common.cpu_description()
    path = tmp_path / "kind.json"
    path.write_text(run.portable_json({"header": dict(_header(reps=2), cpu=cpu, cpu_kind=common.cpu_kind(cpu)),
                                       "measurements": [dict(vars(m)) for m in rows]}, str(tmp_path)))
    assert run.main(["--extend", str(path), "--reps", "1", "--only", "train"]) == 0
    assert ran == [("albert-tf step", 2), ("Hugging Face", 2)]
    measurements, header = run.load(str(path))
    assert [[r["rep"] for r in m.runs] for m in measurements] == [[0, 1, 2], [0, 1, 2], [0, 1]]
    assert header["reps"] == 3 and header["extensions"][0]["only"] == ["train"]
    assert header["extensions"][0]["command"] == f"python -m bench.run --extend {path} --reps 1 --only train"
    text = (tmp_path / "kind.md").read_text()
    assert "Extended by `python -m bench.run --extend" in text and "1 more repetition(s) of train" in text
    ratio = stats.paired(measurements[0], measurements[1])  # three paired repetitions now: a verdict
    assert ratio.n == 3 and ratio.verdict == "level" and f"| {ratio.text()} | 3 |" in text
    assert f"| {measurements[2].key} | 2 of 3 |" in text  # the row left out says it lacks a repetition
    # --fill reruns a missing repetition (here the infer row's third) of the rows named, with the saved run's
    # <cache_dir> paths pointed at this machine's cache folder; nothing else runs and no repetition is added.
    ran.clear()
    measurements[2].kwargs["spm_path"] = "<cache_dir>/sp.model"
    measurements[2].errors = ["rep 3: exit 1: cut"]
    path.write_text(run.portable_json({"header": header, "measurements": [dict(vars(m)) for m in measurements]},
                                      str(tmp_path)))
    assert run.main(["--extend", str(path), "--fill", "infer:albert-tf", "--cache_dir", str(tmp_path / "c")]) == 0
    measurements, header = run.load(str(path))
    assert ran == [("albert-tf", 2)] and header["reps"] == 3 and [r["rep"] for r in measurements[2].runs] == [0, 1, 2]
    assert measurements[2].errors == [] and header["extensions"][1]["filled"] == [f"{measurements[2].key} rep 3"]
    assert "reran the missing repetition(s) infer:albert-tf" in (tmp_path / "kind.md").read_text()
    # Another machine's run is not extended.
    other = dict(_header(reps=2), cpu=dict(cpu, model="Other CPU"), cpu_kind=common.cpu_kind(cpu))
    path.write_text(run.portable_json({"header": other, "measurements": [dict(vars(m)) for m in rows]},
                                      str(tmp_path)))
    with pytest.raises(SystemExit, match="Repetitions of one run come from one machine"):
        run.main(["--extend", str(path), "--reps", "1"])


def test_levers_plan_pulls_each_lever_against_the_default_in_float32():
    rows = P.plan("levers", "sp.model", "pool.json")
    assert {m.precision for m in rows} == {"float32"} and all(P.is_ours(m) for m in rows if m.group != "matmul")
    got = {(m.group, m.system.rsplit(" (", 1)[0], P.lever(m)) for m in rows if m.group != "matmul"}
    assert got == {(g, s, lever) for g, s in (("train", "albert-tf step"), ("infer", P.OURS), ("infer", P.FROZEN))
                   for lever in P.LEVERS} | {("finetune", "albert-tf fit", lever) for lever in ("default", "oneDNN")}
    for m in rows:
        assert m.env.get("TF_ENABLE_ONEDNN_OPTS") in (("0", "1") if m.module != "matmul" or m.system == "tensorflow"
                                                      else (None,))
        if m.kwargs.get("frozen"):  # the frozen graph gets XLA the way TF Serving can: auto-clustering
            assert ("TF_XLA_FLAGS" in m.env) == ("XLA" in P.lever(m)) and not m.kwargs["xla"]
    pairs = P.lever_pairs(rows)
    assert len(pairs) == 3 * 3 + 1 and all(P.lever(b) == "default" and P.table(a) == P.table(b) for a, b in pairs)
    assert {(a.system, b.system) for a, b in pairs} >= {("albert-tf step (XLA + oneDNN)", "albert-tf step (default)")}
    assert P.pairs(rows) == []  # no peer: the ratios are the levers'


@pytest.mark.parametrize("name", ["default", "full", "smoke", "serving", "levers"])
def test_tensorflow_rows_run_with_the_cpu_kinds_settings_and_other_runtimes_without(name):
    """What albert-tf's binaries set before TensorFlow starts (albert_tf.cpu), every TensorFlow row gets on that
    kind (keras-hub's too: the same lever for the same runtime); the levers plan sets its own."""
    from albert_tf.cpu import TENSORFLOW_DEFAULTS

    for kind in ("avx2", "avx512-bf16", "amx", "other"):
        rows, bare = P.plan(name, "sp.model", "pool.json", "float32", kind), P.plan(name, "sp.model", "pool.json",
                                                                                   "float32")
        assert [m.kwargs for m in rows] == [m.kwargs for m in bare]
        for m, b in zip(rows, bare):
            tf_serving = m.kwargs.get("frozen") or m.function == "saved_model_text"  # TF Serving runs that graph
            binary = P.runtime(m) == "tensorflow" and not tf_serving
            expected = {**TENSORFLOW_DEFAULTS.get(kind, {}), **b.env} if binary else b.env
            assert m.env == expected, (kind, m.key)
    avx2 = P.plan(name, "s", "p", "float32", "avx2")
    saved_model_rows = [m for m in avx2 if m.kwargs.get("frozen") or m.function == "saved_model_text"]
    assert saved_model_rows and (name == "levers" or all("TF_ENABLE_ONEDNN_OPTS" not in m.env
                                                         for m in saved_model_rows))
    tensorflow_rows = [m for m in avx2 if P.runtime(m) == "tensorflow" and m not in saved_model_rows]
    assert tensorflow_rows and all(m.env.get("TF_ENABLE_ONEDNN_OPTS") in ("0", "1") for m in tensorflow_rows)
    if name != "levers":
        assert {m.env["TF_ENABLE_ONEDNN_OPTS"] for m in tensorflow_rows} == {"1"}
        assert any(m.module == "kerashub" or m.function == "kerashub" for m in tensorflow_rows)  # keras-hub too


def test_a_levers_run_file_shows_what_each_lever_gains():
    kw = dict(precision="float32", batch=8, seq=128)
    rows = [_measured("train", f"albert-tf step ({lever})", "ours", dict(kw, xla="XLA" in lever), values)
            for lever, values in (("default", [1.0, 1.0, 1.0]), ("XLA", [1.1, 1.2, 1.15]))]
    rows[0].env, rows[1].env = dict(P.NO_ONEDNN), dict(P.NO_ONEDNN)
    text = "\n".join(report.ratio_table(rows))
    assert "For a lever: the row with it / the same system with none" in text
    assert ("| albert-tf step (XLA) (tensorflow, float32, XLA, oneDNN off) | albert-tf step (default) (tensorflow, "
            "float32, no XLA, oneDNN off) | **1.15x** (1.10-1.20x) | 3 | ours ahead |") in text


def test_default_output_is_the_cpu_kinds_run_file_only_for_a_whole_plan(tmp_path):
    assert run.default_output("levers", "", str(tmp_path), "avx2") == os.path.join(run.RESULTS_DIR, "avx2-levers.md")
    assert run.default_output("serving", "", str(tmp_path), "avx2") == os.path.join(run.RESULTS_DIR,
                                                                                 "avx2-serving.md")
    assert run.default_output("default", "", str(tmp_path), "amx") == os.path.join(run.RESULTS_DIR, "amx.md")
    assert run.default_output("full", "", str(tmp_path), "avx512-bf16").endswith("results/avx512-bf16.md")
    assert run.default_output("smoke", "", str(tmp_path), "amx").startswith(str(tmp_path))
    assert run.default_output("default", "text", str(tmp_path), "amx") == str(tmp_path / "amx-default-text.md")


def test_saved_results_name_the_cache_folder_not_this_machine(tmp_path):
    cache = str(tmp_path / "bench cache")
    text = run.portable_json({"kwargs": {"spm_path": os.path.join(cache, "sp.model"), "steps": 3}}, cache + os.sep)
    assert str(tmp_path) not in text
    assert json.loads(text) == {"kwargs": {"spm_path": "<cache_dir>" + os.sep + "sp.model", "steps": 3}}


def test_arguments_are_checked_in_one_line():
    for argv, message in ((["--reps", "0"], "--reps must be >= 1"), (["--only", "trian"], "unknown groups")):
        with pytest.raises(SystemExit):
            run.parse_args(argv)


# ------------------------------------------------------------------ tables
def _header(reps=3, **extra):
    return dict(command="python -m bench.run", date="today", minutes=1.0, load_start=0.5, load_end=0.6,
                cpu={"model": "Test CPU", "cores": 2, "flags": ["avx512f", "avx512_bf16"]}, plan="default",
                versions={"tensorflow": "2.21.0"}, reps=reps, threads=2, **extra)


def _measured(group, system, module, kwargs, values, **extra):
    m = P.Measurement(group, system, module, "f", kwargs)
    m.runs = [dict(per_s=v, peak_rss_mb=1000.0, rep=i, **extra) for i, v in enumerate(values) if v is not None]
    return m


def test_training_table_medians_paired_ratios_and_mfu_per_repetition():
    flops = common.training_flops(common.model_shape("base"), 128, 20)
    matmul = P.Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates", {"precision": "bfloat16"})
    # The limit in each repetition: the best shape of that repetition (400, 200, 400 GFLOP/s).
    matmul.runs = [{"tf 4096x4096x4096": 400.0, "tf 1024x768x3072": 100.0, "rep": 0},
                   {"tf 4096x4096x4096": 150.0, "tf 1024x768x3072": 200.0, "rep": 1},
                   {"tf 4096x4096x4096": 400.0, "rep": 2}]
    kw = dict(precision="bfloat16", xla=False, batch=8, seq=128)
    ours = _measured("train", "albert-tf step", "ours", kw, [3.0, 4.0, 5.0])
    peer = _measured("train", "keras-hub fit", "kerashub", kw, [2.0, 2.0, 1.0])
    text = report.render([matmul, ours, peer], _header())
    mfu = sorted(100 * r * flops / 1e9 / limit for r, limit in ((3.0, 400.0), (4.0, 200.0), (5.0, 400.0)))
    # The header records no clock: no hardware peak (n/a), the GEMM probe's share beside it.
    assert f"| 4.00 | 3.00, 4.00, 5.00 | n/a | {mfu[1]:.0f}% ({mfu[0]:.0f}-{mfu[2]:.0f}%) |" in text
    # Paired: 3/2, 4/2, 5/1 -> median 2.00, range 1.50-5.00; not the ratio of medians (4/2 = 2.00 here too).
    assert "| **2.00x** (1.50-5.00x) | 3 | ours ahead |" in text
    assert "GEMM probe per repetition, bfloat16: 400, 200, 400 GFLOP/s" in text
    assert "Test CPU" in text and "Kind: avx512-bf16" in text and "No outlier rule" in text
    assert "Threads: 2 for every framework" in text and "Every run reported these." in text


def test_a_range_across_one_is_level_and_pairing_skips_missing_repetitions():
    kw = dict(precision="bfloat16", xla=False, batch=8, seq=128)
    ours = _measured("train", "albert-tf step", "ours", kw, [1.1, None, 0.9, 1.2])
    peer = _measured("train", "Hugging Face", "hf", kw, [1.0, 1.0, 1.0, 1.0])
    lines = "\n".join(report.ratio_table([ours, peer]))
    assert "level (1.10x; 0.90-1.20x) | 3 | level |" in lines  # repetition 1 of ours failed: 3 pairs
    peer.runs = peer.runs[:2]
    assert "too few repetitions (1.10x)" in "\n".join(report.ratio_table([ours, peer]))


def test_threads_line_lists_rows_that_ran_with_other_threads():
    kw = dict(precision="bfloat16", xla=False, batch=8, seq=128)
    ours = _measured("train", "albert-tf step", "ours", kw, [1.0], threads={"tensorflow_intra_op": 0})
    assert "Rows that reported other threads: albert-tf step tensorflow_intra_op=0." in report.threads_line(
        _header(), [ours])
    assert "not set or recorded" in report.threads_line(dict(_header(), threads=None), [ours])


def test_text_tables_pair_ours_with_peers_given_the_same_sorting_and_show_packing():
    def row(system, module, values, **kw):
        return _measured("text", system, module, dict(precision="bfloat16", feed=common.RANDOM, warmup=2,
                                                      steps=10, **kw), values, padded_tokens=40.0, real_tokens=36.0)

    rows = [row("albert-tf task model", "ours", [30.0, 32.0, 31.0], rows_per_bucket=8),
            row(P.OURS_OPENVINO, "ours_openvino", [60.0, 66.0, 63.0]),
            row(P.OURS_OPENVINO_PADDED, "ours_openvino", [30.0, 30.0, 30.0], pack_tokens=False),
            row("Hugging Face", "hf", [20.0, 20.0, 20.0], sort_rows=8),
            row(P.OPENVINO_OV_TOKENIZER, "onnx_runtimes", [40.0, 40.0, 45.0], sort_rows=8, runtime="openvino",
                tokenizer="openvino")]
    for r in rows[-1].runs:
        r["same_tokens"] = True
    text = "\n".join(report.text_section(rows, 3))
    sorted_part, rest = text.split(f"### {P.PADDED[0].upper() + P.PADDED[1:]}")
    assert "rows sorted, 8 at a time" in sorted_part and "packed tokens (no padding)" in sorted_part
    assert "| **1.55x** (1.50-1.60x) | 3 | ours ahead |" in sorted_part  # task model / HF: 30/20, 32/20, 31/20
    assert "| **1.50x** (1.40-1.65x) | 3 | ours ahead |" in sorted_part  # OV export / OpenVINO: 60/40, 66/40, 63/45
    assert P.OURS_OPENVINO_PADDED not in sorted_part
    assert f"{P.OURS_OPENVINO} / {P.OURS_OPENVINO_PADDED}: **2.10x** (2.00-2.20x); repetitions: 3; reading: " \
        "ahead" in rest
    assert ("openvino-tokenizers' ids against Hugging Face's AlbertTokenizer on the first timed batch: "
            f"{P.OPENVINO_OV_TOKENIZER} (random batches): the same ids.") in rest
    for r in rows[-1].runs:
        r.update(same_tokens=False, rows_differing=0.25, extra_tokens=0.5)
    assert "other ids in 25% of the rows, +0.50 tokens per row." in "\n".join(report.text_section(rows, 3))


def test_old_runs_render_with_repetitions_in_order(tmp_path):
    # A run saved before repetitions and threads were recorded (bench/results/amx.json's format).
    old = {"header": {k: v for k, v in _header().items() if k not in ("plan", "threads")},
           "measurements": [dict(group="train", system="albert-tf step", module="ours", function="train_step",
                                 kwargs=dict(precision="bfloat16", xla=False, batch=8, seq=128),
                                 runs=[{"per_s": 2.0}, {"per_s": 3.0}], errors=[], skip="")]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    measurements, header = run.load(str(path))
    assert [r["rep"] for r in measurements[0].runs] == [0, 1]
    text = report.render(measurements, header)
    assert "Threads: not set or recorded in this run" in text and "| 2.50 | 2.00, 3.00, - |" in text


def test_every_run_file_is_its_json_rendered():
    # Nothing by hand: each bench/results/<cpu-kind>.md (and <cpu-kind>-<group>.md, a group's rerun) is exactly
    # what bench.report renders from its .json.
    known = ("amx", "avx512-bf16", "avx512", "avx2", "other")
    kinds = [name[:-5] for name in os.listdir(run.RESULTS_DIR)
             if name.endswith(".json") and any(name[:-5] == k or name[:-5].startswith(k + "-") for k in known)]
    assert kinds
    for kind in kinds:
        measurements, header = run.load(os.path.join(run.RESULTS_DIR, kind + ".json"))
        with open(os.path.join(run.RESULTS_DIR, kind + ".md"), encoding="utf-8") as f:
            assert f.read() == report.render(measurements, header), f"bench/results/{kind}.md was edited by hand"
        measurements[0].runs = measurements[0].runs[:-1]  # a changed run no longer matches its file
        with open(os.path.join(run.RESULTS_DIR, kind + ".md"), encoding="utf-8") as f:
            assert f.read() != report.render(measurements, header)


def test_load_warning_only_when_the_load_exceeded_the_cores():
    assert "favour ours" in report.load_warning(_header(load_max=2.5))
    assert report.load_warning(_header(load_max=1.9)) == ""
