"""SavedModels for TF Serving: raw text in, predictions out, for every head.

`export_saved_model(model, export_dir)` writes `export_dir/N/` (TF Serving's
version layout) with these signatures:

- `serving_default`: raw UTF-8 strings in. Lower-casing, normalisation,
  SentencePiece and packing run inside the graph (the `AlbertTextPreprocessor`
  that fine-tuning uses). Inputs: `text` (tf.string [batch]); span_qa takes
  `text` (question) and `text_pair` (context); multiple_choice takes `text`
  (context) and `choices` (tf.string [batch, num_choices]).
- `serve_text_pair` (encoder, classifier, tagging): `text` and `text_pair`,
  packed `[CLS] text [SEP] text_pair [SEP]`. This is how the pair is optional:
  single texts go to `serving_default`, pairs to `serve_text_pair`. (TF
  Serving feeds every input a signature names, so one signature cannot leave
  an input out.)
- `serve_token_ids`: the same outputs from `input_ids`, `input_mask`,
  `segment_ids` (int32 [batch, seq]; multiple_choice [batch, choices, seq]),
  for clients that tokenize themselves.

A model server must have the tensorflow-text ops to load a graph that holds
the SentencePiece op, even to call `serve_token_ids`. For a stock TF Serving,
export with `text_signatures=False`: only `serve_token_ids` (also as
`serving_default`), no tensorflow-text op in the graph.

Outputs by head (float outputs are float32 even for mixed-precision models):

- encoder: `pooled_output` [B, H], `sequence_output` [B, T, H], `input_mask`
  [B, T] (T = longest packed text in the request, at most max_seq_length).
- pretrainer (fill-mask; write `[MASK]` in the text): `masked_positions`
  [B, M] (position in the packed sequence, -1 = padding when rows have fewer
  masks than the row with most), `top_k_pieces` (tf.string), `top_k_ids` and
  `top_k_scores` (softmax probabilities) [B, M, k].
- classifier: `probabilities` [B, C], `label` (tf.string [B], the label
  name), `logits` [B, C]; regression (one output): `value` [B], `logits` [B, 1].
- span_qa: `answer` (tf.string [B], the normalised answer text), `start` and
  `end` (int32 [B]: first and last answer piece, counted in the context's
  pieces; -1 when there is no context), `score` (start + end logit; SQuAD v2
  heads: start + end log-probability over their beam), and for SQuAD v2
  models `no_answer_probability` (sigmoid of the answerability logit).
- multiple_choice: `probabilities` [B, N], `logits` [B, N], `choice` int32 [B].
- tagging: `tags` (tf.string [B, T]; "" on padding), `pieces` (tf.string
  [B, T], the SentencePiece pieces including [CLS]/[SEP]; "" on padding),
  `tag_ids` int32 [B, T] (-1 on padding), `input_mask` [B, T].

The folder also holds assets/spm.model, assets/albert_config.json and, for
task models, assets/task_config.json plus assets/label_names.txt (classifier)
or assets/tag_names.txt (tagging), so it can be copied to a server as it is.
Loading needs only `import tensorflow, tensorflow_text` (for the
SentencePiece op), never this package.

`rest_predict(path, {"instances": [...]})` answers a TF Serving REST body
with the SavedModel loaded in this process, to check an export without a
model server.

Example:

>>> import albert_tf
>>> enc = albert_tf.load_checkpoint("runs/base").encoder              # doctest: +SKIP
>>> albert_tf.export_saved_model(enc, "exports/albert",                # doctest: +SKIP
...                              spm_model_file="runs/base/spm.model")
'exports/albert/1'
>>> rest_predict("exports/albert/1", {"instances": [{"text": "Hello."}]})  # doctest: +SKIP
{'predictions': [{'pooled_output': [...], 'sequence_output': [...], 'input_mask': [1, 1, 1, 1]}]}
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

HEADS = ("encoder", "pretrainer", "classifier", "span_qa", "multiple_choice", "tagging")
# Task-model class name -> head name (the classes live in albert_tf.models).
_TASK_CLASSES = {
    "AlbertClassifier": "classifier",
    "AlbertSpanQA": "span_qa",
    "AlbertMultipleChoice": "multiple_choice",
    "AlbertTokenClassifier": "tagging",
}
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
DEFAULT_MAX_SEQ_LENGTH = 128
SPIECE_UNDERLINE = "\u2581"
# What a fill-mask request writes where a piece is to be predicted.
MASK_TOKEN = "[MASK]"
SPM_ASSET = "spm.model"
CONFIG_ASSET = "albert_config.json"
TASK_CONFIG_ASSET = "task_config.json"
LABELS_ASSET = "label_names.txt"
TAGS_ASSET = "tag_names.txt"
# A logit for spans that are not allowed (outside the context, end < start).
_NEG = -1e9


# --------------------------------------------------------------------- public
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
    max_answer_length: int = 30,
    text_signatures: bool = True,
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
        spm_model_file: the SentencePiece model; required for encoder and
            pretrainer, optional for task models (they carry their own).
        do_lower_case: default: the task model's preprocessor's, else True.
        label_names: classifier label names or tagging tag names (default:
            the model's `label_names`/`tag_names`, else "0", "1", ...).
        top_k: fill-mask candidates per [MASK] (pretrainer).
        max_answer_length: longest answer in pieces (span_qa).
        text_signatures: False writes only `serve_token_ids` (also as
            `serving_default`), with no tensorflow-text op in the graph: for
            a stock TF Serving, which cannot load a graph that holds the
            SentencePiece op even when only the ids signature is called.

    Returns:
        The version folder written (export_dir/N).

    Raises:
        ValueError: unknown head, a model that does not match the head, a
            missing SentencePiece model, bad label names or version.
        FileExistsError: export_dir/version exists already.

    Example:
    >>> pre = albert_tf.load_checkpoint("runs/base")                      # doctest: +SKIP
    >>> export_saved_model(pre, "exports/fill_mask", spm_model_file="runs/base/spm.model")  # doctest: +SKIP
    'exports/fill_mask/1'
    >>> export_saved_model(albert_tf.load_task_model("runs/sst2"), "exports/sst2")  # doctest: +SKIP
    'exports/sst2/1'
    """
    head = _resolve_head(model, head)
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}.")
    model, preprocessor = _make_preprocessor(model, spm_model_file, max_seq_length, do_lower_case)
    serving = _HEAD_BUILDERS[head](model, preprocessor, label_names=label_names, top_k=top_k,
                                   max_answer_length=max_answer_length)
    serving.text_signatures = bool(text_signatures)
    version = _choose_version(export_dir, version)
    final_dir = os.path.join(export_dir, str(version))
    # TF Serving only loads numeric folder names: the temporary one is ignored.
    tmp_dir = os.path.join(export_dir, f".tmp-{version}-{os.getpid()}")
    tf.io.gfile.makedirs(export_dir)
    if tf.io.gfile.exists(tmp_dir):
        tf.io.gfile.rmtree(tmp_dir)
    try:
        with _quiet_tensorflow_logger():
            tf.saved_model.save(serving, tmp_dir, signatures=serving.signatures())
        _write_assets(tmp_dir, model, preprocessor, serving)
        if tf.io.gfile.exists(final_dir):
            raise FileExistsError(f"Export version {final_dir!r} appeared while exporting; not overwritten.")
        tf.io.gfile.rename(tmp_dir, final_dir, overwrite=False)
    finally:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)
    return final_dir


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


