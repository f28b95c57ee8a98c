"""Every install hint works from a checkout: `pip install -e .` or `pip install -e '.[extra]'` of an extra setup.py
defines (albert-tf is installed from its checkout, not from a package index), and a hint that installs [beam] or
[openvino] says that the two do not go in one environment (setup.py's note on [beam]'s protobuf cap).

The hints are read from the package's source (albert_tf/, pipelines/, flags/: messages, help texts, docstrings) and
from the pages (README.md, CONTRIBUTING.md, docs/*.md).
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.doc_blocks import REPO

PACKAGES = ("albert_tf", "pipelines", "flags")
PAGES = ("README.md", "CONTRIBUTING.md", "docs/*.md")
# The form of a hint: the checkout itself, or extras of it, quoted for any shell.
_HINT = re.compile(r"pip install -e (?:\.(?![\w\[])|'\.\[([\w,-]+)\]')")
# Extras that may not share an environment, and how far after a hint its message may say so (characters).
CONFLICTS = {"beam": ("openvino", "bench"), "openvino": ("beam",), "bench": ("beam",)}
_SAY_WITHIN = 400


def setup_extras(path: str = os.path.join(REPO, "setup.py")) -> set:
    """The extras_require keys of setup.py, read without running it."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return {key.value for key in node.value.keys}
    raise AssertionError("setup.py has no extras_require")


def hint_problems(text: str, where: str, extras: set) -> list:
    """What is wrong with the install hints of `text` (whitespace collapsed, so a hint may wrap).

    Example:

    >>> hint_problems("run pip install -e '.[serving]' first", "x.py", {"serving"})
    []
    >>> hint_problems("pip install 'albert-tf[openvino]'", "x.py", {"openvino"})
    ["x.py: pip install 'albert-tf[openvino]' is not pip install -e . or -e '.[extra]' (run in the checkout)"]
    """
    flat = " ".join(text.split())
    problems = []
    for found in re.finditer(r"pip install\b", flat):
        hint = _HINT.match(flat, found.start())
        if not hint:
            problems.append(f"{where}: {flat[found.start():found.start() + 34].strip()} is not pip install -e . "
                            f"or -e '.[extra]' (run in the checkout)")
            continue
        named = hint.group(1).split(",") if hint.group(1) else []
        problems += [f"{where}: {hint.group(0)} names the extra {name!r}, which setup.py does not define "
                     f"(it has {sorted(extras)})" for name in named if name not in extras]
        after = flat[hint.end():hint.end() + _SAY_WITHIN]
        for name in named:
            problems += [f"{where}: {hint.group(0)} does not say that [{name}] and [{other}] need separate "
                         f"environments" for other in CONFLICTS.get(name, ()) if f"[{other}]" not in after
                         and f".[{other}]" not in after]
    return problems


def _sources() -> list:
    paths = []
    for package in PACKAGES:
        paths += glob.glob(os.path.join(REPO, package, "**", "*.py"), recursive=True)
    for pattern in PAGES:
        paths += glob.glob(os.path.join(REPO, pattern))
    return sorted(paths)


def test_every_install_hint_is_a_checkout_install_of_a_defined_extra():
    extras = setup_extras()
    assert {"beam", "openvino", "serving", "bench", "test"} <= extras
    problems, hints = [], 0
    for path in _sources():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        hints += len(re.findall(r"pip install\b", " ".join(text.split())))
        problems += hint_problems(text, os.path.relpath(path, REPO), extras)
    assert hints >= 10, hints  # the messages of albert-export, the warm-up writer and the Beam runner among them
    assert not problems, "\n".join(problems)


def test_a_hint_that_points_nowhere_or_hides_the_conflict_fails():
    extras = {"beam", "openvino", "serving", "bench"}
    assert hint_problems("(pip install '.[serving]')", "a.md", extras) == [
        "a.md: pip install '.[serving]') is not pip install -e . or -e '.[extra]' (run in the checkout)"]
    assert hint_problems("pip install -e '.[servign]'", "a.md", extras) == [
        "a.md: pip install -e '.[servign]' names the extra 'servign', which setup.py does not define "
        "(it has ['beam', 'bench', 'openvino', 'serving'])"]
    assert hint_problems("pip install -e '.[openvino]' and go", "a.py", extras) == [
        "a.py: pip install -e '.[openvino]' does not say that [openvino] and [beam] need separate environments"]
    assert hint_problems("pip install -e '.[openvino]', not beside\n  [beam]", "a.py", extras) == []
    assert hint_problems("pip install -e .[serving]", "a.md", extras)  # unquoted: a glob in zsh
    assert hint_problems("pip install -e . && albert-demo", "README.md", extras) == []


def test_albert_export_without_openvino_says_how_to_install_it_in_one_line(tmp_path):
    if importlib.util.find_spec("openvino") and importlib.util.find_spec("openvino_tokenizers"):
        pytest.skip("the [openvino] extra is installed here: albert-export has nothing to refuse")
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "albert-export"), "--checkpoint=model",
                           "--export_dir=out", "--head=classifier", "--format=openvino"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("albert-export: --format=openvino needs the [openvino] extra: "
                                "pip install -e '.[openvino]' in the checkout, in an environment without [beam] ")
    assert not any("Traceback" in line for line in lines), done.stderr
    assert not hint_problems(lines[-1], "albert-export", setup_extras())
