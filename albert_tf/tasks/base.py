"""What a fine-tuning task tells the runner: how to read, build, train on, evaluate and predict.

`albert_tf.tasks.runner.run_finetuning` drives every task the same way
(strategy, precision, optimizer, `model.fit` with callbacks, eval_results.txt);
a `FinetuneTask` subclass holds only what differs between task families:
the reader, the task model and its loss, the metrics as the official scripts
compute them, and the prediction files.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class TaskOptions:
    """Reader and model settings a task needs (the task-specific flags of albert-finetune).

    Attributes:
        max_seq_length: tokens per packed input; None (albert-finetune without
            --max_seq_length): `run_finetuning` takes the model's, 128 capped
            at its max_position_embeddings (`resolve_max_seq_length`).
        do_lower_case: lower-case before SentencePiece.
        spm_model_file: the SentencePiece model (readers of id-feature tasks
            tokenize in Python with it; every model carries it in its
            preprocessor).
        text_column / text_b_column / label_column / regression: --task=csv.
        doc_stride / max_query_length / n_best_size / max_answer_length: SQuAD.
        max_qa_length: RACE.
        dropout_rate: dropout before the task head.
        pooling: classification: "pooled" (the original's tanh dense on
            [CLS]) or "mean" (masked mean of the sequence output).
        length_buckets: classification tasks train on batches of examples of
            similar length (each pass in random order), so little is
            computed on padding; False: batches of mixed length.
        static_shapes: fixed input shapes, as a TPU needs
            (`albert_tf.tasks.static_shapes`): training batches of exactly the
            batch size (each pass drops its remainder), lengths padded to
            the next of `static_lengths(max_seq_length, static_length_step)`,
            evaluation's last batch filled with padding rows whose outputs
            are dropped.
        static_length_step: the step of those lengths.
    """

    max_seq_length: Optional[int] = 128
    do_lower_case: bool = True
    spm_model_file: Optional[str] = None
    text_column: str = "text"
    text_b_column: Optional[str] = None
    label_column: str = "label"
    regression: bool = False
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    max_qa_length: int = 128
    dropout_rate: float = 0.1
    pooling: str = "pooled"
    length_buckets: bool = True
    static_shapes: bool = False
    static_length_step: int = 64


class FinetuneTask:
    """Base class of the task families (classification, span QA, multiple choice, tagging).

    Args:
        name: the --task value, e.g. "glue/cola".
        options: `TaskOptions`.
    """

    #: the dev metric the best checkpoint is chosen by (the original's keys)
    selection_metric: str = "accuracy"
    #: splits `read` understands
    splits = ("train", "dev", "test")

    def __init__(self, name: str, options: TaskOptions):
        self.name = name
        self.options = options

    def adopt_saved_model(self, task_config: Dict[str, Any]) -> None:
        """Takes what reading needs (e.g. the tag set) from a saved model's task_config (eval-only runs)."""

    # ------------------------------------------------------------ data
    def read(self, data_dir: str, split: str) -> Optional[Any]:
        """The examples of one split, or None when an optional split (test) has no file."""
        raise NotImplementedError

    def num_examples(self, data: Any) -> int:
        """Training examples as the original counts them for the schedule
        (``steps = int(num_examples / batch * epochs)``; SQuAD: questions, not windows)."""
        raise NotImplementedError

    def train_items(self, data: Any) -> Any:
        """(inputs, targets): nested arrays with one row per training item (a
        sentence, a SQuAD window, a RACE question), what a batch gathers from."""
        raise NotImplementedError

    def pass_batches(self, data: Any, num_items: int, batch_size: int, seed: int,
                     pass_index: int) -> List[np.ndarray]:
        """The item indices of each batch of one pass, a function of (seed, pass_index) only.

        Default: the `num_items` items in random order (`pipelines.finetune.common.shuffled_pass`),
        full batches only under `options.static_shapes`.
        """
        from pipelines.finetune.common import shuffled_pass

        return shuffled_pass(num_items, batch_size, seed, pass_index, drop_remainder=self.options.static_shapes)

    def num_train_items(self, data: Any) -> int:
        """Rows of `train_items`."""
        return int(tf.nest.flatten(self.train_items(data))[0].shape[0])

    def batches_per_pass(self, data: Any, batch_size: int) -> int:
        """Batches in one pass over the training items: ceil(items / batch_size) (floor under static shapes)."""
        from pipelines.finetune.common import batches_per_pass

        return batches_per_pass(self.num_train_items(data), batch_size, self.options.static_shapes)

    def train_dataset(self, data: Any, batch_size: int, seed: int, start_batch: int = 0) -> tf.data.Dataset:
        """(inputs, targets) batches, pass after pass forever, from batch `start_batch` of that stream.

        Pass p is `pass_batches(data, n, batch_size, seed, p)`, so the stream is
        the same whether a run starts at 0 or resumes at `start_batch`.
        """
        from pipelines.finetune.common import passes_dataset

        items = self.train_items(data)
        n = int(tf.nest.flatten(items)[0].shape[0])
        ds = passes_dataset(items, lambda p: self.pass_batches(data, n, batch_size, seed, p), n, batch_size,
                            start_batch, drop_remainder=self.options.static_shapes)
        return ds.prefetch(tf.data.AUTOTUNE)

    # ------------------------------------------------------------ model
    def build_model(self, config, init_checkpoint: Optional[str], train_data: Any) -> keras.Model:
        """The task model, from `init_checkpoint` (pretrained) or `config` (random init)."""
        raise NotImplementedError

    def loss(self) -> Any:
        """What `model.compile(loss=...)` gets; None: the task model's own loss (the
        original's, averaged over the global batch under any strategy)."""
        return None

    def compile_metrics(self) -> Any:
        """Training-time metrics for `model.compile(metrics=...)` (None for none)."""
        return None

    # ------------------------------------------------------------ results
    def evaluate(self, model: keras.Model, data: Any, batch_size: int) -> Dict[str, float]:
        """Dev metrics as the official scripts compute them (includes `selection_metric`)."""
        raise NotImplementedError

    def record_selection(self, results: Dict[str, float], output_dir: str) -> None:
        """Called after the best-on-dev model is saved to output_dir with its dev
        results (SQuAD v2 records its threshold there); default: nothing."""

    def predict(self, model: keras.Model, data: Any, batch_size: int, output_dir: str) -> List[str]:
        """Writes the prediction file(s) into output_dir and returns their paths."""
        raise NotImplementedError


