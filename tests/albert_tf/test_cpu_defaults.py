"""The CPU kind's TensorFlow defaults: set before TensorFlow starts in a binary, never over the user's choice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from albert_tf import cpu

ONEDNN = "TF_ENABLE_ONEDNN_OPTS"


@pytest.mark.parametrize("kind,expected", [("avx2", {ONEDNN: "1"}), ("avx512", {}), ("avx512-bf16", {}),
                                           ("amx", {}), ("other", {})])
def test_each_cpu_kind_gets_the_settings_its_levers_runs_chose(kind, expected):
    environ = {"PATH": "/bin"}
    assert cpu.apply_tensorflow_defaults(environ, kind) == expected
    assert environ == {"PATH": "/bin", **expected}


@pytest.mark.parametrize("users_value", ["0", "1", ""])
def test_a_variable_the_user_set_is_left_as_it_is(users_value):
    environ = {ONEDNN: users_value}
    assert cpu.apply_tensorflow_defaults(environ, "avx2") == {} and environ == {ONEDNN: users_value}


# What a binary does on start (`albert_tf.bin.common`), then TensorFlow's own answer: is oneDNN on?
PROBE = ("import os\nfrom albert_tf.bin import common\ncommon.start_tensorflow_quietly()\n"
         "from tensorflow.python.util import _pywrap_util_port\n"
         f"print(os.environ.get({ONEDNN!r}), _pywrap_util_port.IsMklEnabled())\n")


@pytest.mark.parametrize("users_value", [None, "0"])
def test_a_binary_starts_tensorflow_with_this_cpus_defaults(users_value):
    env = {k: v for k, v in os.environ.items() if k != ONEDNN}
    if users_value is not None:
        env[ONEDNN] = users_value
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    value, onednn_on = done.stdout.split()
    kind = cpu.cpu_kind(cpu.cpu_flags())
    want = users_value if users_value is not None else cpu.TENSORFLOW_DEFAULTS.get(kind, {}).get(ONEDNN)
    assert value == str(want)
    if want is not None:  # where nobody chose, TensorFlow's own default by kind holds (on with VNNI/BF16/AMX)
        assert onednn_on == str(want == "1")


def _console_scripts():
    import re

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "setup.py"), encoding="utf-8") as f:
        return re.findall(r'"(albert-[a-z-]+)=([\w.]+):(\w+)"', f.read())


# Runs a binary's entry point up to its flags: run_binary is replaced by one that defines them and says whether
# TensorFlow is imported by then (main sets the kind's defaults only while it is not).
DEFINE_ONLY = """
import importlib, sys
import albert_tf.bin.common as common
def define_only(main, define_flags, name, doc):
    common.define_flags_by_group(define_flags)
    print("tensorflow imported" if "tensorflow" in sys.modules else "no tensorflow")
common.run_binary = define_only
module, function = sys.argv[1:]
getattr(importlib.import_module(module), function)()
"""


@pytest.mark.parametrize("binary,module,function", _console_scripts())
def test_no_binary_imports_tensorflow_before_main_sets_the_cpu_defaults(binary, module, function):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    done = subprocess.run([sys.executable, "-c", DEFINE_ONLY, module, function], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "no tensorflow", f"{binary}: its module or flags import TensorFlow"