def head_of(model: Any) -> str:
    """The export head of a model, from its class (see HEADS)."""
    from albert_tf.models.encoder import AlbertEncoder
    from albert_tf.models.pretrainer import AlbertPretrainer

    if isinstance(model, AlbertPretrainer):
        return "pretrainer"
    if isinstance(model, AlbertEncoder):
        return "encoder"
    for cls in type(model).__mro__:
        if cls.__name__ in _TASK_CLASSES:
            return _TASK_CLASSES[cls.__name__]
    raise ValueError(
        f"Cannot export a {type(model).__name__}: expected an AlbertEncoder, AlbertPretrainer or one of "
        f"{sorted(_TASK_CLASSES)}."
    )


def next_version(export_dir: str) -> int:
    """One more than the largest numeric subfolder of export_dir (1 when none)."""
    if not tf.io.gfile.isdir(export_dir):
        return 1
    numbers = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir) if name.rstrip("/").isdigit()]
    return max(numbers, default=0) + 1


# ------------------------------------------------------------------ checking
def _resolve_head(model: Any, head: Optional[str]) -> str:
    inferred = head_of(model)
    if head is None:
        return inferred
    if head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {head!r}.")
    if head != inferred:
        raise ValueError(f"head={head!r} does not match the model, a {type(model).__name__} (head {inferred!r}).")
    return head


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


