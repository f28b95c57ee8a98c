"""absl flags of albert-finetune (fine-tuning on GLUE, CSV, SQuAD, RACE, tagging).

Defaults follow the original run_classifier / run_squad / run_race where they
agree with a small-machine user's expectations (reference §1): AdamW, lr 3e-5
(the README's MNLI command), 3 epochs with 10% warmup (run_squad), doc_stride
128, max_query_length 64, n_best_size 20, max_answer_length 30, max_qa_length
128. The model, distribution and runtime flags that albert-pretrain also has
keep their names (flags/core_flags.py); a flag is defined once per process and
its first definition wins.

```python
from absl import app
import flags.finetune_flags as finetune_flags

def run():
    finetune_flags.define_finetune_flags()
    app.run(main)
```
"""

from __future__ import annotations

from absl import flags

import flags.core_flags as albert_flags
from albert_tf.finetune_defaults import BASE_DEFAULTS, SMALL_MODEL_DEFAULTS, SMALL_MODEL_MAX_HIDDEN_SIZE

_define = albert_flags._define  # one definition per process, shared with the other groups

MIXED_PRECISION_CHOICES = ("auto", "float32", "bfloat16", "float16")


def _small(name: str) -> str:
    """The help sentence of a flag whose default depends on the model's size (albert_tf/finetune_defaults.py)."""
    return (f" Not given: {BASE_DEFAULTS[name]:g}" if isinstance(BASE_DEFAULTS[name], float) else
            f" Not given: {BASE_DEFAULTS[name]}") + (
        f", or {SMALL_MODEL_DEFAULTS[name]} for a model of hidden size <= {SMALL_MODEL_MAX_HIDDEN_SIZE} "
        "(flags/recipes/small_finetune.cfg).")


def define_task_flags() -> None:
    """--task, --data_dir and the per-task reader flags."""
    _define(flags.DEFINE_string, "task", None,
            "glue/<name> (cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, "
            "rte, wnli), csv, squad_v1, squad_v2, race or tagging.")
    _define(flags.DEFINE_string, "data_dir", None,
            "Folder with the task's files: GLUE <data_dir>/{train,dev,test}.tsv, "
            "csv train.csv/dev.csv[/test.csv], SQuAD train.json/dev.json"
            "[/test.json], RACE {train,dev,test}/{middle,high}/*, tagging "
            "train/dev/test files.")
    _define(flags.DEFINE_string, "text_column", "text",
            "--task=csv: header name of the first text column.")
    _define(flags.DEFINE_string, "text_b_column", None,
            "--task=csv: header name of the optional second text column.")
    _define(flags.DEFINE_string, "label_column", "label",
            "--task=csv: header name of the label column.")
    _define(flags.DEFINE_bool, "regression", False,
            "--task=csv: the label is a number (one output, squared error).")
    _define(flags.DEFINE_integer, "doc_stride", 128,
            "SQuAD: stride of the sliding window over long contexts.")
    _define(flags.DEFINE_integer, "max_query_length", 64,
            "SQuAD: question tokens kept (the rest is cut).")
    _define(flags.DEFINE_integer, "n_best_size", 20,
            "SQuAD: start and end candidates considered per window.")
    _define(flags.DEFINE_integer, "max_answer_length", 30,
            "SQuAD: longest answer in tokens.")
    _define(flags.DEFINE_integer, "max_qa_length", 128,
            "RACE: tokens kept from the end of question + option.")
    _define(flags.DEFINE_bool, "do_lower_case", True,
            "Lower-case text before SentencePiece (must match the vocabulary).")
    _define(flags.DEFINE_enum, "pooling", BASE_DEFAULTS["pooling"], ["pooled", "mean"],
            "Classification head input: pooled (the original: tanh dense "
            "on [CLS]) or mean (masked mean of the sequence output)." + _small("pooling"))
    _define(flags.DEFINE_bool, "length_buckets", True,
            "Classification: train on batches of sentences of similar length "
            "(shuffled, seeded, each example once per pass) so that little "
            "is computed on padding; --nolength_buckets: random batches.")


