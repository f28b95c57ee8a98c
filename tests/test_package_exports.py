"""The lazily imported public names of albert_tf and pipelines all resolve."""

import subprocess
import sys

import albert_tf
import pipelines


def test_every_public_name_resolves():
    for package in (albert_tf, pipelines):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"


def test_submodules_resolve_after_a_bare_import():
    assert albert_tf.metrics.accuracy([1, 0], [1, 1]) == 0.5
    assert callable(albert_tf.training.run_pretraining)


def test_import_does_not_start_tensorflow():
    code = ("import sys, albert_tf, pipelines; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
