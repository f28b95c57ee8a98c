"""The fine-tuning group of bench.run: plan, costs, table, and ours at a tiny shape.

Peers (keras-hub, torch) are not imported: CI installs only the test extra.
"""

import json
import sys

import pytest

from bench import plan as P
from bench import report, run
from bench.systems import common, finetune


def test_plan_gives_every_system_the_same_batches_and_smoke_is_tiny():
    default = P.finetune_plan(False, "sp.model", "pool.json")
    assert [(m.system, P.table(m)) for m in default] == [
        ("albert-tf fit", P.GROUPED), ("keras-hub fit", P.GROUPED), ("Hugging Face", P.GROUPED),
        (P.HF_COMPILED, P.GROUPED)]
    assert {m.precision for m in default} == {"bfloat16"}
    assert {(m.kwargs["batch"], m.kwargs["shape"], m.kwargs["steps"], m.kwargs["warmup"]) for m in default} == {
        (32, "base", 20, 2)}
    full = P.finetune_plan(True, "sp.model", "pool.json")
    assert {P.table(m) for m in full} == {P.GROUPED, P.PADDED}
    assert [m.system for m in full if not P.in_ratios(m)] == [P.FINETUNE_BUCKETED]
    assert {m.kwargs["shape"] for m in P.plan("smoke", "sp.model", "pool.json") if m.group == "finetune"} == {"tiny"}
    assert all("pool_file" not in m.key for m in full) and len({m.key for m in full}) == len(full)


def test_batch_costs_hand_worked():
    shape = finetune.SHAPES["base"]
    costs = finetune.batch_costs(shape, [[10, 30], [20, 20, 20]])
    assert costs["padded_tokens"] == pytest.approx((2 * 30 + 3 * 20) / 5)
    assert costs["real_tokens"] == pytest.approx(100 / 5)
    want = (2 * 3 * common.forward_flops(shape, 30, None) + 3 * 3 * common.forward_flops(shape, 20, None)) / 5
    assert costs["gflop_per_example"] == pytest.approx(want / 1e9)


def _measured(system, function, values, **fields):
    m = P.Measurement("finetune", system, "finetune", function, dict(precision="bfloat16", batch=32, warmup=2,
                                                                     steps=4, shape="base", order=common.GROUPED))
    m.runs = [dict(per_s=v, peak_rss_mb=900.0, rep=i, **fields) for i, v in enumerate(values)]
    return m


def test_section_pairs_ours_with_each_peer_per_repetition_and_per_cpu_second():
    rows = [_measured("albert-tf fit", "ours", [4.0, 5.0, 6.0], padded_tokens=62.0, gflop_per_example=30.0),
            _measured(P.FINETUNE_BUCKETED, "ours", [8.0, 6.0, 9.0], padded_tokens=50.0, gflop_per_example=25.0),
            _measured("Hugging Face", "hf", [4.0, 3.0, 3.0], padded_tokens=62.0, gflop_per_example=30.0)]
    rows[1].kwargs["feed"] = "finetune"
    text = "\n".join(report.finetune_section(rows, 3))
    assert (f"| {P.FINETUNE_BUCKETED} | tensorflow | albert-finetune's own batches, each padded to its longest row | "
            "8.00 | 8.00, 6.00, 9.00 | n/a | 50.0 |") in text
    # albert-tf fit / HF: 4/4, 5/3, 6/3 -> median 1.67, range 1.00-2.00 (level: includes 1.0).
    assert "| level (1.67x; 1.00-2.00x) | 3 | level |" in text
    assert P.FINETUNE_BUCKETED + " (tensorflow" not in text  # other batches: in the table, in no ratio
    assert report.finetune_section([], 3) == []
    for m, cpu in zip(rows, (3.0, 5.0, 1.0)):
        for r in m.runs:
            r["per_cpu_s"] = cpu
    text = "\n".join(report.finetune_section(rows, 3))
    assert "Ratios per CPU-second" in text and "| **3.00x** (3.00-3.00x) | 3 | ours ahead |" in text


def _pool(tmp_path, sentences, batch):
    path = tmp_path / "pool.json"
    lengths = [len(s.split()) for s in sentences]
    path.write_text(json.dumps({"sentences": sentences, "lengths": lengths, "batch": batch,
                                common.GROUPED: common.length_grouped_batches(lengths, batch, 0),
                                common.RANDOM: common.random_batches(len(sentences), batch, 0)}))
    return str(path)


def test_ours_runs_both_feeds_at_a_tiny_shape(tmp_path):
    from tests.albert_tf import task_testlib

    spm = task_testlib.train_tiny_spm(str(tmp_path))
    words = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don"]
    sentences = [" ".join(words[(i + k) % 8] for k in range(2 + (7 * i) % 30)) for i in range(16)]
    path = _pool(tmp_path, sentences, 8)
    results = {}
    for feed in ("fit", "finetune"):
        m = P.Measurement("finetune", feed, "finetune", "ours", dict(
            precision="float32", spm_path=spm, pool_file=path, batch=8, warmup=0, steps=2,
            feed=feed, order=common.RANDOM, shape="tiny"))
        run.run_one(m, timeout=300, python=sys.executable)
        assert not m.errors, m.errors
        results[feed] = m.runs[0]
    for r in results.values():
        assert r["examples"] == 16 and r["per_s"] > 0 and r["cpu_s"] > 0 and r["real_tokens"] == pytest.approx(
            results["fit"]["real_tokens"])
    # Sorted into two batches of similar length, the pass pads less than random batches.
    assert results["finetune"]["padded_tokens"] < results["fit"]["padded_tokens"]
