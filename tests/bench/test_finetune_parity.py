"""bench/finetune_parity.py: the report from hand-made runs, the log parser, the ids digest, and a smoke run
of the whole harness (every system, both starts, 1-2 steps) when the peers (the bench extra) are installed."""

import importlib.util
import os

import numpy as np
import pytest

from bench import finetune_parity as fp
from bench.systems import parity


def _row(task, start, system, rate, seed, value, metric="accuracy"):
    run = fp.Run(task, start, system, rate, seed)
    return dict(key=run.key, task=task, start=start, system=system, learning_rate=rate, seed=seed, metric=metric,
                final={metric: value}, epochs=[{metric: value}], seconds=10.0, data_digest="d")


def _journal(tmp_path, rows):
    journal = fp.Journal(str(tmp_path / "runs.jsonl"), "settings-1")
    for row in rows:
        journal.add(row)
    return journal


def test_rate_chosen_by_seed0_then_mean_and_spread_over_seeds(tmp_path):
    rows = [_row("t", "random", "hf", 1e-4, 0, 0.40), _row("t", "random", "hf", 1e-3, 0, 0.60),
            _row("t", "random", "hf", 1e-3, 1, 0.50), _row("t", "random", "hf", 1e-3, 2, 0.70),
            _row("t", "random", "api", 1e-4, 0, 0.55), _row("t", "random", "api", 1e-3, 0, 0.55)]
    journal = _journal(tmp_path, rows)
    assert fp.best_rate(journal, "t", "random", "hf", [1e-4, 1e-3]) == 1e-3
    assert fp.best_rate(journal, "t", "random", "api", [1e-4, 1e-3]) == 1e-4  # a tie keeps the smaller rate
    [api, hf] = fp.summary_rows(journal, ["t"], ["random"], ["api", "hf"], [1e-4, 1e-3], seeds=3)
    assert hf["values"] == [0.60, 0.50, 0.70]
    assert hf["mean"] == pytest.approx(0.60) and (hf["min"], hf["max"]) == (0.50, 0.70)
    assert hf["std"] == pytest.approx(np.std([0.6, 0.5, 0.7], ddof=1))
    assert hf["grid"] == {1e-4: 0.40, 1e-3: 0.60}
    assert api["values"] == [0.55] and api["std"] == 0.0
    # ours (api) is 5 points under Hugging Face: reported as missed against the 0.5-point target
    [line] = [x for x in fp.comparisons([api, hf]) if "Hugging Face" in x]
    assert "| -5.0 |" in line and "**missed**" in line


def test_recipe_runs_at_the_recipes_rate_and_is_compared_with_the_best_grid_rate(tmp_path):
    with open(os.path.join(fp.REPO_DIR, fp.RECIPE), encoding="utf-8") as f:
        [line] = [x for x in f if x.startswith("--learning_rate=")]
    rate = float(line.split("=")[1])
    assert fp.system_grid("recipe", [1e-4, 1e-3]) == [rate] and fp.system_grid("hf", [1e-4]) == [1e-4]
    rows = [_row("t", "random", "finetune", 1e-4, 0, 0.50), _row("t", "random", "finetune", 1e-3, 0, 0.62),
            _row("t", "random", "finetune", 1e-3, 1, 0.60), _row("t", "random", "recipe", rate, 0, 0.60),
            _row("t", "random", "recipe", rate, 1, 0.58)]
    summary = fp.summary_rows(_journal(tmp_path, rows), ["t"], ["random"], ["finetune", "recipe"], [1e-4, 1e-3],
                              seeds=2)
    [recipe] = [r for r in summary if r["system"] == "recipe"]
    assert recipe["learning_rate"] == rate and recipe["mean"] == pytest.approx(0.59)
    # 0.59 against the best grid rate's 0.61: -2.0 points, outside the 1-point target
    [line] = [x for x in fp.comparisons(summary) if "small_finetune.cfg" in x]
    assert "lr 0.001" in line and "| -2.0 |" in line and "**missed**" in line


def test_journal_reuses_rows_of_the_same_settings_only(tmp_path):
    path = tmp_path / "runs.jsonl"
    first = fp.Journal(str(path), "a")
    first.add(_row("t", "random", "hf", 1e-3, 0, 0.5))
    assert list(fp.Journal(str(path), "a").rows) == ["t/random/hf/lr=0.001/seed=0"]
    assert fp.Journal(str(path), "b").rows == {}
    done = []
    fp.run_all([fp.Run("t", "random", "hf", 1e-3, 0), fp.Run("t", "random", "hf", 1e-3, 1)],
               fp.Journal(str(path), "a"), lambda run: done.append(run.key) or _row("t", "random", "hf", 1e-3,
                                                                                     run.seed, 0.6), jobs=1)
    assert done == ["t/random/hf/lr=0.001/seed=1"]
    assert len(path.read_text().splitlines()) == 2


def test_pretrained_gain_against_targets():
    rows = [dict(task=t, start=s, system="api", mean=m, values=[m]) for t, s, m in
            (("topic", "random", 0.50), ("topic", "pretrained", 0.56), ("position", "random", 0.30),
             ("position", "pretrained", 0.31))]
    lines = fp.comparisons(rows)
    assert any("topic | pretrained - random" in x and "+6.0" in x and "| met" in x for x in lines)
    assert any("position | pretrained - random" in x and "+1.0" in x and "**missed**" in x for x in lines)


