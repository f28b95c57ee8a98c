"""albert-tf's encoder run by OpenVINO through our own export (`albert-export --format=openvino`).

The model is `AlbertEncoder` with random weights (seed 0, the config of
`ours.infer`: albert_base_v2; the raw-text row: its vocabulary is the text
benchmarks' SentencePiece model), written by
`albert_tf.export.openvino.export_openvino` once per configuration and
weights (the folder's name is a hash of both, of the SentencePiece model, of
the versions and of albert_tf's layers, models and export code) and compiled as the Hugging Face ONNX row is
(`onnx_runtimes._openvino_runner`: INFERENCE_PRECISION_HINT bf16 or f32,
PERFORMANCE_HINT LATENCY by default).

- `infer`: the ids model (`text_signatures=False`: input_ids, input_mask,
  segment_ids), full-length batches. Its export checks a SentencePiece model
  of the encoder's vocabulary, which the ids graph does not hold: the text
  benchmarks' model padded with unused pieces to that size.
- `text`: the text model (openvino-tokenizers inside: strings in, each batch
  padded to its longest row, the dense layers on the real tokens only unless
  pack_tokens=False) over the pool's batches.

Every timed function first compares the compiled model's outputs with our
Keras encoder's (float32) on the same inputs, reported as
"max_diff_vs_keras" and "within_bf16_tolerance" (`onnx_runtimes.compare_outputs`);
the text model's check also says whether its tokens ("input_mask") equal our
TensorFlow preprocessor's ("same_tokens").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from typing import Dict, Optional, Tuple

import numpy as np

from bench.systems import common, onnx_runtimes, threads

IDS_OUTPUTS = ("sequence_output", "pooled_output")
TEXT_OUTPUTS = ("input_mask", "sequence_output", "pooled_output")
KERAS = "keras"  # the reference's name in the check's keys ("max_diff_vs_keras")


def _cache_dir(cache_dir: Optional[str]) -> str:
    folder = cache_dir or os.path.join(tempfile.gettempdir(), "albert-tf-bench", "openvino-ours")
    os.makedirs(folder, exist_ok=True)
    return folder


def _encoder(config):
    """AlbertEncoder(config), float32, with seed-0 weights."""
    import keras

    import albert_tf

    keras.utils.set_random_seed(0)
    return albert_tf.AlbertEncoder(config)


def _bf16_copy(encoder):
    """The encoder with its weights, computing in mixed_bfloat16 (the reference for bf16's own rounding)."""
    config = encoder.get_config()
    config["dtype"] = "mixed_bfloat16"
    copy = type(encoder).from_config(config)
    copy.set_weights(encoder.get_weights())
    return copy


def _keras_outputs(encoder, ids: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    out = encoder({k: np.asarray(v, np.int32) for k, v in ids.items()}, training=False)
    return (np.asarray(out["sequence_output"], np.float32), np.asarray(out["pooled_output"], np.float32))


def padded_spm(spm_path: str, vocab_size: int, cache_dir: Optional[str] = None) -> str:
    """spm_path itself when it has vocab_size pieces, else a copy padded with UNUSED pieces (cached).

    For the ids export only: its graph holds no tokenizer, and unused pieces
    are never produced from text.
    """
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(spm_path, "rb") as f:
        proto.ParseFromString(f.read())
    have = len(proto.pieces)
    if have == vocab_size:
        return spm_path
    if have > vocab_size:
        raise ValueError(f"{spm_path} has {have} pieces, more than the vocabulary of {vocab_size}.")
    digest = hashlib.sha256(proto.SerializeToString()).hexdigest()[:16]
    path = os.path.join(_cache_dir(cache_dir), f"spm-{digest}-{vocab_size}.model")
    if not os.path.exists(path):
        unused = sentencepiece_model_pb2.ModelProto.SentencePiece.UNUSED
        for i in range(vocab_size - have):
            proto.pieces.add(piece=f"<unused{i}>", score=0.0, type=unused)
        with open(f"{path}.{os.getpid()}.tmp", "wb") as f:
            f.write(proto.SerializeToString())
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    return path


def _export_key(encoder, spm_path: str, text: bool, pack_tokens: bool) -> str:
    """A hash of the weights, the config, the SentencePiece model, the export's flags, the versions and the code."""
    from importlib import metadata

    key = hashlib.sha256()
    for w in encoder.get_weights():
        key.update(np.ascontiguousarray(w).tobytes())
    with open(spm_path, "rb") as f:
        key.update(f.read())
    versions = [metadata.version(n) for n in ("tensorflow", "keras", "openvino")]
    key.update(f"{encoder.get_config()} text={text} pack_tokens={pack_tokens} {versions}".encode())
    key.update(_code_digest().encode())
    return key.hexdigest()[:16]


def _code_digest() -> str:
    """A hash of the code an export traces (albert_tf's layers, models and export), so a change re-exports."""
    import albert_tf

    root = os.path.dirname(os.path.abspath(albert_tf.__file__))
    digest = hashlib.sha256()
    for folder in ("layers", "models", "export"):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, folder))):
            for name in sorted(n for n in names if n.endswith(".py")):
                with open(os.path.join(dirpath, name), "rb") as f:
                    digest.update(name.encode() + f.read())
    return digest.hexdigest()


