"""The docstring examples of every module run as tests, so that they stay true.

Each module of albert_tf, pipelines and flags is one test case; its examples
run in the module's namespace (as `python -m doctest` would) with ELLIPSIS and
NORMALIZE_WHITESPACE. Examples that need files are marked `# doctest: +SKIP`
in their docstrings. The binaries' modules (albert_tf/bin, pipelines/bin)
except the shared albert_tf/bin/common.py are left out: some define absl flags
at import.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("albert_tf", "pipelines", "flags")
# Binaries define absl flags (some at import); their behaviour is tested by
# running them (tests/albert_tf/test_binaries.py and the binaries' tests).
EXCLUDED_PREFIXES = ("albert_tf.bin.", "pipelines.bin.")
INCLUDED_ANYWAY = ("albert_tf.bin.common", "albert_tf.bin.faults", "albert_tf.bin.plan", "pipelines.bin.create_vocab")
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# Modules of an optional extra: skipped when it is not installed.
OPTIONAL_IMPORTS = {"pipelines.beam_pipeline": "apache_beam"}


def _module_names() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        path = [os.path.join(REPO, *package.split("."))]
        for info in pkgutil.walk_packages(path, prefix=package + "."):
            names.append(info.name)
    return sorted(n for n in names if not n.startswith(EXCLUDED_PREFIXES) or n in INCLUDED_ANYWAY)


def test_the_module_list_is_complete():
    names = _module_names()
    for expected in ("albert_tf.config", "albert_tf.layers.transformer_stack", "pipelines.fileio",
                     "flags.core_flags", "albert_tf.bin.common"):
        assert expected in names
    assert "albert_tf.bin.demo" not in names


@pytest.mark.parametrize("module_name", _module_names())
def test_docstring_examples(module_name):
    if module_name in OPTIONAL_IMPORTS:
        pytest.importorskip(OPTIONAL_IMPORTS[module_name], reason="an optional extra ([beam])")
    module = importlib.import_module(module_name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, module_name)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    failures = []
    for test in tests:
        if not test.examples:
            continue
        output = []
        result = runner.run(test, out=output.append, clear_globs=True)
        if result.failed:
            failures.append("".join(output))
    assert not failures, "\n".join(failures)