def _make_preprocessor(model, spm_model_file, max_seq_length, do_lower_case):
    """(model, preprocessor): the model's own preprocessor, or a new one.

    A task model packs text itself (span QA and multiple choice truncate in
    their own way), so when its preprocessor must change (another
    max_seq_length, lower-casing or SentencePiece model, or none yet) the
    export uses a copy of the model built with the new one; the caller's
    model is left as it is.
    """
    from albert_tf.layers.preprocessor import AlbertTextPreprocessor

    own = getattr(model, "preprocessor", None)
    settings = own.get_config() if own is not None else {}
    limit = model.config.max_position_embeddings
    max_len = max_seq_length or settings.get("max_seq_length") or min(DEFAULT_MAX_SEQ_LENGTH, limit)
    lower = settings.get("do_lower_case", True) if do_lower_case is None else bool(do_lower_case)
    if max_len > limit:
        raise ValueError(f"max_seq_length={max_len} exceeds the model's max_position_embeddings={limit}.")
    if spm_model_file is None and own is not None:
        if max_len == settings.get("max_seq_length") and lower == settings.get("do_lower_case"):
            return model, own
        pre = AlbertTextPreprocessor(spm_model_proto=own.spm_model_proto, max_seq_length=max_len,
                                     do_lower_case=lower)
    elif spm_model_file is None:
        raise ValueError(
            f"A {type(model).__name__} has no tokenizer: pass spm_model_file (the SentencePiece model "
            "it was trained with)."
        )
    else:
        if not tf.io.gfile.exists(spm_model_file):
            raise FileNotFoundError(f"SentencePiece model not found: {spm_model_file!r}")
        pre = AlbertTextPreprocessor(spm_model_file, max_seq_length=max_len, do_lower_case=lower)
        if pre.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"SentencePiece model {spm_model_file!r} has {pre.vocab_size} pieces but the model's "
                f"vocab_size is {model.config.vocab_size}."
            )
    if hasattr(model, "features"):  # a task model: rebuild it around the new preprocessor
        model = _with_preprocessor(model, pre)
    return model, pre


def _with_preprocessor(model, preprocessor):
    """A copy of a task model (same weights) whose preprocessor is `preprocessor`."""
    import keras

    config = model.get_config()
    config["preprocessor"] = keras.layers.serialize(preprocessor)
    copy = type(model).from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def _piece_table(preprocessor) -> List[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(preprocessor.spm_model_proto)
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]


def _task_config(model) -> Dict[str, Any]:
    return dict(getattr(model, "task_config", None) or {})


def _names(model, given, attr: str, key: str, count: int, what: str) -> List[str]:
    names = given if given is not None else getattr(model, attr, None) or _task_config(model).get(key)
    if not names:
        return [str(i) for i in range(count)]
    names = [str(n) for n in names]
    if len(names) != count:
        raise ValueError(f"{len(names)} {what} names {names!r} for a model with {count} outputs.")
    if any("\n" in n for n in names):
        raise ValueError(f"{what} names must not contain newlines: {names!r}.")
    return names


# ------------------------------------------------------------ serving module
def _spec(shape, dtype, name):
    return tf.TensorSpec(shape, dtype, name=name)


def _f32(x):
    return tf.cast(x, tf.float32)


