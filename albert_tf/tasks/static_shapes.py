"""Fixed input shapes for fine-tuning: what a TPU needs, and what bounds XLA's compilations.

A TPU program (and any XLA program) is compiled for one shape of its inputs.
Fine-tuning by default feeds batches whose length is their longest example and
whose size varies by one at the end of a pass, so XLA would compile a program
per batch shape met. Under `TaskOptions.static_shapes` (albert-finetune
`--static_shapes`, on by itself under `--strategy=tpu`):

- training batches hold exactly train_batch_size examples: each pass drops its
  remainder (`pipelines.finetune.common.pass_batch_sizes`), which examples sit
  a pass out changes from pass to pass with its shuffle;
- every batch's length is padded up to the next of a fixed set of lengths
  (`static_lengths`: multiples of `static_length_step`, then max_seq_length),
  so a run meets at most len(set) shapes per batch size;
- evaluation and prediction run batches of exactly eval_batch_size: the last
  one is filled with padding rows (empty texts or all-zero ids) whose outputs
  are dropped, so every example is counted once.

The text layer (SentencePiece, ragged packing) has no XLA or TPU kernels, so
under static shapes, and for a model compiled with XLA (`compile_for_xla`), it
runs in the tf.data input pipeline (`model_input_batches`): the compiled step
gets int32 ids. Padding ids are masked (input_mask 0), so the outputs at real
positions are those of the dynamic shapes up to float rounding.

Example:
>>> static_lengths(128, 48)
(48, 96, 128)
>>> int(bucket_length(tf.constant(50), (48, 96, 128)))
96
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

# Position-aligned features the length padding extends, and their padding value: p_mask 1 marks a
# position that cannot hold an answer; ids, mask and segments pad with 0 (masked out).
POSITION_FEATURES = {"input_ids": 0, "input_mask": 0, "segment_ids": 0, "p_mask": 1}


def static_lengths(max_seq_length: int, step: int) -> Tuple[int, ...]:
    """The fixed lengths batches are padded to: step, 2*step, ... below max_seq_length, then max_seq_length.

    Args:
        max_seq_length: the longest packed input.
        step: the spacing (>= 1); step >= max_seq_length leaves max_seq_length alone.

    Raises:
        ValueError: naming the bad value.

    Example:
    >>> static_lengths(128, 64), static_lengths(100, 32), static_lengths(32, 512)
    ((64, 128), (32, 64, 96, 100), (32,))
    """
    if int(step) < 1:
        raise ValueError(f"--static_length_step must be positive, got {step!r}.")
    if int(max_seq_length) < 1:
        raise ValueError(f"max_seq_length must be positive, got {max_seq_length!r}.")
    return tuple(range(int(step), int(max_seq_length), int(step))) + (int(max_seq_length),)


def bucket_length(length: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    """The smallest of `lengths` (ascending) >= `length` (int32 scalar); the largest when none is."""
    table = tf.constant(lengths, tf.int32)
    index = tf.searchsorted(table, tf.reshape(tf.cast(length, tf.int32), [1]), side="left")[0]
    return tf.gather(table, tf.minimum(index, len(lengths) - 1))


def pad_positions(features, lengths: Sequence[int]):
    """Pads the position axis (the last) of `POSITION_FEATURES` to `bucket_length` of its length.

    Example:
    >>> out = pad_positions({"input_ids": tf.ones([2, 5], tf.int32), "p_mask": tf.zeros([2, 5], tf.int32)},
    ...                     (4, 8))
    >>> out["input_ids"].shape, out["p_mask"].numpy()[0].tolist()
    (TensorShape([2, 8]), [0, 0, 0, 0, 0, 1, 1, 1])
    """
    features = dict(features)
    length = tf.shape(features["input_ids"])[-1]
    missing = bucket_length(length, lengths) - length
    for key, value in POSITION_FEATURES.items():
        if key in features:
            x = features[key]
            padding = [[0, 0]] * (x.shape.rank - 1) + [[0, missing]]
            features[key] = tf.pad(x, padding, constant_values=tf.cast(value, x.dtype))
    return features


def model_input_batches(dataset: tf.data.Dataset, model: keras.Model, lengths: Optional[Sequence[int]] = None,
                        batch_size: Optional[int] = None) -> tf.data.Dataset:
    """(x, ...) batches -> (the model's id features of x, ...): the text layer runs in the input pipeline.

    Args:
        dataset: batches of (x,) or (x, y); x is anything the task model's
            `features` reads (texts, (text, text_pair), a dict of ids or of
            texts and choices).
        model: the task model (its preprocessor turns text into ids).
        lengths: pad the length to the next of these (`static_lengths`); None: keep it.
        batch_size: the batch dimension every element has (`tf.ensure_shape`,
            so that the element spec, and the compiled step, see it); None: any.
    """
    def fixed_rows(value):
        if batch_size is None:
            return value
        return tf.ensure_shape(value, [batch_size] + [None] * (value.shape.rank - 1))

    @tf.autograph.experimental.do_not_convert
    def convert(x, *rest):
        features = model.features(x)
        if lengths:
            features = pad_positions(features, lengths)
        return tf.nest.map_structure(fixed_rows, (features,) + tuple(rest))

    return dataset.map(convert, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def num_rows(inputs: Any) -> int:
    """Rows of a tensor, tuple or dict of arrays (its first leaf's first dimension)."""
    return int(np.shape(tf.nest.flatten(inputs)[0])[0])


def pad_rows(inputs: Any, rows: int) -> Any:
    """Every array of `inputs` grown to `rows` rows: empty strings for text, 0 otherwise.

    Example:
    >>> pad_rows((np.array(["a b", "c"], dtype=object), np.array([[1, 2], [3, 4]])), 3)[1].tolist()
    [[1, 2], [3, 4], [0, 0]]
    """
    def grow(value):
        value = np.asarray(value)
        missing = rows - value.shape[0]
        if missing <= 0:
            return value
        fill = "" if value.dtype.kind in "USO" else 0
        extra = np.full((missing,) + value.shape[1:], fill, dtype=value.dtype)
        return np.concatenate([value, extra], axis=0)

    return tf.nest.map_structure(grow, inputs)


def prediction_dataset(model: keras.Model, inputs: Any, batch_size: int,
                       lengths: Optional[Sequence[int]] = None) -> tf.data.Dataset:
    """The (id features,) batches `predict` feeds the model.

    With `lengths` (static shapes): ceil(n / batch_size) batches of exactly
    `batch_size` rows (the last filled with `pad_rows`), lengths padded to
    `lengths`; without: the batches of `inputs` as they come, as ids.
    """
    if lengths:
        rows = -(-num_rows(inputs) // batch_size) * batch_size
        inputs = pad_rows(inputs, rows)
    # One-element tuples: Keras reads a 2-tuple element as (x, y), which would split a (text, text_pair) input.
    dataset = tf.data.Dataset.from_tensor_slices((inputs,)).batch(batch_size, drop_remainder=bool(lengths))
    return model_input_batches(dataset, model, lengths, batch_size if lengths else None)


@contextlib.contextmanager
def whole_batch_inference(model: keras.Model):
    """Inference on the whole batch at its fixed shape: the classifier's length-sorted sub-batches
    (`albert_tf.models.length_buckets`: data-dependent slices, a loop) are off meanwhile."""
    saved = model.inference_rows_per_bucket
    if saved:
        model.inference_rows_per_bucket = None
        model.predict_function = None  # traced with the buckets otherwise
    try:
        yield model
    finally:
        if saved:
            model.inference_rows_per_bucket = saved
            model.predict_function = None


def predict(model: keras.Model, inputs: Any, batch_size: int, options=None) -> Any:
    """`model.predict` on ids made in the input pipeline; fixed shapes with `options.static_shapes`.

    Args:
        model: a task model.
        inputs: what `FinetuneTask.evaluate` predicts (texts, ids, ...), one row per example.
        batch_size: the evaluation batch.
        options: `TaskOptions` (static_shapes, static_length_step, max_seq_length); None: dynamic.

    Returns:
        The outputs of the `num_rows(inputs)` real rows, padding rows dropped.
    """
    n = num_rows(inputs)
    if n == 0:
        return model.predict(inputs, verbose=0)  # the task model answers an empty batch with no rows
    lengths = None
    if options is not None and options.static_shapes:
        lengths = static_lengths(options.max_seq_length, options.static_length_step)
    with whole_batch_inference(model):
        outputs = model.predict(prediction_dataset(model, inputs, batch_size, lengths), verbose=0)
    return tf.nest.map_structure(lambda value: np.asarray(value)[:n], outputs)


# ------------------------------------------------------------------ XLA
@contextlib.contextmanager
def text_layer_in_pipeline(model: keras.Model):
    """Lets Keras XLA-compile a task model that holds the text layer.

    The text layer says it cannot be compiled (`supports_jit = False`), and
    Keras then silently compiles nothing. The runner feeds such a model ids
    made in the input pipeline (`model_input_batches`), so the layer is never
    called inside the compiled step; meanwhile it may say so.
    """
    layer = getattr(model, "preprocessor", None)
    if layer is None:
        yield model
        return
    layer.supports_jit = True
    try:
        yield model
    finally:
        layer.supports_jit = False


def compile_for_xla(model: keras.Model) -> keras.Model:
    """Sets an (already compiled, or inference-only) task model's programs to XLA (`jit_compile`).

    Raises:
        ValueError: when Keras refuses (another layer that cannot be compiled).
    """
    with text_layer_in_pipeline(model):
        model.jit_compile = True
    if not model.jit_compile:
        raise ValueError(f"--jit_compile: Keras cannot XLA-compile {type(model).__name__} "
                         "(a layer has supports_jit=False).")
    model.train_function = model.test_function = model.predict_function = None
    return model


def compiled_for_xla(model: keras.Model) -> bool:
    """Whether the model's Keras programs are XLA-compiled (set by `compile(jit_compile=True)`)."""
    return bool(getattr(model, "_jit_compile", None))
