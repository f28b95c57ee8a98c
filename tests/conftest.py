"""Shared pytest configuration: quiet TensorFlow, fixed seeds, fixture paths."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
