"""The pretraining TFRecord format: feature spec, in-graph writer, reader.

Features, names, dtypes and lengths exactly as the original tool
(google-research/albert create_pretraining_data.py) writes them: input_ids,
input_mask, segment_ids, token_boundary (int64 [max_seq_length]),
masked_lm_positions, masked_lm_ids (int64 [max_predictions_per_seq]),
masked_lm_weights (float), next_sentence_labels (int64 [1]; 0 = in order,
1 = swapped or random).

Examples are serialised in the graph with `tf.io.encode_proto` (batched, one
call per message level), features in the original's order; the records parse
to the same `tf.train.Example` messages the original writes (Python protobuf
may order map entries differently, so bytes are compared only among our own
runs).

Example:

>>> ds = pretraining_dataset("out/*.tfrecord", batch_size=8, max_seq_length=128,
...                          max_predictions_per_seq=20)   # doctest: +SKIP
>>> batch = next(iter(ds))                                  # doctest: +SKIP
>>> batch["next_sentence_labels"].shape                     # doctest: +SKIP
TensorShape([8])
"""

import os
from typing import Dict, List, Optional, Sequence, Union

import tensorflow as tf

from pipelines import masking as masking_lib
from pipelines import random_ops
from pipelines import tokenizer as tokenizer_lib

# The original's feature order (an OrderedDict in create_pretraining_data.py).
FEATURE_NAMES = (
    "input_ids", "input_mask", "segment_ids", "token_boundary",
    "masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "next_sentence_labels",
)
# The manifest create_pretraining_data writes beside the shards (PREFIX + this).
MANIFEST_SUFFIX = ".manifest.json"
_SEQ_FEATURES = ("input_ids", "input_mask", "segment_ids", "token_boundary")
_PRED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


def feature_spec(max_seq_length: int, max_predictions_per_seq: int,
                 include_token_boundary: bool = True) -> Dict[str, tf.io.FixedLenFeature]:
    """The parsing spec of a pretraining record.

    Args:
        max_seq_length: length of the sequence features.
        max_predictions_per_seq: length of the masked_lm_* features.
        include_token_boundary: False gives the original run_pretraining
            parser's spec (it ignores token_boundary).
    """
    spec = {}
    for name in FEATURE_NAMES:
        if name in _SEQ_FEATURES:
            if name == "token_boundary" and not include_token_boundary:
                continue
            spec[name] = tf.io.FixedLenFeature([max_seq_length], tf.int64)
        elif name == "masked_lm_weights":
            spec[name] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
        elif name in _PRED_FEATURES:
            spec[name] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
        else:
            spec[name] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def _encode(message_type: str, field_names: List[str], values: List[tf.Tensor],
            sizes: tf.Tensor) -> tf.Tensor:
    return tf.io.encode_proto(sizes=sizes, values=values, field_names=field_names,
                              message_type=message_type)


def serialize_examples(features: Dict[str, tf.Tensor]) -> tf.Tensor:
    """Serialises a batch of instances to tf.train.Example strings.

    Args:
        features: the eight FEATURE_NAMES, each [C, length] (any int dtype;
            masked_lm_weights float; next_sentence_labels [C] or [C, 1]).

    Returns:
        string [C].
    """
    count = tf.shape(features["input_ids"])[0]
    ones = tf.ones([count, 1], tf.int32)
    entries = []
    for name in FEATURE_NAMES:
        value = tf.convert_to_tensor(features[name])
        if value.shape.rank == 1:
            value = value[:, None]
        width = value.shape[1]
        sizes = tf.fill([count, 1], width)
        if name == "masked_lm_weights":
            lst = _encode("tensorflow.FloatList", ["value"], [tf.cast(value, tf.float32)], sizes)
            kind = "float_list"
        else:
            lst = _encode("tensorflow.Int64List", ["value"], [tf.cast(value, tf.int64)], sizes)
            kind = "int64_list"
        feature = _encode("tensorflow.Feature", [kind], [lst[:, None]], ones)
        entries.append(_encode(
            "tensorflow.Features.FeatureEntry", ["key", "value"],
            [tf.fill([count, 1], name), feature[:, None]], tf.ones([count, 2], tf.int32)))
    feats = _encode("tensorflow.Features", ["feature"], [tf.stack(entries, axis=1)],
                    tf.fill([count, 1], len(entries)))
    return _encode("tensorflow.Example", ["features"], [feats[:, None]], ones)