class _Serving(tf.Module):
    """The exported object: model + preprocessor + the serving functions.

    Subclasses implement `outputs(ids)` (ids dict -> output dict) and may
    override `text_ids(...)`/the text signatures.
    """

    ids_rank = 2

    def __init__(self, model, preprocessor, head: str):
        super().__init__(name=f"albert_{head}_serving")
        # Not tracked: only what the graphs capture is saved (see signatures()),
        # so an ids-only export holds no SentencePiece op at all.
        self._refs = types.SimpleNamespace(model=model, preprocessor=preprocessor)
        self.head = head
        self.text_signatures = True

    @property
    def model(self):
        return self._refs.model

    @property
    def preprocessor(self):
        return self._refs.preprocessor

    def outputs(self, ids: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def _id_specs(self):
        shape = [None] * self.ids_rank
        return [_spec(shape, tf.int32, name) for name in ID_INPUTS]

    def text_functions(self) -> Dict[str, Callable]:
        """Signature name -> tf.function over string inputs."""

        @tf.function(input_signature=[_spec([None], tf.string, "text")])
        def serve_text(text):
            return self.outputs(self.text_ids(text))

        @tf.function(input_signature=[_spec([None], tf.string, "text"), _spec([None], tf.string, "text_pair")])
        def serve_text_pair(text, text_pair):
            return self.outputs(self.text_ids(text, text_pair))

        return {"serving_default": serve_text, "serve_text_pair": serve_text_pair}

    def text_ids(self, text, text_pair=None) -> Dict[str, tf.Tensor]:
        """Strings -> id tensors, packed as the model packs them in training."""
        if hasattr(self.model, "features"):  # task models own their packing
            return self.model.features({"text": text} if text_pair is None else
                                       {"text": text, "text_pair": text_pair})
        return self.preprocessor(text, text_pair)

    def signatures(self) -> Dict[str, Any]:
        """Signature name -> concrete function (traced here, once per call).

        With `text_signatures` False only `serve_token_ids` exists (also as
        `serving_default`) and the graph holds no tensorflow-text op, so a
        stock TF Serving loads it.
        """

        @tf.function(input_signature=self._id_specs())
        def serve_token_ids(input_ids, input_mask, segment_ids):
            return self.outputs({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids})

        if self.text_signatures:
            # The SentencePiece resources the text graphs use must be saved with them.
            self.text_preprocessor = self.preprocessor
            functions = dict(self.text_functions())
        else:
            functions = {"serving_default": serve_token_ids}
        functions["serve_token_ids"] = serve_token_ids
        concrete = {name: fn.get_concrete_function() for name, fn in functions.items()}
        # Track the tf.Variables the graphs capture (not only the Keras
        # wrappers): the TF1-style loader of TF Serving and saved_model_cli
        # restores exactly these, else "Could not find variable ...".
        captured = {}
        for fn in concrete.values():
            for var in fn.variables:
                captured.setdefault(id(var), var)
        self._captured_variables = list(captured.values())
        return concrete

    def _call_model(self, ids):
        return self.model({k: tf.cast(ids[k], tf.int32) for k in ID_INPUTS}, training=False)


def _max_len(preprocessor) -> int:
    return int(preprocessor.get_config()["max_seq_length"])


class _EncoderServing(_Serving):
    def outputs(self, ids):
        out = self._call_model(ids)
        return {
            "pooled_output": _f32(out["pooled_output"]),
            "sequence_output": _f32(out["sequence_output"]),
            "input_mask": tf.cast(ids["input_mask"], tf.int32),
        }


class _PretrainerServing(_Serving):
    """Fill-mask: `[MASK]` in the text becomes the [MASK] id; top-k per mask."""

    def __init__(self, model, preprocessor, head, top_k: int):
        super().__init__(model, preprocessor, head)
        pieces = _piece_table(preprocessor)
        self.pieces = tf.constant(pieces)
        self.top_k = min(int(top_k), len(pieces))
        self.mask_id = int(preprocessor.mask_id)

    def text_functions(self):
        @tf.function(input_signature=[_spec([None], tf.string, "text")])
        def serve_text(text):
            return self.outputs(self.pack_with_masks(text))

        return {"serving_default": serve_text}

    def pack_with_masks(self, text):
        """[CLS] pieces [SEP] with every literal "[MASK]" as the [MASK] id.

        The text is split at "[MASK]" and each part is normalised and
        tokenized alone, then the parts are joined with the [MASK] id, cut to
        max_seq_length - 2 as the single-text packing does, and padded.
        """
        pre = self.preprocessor
        parts = tf.strings.split(text, sep=MASK_TOKEN)  # [B, S]
        part_ids = pre.tokenize(parts.flat_values)  # [B*S, P]
        part_ids = tf.RaggedTensor.from_row_splits(part_ids, parts.row_splits)  # [B, S, P]
        masks = tf.ones_like(tf.reduce_sum(part_ids, axis=2, keepdims=True)) * self.mask_id  # [B, S, 1]
        with_masks = tf.concat([part_ids, tf.cast(masks, part_ids.dtype)], axis=2).merge_dims(1, 2)
        body = with_masks[:, :-1]  # no [MASK] after the last part
        body = body[:, : _max_len(pre) - 2]
        batch = tf.shape(text)[0]
        cls = tf.fill([batch, 1], tf.cast(pre.cls_id, body.dtype))
        sep = tf.fill([batch, 1], tf.cast(pre.sep_id, body.dtype))
        packed = tf.concat([cls, body, sep], axis=1)
        input_ids = tf.cast(packed.to_tensor(default_value=pre.pad_id), tf.int32)
        input_mask = tf.cast(tf.ones_like(packed).to_tensor(default_value=0), tf.int32)
        return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": tf.zeros_like(input_ids)}

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        is_mask = tf.logical_and(tf.equal(input_ids, self.mask_id), tf.cast(ids["input_mask"], tf.bool))
        seq_len = tf.shape(input_ids)[1]
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(seq_len), tf.shape(input_ids)), is_mask)
        valid = tf.ones_like(positions, tf.bool).to_tensor(default_value=False)  # [B, M]
        dense_positions = positions.to_tensor(default_value=0)
        inputs = {k: tf.cast(ids[k], tf.int32) for k in ID_INPUTS}
        inputs["masked_lm_positions"] = dense_positions
        logits = _f32(self.model(inputs, training=False)["mlm_logits"])  # [B, M, V]
        scores, top_ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self.top_k)
        keep = valid[:, :, tf.newaxis]
        return {
            "masked_positions": tf.where(valid, dense_positions, -1),
            "top_k_ids": tf.where(keep, top_ids, -1),
            "top_k_pieces": tf.where(keep, tf.gather(self.pieces, top_ids), ""),
            "top_k_scores": tf.where(keep, scores, 0.0),
        }


