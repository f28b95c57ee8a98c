"""The README's Python example runs as written and prints what its comments say."""

import contextlib
import io
import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_readme_model_example_runs():
    text = open(README, encoding="utf-8").read()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert "from_preset" in block
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(block, "README.md", "exec"), {})
    printed = stdout.getvalue().splitlines()
    expected = [m.strip() for m in re.findall(r"print\(.*\)\s+#\s*(.*)", block)]
    assert printed == expected


def test_readme_binaries_are_installed_console_scripts():
    import sys

    text = open(README, encoding="utf-8").read()
    names = sorted(set(re.findall(r"`(albert-[a-z-]+)", text)))
    assert "albert-pretrain" in names and "albert-convert" in names
    scripts = os.path.dirname(sys.executable)
    setup = open(os.path.join(os.path.dirname(README), "setup.py"), encoding="utf-8").read()
    for name in names:
        assert f'"{name}=' in setup, f"README names {name}, setup.py declares no such console script"
        assert os.path.exists(os.path.join(scripts, name)), f"{name} is not installed next to {sys.executable}"
