"""Stage 5, evaluation on the held-out documents: masked-LM accuracy against always answering the training
data's most frequent masked piece (`masked_token_baseline`), and sentence-order accuracy against chance.

Example:

>>> import numpy as np
>>> most_frequent_accuracy(np.array([5, 5, 7, 9]), np.array([1, 1, 1, 0]), np.array([5, 7, 7, 9]),
...                        np.array([1, 1, 1, 1]))
(5, 0.25, 4)
"""

from __future__ import annotations

from typing import Tuple

from albert_tf.demo.console import Console
from albert_tf.demo.settings import MAX_PREDICTIONS_PER_SEQ, DemoSettings


def most_frequent_accuracy(train_ids, train_weights, eval_ids, eval_weights) -> Tuple[int, float, int]:
    """(most frequent scored training label, how often it is the scored eval label, eval positions scored).

    Args:
        train_ids, train_weights: masked_lm_ids / masked_lm_weights of training rows (flat).
        eval_ids, eval_weights: the same of the held-out rows.
    """
    import numpy as np

    most_frequent = np.bincount(train_ids[train_weights > 0]).argmax()
    scored = eval_ids[eval_weights > 0]
    return int(most_frequent), float((scored == most_frequent).mean()), int(scored.size)


def masked_token_baseline(train_pattern: str, eval_pattern: str, max_seq_length: int) -> Tuple[int, float, int]:
    """(most frequent masked piece of the training data, held-out accuracy of always answering it, positions)."""
    import numpy as np
    import pipelines

    def labels(pattern, batches):
        ds = pipelines.pretraining_dataset(
            pattern, 256, max_seq_length, MAX_PREDICTIONS_PER_SEQ, is_training=False
        ).take(batches)
        ids, weights = [], []
        for batch in ds:
            ids.append(batch["masked_lm_ids"].numpy().ravel())
            weights.append(batch["masked_lm_weights"].numpy().ravel())
        return np.concatenate(ids), np.concatenate(weights)

    return most_frequent_accuracy(*labels(train_pattern, 20), *labels(eval_pattern, 1000))


def evaluation_stage(settings: DemoSettings, console: Console, result: dict, vocab_size: int, spm_model: str,
                     train_pattern: str, eval_pattern: str) -> dict:
    """Stage 5: reports the held-out accuracies; returns the masked-LM figures of the verdict."""
    import pipelines

    console.stage(5, "evaluation", "the pretrained model on the held-out documents")
    most_frequent, baseline, positions = masked_token_baseline(train_pattern, eval_pattern, settings.max_seq_length)
    mlm_acc = result["eval_masked_lm_accuracy"]
    sop_acc = result["eval_sentence_order_accuracy"]
    console.say(
        "Held-out masked-LM accuracy %.3f on %d masked positions (chance 1/V = %.5f; always guessing the most "
        "frequent piece %r: %.3f)",
        mlm_acc,
        positions,
        1.0 / vocab_size,
        pipelines.SentencePieceVocab.from_file(spm_model).pieces[most_frequent],
        baseline,
    )
    # SOP is reported, not judged: at this size it stays near chance (bench/results/learning_efficiency.md).
    console.say("Held-out sentence-order accuracy %.3f (chance 0.5), on %d instances.", sop_acc,
                result.get("eval_num_examples", 0))
    return {"mlm_accuracy": mlm_acc, "mlm_baseline": baseline, "mlm_positions": positions}
