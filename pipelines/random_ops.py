"""Keyed (counter-based) random numbers as plain TensorFlow ops.

Every random choice of the data pipeline is a pure function of a 64-bit key
derived from the user's seed and the *identity* of what is being decided (the
document index, the duplication pass, the chunk number, the token position and
a constant naming the purpose).  Nothing depends on batching, on the order in
which parallel map calls run, or on how many workers share the job, which is
what makes the output byte-identical across runs and worker splits.

`tf.random.stateless_*` ops take one seed per call, so vectorising over a batch
would tie the numbers to the batch composition; a hash of the key per element
does not.  The mixer is the SplitMix64 finaliser (Steele, Lea & Flood 2014),
whose outputs pass BigCrush when fed a counter.

Example:

>>> key = seed_key(12345)
>>> bits = stream(fold_in(key, tf.range(4, dtype=tf.int64)), 3)  # 3 numbers per key
>>> u = uniform_bits(bits)
>>> u.shape, bool(tf.reduce_all((u >= 0) & (u < 1)))
(TensorShape([4, 3]), True)
"""

from typing import Union

import tensorflow as tf

_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB

# Purposes: distinct constants folded into a key so that two decisions about
# the same object never reuse a random number.
WORD_ORDER = 12
REPLACEMENT = 14
DUPE = 17
CHUNK = 18
SHUFFLE = 19
DYNAMIC = 20


def _u64(x: Union[int, tf.Tensor]) -> tf.Tensor:
    if isinstance(x, int):
        return tf.constant(x & 0xFFFFFFFFFFFFFFFF, tf.uint64)
    x = tf.convert_to_tensor(x)
    if x.dtype == tf.uint64:
        return x
    if x.dtype not in (tf.int64, tf.int32, tf.uint32, tf.int8, tf.uint8):
        raise TypeError(f"Random keys need integer tensors, got {x.dtype!r}.")
    # Bitcast keeps negative int64 values distinct instead of saturating.
    return tf.bitcast(tf.cast(x, tf.int64), tf.uint64)


def mix64(z: tf.Tensor) -> tf.Tensor:
    """SplitMix64 finaliser: a bijective avalanche hash of uint64 values."""
    z = _u64(z) + _u64(_GOLDEN)
    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(30))) * _u64(_M1)
    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(27))) * _u64(_M2)
    return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(31)))


def seed_key(seed: int) -> tf.Tensor:
    """The root key for a user seed (any Python int)."""
    return mix64(_u64(int(seed)))


def fold_in(key: tf.Tensor, value: Union[int, tf.Tensor]) -> tf.Tensor:
    """A new key for `value` under `key` (broadcasting)."""
    return mix64(tf.bitwise.bitwise_xor(_u64(key), mix64(_u64(value))))


def uniform_bits(bits: tf.Tensor) -> tf.Tensor:
    """A float64 in [0, 1) from hashed bits (`stream` output): the top 53 bits."""
    return tf.cast(tf.bitwise.right_shift(bits, _u64(11)), tf.float64) * (1.0 / (1 << 53))


def randint_bits(bits: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """Uniform integers in [low, high] inclusive from already-hashed bits, int32."""
    low = tf.cast(low, tf.float64)
    span = tf.cast(high, tf.float64) - low + 1.0
    return tf.cast(tf.floor(low + uniform_bits(bits) * span), tf.int32)


def stream(key: tf.Tensor, width: int) -> tf.Tensor:
    """uint64 [..., width]: `width` independent hashes per key (SplitMix64 in
    counter mode: the i-th output for state `key`), one mix per number."""
    counter = tf.range(1, width + 1, dtype=tf.int64)
    steps = tf.bitcast(counter, tf.uint64) * _u64(_GOLDEN)
    return mix64(_u64(key)[..., None] + steps)


def high_uniform(bits: tf.Tensor, shift: int, width: int) -> tf.Tensor:
    """float64 in [0, 1) from `width` bits of `bits` starting at bit `shift`."""
    field = tf.bitwise.right_shift(bits, _u64(shift))
    if shift + width < 64:
        field = tf.bitwise.bitwise_and(field, _u64((1 << width) - 1))
    return tf.cast(field, tf.float64) * (1.0 / (1 << width))


def binomial_half_bits(bits: tf.Tensor, extra_bits: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Binomial(count, 1/2) from two already-hashed uint64 per draw, int32.

    Exact (a popcount of `count` random bits) for count <= 64; above that the
    first 64 trials stay exact and the rest use the normal approximation (from
    `extra_bits`), which only matters for a truncation of more than 64 tokens
    from one segment.
    """
    count = tf.cast(count, tf.int32)
    low = tf.minimum(count, 64)
    # mask of `low` ones; shifting a uint64 by 64 is undefined, so special-case it.
    ones = tf.where(
        low >= 64, _u64(0xFFFFFFFFFFFFFFFF),
        tf.bitwise.left_shift(_u64(1), tf.cast(tf.minimum(low, 63), tf.uint64)) - _u64(1))
    exact = tf.cast(tf.raw_ops.PopulationCount(x=tf.bitwise.bitwise_and(bits, ones)), tf.int32)
    rest = tf.cast(count - low, tf.float64)
    u1 = tf.maximum(high_uniform(extra_bits, 32, 32), 1e-12)
    u2 = high_uniform(extra_bits, 0, 32)
    normal = tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(2.0 * 3.141592653589793 * u2)
    approx = tf.clip_by_value(tf.round(rest / 2.0 + normal * tf.sqrt(rest) / 2.0), 0.0, rest)
    return exact + tf.cast(approx, tf.int32)
