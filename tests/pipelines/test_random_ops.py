"""Keyed random numbers: deterministic, independent of batching, uniform; and
no dead code (every function and constant is used by the pipelines)."""

import ast
import os

import numpy as np
import tensorflow as tf

from pipelines import random_ops

PIPELINES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "pipelines")


def uniform(keys):
    """One U[0, 1) number per key, as the pipelines draw them."""
    return random_ops.uniform_bits(random_ops.mix64(keys))


def test_keyed_numbers_do_not_depend_on_batching():
    key = random_ops.seed_key(5)
    whole = uniform(random_ops.fold_in(key, tf.range(100, dtype=tf.int64))).numpy()
    parts = np.concatenate([
        uniform(random_ops.fold_in(key, tf.range(i, i + 10, dtype=tf.int64))).numpy()
        for i in range(0, 100, 10)])
    np.testing.assert_array_equal(whole, parts)
    other = uniform(random_ops.fold_in(random_ops.seed_key(6),
                                       tf.range(100, dtype=tf.int64))).numpy()
    assert not np.allclose(whole, other)


def test_uniform_moments():
    # Mean 1/2 and variance 1/12 of U(0,1); n = 200k so the std of the mean is
    # sqrt(1/12/n) = 6.5e-4; 4 std tolerance.
    n = 200_000
    u = uniform(random_ops.fold_in(random_ops.seed_key(1), tf.range(n))).numpy()
    assert abs(u.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 4 * np.sqrt(1 / 180 / n)
    bits = random_ops.stream(random_ops.seed_key(2)[None], 50_000)
    v = random_ops.high_uniform(bits, 32, 32).numpy().ravel()
    assert abs(v.mean() - 0.5) < 4 * np.sqrt(1 / 12 / v.size)


def test_binomial_half_matches_binomial_moments():
    for count in (0, 1, 5, 64, 200):
        n = 40_000
        bits = random_ops.stream(random_ops.fold_in(random_ops.seed_key(count), tf.range(n)), 2)
        draws = random_ops.binomial_half_bits(bits[:, 0], bits[:, 1], tf.fill([n], count)).numpy()
        assert draws.min() >= 0 and draws.max() <= count
        mean_std = np.sqrt(count / 4 / n)
        assert abs(draws.mean() - count / 2) <= 4 * mean_std + 1e-9, count
        if count:
            assert abs(draws.var() / (count / 4) - 1) < 0.05, count


def test_randint_bits_is_inclusive_and_uniform():
    n = 60_000
    bits = random_ops.mix64(random_ops.fold_in(random_ops.seed_key(3), tf.range(n)))
    r = random_ops.randint_bits(bits, 2, 7).numpy()
    counts = np.bincount(r, minlength=8)[2:]
    assert counts.sum() == n and (np.bincount(r)[:2] == 0).all()
    p = 1 / 6
    assert (np.abs(counts / n - p) < 4 * np.sqrt(p * (1 - p) / n)).all()


def test_every_name_is_used_by_the_pipelines():
    # random_ops is internal: a function or constant no other pipelines module
    # (nor a used function of random_ops itself) refers to is dead code.
    with open(os.path.join(PIPELINES_DIR, "random_ops.py")) as f:
        tree = ast.parse(f.read())
    defined = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defined[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                defined[target.id] = node

    def names_in(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    used = set()
    for folder, _, names in os.walk(PIPELINES_DIR):  # subpackages too
        for name in names:
            if not name.endswith(".py") or name == "random_ops.py" and folder == PIPELINES_DIR:
                continue
            with open(os.path.join(folder, name)) as f:
                other = ast.parse(f.read())
            used |= {n.attr for n in ast.walk(other)
                     if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                     and n.value.id == "random_ops"}
    frontier = set(used)
    while frontier:  # names used by used functions of random_ops
        frontier = {n for name in frontier if name in defined
                    for n in names_in(defined[name])} - used
        used |= frontier
    assert sorted(set(defined) - used) == []
