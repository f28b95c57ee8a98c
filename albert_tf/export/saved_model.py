"""`export_saved_model`: choose the head and preprocessor, trace the signatures, save, write assets."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from albert_tf.config import DEFAULT_MAX_SEQ_LENGTH, max_seq_length_for  # noqa: F401 (exported here too)
from albert_tf.export.assets import _write_assets
from albert_tf.export.base import IdsOnlyPacking, has_tokenizer
from albert_tf.export.heads import _HEAD_BUILDERS, _resolve_head
from albert_tf.export.versions import _choose_version, publish, release_version, remove_staging, staging_name
from albert_tf.export.warmup import write_warmup_requests
# Frozen weights live in the graph's protocol buffer, which cannot exceed 2 GB.
FREEZE_WEIGHTS_MAX_BYTES = 1 << 30


def export_saved_model(
    model: Any,
    export_dir: str,
    *,
    head: Optional[str] = None,
    version: Optional[int] = None,
    max_seq_length: Optional[int] = None,
    spm_model_file: Optional[str] = None,
    do_lower_case: Optional[bool] = None,
    label_names: Optional[Sequence[str]] = None,
    top_k: int = 5,
    max_answer_length: Optional[int] = None,
    text_signatures: bool = True,
    normalization: Optional[str] = None,
    doc_stride: Optional[int] = None,
    max_context_length: Optional[int] = None,
    null_score_diff_threshold: Optional[float] = None,
    n_best_size: Optional[int] = None,
    freeze_weights: Optional[bool] = None,
) -> str:
    """Writes `model` as a TF Serving SavedModel with raw-text signatures.

    Args:
        model: an `AlbertEncoder`, `AlbertPretrainer` (fill-mask) or a task
            model (`AlbertClassifier`, `AlbertSpanQA`, `AlbertMultipleChoice`,
            `AlbertTokenClassifier`).
        export_dir: the model's folder (TF Serving's model base path); the
            SavedModel goes to export_dir/<version>/.
        head: one of HEADS; default: inferred from the model's class.
        version: the version number; default: one more than the largest
            existing numeric subfolder (1 when none). An existing version is
            never overwritten (FileExistsError).
        max_seq_length: longest packed sequence (longer text is truncated as
            in training); default: the task model's preprocessor's, else 128
            (or max_position_embeddings when that is smaller).
        spm_model_file: the SentencePiece model; required for the text
            signatures of encoder and pretrainer, optional for task models
            (they carry their own). Written to assets/spm.model for clients.
            An ids-only export (text_signatures=False) needs none, except
            span_qa (its answers are text); without one it has no
            assets/spm.model, and the pretrainer serves no `top_k_pieces`
            and tagging no `pieces` (ids only).
        do_lower_case: default: the task model's preprocessor's, else True.
        label_names: classifier label names or tagging tag names (default:
            the model's `label_names`/`tag_names`, else "0", "1", ...).
        top_k: fill-mask candidates per [MASK] (pretrainer).
        max_answer_length: longest answer in pieces (span_qa); default: the
            model's (task_config.json, the fine-tuning value), else 30.
        text_signatures: False writes only `serve_token_ids` (also as
            `serving_default`), with no tensorflow-text op in the graph: for
            a stock TF Serving, which cannot load a graph that holds the
            SentencePiece op even when only the ids signature is called. Needs
            no SentencePiece model (see spm_model_file).
        normalization: "original" or "xlnet" (see
            `pipelines.tokenizer.preprocess_text`); default: the task model's
            preprocessor's, else "original".
        doc_stride: span_qa: windows over long contexts start this many
            pieces apart, as the SQuAD reader's; default: the model's
            (task_config.json), else 128.
        max_context_length: span_qa: context pieces served (the text is cut
            to this many pieces' worth of characters first); default 4096.
        null_score_diff_threshold: span_qa v2: answer "" when the null odds
            exceed it; default: the model's (task_config.json), else 0.0.
        n_best_size: span_qa v1: a span starts at one of each window's n
            highest start logits and ends at one of its n highest end logits,
            as fine-tuning's predictions.json; default: the model's
            (task_config.json, the fine-tuning value), else 20.
        freeze_weights: True writes the weights as graph constants (no
            variables): oneDNN then prepares each weight matrix once and runs
            its fastest kernels, 1.24x the speed of a variables graph on an AMX
            CPU (`bench/results/performance_notes.md`). The graph cannot be
            fine-tuned further from the SavedModel (export again from the
            checkpoint). Default: True when the weights take at most 1 GiB
            in float32 (the graph's 2 GB protocol-buffer limit), else False.

    Returns:
        The version folder written (export_dir/N).

    Raises:
        ValueError: unknown head, a model that does not match the head, a
            missing SentencePiece model (text signatures, span_qa), bad label
            names or version.
        FileExistsError: export_dir/version exists already.

    Example:
    >>> pre = albert_tf.load_checkpoint("runs/base")                      # doctest: +SKIP
    >>> export_saved_model(pre, "exports/fill_mask", spm_model_file="runs/base/spm.model")  # doctest: +SKIP
    'exports/fill_mask/1'
    >>> export_saved_model(albert_tf.load_task_model("runs/sst2"), "exports/sst2")  # doctest: +SKIP
    'exports/sst2/1'
    >>> export_saved_model(pre.encoder, "exports/ids", text_signatures=False)  # doctest: +SKIP
    'exports/ids/1'
    """
    head = _resolve_head(model, head)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    model, preprocessor = _make_preprocessor(model, spm_model_file, max_seq_length, do_lower_case, normalization)
    if text_signatures and not has_tokenizer(preprocessor):
        raise preprocessor.missing()
    serving = _HEAD_BUILDERS[head](model, preprocessor, label_names=label_names, top_k=top_k,
                                   max_answer_length=max_answer_length, doc_stride=doc_stride,
                                   max_context_length=max_context_length,
                                   null_score_diff_threshold=null_score_diff_threshold, n_best_size=n_best_size)
    serving.text_signatures = bool(text_signatures)
    serving.freeze_weights = _should_freeze(model, freeze_weights)
    return _write_version(serving, model, preprocessor, export_dir, _choose_version(export_dir, version))


def _write_version(serving, model, preprocessor, export_dir: str, version: int) -> str:
    """Writes export_dir/version whole or not at all: a temporary folder, renamed when complete."""
    final_dir = os.path.join(export_dir, str(version))
    # TF Serving only loads numeric folder names: the temporary one is ignored.
    tmp_dir = staging_name(final_dir)
    tf.io.gfile.makedirs(export_dir)
    try:
        with _quiet_tensorflow_logger():
            signatures = serving.signatures()
            tf.saved_model.save(serving, tmp_dir, signatures=signatures)
        _write_assets(tmp_dir, model, preprocessor, serving)
        # assets.extra/tf_serving_warmup_requests (when tensorflow-serving-api is installed)
        write_warmup_requests(tmp_dir, signatures, os.path.basename(os.path.normpath(export_dir)))
        publish(tmp_dir, final_dir, last="saved_model.pb")  # remote: file by file, saved_model.pb last
    finally:
        remove_staging(tmp_dir)
        release_version(export_dir, version)  # the folder is in place (or the export failed)
    return final_dir


def _should_freeze(model, freeze_weights: Optional[bool]) -> bool:
    """freeze_weights, or by default whether the float32 weights fit FREEZE_WEIGHTS_MAX_BYTES."""
    weight_bytes = 4 * sum(int(np.prod(w.shape)) for w in model.weights)
    if freeze_weights is None:
        return weight_bytes <= FREEZE_WEIGHTS_MAX_BYTES
    if freeze_weights and weight_bytes > FREEZE_WEIGHTS_MAX_BYTES:
        raise ValueError(f"freeze_weights=True: the weights take {weight_bytes / 2**30:.2f} GiB, more than the "
                         f"{FREEZE_WEIGHTS_MAX_BYTES / 2**30:.0f} GiB a frozen graph can hold; export with "
                         "freeze_weights=False.")
    return bool(freeze_weights)


@contextlib.contextmanager
def _quiet_tensorflow_logger():
    """Hides tf.saved_model.save's INFO lines (input renaming, sharding, the
    temporary folder's name); warnings still show."""
    from absl import logging as absl_logging

    logger = tf.get_logger()
    level, verbosity = logger.level, absl_logging.get_verbosity()
    if logger.getEffectiveLevel() < logging.WARNING:
        logger.setLevel(logging.WARNING)
    absl_logging.set_verbosity(min(verbosity, absl_logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
        absl_logging.set_verbosity(verbosity)


def _make_preprocessor(model, spm_model_file, max_seq_length, do_lower_case, normalization=None):
    """(model, preprocessor): the model's own preprocessor, a new one, or (no
    SentencePiece model anywhere) an `IdsOnlyPacking` holding the settings.

    A task model packs text itself (span QA and multiple choice truncate in
    their own way), so when its preprocessor must change (another
    max_seq_length, lower-casing, normalisation or SentencePiece model, or
    none yet) the export uses a copy of the model built with the new one; the
    caller's model is left as it is. The preprocessor returned is then the
    copy's own: the one its graphs use, so the one the export must track.
    """
    from albert_tf.layers.preprocessor import AlbertTextPreprocessor
    from pipelines.tokenizer import DEFAULT_NORMALIZATION

    own = getattr(model, "preprocessor", None)
    settings = own.get_config() if own is not None else {}
    limit = model.config.max_position_embeddings
    wanted = {
        # 128 capped at the model's positions when neither the caller nor the model says (albert_tf.config).
        "max_seq_length": max_seq_length_for(limit, max_seq_length or settings.get("max_seq_length")),
        "do_lower_case": settings.get("do_lower_case", True) if do_lower_case is None else bool(do_lower_case),
        "normalization": normalization or settings.get("normalization") or DEFAULT_NORMALIZATION,
    }
    if spm_model_file is None and own is not None:
        if all(settings.get(key) == value for key, value in wanted.items()):
            return model, own
        pre = AlbertTextPreprocessor(spm_model_proto=own.spm_model_proto, **wanted)
    elif spm_model_file is None:
        # Nothing to tokenize with: enough for an ids-only export (the text graphs raise `missing()`).
        return model, IdsOnlyPacking(type(model).__name__, **wanted)
    else:
        if not tf.io.gfile.exists(spm_model_file):
            raise FileNotFoundError(f"SentencePiece model not found: {spm_model_file!r}")
        pre = AlbertTextPreprocessor(spm_model_file, **wanted)
        if pre.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"SentencePiece model {spm_model_file!r} has {pre.vocab_size} pieces but the model's "
                f"vocab_size is {model.config.vocab_size}."
            )
    if hasattr(model, "features"):  # a task model: rebuild it around the new preprocessor
        model = _with_preprocessor(model, pre)
        pre = model.preprocessor
    return model, pre


def _with_preprocessor(model, preprocessor):
    """A copy of a task model (same weights) whose preprocessor is `preprocessor`."""
    import keras

    config = model.get_config()
    config["preprocessor"] = keras.layers.serialize(preprocessor)
    copy = type(model).from_config(config)
    copy.set_weights(model.get_weights())
    # How inference runs is set on the instance, not in the config.
    copy.inference_rows_per_bucket = model.inference_rows_per_bucket
    copy.encoder.inference_packs_tokens = model.encoder.inference_packs_tokens
    return copy
