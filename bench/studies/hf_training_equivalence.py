"""Does fine-tuning with albert_tf take the same steps as Hugging Face from the same start?

Study (2026-12-01). Question: From the same start and batches, does fine-tuning in albert-tf take Hugging
Face's steps? Answer: yes, logits within 9e-7 after 12 steps (kept as a check on any converted folder;
tests/bench/test_hf_training_equivalence.py). Command: `python -m bench.studies.hf_training_equivalence
path/to/hf_folder`.

`compare_finetuning_with_transformers(folder)` loads one Hugging Face ALBERT
folder (as `albert-convert --to=huggingface` writes it) twice: as our
`AlbertClassifier` (`albert_tf.optimizers.adamw`, Keras `train_on_batch`)
and as `transformers.AlbertForSequenceClassification` (torch AdamW with the
same weight-decay exclusions, `get_linear_schedule_with_warmup`, gradient
clipping to norm 1.0), gives both the same classifier weights, trains both
on the same batches (padded rows of random ids, labelled by their first id: learnable) and compares
their logits on a fixed batch after every step. Dropout is off on both sides
so that the two runs are deterministic; what is compared is the model, the
loss, the gradients, the clipping, the weight decay, Adam's bias-corrected
moments and the schedule (ours with `decay_after_warmup=True`, the schedule
Hugging Face uses).

From one start, on the same batches, the two stay within float rounding of
each other, so a gap between the two systems' mean accuracies from random
weights comes from what each draws at random (classifier head, dropout
masks), not from the maths (bench/studies/README.md, "Fine-tuning parity").
Needs torch and transformers (the [bench] extra).

    python -m bench.studies.hf_training_equivalence path/to/hf_folder

Example:

```python
from bench.studies.hf_training_equivalence import compare_finetuning_with_transformers
report = compare_finetuning_with_transformers("runs/pretrained_hf", steps=30, atol=1e-3)
```
"""

from __future__ import annotations

import json
import sys
from typing import Dict, List, Optional

import numpy as np

WEIGHT_DECAY = 0.01
CLIP_NORM = 1.0
NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # the original's weight-decay exclusions


def torch_adamw(model, learning_rate: float):
    """torch AdamW with weight decay WEIGHT_DECAY except on biases and LayerNorm (the original's exclusions)."""
    import torch

    named = list(model.named_parameters())
    return torch.optim.AdamW(
        [{"params": [p for n, p in named if not any(k in n for k in NO_DECAY)], "weight_decay": WEIGHT_DECAY},
         {"params": [p for n, p in named if any(k in n for k in NO_DECAY)], "weight_decay": 0.0}],
        lr=learning_rate)


def random_batches(vocab_size: int, max_length: int, batch_size: int, count: int, num_classes: int,
                   seed: int = 0) -> List[Dict[str, np.ndarray]]:
    """`count` batches of [CLS] ids [SEP] rows of random lengths (padded), labelled by the first id after
    [CLS] (modulo num_classes), so that training has something to learn.

    Example:
    >>> b = random_batches(30, 12, 4, 2, 3)
    >>> len(b), b[0]["input_ids"].shape, int(b[0]["input_ids"][0, 0]), b[0]["labels"].shape
    (2, (4, 12), 2, (4,))
    """
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        ids = np.zeros([batch_size, max_length], np.int32)
        mask = np.zeros([batch_size, max_length], np.int32)
        for row in range(batch_size):
            used = int(rng.integers(3, max_length + 1))  # [CLS] x [SEP] at least
            ids[row, :used] = rng.integers(5, vocab_size, used)
            ids[row, 0], ids[row, used - 1] = 2, 3  # [CLS] ... [SEP]
            mask[row, :used] = 1
        batches.append({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
                        "labels": (ids[:, 1] % num_classes).astype(np.int32)})
    return batches


def _torch_inputs(batch: Dict[str, np.ndarray]) -> Dict[str, object]:
    import torch

    return {"input_ids": torch.as_tensor(batch["input_ids"], dtype=torch.long),
            "attention_mask": torch.as_tensor(batch["input_mask"], dtype=torch.long),
            "token_type_ids": torch.as_tensor(batch["segment_ids"], dtype=torch.long)}


