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
