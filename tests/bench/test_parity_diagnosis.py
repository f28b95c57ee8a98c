"""bench.parity_diagnosis: its variants call real parity functions, its table is the mean per variant."""

import inspect
import json
import os

import pytest

from bench import parity_diagnosis as pd
from bench.systems import parity


@pytest.mark.parametrize("variant", sorted(pd.VARIANTS))
def test_every_variant_calls_a_parity_function_with_arguments_it_takes(variant):
    function, shared, extra = pd.VARIANTS[variant]
    params = inspect.signature(getattr(parity, function)).parameters
    assert set(extra) <= set(params), (variant, extra)
    if shared:  # the shared start goes in as our checkpoint or as the Hugging Face folder
        assert ("init_checkpoint" if function == "api" else "hf_dir") in params


def test_summary_gives_each_seed_and_the_mean():
    rows = [{"variant": "hf", "seed": 1, "final": {"accuracy": 0.5}},
            {"variant": "hf", "seed": 0, "final": {"accuracy": 0.4}},
            {"variant": "api", "seed": 0, "final": {"accuracy": 0.3}}]
    table = pd.summary(rows, ["api", "hf", "api_peak"]).splitlines()
    assert table[2] == "| api | 1 | 0.300 | 0.300 |"
    assert table[3] == "| hf | 2 | 0.400 / 0.500 | 0.450 |"  # seeds in order
    assert len(table) == 4  # a variant without rows is left out


def test_task_file_names_the_missing_cache(tmp_path):
    os.makedirs(tmp_path / "tasks" / "topic_abc")
    with pytest.raises(FileNotFoundError, match="run bench.finetune_parity first"):
        pd.task_file(str(tmp_path), "topic")
    (tmp_path / "tasks" / "topic_abc" / "ids.npz").write_bytes(b"")
    assert pd.task_file(str(tmp_path), "topic").endswith(os.path.join("topic_abc", "ids.npz"))


def test_recorded_rows_are_well_formed():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "results", "parity_diagnosis.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert rows and all(r["variant"] in pd.VARIANTS for r in rows)
    for r in rows:  # one score per epoch, the last is the final one
        assert r["epochs"][-1] == r["final"] and 0.0 <= r["final"]["accuracy"] <= 1.0
