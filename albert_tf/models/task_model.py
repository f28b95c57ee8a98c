"""The base of the fine-tuning models: inputs, losses with global denominators,
`from_pretrained`, and the small dense head every task uses.

A task model wraps an `AlbertEncoder` and, optionally, an
`AlbertTextPreprocessor`, so it takes raw strings as well as id tensors. Its
default loss (used when `compile()` gets no `loss=`) is the original's loss for
the task, computed as a sum over the local batch divided by the *global*
number of examples (or tokens), so the gradient summed over replicas is the
gradient of the global-batch loss under any `tf.distribute` strategy, and the
reported `loss` is the global mean.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig, max_seq_length_for
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf.models.encoder import ENCODER_INPUTS, AlbertEncoder
from albert_tf.models.length_buckets import pooled_output_in_buckets
from albert_tf.model_folder import VOCABULARY_NAMES, find_vocabulary

# Names the SentencePiece model may have beside a checkpoint: ours, the
# original release's, Hugging Face's (the one rule: albert_tf.model_folder).
SPM_MODEL_NAMES = VOCABULARY_NAMES


class OutputProjection(keras.layers.Layer):
    """`x @ output_weights^T + output_bias` with weights stored [units, H].

    The original fine-tuning heads keep their weights in this layout
    (`output_weights [num_labels, H]`), so saved heads use the same shapes.

    Args:
        units: number of outputs.
        initializer_range: stddev of the truncated-normal initializer.
        use_bias: add `output_bias`.

    Example:
    >>> OutputProjection(3, 0.02)(tf.zeros([2, 5, 8])).shape
    TensorShape([2, 5, 3])
    """

    def __init__(self, units: int, initializer_range: float = 0.02, use_bias: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.initializer_range = float(initializer_range)
        self.use_bias = bool(use_bias)

    def build(self, input_shape):
        self.output_weights = self.add_weight(
            shape=(self.units, int(input_shape[-1])),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            name="output_weights")
        self.output_bias = None
        if self.use_bias:
            self.output_bias = self.add_weight(shape=(self.units,), initializer="zeros", name="output_bias")

    def call(self, x):
        weights = tf.cast(self.output_weights, self.compute_dtype)
        y = tf.matmul(tf.cast(x, self.compute_dtype), weights, transpose_b=True)
        if self.output_bias is not None:
            y = y + tf.cast(self.output_bias, self.compute_dtype)
        return y

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, initializer_range=self.initializer_range, use_bias=self.use_bias)
        return config


def global_sum(value: tf.Tensor) -> tf.Tensor:
    """Sum of `value` over the replicas of the current strategy (a no-op outside one)."""
    value = tf.stop_gradient(tf.cast(value, tf.float32))
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync == 1:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


def find_spm_model(path: str) -> Optional[str]:
    """The SentencePiece model beside a checkpoint path (None if there is none): `albert_tf.model_folder.find_vocabulary`.

    Args:
        path: a model folder or a checkpoint prefix.
    """
    return find_vocabulary(path)


def _is_text(value) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, bytes)) for v in value):
        return True
    if isinstance(value, np.ndarray) and value.dtype.kind in "USO":
        return True
    return isinstance(value, (tf.Tensor, tf.RaggedTensor, keras.KerasTensor)) and value.dtype == tf.string


def _is_python_text(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "US"
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, (str, bytes)) or _is_python_text(v) for v in value)
    return False


def _texts_as_tensors(x):
    """Python/NumPy strings -> tf.string tensors (Keras's adapters take those)."""
    if isinstance(x, tuple) and len(x) == 2 and all(
            _is_python_text(part) and not isinstance(part, (str, bytes)) for part in x):
        return tuple(tf.constant(part) for part in x)  # (texts, text_pairs)
    if _is_python_text(x):
        return tf.constant(x)
    if isinstance(x, Mapping):
        return {k: tf.constant(v) if _is_python_text(v) else v for k, v in x.items()}
    return x


def _empty_batch(x) -> bool:
    """Is x a batch of no rows (an empty list, tuple of lists, array or tensor, or a dict of them)?"""
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)) or x is None:
        return False
    if isinstance(x, list) and not x:
        return True
    leaves = tf.nest.flatten(x)
    if not leaves:
        return isinstance(x, (tuple, Mapping))
    return all(np.ndim(leaf) > 0 and np.shape(leaf)[0] == 0 for leaf in leaves)