class _ClassifierServing(_Serving):
    def __init__(self, model, preprocessor, head, label_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.num_classes = len(label_names)
        self.label_names = tf.constant(list(label_names))

    def outputs(self, ids):
        logits = _f32(self._call_model(ids))
        if self.num_classes == 1:
            return {"value": logits[:, 0], "logits": logits}
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
            "logits": logits,
        }


def decoding_table(pieces: Sequence[str]) -> List[str]:
    """The text each piece decodes to, as SentencePiece's decoder writes it.

    Special pieces (<pad>, [CLS], [SEP], [MASK]) decode to nothing and <unk>
    to " \u2047 "; the others keep their U+2581 word-start mark (see
    `decode_pieces`).
    """
    table = list(pieces)
    for i, piece in enumerate(table[:5]):
        table[i] = " \u2047 " if piece == "<unk>" else ""
    return table


def decode_pieces(table: tf.Tensor, ids: tf.RaggedTensor) -> tf.Tensor:
    """Ragged ids [B, None] -> text [B], with string ops only (no SentencePiece op).

    Joins the ids' entries of `table` (a `decoding_table`), drops the first
    word-start mark U+2581 and turns the others into spaces, as
    SentencePiece's decoder does.

    Example:
    >>> decode_pieces(tf.constant(["", "\u2581ka", "lo", "\u2581mi"]),
    ...               tf.ragged.constant([[1, 2, 3], []])).numpy().tolist()
    [b'kalo mi', b'']
    """
    text = tf.strings.reduce_join(tf.gather(table, ids), axis=-1)
    text = tf.strings.regex_replace(text, "^" + SPIECE_UNDERLINE, "")
    return tf.strings.regex_replace(text, SPIECE_UNDERLINE, " ")