def _models(folder: str, num_classes: int):
    """Ours and transformers' classifier from `folder`, with our head's weights copied into theirs."""
    import torch
    import transformers

    import albert_tf

    ours = albert_tf.AlbertClassifier.from_pretrained(folder, num_classes=num_classes, dropout_rate=0.0)
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(
        folder, num_labels=num_classes, classifier_dropout_prob=0.0, dtype=torch.float32)
    with torch.no_grad():
        theirs.classifier.weight.copy_(torch.as_tensor(ours.head.output_weights.numpy()))
        theirs.classifier.bias.copy_(torch.as_tensor(ours.head.output_bias.numpy()))
    return ours, theirs


def compare_finetuning_with_transformers(folder: str, steps: int = 20, warmup_steps: int = 4,
                                         learning_rate: float = 1e-3, batch_size: int = 8, max_length: int = 16,
                                         num_classes: int = 3, atol: Optional[float] = None,
                                         seed: int = 0) -> Dict[str, object]:
    """Trains ours and transformers' classifier side by side (see the module docstring).

    Args:
        folder: a Hugging Face ALBERT folder (config.json, model.safetensors).
        steps: optimizer steps (the schedule decays to 0 at the last one).
        warmup_steps: linear warmup steps of the schedule.
        learning_rate: the peak rate.
        batch_size, max_length: the training batches' shape.
        num_classes: the classifier's outputs.
        atol: when given, raise AssertionError if the logits differ by more at any step.
        seed: seed of the batches.

    Returns:
        `max_logit_diff` per step, `max_logit_diff_overall`, `logit_scale` (the largest
        |logit| at the end, to read the differences against) and `loss_moved` (how far
        training moved the first batch's loss: the steps were not a no-op).
    """
    if steps < 1 or not 0 <= warmup_steps < steps:
        raise ValueError(f"need steps >= 1 and 0 <= warmup_steps < steps, got steps={steps!r}, "
                         f"warmup_steps={warmup_steps!r}.")
    import torch
    import transformers

    import albert_tf

    with open(f"{folder}/config.json", encoding="utf-8") as f:
        vocab_size = json.load(f)["vocab_size"]
    batches = random_batches(vocab_size, max_length, batch_size, steps + 1, num_classes, seed)
    probe = batches.pop()
    ours, theirs = _models(folder, num_classes)
    ours.compile(optimizer=albert_tf.optimizers.adamw(
        learning_rate, num_train_steps=steps, num_warmup_steps=warmup_steps, weight_decay_rate=WEIGHT_DECAY,
        global_clipnorm=CLIP_NORM, decay_after_warmup=True))
    optimizer = torch_adamw(theirs, learning_rate)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, warmup_steps, steps)

    def logits():
        theirs.eval()
        with torch.no_grad():
            theirs_logits = theirs(**_torch_inputs(probe)).logits.numpy()
        theirs.train()
        features = {k: probe[k] for k in ("input_ids", "input_mask", "segment_ids")}
        return np.asarray(ours(features, training=False)), theirs_logits

    first = batches[0]
    first_loss = float(ours.evaluate({k: first[k] for k in ("input_ids", "input_mask", "segment_ids")},
                                     first["labels"], verbose=0))
    diffs = []
    theirs.train()
    for batch in batches:
        ours.train_on_batch({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}, batch["labels"])
        loss = theirs(**_torch_inputs(batch), labels=torch.as_tensor(batch["labels"], dtype=torch.long)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), CLIP_NORM)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        ours_logits, theirs_logits = logits()
        diffs.append(float(np.max(np.abs(ours_logits - theirs_logits))))
    last_loss = float(ours.evaluate({k: first[k] for k in ("input_ids", "input_mask", "segment_ids")},
                                    first["labels"], verbose=0))
    report = {"max_logit_diff": diffs, "max_logit_diff_overall": max(diffs),
              "logit_scale": float(np.max(np.abs(ours_logits))), "loss_moved": abs(first_loss - last_loss)}
    if atol is not None and report["max_logit_diff_overall"] > atol:
        raise AssertionError(f"{folder}: fine-tuning steps of albert_tf and transformers differ by more than "
                             f"{atol}: {diffs}")
    return report


if __name__ == "__main__":
    print(json.dumps(compare_finetuning_with_transformers(sys.argv[1]), indent=1))