def _empty_as_tensors(x):
    """An empty batch as tensors: strings where the rows would be text, else the values' own dtype."""
    def convert(value):
        if isinstance(value, (list, tuple)) or np.asarray(value).dtype.kind in "USO":
            return tf.fill(np.shape(value), "")
        return tf.convert_to_tensor(value)

    if isinstance(x, list) or (isinstance(x, tuple) and all(isinstance(v, list) and not v for v in x)):
        return tf.fill([0], "") if isinstance(x, list) else tuple(tf.fill([0], "") for _ in x)
    return tf.nest.map_structure(convert, x)


class TaskModel(keras.Model):
    """Shared machinery of the task models (not used directly).

    Subclasses set `task_type`, build their head in `__init__` then call
    `self._build_with_dummy()`, and implement `_head(features, outputs,
    training)` and `loss_terms(x, y, y_pred, sample_weight)` (the local sum of
    the loss and its local count).

    Args:
        config: an `AlbertConfig`.
        preprocessor: an `AlbertTextPreprocessor` for string inputs, or None
            (ids only).
        **kwargs: passed to `keras.Model` (`name`, `dtype`).
    """

    task_type = "task"
    # The constructor arguments saved in task_config.json (see `_task_args`).
    init_arguments: Tuple[str, ...] = ()
    # Heads that read only the pooled output set this: inference (not
    # training) then runs the encoder in length-sorted buckets of this many
    # rows, never on a long row's padding (`albert_tf.models.length_buckets`).
    inference_rows_per_bucket: Optional[int] = None
    # Heads that read nothing but the pooled output set this: the encoder's last
    # block then computes the [CLS] position only (`AlbertEncoder`'s
    # `pooled_output_only`), in training, inference and every export.
    reads_pooled_output_only: bool = False

    def __init__(self, config: AlbertConfig, *, preprocessor: Optional[AlbertTextPreprocessor] = None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(config, AlbertConfig):
            raise TypeError(f"config must be an AlbertConfig, got {type(config).__name__}.")
        if preprocessor is not None and not isinstance(preprocessor, AlbertTextPreprocessor):
            raise TypeError(f"preprocessor must be an AlbertTextPreprocessor, got {type(preprocessor).__name__}.")
        if preprocessor is not None and preprocessor.vocab_size != config.vocab_size:
            raise ValueError(f"The SentencePiece model has {preprocessor.vocab_size} pieces but the config's "
                             f"vocab_size is {config.vocab_size}.")
        self.config = config
        self.preprocessor = preprocessor
        self.encoder = AlbertEncoder(config, dtype=self.dtype_policy)

    def _build_with_dummy(self) -> None:
        ids = tf.constant([[2, 5, 3]], tf.int32)
        self(self._dummy_ids({"input_ids": ids, "input_mask": tf.ones_like(ids),
                              "segment_ids": tf.zeros_like(ids)}))

    def _dummy_ids(self, features: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return features

    def build(self, input_shape=None):
        pass  # built in __init__ by a call on a dummy batch

    # ------------------------------------------------------------- inputs
    def _require_preprocessor(self):
        if self.preprocessor is None:
            raise ValueError(f"{type(self).__name__} got text but has no preprocessor: build it with "
                             "preprocessor=AlbertTextPreprocessor(spm_model_file) (from_pretrained finds the "
                             "SentencePiece model beside the checkpoint or takes spm_model_file=).")
        return self.preprocessor

    def _text_features(self, text, text_pair=None) -> Dict[str, tf.Tensor]:
        return self._require_preprocessor()(text, text_pair)

    def features(self, inputs) -> Dict[str, tf.Tensor]:
        """Any accepted input -> {"input_ids", "input_mask", "segment_ids", ...}.

        Accepted: a dict of id tensors; a tf.string tensor [B]; a tuple
        (text, text_pair); a dict {"text": ..., "text_pair": ...}. Extra keys
        of a dict are kept (e.g. `p_mask`, `start_positions`).
        """
        if isinstance(inputs, Mapping):
            if "input_ids" in inputs:
                return dict(inputs)
            if "text" in inputs:
                extra = {k: v for k, v in inputs.items() if k not in ("text", "text_pair")}
                features = dict(self._text_features(inputs["text"], inputs.get("text_pair")))
                features.update(extra)
                return features
            raise ValueError(f"{type(self).__name__} expects a dict with 'input_ids' (and 'input_mask', "
                             f"'segment_ids') or with 'text' (and 'text_pair'); got keys {sorted(inputs)}.")
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2 and not isinstance(inputs[0], (str, bytes)) \
                and _is_text(inputs[0]):
            return dict(self._text_features(inputs[0], inputs[1]))
        if _is_text(inputs):
            return dict(self._text_features(inputs))
        inputs = tf.convert_to_tensor(inputs)
        if inputs.dtype.is_integer:
            return {"input_ids": inputs}
        raise ValueError(f"{type(self).__name__} cannot read inputs of type {type(inputs).__name__} "
                         f"and dtype {inputs.dtype}: pass strings or a dict of ids.")

    @staticmethod
    def encoder_inputs(features: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return {k: features[k] for k in ENCODER_INPUTS if k in features}

    def call(self, inputs, training=None):
        features = self.features(inputs)
        if not training and self.inference_rows_per_bucket:
            outputs = {"pooled_output": pooled_output_in_buckets(
                self.encoder, self.encoder_inputs(features), self.inference_rows_per_bucket)}
        else:
            outputs = self.encoder(self.encoder_inputs(features), training=training,
                                   pooled_output_only=self.reads_pooled_output_only)
        return self._head(features, outputs, training)

    def _head(self, features, outputs, training):
        raise NotImplementedError

    # ------------------------------------------------------------- losses
    def loss_terms(self, x, y, y_pred, sample_weight=None) -> Tuple[tf.Tensor, tf.Tensor]:
        """(sum of the loss over the local batch, number of examples or tokens it covers)."""
        raise NotImplementedError

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's compiled loss when `compile(loss=...)` got one, else the
        task's loss: local sum / global count (see the module docstring)."""
        if self._compile_loss is not None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        loss_sum, count = self.loss_terms(x, y, y_pred, sample_weight)
        return tf.cast(loss_sum, tf.float32) / tf.maximum(global_sum(count), 1e-12)

    def _forward(self, x, y, training):
        return self(x, training=training)

    def _step(self, data, training: bool):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self._forward(x, y, training)
            if self._compile_loss is not None:
                loss = super().compute_loss(x, y, y_pred, sample_weight, training)
                batch = tf.shape(tf.nest.flatten(y_pred)[0])[0]
                replicas = tf.distribute.get_strategy().num_replicas_in_sync
                self._loss_tracker.update_state(loss * replicas, sample_weight=batch)
            else:
                loss_sum, count = self.loss_terms(x, y, y_pred, sample_weight)
                loss_sum = tf.cast(loss_sum, tf.float32)
                count = tf.cast(count, tf.float32)
                loss = loss_sum / tf.maximum(global_sum(count), 1e-12)
                # total += local sum, count += local count: the global mean.
                self._loss_tracker.update_state(tf.math.divide_no_nan(loss_sum, count), sample_weight=count)
            if training:
                scaled = self.optimizer.scale_loss(loss)
        if training:
            grads = tape.gradient(scaled, self.trainable_weights)
            # Unused weights (the pooler under a span or tagging head) get no
            # gradient; they are left out instead of warned about.
            pairs = [(g, v) for g, v in zip(grads, self.trainable_weights) if g is not None]
            self.optimizer.apply_gradients(pairs)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def train_step(self, data):
        return self._step(data, training=True)

    def test_step(self, data):
        return self._step(data, training=False)

    # -------------------------------------------------------- convenience
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Under a tf.distribute strategy Keras 3.15 builds its metrics from a
        # MEAN over the replicas' first batch, which fails on string inputs
        # (AddN of strings). The model is built already; only shapes and
        # dtypes matter here, so the first replica's batch serves.
        if self._distribute_strategy is None or iterator is None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        strategy = self.distribute_strategy

        def first_replica(value):
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value

        for _, _, it in iterator:
            data_batch = tf.nest.map_structure(first_replica, next(it))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def fit(self, x=None, y=None, *args, **kwargs):
        """`keras.Model.fit`; x may also be Python strings (see `predict`)."""
        if isinstance(x, tf.data.Dataset) and not args:
            # Keras ignores `shuffle` for datasets but warns when it is True (its default).
            kwargs.setdefault("shuffle", False)
        return super().fit(_texts_as_tensors(x), y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """`keras.Model.evaluate`; x may also be Python strings (see `predict`)."""
        return super().evaluate(_texts_as_tensors(x), y, *args, **kwargs)

    def answer(self, text, text_pair=None, choices=None, **settings) -> Dict[str, np.ndarray]:
        """Answers raw texts as the model's exported `serving_default` does, from the same code
        (`albert_tf.export.answer`): labels and probabilities (classifier), answers with character
        offsets (span QA: `text` questions, `text_pair` contexts), one tag per word (tagging),
        probabilities and the choice (multiple choice: `text` contexts, `choices`).

        Args:
            text, text_pair, choices: lists of strings (choices: [batch, num_choices]).
            **settings: export settings (e.g. max_answer_length, n_best_size); default: the model's.

        Returns:
            Output name -> NumPy array (strings as Python str).

        Example:
        >>> clf.answer(["a fine film"])["label"]  # doctest: +SKIP
        array(['positive'], dtype=object)
        """
        from albert_tf.export.answers import answer

        return answer(self, text, text_pair, choices, **settings)

    def predict(self, x, *args, **kwargs):
        """`keras.Model.predict`, also on Python strings: a list (or NumPy
        array) of texts, a tuple (texts, text_pairs), or a dict of them. An
        empty batch gets outputs with no rows (Keras's predict cannot)."""
        if _empty_batch(x):
            from albert_tf.layers.preprocessor import at_least_one_position

            features = self.features(_empty_as_tensors(x))
            # No rows, so no [CLS] column to read unless one is padded in.
            features.update(at_least_one_position({k: v for k, v in features.items() if v.shape.rank >= 2}))
            return tf.nest.map_structure(lambda t: t.numpy(), self(features, training=False))
        return super().predict(_texts_as_tensors(x), *args, **kwargs)

    @property
    def task_config(self) -> dict:
        """What `save_task_model` writes to task_config.json."""
        pre = self.preprocessor
        return {
            "task_type": self.task_type,
            "max_seq_length": pre.max_seq_length if pre is not None else None,
            "do_lower_case": pre.do_lower_case if pre is not None else None,
            "normalization": pre.normalization if pre is not None else None,
            **self._task_args(),
        }

    def _task_args(self) -> dict:
        return {}

    def head_variable_map(self) -> Dict[str, tf.Variable]:
        """Saved name -> variable of the task head (the encoder's are `bert/...`)."""
        raise NotImplementedError

    # ------------------------------------------------------------- config
    def get_config(self):
        config = {"name": self.name, "config": self.config.to_dict(), **self._task_args()}
        config["preprocessor"] = (None if self.preprocessor is None
                                  else keras.layers.serialize(self.preprocessor))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        pre = config.pop("preprocessor", None)
        if pre is not None:
            pre = keras.layers.deserialize(pre)
        return cls(AlbertConfig(**config.pop("config")), preprocessor=pre, **config)

    @classmethod
    def from_pretrained(cls, path: str, *args, spm_model_file: Optional[str] = None,
                        max_seq_length: Optional[int] = None, do_lower_case: bool = True, dtype=None,
                        **kwargs) -> "TaskModel":
        """A task model whose encoder starts from a checkpoint; the head is new.

        Args:
            path: anything `albert_tf.load_checkpoint` reads (original TF1, Hugging
                Face, ours, a training checkpoint).
            *args: the task's own arguments (e.g. num_classes).
            spm_model_file: the SentencePiece model; by default the one beside
                the checkpoint (spm.model, 30k-clean.model, spiece.model or the
                only *.model: `albert_tf.model_folder`). Without one the model
                takes ids only.
            max_seq_length: the preprocessor's longest packed sequence; None:
                128 capped at the model's max_position_embeddings (as
                albert-finetune and albert-export); more than the model's
                positions is refused.
            do_lower_case: lower-case text (as the model was pretrained).
            dtype: optional Keras dtype policy, e.g. "mixed_bfloat16".
            **kwargs: the task's keyword arguments.
        """
        from albert_tf.checkpoints import load_checkpoint

        pretrainer = load_checkpoint(path, dtype=dtype)
        max_seq_length = max_seq_length_for(pretrainer.config.max_position_embeddings, max_seq_length)
        spm_model_file = spm_model_file or find_vocabulary(path)
        preprocessor = None
        if spm_model_file is not None:
            preprocessor = AlbertTextPreprocessor(spm_model_file, max_seq_length=max_seq_length,
                                                  do_lower_case=do_lower_case)
        else:
            logging.warning("No SentencePiece model beside %s and no spm_model_file: %s takes ids only.",
                            path, cls.__name__)
        if dtype is not None:
            kwargs["dtype"] = dtype
        model = cls(pretrainer.config, *args, preprocessor=preprocessor, **kwargs)
        model.encoder.set_weights(pretrainer.encoder.get_weights())
        return model
