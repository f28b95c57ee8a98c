"""absl flags of albert-export (SavedModels for TF Serving).

```python
from absl import app
import flags.export_flags as export_flags

def run():
    export_flags.define_export_flags()
    app.run(main)
```

A flag is defined once per process (shared with the other groups through
`flags.core_flags._define`); its first definition wins.
"""

from __future__ import annotations

from absl import flags

import flags.core_flags as albert_flags

_define = albert_flags._define

HEAD_CHOICES = ("encoder", "pretrainer", "classifier", "span_qa", "multiple_choice", "tagging")


def define_export_flags() -> None:
    """--checkpoint, --spm_model_file, --export_dir, --version, --head, the text settings and the head options."""
    _define(flags.DEFINE_string, "checkpoint", None,
            "What to export. encoder/pretrainer: anything albert_tf.load_checkpoint reads (an "
            "albert-tf folder, a training checkpoint, an original TF1 checkpoint, a Hugging Face "
            "folder). Task heads: an albert-finetune output directory.")
    _define(flags.DEFINE_string, "spm_model_file", None,
            "SentencePiece model. Default: spm.model, 30k-clean.model, spiece.model or the only *.model "
            "file beside --checkpoint; task models use the one saved with them.")
    _define(flags.DEFINE_string, "export_dir", None,
            "The model's folder, TF Serving's model base path (e.g. exports/albert_sst2); the "
            "SavedModel is written to <export_dir>/<version>/.")
    _define(flags.DEFINE_integer, "version", None,
            "Version folder number. Default: one more than the largest existing version (1 when "
            "none). An existing version is never overwritten.", lower_bound=0)
    _define(flags.DEFINE_enum, "head", None, list(HEAD_CHOICES),
            "Which model to export: the encoder (embeddings), the pretrainer (fill-mask) or a "
            "fine-tuned task model (classifier, span_qa, multiple_choice, tagging).")
    _define(flags.DEFINE_integer, "max_seq_length", None,
            "Longest packed sequence served; longer text is truncated as in training. Default: "
            "the task model's, else 128 (or the model's max_position_embeddings if smaller); more "
            "than max_position_embeddings is refused.")
    _define(flags.DEFINE_bool, "do_lower_case", None,
            "Lower-case the text. Default: the task model's setting, else true.")
    _define(flags.DEFINE_enum, "normalization", None, ["original", "xlnet"],
            "Text normalisation: original (google-research/albert's preprocess_text) or xlnet (also turns "
            "`` and '' into \"). Default: the task model's setting, else original.")
    _define(flags.DEFINE_integer, "doc_stride", None,
            "span_qa: long contexts are served in windows starting this many pieces apart, as the SQuAD "
            "reader's training windows. Default: the model's (task_config.json), else 128.", lower_bound=1)
    _define(flags.DEFINE_integer, "max_context_length", None,
            "span_qa: context pieces served (longer contexts are cut). Default: 4096.", lower_bound=1)
    _define(flags.DEFINE_integer, "top_k", 5,
            "pretrainer: candidates returned for each [MASK].", lower_bound=1)
    _define(flags.DEFINE_integer, "max_answer_length", None,
            "span_qa: longest answer, in SentencePiece pieces. Default: the fine-tuned model's "
            "(task_config.json), else 30.", lower_bound=1)
    _define(flags.DEFINE_integer, "n_best_size", None,
            "span_qa (SQuAD v1 heads): an answer starts at one of each window's n highest start logits and ends "
            "at one of its n highest end logits, as fine-tuning's predictions.json. Default: the fine-tuned "
            "model's (task_config.json), else 20.", lower_bound=1)
    _define(flags.DEFINE_bool, "freeze_weights", None,
            "--format=savedmodel: write the weights as graph constants (no variables), which oneDNN "
            "runs faster (1.24x on an AMX CPU); the SavedModel cannot then be trained further. "
            "Default: on when the float32 weights take at most 1 GiB.")
    _define(flags.DEFINE_bool, "text_signatures", True,
            "Write the raw-text signatures (the graph then needs the tensorflow-text ops in the "
            "model server). --notext_signatures writes only serve_token_ids (also as "
            "serving_default), which a stock TF Serving loads.")
