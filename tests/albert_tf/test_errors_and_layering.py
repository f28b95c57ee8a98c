"""Two promises of docs/reliability.md and docs/architecture.md.

- "`--verbosity=1` adds the traceback": an installed binary that fails prints one line by default, and the
  traceback (then the same line) with --verbosity=1.
- "`pipelines/` imports no model code": no module of pipelines/ imports albert_tf, except the binaries'
  shared wrapper (albert_tf.bin.common: one-line errors, verbosity, quiet TensorFlow start), which loads no
  model code (albert_tf's package imports its parts lazily).
"""

import ast
import json
import os
import subprocess
import sys

from tests.albert_tf.test_binaries import _script

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pipelines/bin/*.py: the console scripts run through albert_tf's one binary wrapper, imported inside run().
WRAPPER = "albert_tf.bin.common"
ALLOWED_ALBERT_TF_MODULES = {"albert_tf", "albert_tf.bin", WRAPPER}


def _fail_to_convert(tmp_path, *extra):
    """albert-convert on a checkpoint that does not exist: (exit code, stderr lines)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([_script("albert-convert"), f"--input={tmp_path / 'missing'}",
                           f"--output_dir={tmp_path / 'out'}", *extra], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=300)
    return proc.returncode, proc.stderr.strip().splitlines()


def test_verbosity_1_adds_the_traceback_to_the_one_line_error(tmp_path):
    line = f"albert-convert: --input: Checkpoint path '{tmp_path / 'missing'}' does not exist"
    code, quiet = _fail_to_convert(tmp_path)
    assert code == 1 and len(quiet) == 1 and quiet[0].startswith(line), quiet
    code, verbose = _fail_to_convert(tmp_path, "--verbosity=1")
    assert code == 1 and verbose[-1] == quiet[0], verbose[-5:]
    start = verbose.index("Traceback (most recent call last):")
    traceback = "\n".join(verbose[start:-1])
    assert "albert_tf/model_folder.py" in traceback and "in find_weights" in traceback, traceback
    assert verbose[-2].startswith("FileNotFoundError: Checkpoint path"), verbose[-2]


def _albert_tf_imports(path):
    """The albert_tf modules a source file imports (anywhere in it: inside functions too)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "albert_tf")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == "albert_tf":
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).split(".")[0] == "albert_tf":
                found.add(node.args[0].value)
    return found


def test_pipelines_import_no_model_code():
    sources = [os.path.join(root, name) for root, _, names in os.walk(os.path.join(REPO, "pipelines"))
               for name in names if name.endswith(".py")]
    assert len(sources) > 15
    imports = {os.path.relpath(path, REPO): _albert_tf_imports(path) for path in sources}
    imports = {path: found for path, found in imports.items() if found}
    assert imports, "the scan finds nothing: it would pass anything"
    for path, found in imports.items():
        assert path.startswith(os.path.join("pipelines", "bin")) and found == {WRAPPER}, (path, found)
    # What the wrapper brings along at run time: nothing of albert_tf beyond it (no models, layers, training).
    modules = [os.path.relpath(path, REPO)[:-3].replace(os.sep, ".").replace(".__init__", "") for path in sources]
    code = ("import importlib, json, sys\n"
            f"for name in {modules!r} + [{WRAPPER!r}]:\n    importlib.import_module(name)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'albert_tf')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert loaded == ALLOWED_ALBERT_TF_MODULES, loaded