def test_epoch_scores_read_albert_finetune_log():
    log = ("I1201 12:00:01 callbacks.py:206] Epoch 1 dev: accuracy = 0.4000, eval_loss = 1.2000, "
           "num_examples = 600 (best so far: saved)\n"
           "I1201 12:00:09 callbacks.py:206] Epoch 2 dev: accuracy = 0.5500, eval_loss = 1.0e-01, "
           "num_examples = 600 (best accuracy 0.4000 kept)\n")
    assert fp.epoch_scores(log) == [{"accuracy": 0.4, "eval_loss": 1.2, "num_examples": 600.0},
                                    {"accuracy": 0.55, "eval_loss": 0.1, "num_examples": 600.0}]


def test_data_digest_sees_ids_segments_and_labels_not_padding():
    rng = np.random.default_rng(0)
    task = {}
    for split in ("train", "dev"):
        ids = rng.integers(5, 50, size=(4, 8)).astype("int32")
        mask = np.ones((4, 8), "int32")
        mask[:, 6:] = 0
        task.update({f"{split}_input_ids": ids, f"{split}_input_mask": mask,
                     f"{split}_segment_ids": np.zeros((4, 8), "int32"), f"{split}_labels": np.arange(4)})
    base = parity.data_digest(task)
    padded = dict(task, dev_input_ids=np.where(task["dev_input_mask"] == 1, task["dev_input_ids"], 0))
    assert parity.data_digest(padded) == base
    shorter = {k: (v[:, :6] if v.ndim == 2 else v) for k, v in task.items()}
    assert parity.data_digest(shorter) == base  # the same rows padded to another length
    for key in ("train_input_ids", "dev_segment_ids"):
        changed = {k: v.copy() for k, v in task.items()}
        changed[key][1, 2] += 1
        assert parity.data_digest(changed) != base, key
    assert parity.data_digest(dict(task, train_labels=np.array([0, 1, 3, 2]))) != base


def test_dev_scores_against_hand_values():
    assert parity.dev_scores(np.array([0, 1, 1]), np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]), False) == {
        "accuracy": pytest.approx(2 / 3)}
    scores = parity.dev_scores(np.array([0.0, 0.5, 1.0]), np.array([[0.1], [0.2], [0.9]]), True)
    assert scores["spearman"] == pytest.approx(1.0)
    x, y = np.array([0.0, 0.5, 1.0]), np.array([0.1, 0.2, 0.9])
    assert scores["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert parity.dev_scores(x, np.full((3, 1), 0.5), True) == {"pearson": 0.0, "spearman": 0.0}


_PEERS = [name for name in ("torch", "transformers", "keras_hub") if importlib.util.find_spec(name) is None]


@pytest.mark.skipif(bool(_PEERS), reason=f"the bench extra is not installed (missing: {', '.join(_PEERS)}); "
                    "CI installs only [test]")
def test_smoke_every_system_same_ids_and_converted_weights_match(tmp_path):
    settings = fp.Settings(config={}, max_seq_length=32, batch_size=16, epochs=1.0, train_examples=32,
                           dev_examples=16, smoke=True)
    systems = ["finetune", "api", "hf", "kerashub"]
    cache = str(tmp_path / "cache")
    out = fp.benchmark(["same_document"], systems, ["random"], seeds=1, grid=[1e-3], s=settings, cache=cache,
                       results=str(tmp_path / "parity"), jobs=1, threads=0, timeout=600, pretrain_steps=0,
                       in_process=True)
    task = out["tasks"]["same_document"]
    assert task["train_examples"] == 32 and task["dev_examples"] == 16
    rows = out["rows"]
    assert sorted(r["system"] for r in rows) == sorted(systems)
    for row in rows:
        assert row["metric"] == "accuracy" and 0.0 <= row["final"]["accuracy"] <= 1.0
        assert len(row["epochs"]) == 1 and row["learning_rate"] == 1e-3 and row["seed"] == 0
        if row["system"] != "finetune":
            assert row["data_digest"] == task["data_digest"], row["key"]
    # albert-finetune read the jsonl files itself: its saved preprocessor gives the same ids and labels
    assert out["binary_digests"] == {"same_document": task["data_digest"]}
    report = (tmp_path / "parity.md").read_text()
    for system in systems:
        assert f"| same_document | random | {fp.SYSTEM_NAMES[system]} | 0.001 |" in report
    assert len((tmp_path / "parity.jsonl").read_text().splitlines()) == 4
    # The pretrained start: our checkpoint -> albert-convert --to=huggingface -> transformers and keras-hub
    # compute what our encoder computes.
    ours = fp.prepare_pretrained(cache, settings.config, out["spm_model"], 0, smoke=True)
    hf_dir, checks = fp.convert_for_peers(ours, task["npz"], threads=0, in_process=True)
    assert checks["hf_matches"] and checks["kerashub_matches"] and checks["hf_equivalence_max_diff"] < 1e-4
    assert sorted(os.listdir(hf_dir))[:3] == ["config.json", "model.safetensors", "spiece.model"]
