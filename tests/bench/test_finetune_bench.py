"""The fine-tuning group of bench.run: plan, costs, table, and ours at a tiny shape.

Peers (keras-hub, torch) are not imported: CI installs only the test extra.
"""

import json
import sys

import pytest

from bench import run
from bench.systems import common, finetune


def test_plan_has_every_system_once_in_bfloat16_and_smoke_is_tiny():
    full = run.finetune_plan("sp.model", "s.json")
    assert [m.system for m in full] == ["albert-tf fit", run.FINETUNE_BUCKETED, "keras-hub fit", "Hugging Face"]
    assert {m.kwargs["precision"] for m in full} == {"bfloat16"}
    assert {(m.kwargs["batch"], m.kwargs["shape"]) for m in full} == {(32, "base")}
    assert [m.kwargs.get("feed") for m in full[:2]] == ["fit", "finetune"]
    assert {m.kwargs["shape"] for m in run.finetune_plan("sp.model", "s.json", smoke=True)} == {"tiny"}
    assert all("sentences_file" not in m.key for m in full)


def test_batch_costs_hand_worked():
    shape = finetune.SHAPES["base"]
    costs = finetune.batch_costs(shape, [[10, 30], [20, 20, 20]])
    assert costs["padded_tokens"] == pytest.approx((2 * 30 + 3 * 20) / 5)
    assert costs["real_tokens"] == pytest.approx(100 / 5)
    want = (2 * 3 * common.forward_flops(shape, 30, None) + 3 * 3 * common.forward_flops(shape, 20, None)) / 5
    assert costs["gflop_per_example"] == pytest.approx(want / 1e9)


def test_random_batches_cover_the_pool_once_per_pass():
    batches = finetune.random_batches(10, 5, seed=0, count=4)
    assert sorted(batches[0].tolist() + batches[1].tolist()) == list(range(10))
    assert sorted(batches[2].tolist() + batches[3].tolist()) == list(range(10))
    assert [b.tolist() for b in batches] == [b.tolist() for b in finetune.random_batches(10, 5, 0, 4)]


def _measured(system, function, values, **fields):
    m = run.Measurement("finetune", system, "finetune", function, dict(precision="bfloat16", batch=32, warmup=2,
                                                                       steps=4, shape="base"))
    m.runs = [dict(per_s=v, peak_rss_mb=900.0, **fields) for v in values]
    return m


def test_section_shows_ratios_side_by_side_and_the_predicted_gain():
    rows = [_measured("albert-tf fit", "ours", [4.0, 5.0, 6.0], padded_tokens=110.0, gflop_per_example=60.0),
            _measured(run.FINETUNE_BUCKETED, "ours", [8.0, 6.0, 9.0], padded_tokens=62.0, gflop_per_example=30.0),
            _measured("Hugging Face", "hf", [4.0, 3.0, 3.0], padded_tokens=110.0, gflop_per_example=60.0)]
    text = "\n".join(run.finetune_section(rows))
    assert f"| {run.FINETUNE_BUCKETED} | bfloat16 | 8.00 | 8.00, 6.00, 9.00 | n/a | 62.0 |" in text
    assert "**2.67x**" in text  # median 8.0 / median 3.0
    assert "2.00x, 2.00x, 3.00x" in text  # per repetition: 8/4, 6/3, 9/3
    assert "predicted 2.00x" in text and "measured **1.60x**" in text  # 60/30; 8.0/5.0
    assert run.finetune_section([]) == []
    for m, cpu in zip(rows, (1.0, 3.0, 2.0)):
        for r in m.runs:
            r["per_cpu_s"] = cpu
    text = "\n".join(run.finetune_section(rows))
    assert "per CPU-second (medians): **1.50x**" in text and "per CPU-second 3.00x" in text


def test_ours_runs_both_feeds_at_a_tiny_shape(tmp_path):
    from tests.albert_tf import task_testlib

    spm = task_testlib.train_tiny_spm(str(tmp_path))
    words = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don"]
    sentences = [" ".join(words[(i + k) % 8] for k in range(2 + (7 * i) % 30)) for i in range(16)]
    path = tmp_path / "sentences.json"
    path.write_text(json.dumps(sentences))
    results = {}
    for feed in ("fit", "finetune"):
        m = run.Measurement("finetune", feed, "finetune", "ours", dict(
            precision="float32", spm_path=spm, sentences_file=str(path), batch=8, warmup=1, steps=2,
            feed=feed, shape="tiny"))
        run.run_one(m, timeout=300, python=sys.executable)
        assert not m.errors, m.errors
        results[feed] = m.runs[0]
    for r in results.values():
        assert r["examples"] == 16 and r["per_s"] > 0 and r["cpu_s"] > 0 and r["real_tokens"] == pytest.approx(
            results["fit"]["real_tokens"])
    # Sorted into two batches of similar length, the pass pads less than random batches.
    assert results["finetune"]["padded_tokens"] < results["fit"]["padded_tokens"]