def best_spans(start_logits, end_logits, context_mask, max_answer_length: int):
    """The highest start+end logit span inside the context, end >= start.

    Args:
        start_logits, end_logits: float [B, T].
        context_mask: bool [B, T], the positions an answer may use.
        max_answer_length: longest span in positions.

    Returns:
        (start, end, score): int32 [B] positions (inclusive) and float32 [B];
        start = end = -1 and score = -1e9 where no position is allowed.

    Example:
    >>> s, e, score = best_spans(tf.constant([[0., 3., 1.]]), tf.constant([[0., 1., 2.]]),
    ...                          tf.constant([[False, True, True]]), 30)
    >>> s.numpy(), e.numpy(), score.numpy()
    (array([1], dtype=int32), array([2], dtype=int32), array([5.], dtype=float32))
    """
    start_logits, end_logits = _f32(start_logits), _f32(end_logits)
    seq_len = tf.shape(start_logits)[1]
    pos = tf.range(seq_len)
    length = pos[tf.newaxis, :] - pos[:, tf.newaxis]  # [T(start), T(end)]: end - start
    allowed_span = tf.logical_and(length >= 0, length < max_answer_length)
    allowed = tf.logical_and(context_mask[:, :, tf.newaxis], context_mask[:, tf.newaxis, :])
    allowed = tf.logical_and(allowed, allowed_span[tf.newaxis])
    scores = start_logits[:, :, tf.newaxis] + end_logits[:, tf.newaxis, :]
    scores = tf.where(allowed, scores, _NEG)
    flat = tf.reshape(scores, [tf.shape(scores)[0], -1])
    best = tf.argmax(flat, axis=-1, output_type=tf.int32)
    score = tf.reduce_max(flat, axis=-1)
    found = tf.reduce_any(context_mask, axis=-1)
    start = tf.where(found, best // seq_len, -1)
    end = tf.where(found, best % seq_len, -1)
    return start, end, tf.where(found, score, _NEG)


def best_beam_spans(start_top_log_probs, start_top_index, end_top_log_probs, end_top_index, context_mask,
                    max_answer_length: int):
    """The best span among a SQuAD-v2 head's beam (k starts x k' ends each).

    Scores are start + end log-probabilities, as the original v2
    post-processing; spans must lie in the context with end >= start and at
    most max_answer_length positions.

    Args:
        start_top_log_probs, start_top_index: [B, k].
        end_top_log_probs, end_top_index: [B, k, k'].
        context_mask: bool [B, T].
        max_answer_length: longest span in positions.

    Returns:
        (start, end, score) as `best_spans`: int32 [B], int32 [B], float32 [B];
        -1, -1, -1e9 where no beam span is allowed.

    Example:
    >>> s, e, score = best_beam_spans(tf.constant([[-0.1, -2.0]]), tf.constant([[2, 1]]),
    ...                               tf.constant([[[-0.5, -1.0], [-0.2, -3.0]]]), tf.constant([[[1, 2], [1, 2]]]),
    ...                               tf.constant([[False, True, True]]), 30)
    >>> s.numpy(), e.numpy(), score.numpy()
    (array([2], dtype=int32), array([2], dtype=int32), array([-1.1], dtype=float32))
    """
    start_index = tf.cast(start_top_index, tf.int32)
    end_index = tf.cast(end_top_index, tf.int32)
    starts = tf.broadcast_to(start_index[:, :, tf.newaxis], tf.shape(end_index))
    batch = tf.shape(end_index)[0]
    starts = tf.reshape(starts, [batch, -1])
    ends = tf.reshape(end_index, [batch, -1])
    scores = tf.reshape(_f32(start_top_log_probs)[:, :, tf.newaxis] + _f32(end_top_log_probs), [batch, -1])
    allowed = tf.logical_and(tf.gather(context_mask, starts, batch_dims=1),
                             tf.gather(context_mask, ends, batch_dims=1))
    allowed = tf.logical_and(allowed, tf.logical_and(ends >= starts, ends - starts < max_answer_length))
    scores = tf.where(allowed, scores, _NEG)
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(allowed, axis=-1)
    start = tf.where(found, tf.gather(starts, best, batch_dims=1), -1)
    end = tf.where(found, tf.gather(ends, best, batch_dims=1), -1)
    return start, end, tf.where(found, tf.reduce_max(scores, axis=-1), _NEG)


class _SpanQAServing(_Serving):
    def __init__(self, model, preprocessor, head, max_answer_length: int):
        super().__init__(model, preprocessor, head)
        self.max_answer_length = int(max_answer_length)
        self.pieces = tf.constant(decoding_table(_piece_table(preprocessor)))

    def text_functions(self):
        @tf.function(input_signature=[_spec([None], tf.string, "text"), _spec([None], tf.string, "text_pair")])
        def serve_question_context(text, text_pair):
            return self.outputs(self.text_ids(text, text_pair))

        return {"serving_default": serve_question_context}

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        out = self._call_model(ids)
        # The context: segment 1, real tokens, not its closing [SEP].
        context = tf.logical_and(tf.equal(tf.cast(ids["segment_ids"], tf.int32), 1),
                                 tf.cast(ids["input_mask"], tf.bool))
        context = tf.logical_and(context, tf.not_equal(input_ids, self.preprocessor.sep_id))
        if "start_top_index" in out:  # SQuAD v2 head: ends depend on the start (beam)
            start, end, score = best_beam_spans(out["start_top_log_probs"], out["start_top_index"],
                                                out["end_top_log_probs"], out["end_top_index"], context,
                                                self.max_answer_length)
        else:
            start, end, score = best_spans(out["start_logits"], out["end_logits"], context,
                                           self.max_answer_length)
        found = start >= 0
        span = tf.ragged.range(tf.maximum(start, 0), tf.where(found, end + 1, 0))
        answer_ids = tf.gather(input_ids, span, batch_dims=1)
        if self.text_signatures:
            answer = self.preprocessor.detokenize(answer_ids)
        else:  # no SentencePiece op in an ids-only export
            answer = decode_pieces(self.pieces, answer_ids)
        first_context = tf.argmax(tf.cast(context, tf.int32), axis=-1, output_type=tf.int32)
        result = {
            "answer": tf.where(found, answer, ""),
            "start": tf.where(found, start - first_context, -1),
            "end": tf.where(found, end - first_context, -1),
            "score": score,
        }
        if "cls_logits" in out:
            result["no_answer_probability"] = tf.sigmoid(tf.reshape(_f32(out["cls_logits"]), [-1]))
        return result


class _MultipleChoiceServing(_Serving):
    ids_rank = 3

    def __init__(self, model, preprocessor, head, num_choices: int):
        super().__init__(model, preprocessor, head)
        self.num_choices = int(num_choices)

    def text_functions(self):
        @tf.function(input_signature=[_spec([None], tf.string, "text"),
                                      _spec([None, self.num_choices], tf.string, "choices")])
        def serve_text_choices(text, choices):
            return self.outputs(self.pack_choices(text, choices))

        return {"serving_default": serve_text_choices}

    def pack_choices(self, text, choices):
        """[B] contexts x [B, N] choices -> id tensors [B, N, T] ([CLS] text [SEP] choice [SEP])."""
        return self.model.features({"text": text, "choices": choices})

    def outputs(self, ids):
        logits = _f32(self._call_model(ids))
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "logits": logits,
            "choice": tf.argmax(logits, axis=-1, output_type=tf.int32),
        }


