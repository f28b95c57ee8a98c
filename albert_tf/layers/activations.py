"""Activation functions by their config names."""

from typing import Callable

import keras


def gelu_tanh(x):
    """The tanh-approximated GELU (the original's "gelu", Hugging Face's "gelu_new")."""
    return keras.activations.gelu(x, approximate=True)


def _gelu_erf(x):
    return keras.activations.gelu(x, approximate=False)


# The GELU forms (`albert_tf.layers.xla_kernels` has a training kernel for each).
GELUS = (gelu_tanh, _gelu_erf)

_ACTIVATIONS = {
    # The original modeling.py's "gelu" is the tanh approximation.
    "gelu": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu_exact": _gelu_erf,
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
    "linear": keras.activations.linear,
}


def get_activation(name: str) -> Callable:
    """Returns the activation function for an `AlbertConfig.hidden_act` name.

    Args:
        name: "gelu" (tanh approximation), "gelu_new", "gelu_exact" (erf),
            "relu", "tanh" or "linear".

    Returns:
        A function of a tensor.

    Example:
    >>> import numpy as np
    >>> [round(float(get_activation(n)(np.float32(1.0))), 4) for n in ("gelu", "gelu_exact", "relu")]
    [0.8412, 0.8413, 1.0]
    """
    if name not in _ACTIVATIONS:
        raise ValueError(f"Unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)}.")
    return _ACTIVATIONS[name]
