"""Tiny pretraining data and configs shared by the training tests and their
subprocess scripts. Independent of `pipelines` on purpose: the loop is tested
against the TFRecord contract, not against one reader."""

import dataclasses
import os
import socket

import numpy as np
import tensorflow as tf

import albert_tf

SEQ = 16
PREDS = 3
VOCAB = 100


def tiny_config(**overrides) -> albert_tf.AlbertConfig:
    values = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                  embedding_size=8, num_hidden_layers=2,
                  max_position_embeddings=SEQ)
    values.update(overrides)
    return albert_tf.AlbertConfig.tiny(**values)


def _int64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_tfrecords(path: str, num_examples: int, seed: int = 0,
                    seq_length: int = SEQ, preds: int = PREDS) -> str:
    """Random examples with the original's feature names; learnable SOP/MLM
    signal is irrelevant here, only shapes and determinism matter."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_examples):
            length = int(rng.integers(6, seq_length + 1))
            ids = np.zeros(seq_length, np.int64)
            ids[:length] = rng.integers(5, VOCAB, size=length)
            ids[0], ids[length - 1] = 2, 3
            mask = (np.arange(seq_length) < length).astype(np.int64)
            segments = ((np.arange(seq_length) >= length // 2) & (mask == 1)
                        ).astype(np.int64)
            positions = np.zeros(preds, np.int64)
            labels = np.zeros(preds, np.int64)
            weights = np.zeros(preds, np.float32)
            count = int(rng.integers(1, preds + 1))
            chosen = np.sort(rng.choice(np.arange(1, length - 1), count,
                                        replace=False))
            positions[:count] = chosen
            labels[:count] = ids[chosen]
            weights[:count] = 1.0
            ids[chosen] = 4
            feature = {
                "input_ids": _int64(ids),
                "input_mask": _int64(mask),
                "segment_ids": _int64(segments),
                "token_boundary": _int64(np.ones(seq_length, np.int64)),
                "masked_lm_positions": _int64(positions),
                "masked_lm_ids": _int64(labels),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=weights)),
                "next_sentence_labels": _int64([int(rng.integers(0, 2))]),
            }
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def make_dataset_fn(pattern: str, global_batch: int, seq_length: int = SEQ,
                    preds: int = PREDS, repeat: bool = True):
    """A deterministic reader of the contract features (sharded per input
    pipeline, per-replica batches)."""
    spec = {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([preds], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([preds], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([preds], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        out = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
               for k, v in example.items()}
        out["next_sentence_labels"] = tf.reshape(out["next_sentence_labels"], [])
        return out

    def dataset_fn(ctx):
        files = sorted(tf.io.gfile.glob(pattern))
        ds = tf.data.TFRecordDataset(files)
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        if repeat:
            ds = ds.repeat()
        ds = ds.map(parse)
        return ds.batch(ctx.get_per_replica_batch_size(global_batch),
                        drop_remainder=repeat)

    return dataset_fn



def pretraining_kwargs(**settings) -> dict:
    """Flat settings (the config fields' names, e.g. train_batch_size=8,
    log_steps=1) -> run_pretraining's optimization / runtime / data configs;
    other keys (strategy, log_callback, ...) pass through."""
    from albert_tf import training

    out = {}
    for name, cls in (("optimization", training.OptimizationConfig),
                      ("runtime", training.RuntimeConfig),
                      ("data", training.PretrainingDataConfig)):
        fields = {f.name for f in dataclasses.fields(cls)}
        out[name] = cls(**{k: settings.pop(k) for k in list(settings)
                           if k in fields})
    out.update(settings)
    return out


def free_ports(n: int) -> list:
    """`n` TCP ports free on 127.0.0.1 now (for the workers of a two-process cluster)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def pretrain_argv(folder, output_dir, steps: int, *extra) -> list:
    """albert-pretrain's flags for a tiny run of `steps` on 32 records written into `folder` (with the
    config), for calling the binary's `main` in-process (every flag given: none left from another run)."""
    write_tfrecords(os.path.join(str(folder), "train.tfrecord"), 32, seed=3)
    tiny_config().to_json_file(os.path.join(str(folder), "albert_config.json"))
    return [f"--albert_config_file={os.path.join(str(folder), 'albert_config.json')}",
            f"--input_file={os.path.join(str(folder), 'train.tfrecord')}", f"--output_dir={output_dir}",
            "--spm_model_file=", "--preset=", "--train_batch_size=8", "--gradient_accumulation_steps=1",
            "--max_seq_length=16", "--max_predictions_per_seq=3", f"--num_train_steps={steps}",
            "--num_warmup_steps=1", "--learning_rate=0.01", "--save_checkpoints_steps=100", "--log_steps=1",
            "--do_train", "--nodo_eval", "--strategy=default", "--mixed_precision=float32", "--init_checkpoint=",
            *extra]