def parse_examples(serialized: tf.Tensor, max_seq_length: int,
                   max_predictions_per_seq: int) -> Dict[str, tf.Tensor]:
    """Parses a batch of records: int32 ints, float32 weights, labels [B]."""
    parsed = tf.io.parse_example(serialized, feature_spec(max_seq_length, max_predictions_per_seq))
    out = {}
    for name, value in parsed.items():
        out[name] = value if value.dtype == tf.float32 else tf.cast(value, tf.int32)
    out["next_sentence_labels"] = out["next_sentence_labels"][:, 0]
    return out


def unmasked_input_ids(features: Dict[str, tf.Tensor]) -> tf.Tensor:
    """input_ids with the masked positions given back their original ids."""
    ids = features["input_ids"]
    positions = features["masked_lm_positions"]
    real = features["masked_lm_weights"] > 0
    current = tf.gather(ids, positions, batch_dims=1)
    values = tf.where(real, features["masked_lm_ids"], current)
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    return tf.tensor_scatter_nd_update(ids, tf.stack([rows, positions], axis=-1), values)


def check_feature_ranges(features: Dict[str, tf.Tensor], max_seq_length: int,
                         vocab_size: Optional[int] = None,
                         type_vocab_size: Optional[int] = None) -> Dict[str, tf.Tensor]:
    """The features, after in-graph checks that every id is in range.

    An out-of-range id in an embedding lookup raises on CPU but silently reads
    zeros on GPU/TPU, so the reader fails first, naming the feature, the bad
    value and the limit.  Cost: a min and a max per feature and batch.

    Args:
        features: parsed int features (parse_examples).
        max_seq_length: masked_lm_positions must be below it.
        vocab_size: input_ids and masked_lm_ids must be below it (None: not checked).
        type_vocab_size: segment_ids must be below it (None: not checked).

    Returns:
        The same features, evaluated only after the checks passed.

    Raises:
        tf.errors.InvalidArgumentError (when evaluated): a value out of range.

    Example:

    >>> feats = {"input_ids": tf.constant([[2, 7, 3]]), "segment_ids": tf.constant([[0, 0, 2]]),
    ...          "masked_lm_positions": tf.constant([[1]]), "masked_lm_ids": tf.constant([[7]])}
    >>> try:
    ...     _ = check_feature_ranges(feats, 3, vocab_size=30, type_vocab_size=2)
    ... except tf.errors.InvalidArgumentError as e:
    ...     print("segment_ids holds 2, outside [0, type_vocab_size=2)" in e.message)
    True
    """
    limits = {"masked_lm_positions": (max_seq_length, "max_seq_length")}
    if vocab_size is not None:
        limits["input_ids"] = limits["masked_lm_ids"] = (vocab_size, "vocab_size")
    if type_vocab_size is not None:
        limits["segment_ids"] = (type_vocab_size, "type_vocab_size")
    checks = []
    for name in sorted(limits):
        limit, limit_name = limits[name]
        value = features[name]
        low, high = tf.reduce_min(value), tf.reduce_max(value)
        message = tf.strings.format(
            f"Pretraining records: {name} holds {{}}, outside [0, {limit_name}={limit}): were "
            "they made with another vocabulary, or for another model config?",
            [tf.where(high >= limit, high, low)])
        checks.append(tf.debugging.Assert((low >= 0) & (high < limit), [message]))
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in features.items()}


def _files(file_pattern: Union[str, Sequence[str]]) -> List[str]:
    try:
        files = tokenizer_lib.expand_input_patterns(file_pattern)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"No pretraining records: {e}") from None
    # A broad glob (data/*) also matches the shards' manifest, and (TensorFlow's
    # glob matches hidden files) temporary files of a run in progress: not records.
    records = sorted(f for f in files if not f.endswith(MANIFEST_SUFFIX)
                     and not os.path.basename(f).startswith("."))
    if not records:
        raise FileNotFoundError(f"No pretraining records in {file_pattern!r}: only {files!r}.")
    return records


