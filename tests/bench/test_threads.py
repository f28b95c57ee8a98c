"""bench.systems.threads: every framework of a measurement runs with --threads, and its result says so."""

import sys

import pytest

from bench import plan as P
from bench import run
from bench.systems import threads


def test_count_comes_from_the_environment_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.setenv(threads.ENV, "3")
    assert threads.count() == 3 and threads.openvino_config() == {"INFERENCE_NUM_THREADS": 3}
    monkeypatch.delenv(threads.ENV)
    assert threads.count() >= 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(threads.ENV, bad)
        with pytest.raises(ValueError, match=f"BENCH_THREADS must be a positive integer, got '{bad}'"):
            threads.count()


def test_environment_and_settings_name_every_framework():
    assert threads.environment(4) == {"BENCH_THREADS": "4", "OMP_NUM_THREADS": "4", "RAYON_NUM_THREADS": "4"}
    assert set(threads.settings(4).values()) == {4}
    assert threads.mismatches(dict(threads.settings(4), openvino=2), 4) == {"openvino": 2}
    with pytest.raises(ValueError, match="Unknown framework 'jax'"):
        threads.configure(["jax"])


def test_torch_runs_with_the_measurements_threads_in_a_fresh_process():
    pytest.importorskip("torch")
    m = P.Measurement("matmul", "torch", "matmul", "torch_rates", dict(precision="float32", reps=1, tiny=True))
    run.run_one(m, timeout=300, python=sys.executable, n_threads=1)
    assert not m.errors, m.errors
    assert m.runs[0]["threads"] == {"torch": 1, "torch_interop": 1}


def test_onnxruntime_session_options_take_the_count(monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv(threads.ENV, "1")
    options = threads.session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