def export(encoder, spm_path: str, text: bool, cache_dir: Optional[str] = None, pack_tokens: bool = True) -> str:
    """The model.xml of export_openvino(encoder) (exported once per key, then cached)."""
    from albert_tf.export.openvino import MODEL_FILE, export_openvino

    name = f"albert-{'text' if text else 'ids'}-{_export_key(encoder, spm_path, text, pack_tokens)}"
    folder = os.path.join(_cache_dir(cache_dir), name)
    if not os.path.exists(folder):
        tmp = f"{folder}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        version = export_openvino(encoder, tmp, version=1, spm_model_file=spm_path, text_signatures=text,
                                  pack_tokens=pack_tokens,
                                  max_seq_length=min(common.TEXT_MAX_SEQ_LENGTH,
                                                     encoder.config.max_position_embeddings))
        os.replace(version, folder)
        shutil.rmtree(tmp, ignore_errors=True)
    return os.path.join(folder, MODEL_FILE)


def _runner(encoder, spm_path: str, text: bool, precision: str, hint: str, cache_dir: Optional[str],
            pack_tokens: bool = True):
    """(run(feeds) -> outputs, settings) of the exported model compiled by OpenVINO."""
    onnx_runtimes._check_runtime("openvino", precision)
    path = export(encoder, spm_path, text, cache_dir, pack_tokens)
    if text:
        import openvino_tokenizers  # noqa: F401  (registers the tokenizer's operations)
    return onnx_runtimes._openvino_runner(path, precision, hint, TEXT_OUTPUTS if text else IDS_OUTPUTS)


def _reference(encoder, ids: Dict[str, np.ndarray]):
    """(float32, mixed_bfloat16) outputs of our Keras encoder on ids (building its weights first)."""
    want = _keras_outputs(encoder, ids)
    return want, _keras_outputs(_bf16_copy(encoder), ids)


def _check_ids(vocab_size: int, batch: int = 4, seq: int = 32) -> Dict[str, np.ndarray]:
    """onnx_runtimes' padded check batch under our inputs' names, int32."""
    feeds = onnx_runtimes._check_inputs(batch, seq, vocab_size)
    names = {"input_ids": "input_ids", "input_mask": "attention_mask", "segment_ids": "token_type_ids"}
    return {ours: feeds[theirs].astype(np.int32) for ours, theirs in names.items()}


def _compare(got, ids, reference) -> Dict[str, object]:
    return onnx_runtimes.compare_outputs(got, *reference, ids["input_mask"].astype(bool), reference=KERAS)


@threads.uses("tensorflow")
def infer(precision: str, batch: int, seq: int, warmup: int, steps: int, hint: str = onnx_runtimes.DEFAULT_HINT,
          config=None, spm_path: Optional[str] = None, cache_dir: Optional[str] = None,
          shape: str = "base") -> Dict[str, object]:
    """Full-length inference of the ids model (both outputs computed), sequences/s.

    config: an AlbertConfig (default: the `shape`'s, as ours.infer);
    spm_path: a SentencePiece model of at most its vocabulary (default: the
    text benchmarks' model, trained once in the bench cache).
    """
    from bench.systems import ours

    config = config if config is not None else ours._config(shape)
    spm_path = spm_path or common.spm_model(os.path.join(tempfile.gettempdir(), "albert-tf-bench"))
    encoder = _encoder(config)
    ids = _check_ids(config.vocab_size)
    reference = _reference(encoder, ids)
    run, info = _runner(encoder, padded_spm(spm_path, config.vocab_size, cache_dir), False, precision, hint,
                        cache_dir)
    check = _compare(run(ids), ids, reference)
    ex = common.synthetic_pretraining_batch(batch, seq, 1, config.vocab_size)
    feeds = {k: ex[k] for k in ("input_ids", "input_mask", "segment_ids")}
    times = common.timed_calls(lambda: run(feeds)[1], warmup, steps)
    return dict(common.per_second(batch, times), **info, **check)


@threads.uses("tensorflow")
def text(precision: str, spm_path: str, pool_file: str, feed: str, warmup: int, steps: int,
         hint: str = onnx_runtimes.DEFAULT_HINT, config=None, cache_dir: Optional[str] = None,
         check_rows: int = 8, pack_tokens: bool = True, shape: str = "base") -> Dict[str, object]:
    """Raw strings through the text model over the pool's batches (`common.read_text_pool`).

    config: default the `shape`'s with the SentencePiece model's vocabulary;
    pack_tokens: as export_openvino's (False: every batch padded to its longest
    row, as the peers' text paths). The check runs on the first `check_rows` sentences of the first timed
    batch: the text model's tokens against our TensorFlow preprocessor's,
    then (when they are the same) its outputs against our Keras encoder's.
    """
    import albert_tf
    from bench.systems import ours

    sentences, warm, timed = common.read_text_pool(pool_file, feed, warmup, steps)
    config = config if config is not None else ours._config(shape, vocab_size=common.TEXT_VOCAB_SIZE)
    encoder = _encoder(config)
    pre = albert_tf.AlbertTextPreprocessor(spm_path, max_seq_length=common.TEXT_MAX_SEQ_LENGTH)
    texts = np.array([sentences[i] for i in timed[0][:check_rows]])
    ids = {k: np.asarray(v) for k, v in pre(texts).items()}
    reference = _reference(encoder, ids)
    run, info = _runner(encoder, spm_path, True, precision, hint, cache_dir, pack_tokens)
    mask, *got = run({"text": texts})
    check = {"same_tokens": mask.shape == ids["input_mask"].shape and bool(np.all(mask == ids["input_mask"]))}
    check.update(_compare(got, ids, reference) if check["same_tokens"]
                 else {"max_diff_vs_keras": None, "within_bf16_tolerance": False})
    masks = []

    def serve(batch):
        masks.append(run({"text": np.array([sentences[i] for i in batch])})[0])

    times = common.timed_pass(serve, warm, timed)
    return dict(common.text_pass_result(times, masks[len(warm):]), **info, **check)
