"""The fine-tuning group of bench.run: plan, costs, table, and ours at a tiny shape.

Peers (keras-hub, torch) are not imported: CI installs only the test extra.
"""

import json
import sys

import pytest

from bench import run
from bench.systems import common, finetune


def test_plan_has_every_system_in_both_comparisons_in_bfloat16_and_smoke_is_tiny():
    full = run.finetune_plan("sp.model", "pool.json")
    assert [(m.system, run.comparison(m)) for m in full] == [
        (run.FINETUNE_BUCKETED, run.BEST_USE), ("albert-tf fit", run.BEST_USE), ("keras-hub fit", run.BEST_USE),
        ("Hugging Face", run.BEST_USE), ("albert-tf fit", run.SAME_PADDING), ("keras-hub fit", run.SAME_PADDING),
        ("Hugging Face", run.SAME_PADDING)]
    assert {m.kwargs["precision"] for m in full} == {"bfloat16"}
    assert {(m.kwargs["batch"], m.kwargs["shape"], m.kwargs["steps"]) for m in full} == {(32, "base", 20)}
    assert {m.kwargs["shape"] for m in run.finetune_plan("sp.model", "pool.json", smoke=True)} == {"tiny"}
    assert all("pool_file" not in m.key for m in full) and len({m.key for m in full}) == len(full)


def test_batch_costs_hand_worked():
    shape = finetune.SHAPES["base"]
    costs = finetune.batch_costs(shape, [[10, 30], [20, 20, 20]])
    assert costs["padded_tokens"] == pytest.approx((2 * 30 + 3 * 20) / 5)
    assert costs["real_tokens"] == pytest.approx(100 / 5)
    want = (2 * 3 * common.forward_flops(shape, 30, None) + 3 * 3 * common.forward_flops(shape, 20, None)) / 5
    assert costs["gflop_per_example"] == pytest.approx(want / 1e9)


def _measured(system, function, values, **fields):
    m = run.Measurement("finetune", system, "finetune", function, dict(precision="bfloat16", batch=32, warmup=2,
                                                                       steps=4, shape="base"))
    m.runs = [dict(per_s=v, peak_rss_mb=900.0, **fields) for v in values]
    return m


def test_section_shows_ratios_side_by_side_in_each_comparison():
    rows = [_measured("albert-tf fit", "ours", [4.0, 5.0, 6.0], padded_tokens=110.0, gflop_per_example=60.0),
            _measured(run.FINETUNE_BUCKETED, "ours", [8.0, 6.0, 9.0], padded_tokens=62.0, gflop_per_example=30.0),
            _measured("Hugging Face", "hf", [4.0, 3.0, 3.0], padded_tokens=110.0, gflop_per_example=60.0)]
    rows[0].kwargs["order"] = common.RANDOM
    rows[2].kwargs["order"] = common.GROUPED
    same = _measured("Hugging Face", "hf", [2.0, 2.0, 2.0])
    same.kwargs["order"] = common.RANDOM
    text = "\n".join(run.finetune_section(rows + [same]))
    best_part, same_part = text.split("### Same padding")
    assert f"| {run.FINETUNE_BUCKETED} | bfloat16 | 8.00 | 8.00, 6.00, 9.00 | n/a | 62.0 |" in best_part
    assert "**2.67x**" in best_part  # median 8.0 / median 3.0
    assert "2.00x, 2.00x, 3.00x" in best_part  # per repetition: 8/4, 6/3, 9/3
    assert "**2.50x**" in same_part and "2.00x, 2.50x, 3.00x" in same_part  # 5.0 / 2.0; 4/2, 5/2, 6/2
    assert run.finetune_section([]) == []
    for m, cpu in zip(rows, (1.0, 3.0, 2.0)):
        for r in m.runs:
            r["per_cpu_s"] = cpu
    text = "\n".join(run.finetune_section(rows))
    assert "per CPU-second (medians): **1.50x**" in text


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
        m = run.Measurement("finetune", feed, "finetune", "ours", dict(
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
