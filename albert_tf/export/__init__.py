"""SavedModels for TF Serving: raw text in, predictions out, for every head.

`export_saved_model(model, export_dir)` writes `export_dir/N/` (TF Serving's
version layout) with these signatures:

- `serving_default`: raw UTF-8 strings in. Lower-casing, normalisation,
  SentencePiece and packing run inside the graph (the `AlbertTextPreprocessor`
  that fine-tuning uses). Inputs: `text` (tf.string [batch]); span_qa takes
  `text` (question) and `text_pair` (context); multiple_choice takes `text`
  (context) and `choices` (tf.string [batch, num_choices]).
- `serve_text_pair` (encoder, classifier): `text` and `text_pair`,
  packed `[CLS] text [SEP] text_pair [SEP]`. This is how the pair is optional:
  single texts go to `serving_default`, pairs to `serve_text_pair`. (TF
  Serving feeds every input a signature names, so one signature cannot leave
  an input out.) A classifier trained on text pairs (`text_pairs` in
  task_config.json) takes the pair in `serving_default` too, and no single
  text. Tagging and fill-mask take single texts only.
- `serve_token_ids`: the same outputs from `input_ids`, `input_mask`,
  `segment_ids` (int32 [batch, seq]; multiple_choice [batch, choices, seq]),
  for clients that tokenize themselves.

A model server must have the tensorflow-text ops to load a graph that holds
the SentencePiece op, even to call `serve_token_ids`. For a stock TF Serving,
export with `text_signatures=False`: only `serve_token_ids` (also as
`serving_default`), no tensorflow-text op in the graph.

Every text is cut to `CHARS_PER_PIECE` characters per piece it can keep
before it is normalised (bounded work for huge requests); an empty batch gets
outputs with no rows. assets/preprocessing.json records what the graph
applies (max_seq_length, do_lower_case, normalization, span QA windows).

Outputs by head (float outputs are float32 even for mixed-precision models):

- encoder: `pooled_output` [B, H], `sequence_output` [B, T, H], `input_mask`
  [B, T] (T = longest packed text in the request, at most max_seq_length).
- pretrainer (fill-mask; write `[MASK]` in the text): `masked_positions`
  [B, M] (position in the packed sequence, -1 = padding when rows have fewer
  masks than the row with most), `top_k_pieces` (tf.string), `top_k_ids` and
  `top_k_scores` (softmax probabilities) [B, M, k].
- classifier: `probabilities` [B, C], `label` (tf.string [B], the label
  name), `logits` [B, C]; regression (one output): `value` [B], `logits` [B, 1].
- span_qa: `answer` (tf.string [B]: the context's own text, case, accents
  and characters outside the vocabulary kept, whitespace stripped, as
  `pipelines.finetune.squad.postprocess_predictions` answers),
  `start_char` and `end_char` (int32 [B]: the answer is
  context[start_char:end_char], in characters (code points) of the context;
  -1 when there is no answer; see `albert_tf.export.char_offsets`), `start`
  and `end` (int32 [B]: first and last answer piece, counted in the context's
  pieces; -1 when there is no answer), `score` (start + end logit; SQuAD v2
  heads: start + end log-probability over their beam), and for SQuAD v2
  models `null_odds` (the smallest answerability logit over the windows) and
  `no_answer_probability` (its sigmoid); the answer is "" when `null_odds`
  exceeds `null_score_diff_threshold`. Long contexts are served in the
  training windows (`doc_stride`); see `albert_tf.export.span_qa`.
  `serve_token_ids` has no context text: its `answer` is the decoded
  pieces and `start_char` = `end_char` = -1.
- multiple_choice: `probabilities` [B, N], `logits` [B, N], `choice` int32 [B].
- tagging: `tags` (tf.string [B, T]: the tag of each word at its first
  piece, where fine-tuning puts the word's label; "" on [CLS], [SEP],
  continuation pieces and padding), `pieces` (tf.string [B, T], the
  SentencePiece pieces including [CLS]/[SEP]; "" on padding), `tag_ids`
  int32 [B, T] (-1 where `tags` is ""), `input_mask` [B, T].

The folder also holds assets/spm.model, assets/albert_config.json and, for
task models, assets/task_config.json plus assets/label_names.txt (classifier)
or assets/tag_names.txt (tagging), so it can be copied to a server as it is.
Loading needs only `import tensorflow, tensorflow_text` (for the
SentencePiece op), never this package.

The package, one file per concern: `saved_model` (export_saved_model: the
preprocessor, tracing, saving), `heads` (head names, which head a model is,
the builders), `base` (the exported tf.Module and shared helpers), one file
per head family (`encoder`: encoder and fill-mask, `classifier`: classifier
and tagging, `span_qa`: span decoding, `multiple_choice`), `char_offsets`
(each piece's characters in the original text: span answers in the
context's own text), `pieces` (piece tables, SentencePiece-free decoding),
`versions`, `assets` and `rest` (TF
Serving's REST row format).

`export_openvino(model, export_dir)` (`albert_tf.export.openvino`, the
[openvino] extra, imported only when used) writes an OpenVINO IR that
OpenVINO Model Server serves.

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

import importlib

# Names of this package, loaded on first use: importing a submodule (the int8 and target-CPU choices that
# albert-export's flags list) starts no TensorFlow, so a binary still sets the CPU kind's TensorFlow defaults
# (`albert_tf.cpu`) before TensorFlow starts. OpenVINO too is imported only when its export is used.
_LAZY = {
    "tf": ("tensorflow", None),
    "answer": ("albert_tf.export.answers", "answer"),
    **{name: ("albert_tf.export.assets", name) for name in (
        "CONFIG_ASSET", "LABELS_ASSET", "PREPROCESSING_ASSET", "SPM_ASSET", "TAGS_ASSET", "TASK_CONFIG_ASSET")},
    "ID_INPUTS": ("albert_tf.export.base", "ID_INPUTS"),
    "HEADS": ("albert_tf.export.heads", "HEADS"),
    "head_of": ("albert_tf.export.heads", "head_of"),
    **{name: ("albert_tf.export.pieces", name) for name in ("SPIECE_UNDERLINE", "decode_pieces", "decoding_table")},
    "rest_inputs": ("albert_tf.export.rest", "rest_inputs"),
    "rest_predict": ("albert_tf.export.rest", "rest_predict"),
    "DEFAULT_MAX_SEQ_LENGTH": ("albert_tf.export.saved_model", "DEFAULT_MAX_SEQ_LENGTH"),
    "export_saved_model": ("albert_tf.export.saved_model", "export_saved_model"),
    "best_beam_spans": ("albert_tf.export.span_qa", "best_beam_spans"),
    "best_spans": ("albert_tf.export.span_qa", "best_spans"),
    "next_version": ("albert_tf.export.versions", "next_version"),
    "export_openvino": ("albert_tf.export.openvino", "export_openvino"),
}

__all__ = ["HEADS", "answer", "best_beam_spans", "best_spans", "decode_pieces", "decoding_table", "export_openvino",
           "export_saved_model", "head_of", "next_version", "rest_inputs", "rest_predict"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
