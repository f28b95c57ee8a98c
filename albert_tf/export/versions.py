"""TF Serving's version folders: the next free number, and never overwriting one."""

from __future__ import annotations

import os
from typing import Optional

import numpy as np
import tensorflow as tf


def next_version(export_dir: str) -> int:
    """One more than the largest numeric subfolder of export_dir (1 when none)."""
    if not tf.io.gfile.isdir(export_dir):
        return 1
    numbers = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir) if name.rstrip("/").isdigit()]
    return max(numbers, default=0) + 1


def _choose_version(export_dir: str, version: Optional[int]) -> int:
    if version is None:
        return next_version(export_dir)
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}.")
    path = os.path.join(export_dir, str(int(version)))
    if tf.io.gfile.exists(path):
        raise FileExistsError(
            f"Export version {path!r} exists already; it is never overwritten. Choose another version "
            f"(next free: {next_version(export_dir)}) or leave it unset."
        )
    return int(version)
