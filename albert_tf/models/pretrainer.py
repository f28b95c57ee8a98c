"""AlbertPretrainer: encoder + masked-LM head + sentence-order head, with losses."""

from typing import Dict, Mapping

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.models.config_model import ConfigModel
from albert_tf.layers.heads import MaskedLMHead, SentenceOrderHead
from albert_tf.models.encoder import ENCODER_INPUTS, AlbertEncoder, _dummy_inputs

# The original's denominator guard in the masked-LM loss.
MLM_WEIGHT_EPSILON = 1e-5
# The features a pretraining batch carries besides the encoder's inputs (the
# TFRecord contract's names, as the original's run_pretraining reads them).
MASKED_LM_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
SENTENCE_ORDER_LABELS = "next_sentence_labels"
PRETRAINING_FEATURES = ENCODER_INPUTS + MASKED_LM_FEATURES + (SENTENCE_ORDER_LABELS,)
# The sums `pretraining_loss_terms` returns, in a fixed order (for stacking).
LOSS_TERM_KEYS = ("mlm_nll_sum", "mlm_weight_sum", "mlm_correct_sum", "sop_nll_sum", "sop_correct_sum", "num_examples")


def pretraining_loss_terms(batch: Mapping[str, tf.Tensor], outputs: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Sums over the local batch from which the original's losses follow.

    `mlm_loss = mlm_nll_sum / (mlm_weight_sum + 1e-5)`,
    `sop_loss = sop_nll_sum / num_examples`. Returning sums (not ratios) lets a
    distributed or accumulating loop divide by global denominators and get the
    exact big-batch loss.

    Args:
        batch: dict with `masked_lm_ids` [B, P], `masked_lm_weights` [B, P] and
            `next_sentence_labels` [B] or [B, 1]; optionally `is_real_example`
            [B] (1 or 0: a row padding a batch to its fixed shape, which then
            counts for nothing; its masked_lm_weights are 0).
        outputs: the pretrainer's outputs (`mlm_logits`, `sop_logits`).

    Returns:
        float32 scalars: mlm_nll_sum, mlm_weight_sum, mlm_correct_sum,
        sop_nll_sum, sop_correct_sum, num_examples.
    """
    mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
    labels = tf.cast(batch["masked_lm_ids"], tf.int32)
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=mlm_logits)
    mlm_hits = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), labels), tf.float32)

    sop_logits = tf.cast(outputs["sop_logits"], tf.float32)
    sop_labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
    sop_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=sop_labels, logits=sop_logits)
    sop_hits = tf.cast(tf.equal(tf.argmax(sop_logits, -1, output_type=tf.int32), sop_labels), tf.float32)
    if "is_real_example" in batch:  # static shapes: padding rows count for nothing
        real = tf.reshape(tf.cast(batch["is_real_example"], tf.float32), [-1])
        sop_nll, sop_hits, num_examples = real * sop_nll, real * sop_hits, tf.reduce_sum(real)
    else:
        num_examples = tf.cast(tf.shape(sop_labels)[0], tf.float32)
    return {
        "mlm_nll_sum": tf.reduce_sum(weights * nll),
        "mlm_weight_sum": tf.reduce_sum(weights),
        "mlm_correct_sum": tf.reduce_sum(weights * mlm_hits),
        "sop_nll_sum": tf.reduce_sum(sop_nll),
        "sop_correct_sum": tf.reduce_sum(sop_hits),
        "num_examples": num_examples,
    }


def pretraining_losses(terms: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The original's losses and accuracies from `pretraining_loss_terms` sums.

    The one definition every reporter uses (the training loop, its logs,
    `evaluate`, Keras `fit`/`evaluate`): `mlm_loss = nll_sum / (weight_sum +
    1e-5)` as the original's loss; `mlm_accuracy` is weighted by
    masked_lm_weights (padding slots do not count); `sop_*` are means over
    examples. The sums may cover one batch or many (an interval, an
    evaluation), giving exactly the big-batch ratios.

    Args:
        terms: the six sums of `pretraining_loss_terms` (tensors or floats).

    Returns:
        float32 scalars: loss (mlm_loss + sop_loss), mlm_loss, sop_loss,
        mlm_accuracy, sop_accuracy.

    Example:
    >>> sums = dict(mlm_nll_sum=6.0, mlm_weight_sum=3.0, mlm_correct_sum=1.5,
    ...             sop_nll_sum=2.0, sop_correct_sum=1.0, num_examples=2.0)
    >>> {k: round(float(v), 4) for k, v in pretraining_losses(sums).items()}
    {'loss': 3.0, 'mlm_loss': 2.0, 'sop_loss': 1.0, 'mlm_accuracy': 0.5, 'sop_accuracy': 0.5}
    """
    terms = {key: tf.cast(terms[key], tf.float32) for key in LOSS_TERM_KEYS}
    examples = tf.maximum(terms["num_examples"], 1.0)
    mlm_loss = terms["mlm_nll_sum"] / (terms["mlm_weight_sum"] + MLM_WEIGHT_EPSILON)
    sop_loss = terms["sop_nll_sum"] / examples
    return {
        "loss": mlm_loss + sop_loss,
        "mlm_loss": mlm_loss,
        "sop_loss": sop_loss,
        "mlm_accuracy": terms["mlm_correct_sum"] / tf.maximum(terms["mlm_weight_sum"], MLM_WEIGHT_EPSILON),
        "sop_accuracy": terms["sop_correct_sum"] / examples,
    }


def global_loss_terms(terms: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """`pretraining_loss_terms` summed over the replicas of the current strategy.

    Called in a replica context (inside `strategy.run`, or outside any
    strategy, where it returns the sums unchanged).
    """
    stacked = tf.stack([tf.cast(terms[key], tf.float32) for key in LOSS_TERM_KEYS])
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        stacked = context.all_reduce(tf.distribute.ReduceOp.SUM, stacked)
    return dict(zip(LOSS_TERM_KEYS, tf.unstack(stacked)))


class AlbertPretrainer(ConfigModel):
    """ALBERT with its pretraining heads: masked LM and sentence-order prediction.

    Inputs: the encoder's dict plus `masked_lm_positions` [B, P] int32. Extra
    keys (the TFRecord's labels) are ignored by `call`, so a batch from the
    pretraining reader can be passed as is. Outputs: `sequence_output`,
    `pooled_output`, `mlm_logits` [B, P, V] and `sop_logits` [B, 2] (float32).
    In training (`training=True`) the last block computes only what the
    losses read, [CLS] and the masked positions (`AlbertEncoder`'s
    `output_positions`), and `sequence_output` is not returned.

    `compile(optimizer=...)` then `fit(dataset)` trains with the original's
    losses (weighted masked-LM loss + SOP cross-entropy) and reports loss,
    mlm_loss, sop_loss, mlm_accuracy and sop_accuracy. `pre.encoder` is the
    `AlbertEncoder` to fine-tune or export.

    Args:
        config: an `AlbertConfig`.
        **kwargs: passed to `keras.Model`.

    Example:
    >>> import albert_tf, tensorflow as tf
    >>> pre = albert_tf.AlbertPretrainer(albert_tf.AlbertConfig.tiny())
    >>> ids = tf.constant([[2, 17, 4, 3]])
    >>> out = pre({"input_ids": ids, "masked_lm_positions": tf.constant([[2]])})
    >>> out["mlm_logits"].shape, out["sop_logits"].shape
    (TensorShape([1, 1, 100]), TensorShape([1, 2]))
    """

    def __init__(self, config: AlbertConfig, **kwargs):
        kwargs.setdefault("name", "albert_pretrainer")
        super().__init__(**kwargs)
        self.config = config
        self.encoder = AlbertEncoder(config, dtype=self.dtype_policy)
        self.mlm_head = MaskedLMHead(
            config.vocab_size,
            config.embedding_size,
            config.hidden_act,
            config.initializer_range,
            layer_norm_eps=config.layer_norm_eps,
            name="mlm_head",
            dtype=self.dtype_policy,
        )
        self.sop_head = SentenceOrderHead(
            config.hidden_size, config.initializer_range, name="sop_head", dtype=self.dtype_policy
        )
        self._trackers = {key: keras.metrics.Sum(name=key) for key in LOSS_TERM_KEYS}
        dummy = _dummy_inputs()
        dummy["masked_lm_positions"] = tf.constant([[1]], tf.int32)
        self(dummy)

    def call(self, inputs: Mapping[str, tf.Tensor], training=None):
        if "masked_lm_positions" not in inputs:
            raise ValueError(
                f"AlbertPretrainer needs 'masked_lm_positions' in its inputs; got keys {sorted(inputs)}."
            )
        positions = tf.cast(inputs["masked_lm_positions"], tf.int32)
        if training:
            # The losses read [CLS] and the masked positions only: the last block computes those alone.
            outputs = dict(self.encoder(inputs, training=training, output_positions=positions))
            gathered = outputs.pop("position_output")
        else:
            outputs = dict(self.encoder(inputs, training=training))
            gathered = tf.gather(outputs["sequence_output"], positions, batch_dims=1)
        outputs["mlm_logits"] = self.mlm_head(gathered, self.encoder.embeddings.word_embeddings)
        outputs["sop_logits"] = self.sop_head(outputs["pooled_output"])
        return outputs

    def answer(self, text, spm_model_file: str, *, top_k: int = 5, **settings):
        """Fill-mask on raw text, as the model's exported `serving_default` answers it, from the same code
        (`albert_tf.export.answer`): write `[MASK]` where a piece is to be predicted.

        Args:
            text: a list of strings.
            spm_model_file: the SentencePiece model the model was trained with.
            top_k: candidates per [MASK].
            **settings: max_seq_length (as `export_saved_model`).

        Returns:
            Output name -> NumPy array: `masked_positions` [B, M] (positions in the packed sequence, -1 on
            padding), `top_k_pieces` (str), `top_k_ids`, `top_k_scores` (probabilities) [B, M, top_k].

        Example:
        >>> pre.answer(["the [MASK] sat"], "spm.model", top_k=3)["top_k_pieces"]  # doctest: +SKIP
        """
        from albert_tf.export.answers import answer

        return answer(self, text, spm_model_file=spm_model_file, top_k=top_k, **settings)

    # ----------------------------------------------------------- Keras fit
    # The trackers hold the loss-term sums over the epoch; the reported values
    # are `pretraining_losses` of those sums, so loss, mlm_loss and the
    # accuracies are exact ratios over everything seen (global denominators),
    # as in the custom loop's logs and `evaluate`. Every replica adds the
    # all-reduced sums, so replica-summed reads scale numerator and
    # denominator alike and the ratios hold in any context.
    @property
    def metrics(self):
        return list(self._trackers.values())

    def _update_trackers(self, global_terms):
        for key in LOSS_TERM_KEYS:
            self._trackers[key].update_state(global_terms[key])
        return pretraining_losses({key: self._trackers[key].result() for key in LOSS_TERM_KEYS})

    def train_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            outputs = self(batch, training=True)
            terms = pretraining_loss_terms(batch, outputs)
            totals = global_loss_terms(terms)
            # Local sums over global denominators: the optimizer sums the
            # replicas' gradients, which is then the gradient of the loss of
            # the whole global batch (not a mean of per-replica losses).
            loss = (
                terms["mlm_nll_sum"] / (tf.stop_gradient(totals["mlm_weight_sum"]) + MLM_WEIGHT_EPSILON)
                + terms["sop_nll_sum"] / tf.maximum(tf.stop_gradient(totals["num_examples"]), 1.0)
            )
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return self._update_trackers(totals)

    def test_step(self, data):
        batch = data[0] if isinstance(data, tuple) else data
        outputs = self(batch, training=False)
        return self._update_trackers(global_loss_terms(pretraining_loss_terms(batch, outputs)))
