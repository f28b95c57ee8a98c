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


def _readme() -> str:
    return open(README, encoding="utf-8").read()


def test_readme_finetuning_example_runs(tmp_path, monkeypatch):
    """The fine-tuning Python example trains, predicts and saves, on a tiny pretrained folder."""
    import numpy as np

    import albert_tf
    from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

    block = next(b for b in re.findall(r"```python\n(.*?)```", _readme(), re.S)
                 if "AlbertClassifier.from_pretrained" in b)
    spm = train_tiny_spm(str(tmp_path))
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(tiny_config()), str(tmp_path / "demo_output" / "model"),
                              spm_model_file=spm)
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)
    assert np.asarray(scope["clf"].predict(["a fine film", "a dull one"])).shape == (2, 2)
    restored = albert_tf.load_task_model("my_classifier/")
    np.testing.assert_allclose(restored.predict(["a fine film"]), scope["clf"].predict(["a fine film"]),
                               atol=1e-5)


def test_readme_serving_commands_are_the_tested_ones():
    """The REST bodies and saved_model_cli commands shown are those test_export runs."""
    import json

    from tests.albert_tf import test_export

    text = _readme()
    bodies = [json.loads(b) for b in re.findall(r"-d '(\{.*?\})'", text)]
    assert len(bodies) >= 3
    for body in bodies:
        assert body in test_export.REST_REQUESTS.values(), body
    commands = [" ".join(c.replace("\\\n", " ").split())
                for c in re.findall(r"```bash\n((?:python -c|saved_model_cli run).*?)\n```", text, re.S)]
    expected = {" ".join(c.replace("MODEL_DIR", "exports/albert_sst2/1").split())
                for c in (test_export.README_CLI_RUN_TEXT,)}
    expected.add(" ".join(test_export.README_CLI_RUN_IDS.replace("MODEL_DIR", "exports/albert_sst2_ids/1").split()))
    assert set(commands) == expected