def pretrained_or_random(model_class, config, init_checkpoint: Optional[str], options: TaskOptions,
                         **head_kwargs) -> keras.Model:
    """Builds a task model from pretrained weights or a config, with the SentencePiece preprocessor.

    Args:
        model_class: AlbertClassifier, AlbertSpanQA, ...
        config: `AlbertConfig` for random initialisation (ignored with a checkpoint).
        init_checkpoint: anything `albert_tf.load_checkpoint` reads, or None.
        options: `TaskOptions` (max_seq_length, do_lower_case, spm_model_file).
        **head_kwargs: the model class's head arguments (num_classes, ...).
    """
    if init_checkpoint:
        return model_class.from_pretrained(init_checkpoint, spm_model_file=options.spm_model_file,
                                           max_seq_length=options.max_seq_length,
                                           do_lower_case=options.do_lower_case, **head_kwargs)
    from albert_tf.layers.preprocessor import AlbertTextPreprocessor

    preprocessor = AlbertTextPreprocessor(options.spm_model_file, max_seq_length=options.max_seq_length,
                                          do_lower_case=options.do_lower_case)
    return model_class(config, preprocessor=preprocessor, **head_kwargs)


def predict_in_batches(model: keras.Model, inputs: Any, batch_size: int,
                       options: Optional[TaskOptions] = None) -> Any:
    """`model.predict` on a batched dataset of `inputs` (a tensor, tuple or dict of arrays).

    With `options.static_shapes`, or a model compiled for XLA, the batches
    reach the model as ids (`albert_tf.tasks.static_shapes.predict`): fixed
    shapes with padding rows whose outputs are dropped.
    """
    from albert_tf.tasks import static_shapes

    if (options is not None and options.static_shapes) or static_shapes.compiled_for_xla(model):
        return static_shapes.predict(model, inputs, batch_size, options)
    # One-element tuples: Keras reads a 2-tuple element as (x, y), which would
    # split a (text, text_pair) input.
    dataset = tf.data.Dataset.from_tensor_slices((inputs,)).batch(batch_size)
    return model.predict(dataset, verbose=0)