def define_finetune_run_flags() -> None:
    """Batch, schedule, epochs, actions and the fine-tuning defaults."""
    _define(flags.DEFINE_integer, "max_seq_length", None,
            "Tokens per packed input ([CLS] A [SEP] B [SEP]). Default: 128, or the "
            "model's max_position_embeddings when smaller (evaluation only: the saved "
            "model's); a value above max_position_embeddings is refused.")
    _define(flags.DEFINE_integer, "train_batch_size", BASE_DEFAULTS["train_batch_size"],
            "Global training batch (split over the replicas)." + _small("train_batch_size"))
    _define(flags.DEFINE_integer, "eval_batch_size", 64,
            "Global batch for evaluation and prediction.")
    _define(flags.DEFINE_float, "learning_rate", BASE_DEFAULTS["learning_rate"],
            "Peak AdamW learning rate." + _small("learning_rate"))
    _define(flags.DEFINE_float, "num_train_epochs", BASE_DEFAULTS["num_train_epochs"],
            "Passes over the training data (fractions allowed)." + _small("num_train_epochs"))
    _define(flags.DEFINE_float, "warmup_proportion", BASE_DEFAULTS["warmup_proportion"],
            "Share of the training steps with a linear warmup.")
    # The original run_classifier / run_race's names (run_glue.sh gives steps, not epochs).
    _define(flags.DEFINE_integer, "train_step", None,
            "Optimizer steps of the run; overrides --num_train_epochs.")
    _define(flags.DEFINE_integer, "warmup_step", None,
            "Linear warmup steps; overrides --warmup_proportion.")
    _define(flags.DEFINE_float, "layerwise_lr_decay", None,
            "Learning-rate factor per layer from the top (e.g. 0.8): layer l "
            "of L gets lr * decay**(L - l); the head gets lr. Off by default.")
    _define(flags.DEFINE_float, "weight_decay_rate", 0.01,
            "Decoupled weight decay (not on LayerNorm or biases).")
    _define(flags.DEFINE_enum, "optimizer", BASE_DEFAULTS["optimizer"], ["adamw", "adamw_original"],
            "adamw: AdamW with Adam's bias correction (as Hugging Face, "
            "keras-hub, Model Garden); adamw_original: the original ALBERT's "
            "AdamW (no bias correction: first steps ~3x the rate).")
    _define(flags.DEFINE_float, "adam_epsilon", None,
            "Adam's epsilon. Default: 1e-8 with --optimizer=adamw (torch's and "
            "Hugging Face's), 1e-6 with adamw_original (the original's).")
    _define(flags.DEFINE_bool, "do_train", False,
            "Fine-tune on the training split.")
    _define(flags.DEFINE_bool, "do_eval", False,
            "Evaluate on the dev split; writes eval_results.txt. Without --do_train: "
            "the fine-tuned model of --init_checkpoint (read only), else of --output_dir.")
    _define(flags.DEFINE_bool, "do_predict", False,
            "Predict the test split (or dev when there is no test file). Without "
            "--do_train: the fine-tuned model of --init_checkpoint (read only), else "
            "of --output_dir.")
    _define(flags.DEFINE_integer, "save_checkpoints_steps", 1000,
            "Save the resume state (weights, optimizer, data position) every "
            "N steps, besides each epoch end; 0: only at epoch ends. A rerun "
            "of the same command resumes from the latest one.")
    albert_flags.define_on_nonfinite_flag()
    _define(flags.DEFINE_integer, "steps_per_epoch", None,
            "Optimizer steps per Keras epoch (checkpoint and dev evaluation "
            "interval); default: one pass over the training data.")


def define_finetune_flags() -> None:
    """Every flag albert-finetune reads."""
    albert_flags.define_model_flags()
    albert_flags.define_vocabulary_check_flags()
    albert_flags.define_distribution_flags()
    define_task_flags()
    define_finetune_run_flags()
    _define(flags.DEFINE_string, "output_dir", None,
            "Fine-tuned model, checkpoints, summaries and results go here.")
    _define(flags.DEFINE_enum, "mixed_precision", "auto",
            list(MIXED_PRECISION_CHOICES),
            "auto: bfloat16 on a GPU or a CPU with AMX or AVX-512 bfloat16 "
            "units, else float32. float16 adds dynamic loss scaling.")
    _define(flags.DEFINE_integer, "seed", 12345,
            "Seed of the head initialisation, dropout and data order.")
    _define(flags.DEFINE_integer, "log_steps", 50,
            "Progress line and summaries every N steps.")
    _define(flags.DEFINE_bool, "jit_compile", False,
            "Compile the training step (forward, backward, loss, AdamW) and "
            "inference with XLA; the text layer then runs in the input "
            "pipeline. With variable batch lengths XLA compiles a program per "
            "shape met: see --static_shapes.")
    albert_flags.define_static_shape_flags()