class _TaggingServing(_Serving):
    def __init__(self, model, preprocessor, head, tag_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.tag_names = tf.constant(list(tag_names))
        self.pieces = tf.constant(_piece_table(preprocessor))

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        real = tf.cast(ids["input_mask"], tf.bool)
        logits = _f32(self._call_model(ids))
        tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "tags": tf.where(real, tf.gather(self.tag_names, tag_ids), ""),
            "pieces": tf.where(real, tf.gather(self.pieces, input_ids), ""),
            "tag_ids": tf.where(real, tag_ids, -1),
            "input_mask": tf.cast(real, tf.int32),
        }


def _num_outputs(model, key: str, attr: str) -> int:
    value = getattr(model, attr, None) or _task_config(model).get(key)
    if not value:
        raise ValueError(f"Cannot tell {key} of the {type(model).__name__} (no .{attr} or task_config[{key!r}]).")
    return int(value)


def _build_encoder(model, pre, **_):
    return _EncoderServing(model, pre, "encoder")


def _build_pretrainer(model, pre, *, top_k, **_):
    return _PretrainerServing(model, pre, "pretrainer", top_k)


def _build_classifier(model, pre, *, label_names, **_):
    count = _num_outputs(model, "num_classes", "num_classes")
    return _ClassifierServing(model, pre, "classifier",
                              _names(model, label_names, "label_names", "label_names", count, "label"))


def _build_span_qa(model, pre, *, max_answer_length, **_):
    return _SpanQAServing(model, pre, "span_qa", max_answer_length)


def _build_multiple_choice(model, pre, **_):
    return _MultipleChoiceServing(model, pre, "multiple_choice", _num_outputs(model, "num_choices", "num_choices"))


def _build_tagging(model, pre, *, label_names, **_):
    count = _num_outputs(model, "num_tags", "num_tags")
    return _TaggingServing(model, pre, "tagging", _names(model, label_names, "tag_names", "tag_names", count, "tag"))


_HEAD_BUILDERS = {
    "encoder": _build_encoder,
    "pretrainer": _build_pretrainer,
    "classifier": _build_classifier,
    "span_qa": _build_span_qa,
    "multiple_choice": _build_multiple_choice,
    "tagging": _build_tagging,
}


