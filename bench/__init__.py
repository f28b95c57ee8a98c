"""Benchmarks of albert-tf (see bench/run.py)."""
