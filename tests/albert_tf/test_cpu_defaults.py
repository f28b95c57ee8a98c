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
PROBE = ("import os\nfrom albert_tf.bin import common\ncommon._start_tensorflow_quietly()\n"
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