# ------------------------------------------------------------ REST format
def rest_inputs(body: Mapping[str, Any], input_specs: Mapping[str, tf.TensorSpec]) -> Dict[str, tf.Tensor]:
    """A TF Serving REST predict body (row format) -> batched input tensors.

    `{"instances": [{"text": "a"}, {"text": "b"}]}` gives {"text": ["a", "b"]};
    bare values (`{"instances": ["a", "b"]}`) are allowed when the signature
    has one input, as in TF Serving.

    Args:
        body: the request body ("instances", optional "signature_name").
        input_specs: the signature's inputs (name -> TensorSpec).

    Raises:
        ValueError: naming the instance keys that do not match the inputs.

    Example:
    >>> spec = {"text": tf.TensorSpec([None], tf.string)}
    >>> rest_inputs({"instances": ["a", "b"]}, spec)["text"].numpy().tolist()
    [b'a', b'b']
    """
    unknown = sorted(set(body) - {"instances", "signature_name"})
    if unknown or not isinstance(body.get("instances"), list) or not body["instances"]:
        raise ValueError(f"A predict body needs a non-empty 'instances' list (row format); got keys {sorted(body)}.")
    instances = body["instances"]
    if all(isinstance(row, Mapping) for row in instances):
        for i, row in enumerate(instances):
            if set(row) != set(input_specs):
                raise ValueError(f"instances[{i}] has keys {sorted(row)}; the signature's inputs are "
                                 f"{sorted(input_specs)}.")
        columns = {name: [row[name] for row in instances] for name in input_specs}
    elif len(input_specs) == 1:
        columns = {next(iter(input_specs)): list(instances)}
    else:
        raise ValueError(f"Bare instances need a signature with one input; this one has {sorted(input_specs)}.")
    return {name: tf.constant(values, dtype=input_specs[name].dtype) for name, values in columns.items()}


def _json_value(array: np.ndarray):
    if array.dtype.kind in "SO":
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


def rest_predict(saved_model: Any, body: Mapping[str, Any]) -> Dict[str, Any]:
    """Answers a TF Serving REST predict body with a SavedModel loaded here.

    Row format in and out, as TF Serving's REST API documents it: one
    prediction per instance, a dict of the signature's outputs (the bare value
    when it has a single output); strings decoded as UTF-8. For checking an
    export (and the demo) without a model server; it is not TF Serving.

    Args:
        saved_model: a SavedModel version folder, or what `tf.saved_model.load`
            returned for one.
        body: e.g. {"instances": [{"text": "..."}]}, with an optional
            "signature_name" (default "serving_default").

    Returns:
        {"predictions": [...]}.

    Example:
    >>> rest_predict("exports/sst2/1", {"instances": [{"text": "A fine film."}]})  # doctest: +SKIP
    {'predictions': [{'probabilities': [0.1, 0.9], 'label': 'positive', 'logits': [-1.1, 1.1]}]}
    """
    loaded = tf.saved_model.load(saved_model) if isinstance(saved_model, (str, os.PathLike)) else saved_model
    name = body.get("signature_name", "serving_default")
    if name not in loaded.signatures:
        raise ValueError(f"signature_name {name!r} is not in the SavedModel; it has {sorted(loaded.signatures)}.")
    fn = loaded.signatures[name]
    outputs = {key: value.numpy() for key, value in fn(**rest_inputs(body, fn.structured_input_signature[1])).items()}
    count = len(body["instances"])
    rows = [{key: _json_value(np.asarray(value[i])) for key, value in outputs.items()} for i in range(count)]
    if len(outputs) == 1:
        rows = [next(iter(row.values())) for row in rows]
    return {"predictions": rows}


# ------------------------------------------------------------------- assets
def _write_assets(saved_dir: str, model, preprocessor, serving: _Serving) -> None:
    """SentencePiece model, config and label names beside the graph.

    The graph embeds the SentencePiece model itself; these copies are for the
    people and tools that look at the folder.
    """
    from pipelines.fileio import atomic_write

    assets = os.path.join(saved_dir, "assets")
    tf.io.gfile.makedirs(assets)
    with atomic_write(os.path.join(assets, SPM_ASSET), "wb") as f:
        f.write(preprocessor.spm_model_proto)
    with atomic_write(os.path.join(assets, CONFIG_ASSET)) as f:
        f.write(model.config.to_json_string() if hasattr(model.config, "to_json_string")
                else json.dumps(model.config.to_dict(), indent=2, sort_keys=True) + "\n")
    task_config = _task_config(model)
    if task_config:
        with atomic_write(os.path.join(assets, TASK_CONFIG_ASSET)) as f:
            f.write(json.dumps(task_config, indent=2, sort_keys=True, default=str) + "\n")
    names, filename = None, None
    if isinstance(serving, _ClassifierServing) and serving.num_classes > 1:
        names, filename = serving.label_names, LABELS_ASSET
    elif isinstance(serving, _TaggingServing):
        names, filename = serving.tag_names, TAGS_ASSET
    if names is not None:
        with atomic_write(os.path.join(assets, filename)) as f:
            f.write("".join(n.decode("utf-8") + "\n" for n in names.numpy()))


__all__ = ["HEADS", "best_beam_spans", "best_spans", "decode_pieces", "decoding_table", "export_saved_model", "head_of",
           "next_version", "rest_inputs", "rest_predict"]