def pretraining_dataset(file_pattern: Union[str, Sequence[str]], batch_size: int,
                        max_seq_length: int, max_predictions_per_seq: int,
                        is_training: bool = True, masking: str = "static", seed: int = 12345,
                        input_context: Optional[tf.distribute.InputContext] = None,
                        vocab_size: Optional[int] = None,
                        type_vocab_size: Optional[int] = None, masked_lm_prob: float = 0.15,
                        ngram: int = 3, favor_shorter_ngram: bool = True,
                        do_whole_word_mask: bool = True, shuffle_buffer_size: int = 10000,
                        cycle_length: int = 8,
                        deterministic: Optional[bool] = None,
                        skip_corrupt_records: bool = False,
                        static_shapes: bool = False) -> tf.data.Dataset:
    """The training / evaluation reader of pretraining records.

    Args:
        file_pattern: glob(s), comma-separated allowed; `.gz` files are read
            as GZIP.
        batch_size: examples per batch *of this pipeline* (under
            tf.distribute pass `input_context.get_per_replica_batch_size(global)`).
        max_seq_length, max_predictions_per_seq: the record's lengths.
        is_training: shuffle files and records, repeat forever and drop the
            last partial batch; otherwise one ordered pass, partial batch kept.
        masking: "static" (the record's masks) or "dynamic" (the original ids
            are restored and masked again on the fly with the same n-gram
            masking as the data tool: fresh masks every epoch, reproducible
            from `seed`).
        seed: seed of file/record shuffling and dynamic masks.
        input_context: a tf.distribute.InputContext: each input pipeline
            reads a disjoint part (whole files when there are enough, else
            every n-th record).
        vocab_size: the model's vocabulary size: input_ids and masked_lm_ids
            at or above it stop the reader with an error naming the value
            (on GPU/TPU an out-of-range lookup silently reads zeros).
            Required with masking="dynamic" (random replacements).
        type_vocab_size: the model's number of segment types: segment_ids at
            or above it stop the reader likewise.
        masked_lm_prob, ngram, favor_shorter_ngram, do_whole_word_mask:
            dynamic masking settings. A masked_lm_prob above the records'
            rate yields more masked positions per row than the records hold
            (`dynamic_predictions_per_seq`): e.g. 0.4 at length 128 gives 51.
        shuffle_buffer_size: record shuffle buffer (training).
        cycle_length: files read in parallel.
        deterministic: tf.data determinism of the parallel stages (None:
            the tf.data default, deterministic).
        skip_corrupt_records: a record that fails its CRC or is truncated
            ends the reading of its file (tf.data cannot find the next record
            boundary after it) instead of stopping with a DataLossError; off
            by default. TensorFlow logs each such error at WARNING level.
        static_shapes: evaluation in fixed shapes, as a TPU needs
            (`padded_steps`): every batch holds exactly batch_size rows, the
            last ones filled with padding rows that count for nothing
            (`is_real_example` 0), and the pipeline yields a whole number of
            steps (one batch per replica it feeds), so no replica gets a short
            or empty batch. Training batches are fixed anyway (the remainder
            is dropped).

    Returns:
        A dataset of dicts: int32 input_ids, input_mask, segment_ids,
        token_boundary [B, T], masked_lm_positions, masked_lm_ids [B, P],
        float32 masked_lm_weights [B, P], int32 next_sentence_labels [B]
        (and float32 is_real_example [B] for evaluation with static_shapes).

    Example:

    >>> strategy.distribute_datasets_from_function(lambda ctx: pretraining_dataset(
    ...     "data/*.tfrecord", ctx.get_per_replica_batch_size(4096), 512, 20,
    ...     input_context=ctx))                                  # doctest: +SKIP
    """
    if masking not in ("static", "dynamic"):
        raise ValueError(f"masking must be 'static' or 'dynamic', got {masking!r}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    mask_cfg = None
    if masking == "dynamic":
        if vocab_size is None:
            raise ValueError("masking='dynamic' needs vocab_size (random replacement ids).")
        mask_cfg = masking_lib.MaskingConfig(
            vocab_size=vocab_size,
            max_predictions_per_seq=dynamic_predictions_per_seq(
                max_seq_length, max_predictions_per_seq, masked_lm_prob),
            masked_lm_prob=masked_lm_prob, ngram=ngram, favor_shorter_ngram=favor_shorter_ngram,
            do_whole_word_mask=do_whole_word_mask)
    num_pipelines, pipeline_id = 1, 0
    if input_context is not None:
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
    ds = _records(_files(file_pattern), num_pipelines, pipeline_id, is_training, seed,
                  cycle_length, deterministic, skip_corrupt_records)
    if is_training:
        ds = ds.shuffle(shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True)

    def parse(serialized):
        return check_feature_ranges(
            parse_examples(serialized, max_seq_length, max_predictions_per_seq),
            max_seq_length, vocab_size, type_vocab_size)

    no_autograph = tf.autograph.experimental.do_not_convert
    # Static evaluation reads a step of batches at once and pads it whole.
    steps = static_shapes and not is_training
    per_step = 1
    if steps and input_context is not None:
        per_step = max(1, input_context.num_replicas_in_sync // max(num_pipelines, 1))
    rows = batch_size * per_step
    if mask_cfg is None:
        ds = ds.batch(rows, drop_remainder=is_training)
        ds = ds.map(no_autograph(parse), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=deterministic)
    else:
        remask = _dynamic_remask(parse, mask_cfg, seed, pipeline_id)
        ds = ds.enumerate().batch(rows, drop_remainder=is_training)
        ds = ds.map(no_autograph(remask), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=deterministic)
    if steps:
        ds = ds.map(no_autograph(lambda f: padded_steps(f, batch_size, per_step))).unbatch()
    return ds.prefetch(tf.data.AUTOTUNE)


def padded_steps(features: Dict[str, tf.Tensor], batch_size: int, per_step: int) -> Dict[str, tf.Tensor]:
    """Up to batch_size * per_step parsed rows -> [per_step, batch_size, ...], padded with zero rows.

    `is_real_example` (float32, 1 for a read row, 0 for padding) is added;
    padding rows have masked_lm_weights 0, so `pretraining_loss_terms`
    counts them for nothing.

    Example:

    >>> out = padded_steps({"input_ids": tf.ones([3, 2], tf.int32)}, 2, 2)
    >>> out["input_ids"].shape, out["is_real_example"].numpy().tolist()
    (TensorShape([2, 2, 2]), [[1.0, 1.0], [1.0, 0.0]])
    """
    rows = batch_size * per_step
    real = tf.shape(features["input_ids"])[0]
    out = {"is_real_example": tf.reshape(tf.cast(tf.range(rows) < real, tf.float32), [per_step, batch_size])}
    for key, value in features.items():
        padded = tf.pad(value, [[0, rows - real]] + [[0, 0]] * (value.shape.rank - 1))
        out[key] = tf.reshape(padded, [per_step, batch_size] + value.shape[1:].as_list())
    return out


def dynamic_predictions_per_seq(max_seq_length: int, max_predictions_per_seq: int,
                                masked_lm_prob: float) -> int:
    """Masked positions per row under dynamic masking: the records' count, or
    more when `masked_lm_prob` x `max_seq_length` asks for more.

    >>> dynamic_predictions_per_seq(128, 20, 0.15), dynamic_predictions_per_seq(128, 20, 0.4)
    (20, 51)
    """
    return max(max_predictions_per_seq, int(round(masked_lm_prob * max_seq_length)))


def _records(files: List[str], num_pipelines: int, pipeline_id: int, is_training: bool,
             seed: int, cycle_length: int, deterministic: Optional[bool],
             skip_corrupt_records: bool = False) -> tf.data.Dataset:
    """The serialised records of this input pipeline's part of `files`: whole
    files when there are at least as many as pipelines, else every n-th
    record; files shuffled and repeated forever when training.  With
    `skip_corrupt_records`, a corrupt record ends its file's records."""
    ds = tf.data.Dataset.from_tensor_slices(files)
    shard_records = False
    if num_pipelines > 1:
        if len(files) >= num_pipelines:
            ds = ds.shard(num_pipelines, pipeline_id)
        else:
            shard_records = True
    if is_training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()

    def read(path):
        comp = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
        return tf.data.TFRecordDataset(path, compression_type=comp)

    if skip_corrupt_records:  # each skip logged with its file, in the first pass (pipelines/corrupt_records.py)
        from pipelines.corrupt_records import reader_logging_skips

        read_logging, ds = reader_logging_skips(files), ds.enumerate()
        share = len(files[pipeline_id::num_pipelines]) if num_pipelines > 1 and not shard_records else len(files)
        read = lambda index, path: read_logging(path, index < share)  # noqa: E731

    no_autograph = tf.autograph.experimental.do_not_convert
    ds = ds.interleave(no_autograph(read), cycle_length=max(1, min(cycle_length, len(files))),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if shard_records:
        ds = ds.shard(num_pipelines, pipeline_id)
    return ds


def _dynamic_remask(parse, mask_cfg: masking_lib.MaskingConfig, seed: int, pipeline_id: int):
    """The map function of masking="dynamic": parses a batch of (element
    number, record), restores the original ids and masks them again with
    keys from (seed, pipeline, element number, the record's bytes)."""
    base_key = random_ops.fold_in(
        random_ops.fold_in(random_ops.seed_key(seed), random_ops.DYNAMIC), pipeline_id)

    def remask(index, serialized):
        feats = parse(serialized)
        ids = unmasked_input_ids(feats)
        # The element counter runs on across epochs (enumerate after
        # repeat), so every epoch gets fresh masks. The record's own bytes
        # (farmhash64) are folded in too: every tf.data service worker runs
        # this pipeline on its files and numbers its records from 0, so the
        # counter alone would give the k-th record of every worker one key.
        content = tf.bitcast(tf.fingerprint(serialized), tf.uint64)
        keys = random_ops.fold_in(random_ops.fold_in(base_key, index), content)
        out = masking_lib.mask_tokens(ids, feats["input_mask"], feats["token_boundary"] > 0,
                                      keys, mask_cfg)
        for name in ("input_ids", "masked_lm_positions", "masked_lm_ids",
                     "masked_lm_weights"):
            feats[name] = out[name]
        return feats

    return remask
