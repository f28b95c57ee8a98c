"""Does `transformers` compute what we compute from a folder `albert-convert --to=huggingface` wrote?

`compare_with_transformers(folder)` loads the folder twice, with
`transformers.AlbertForPreTraining` (torch, float32, eval mode) and with our
`albert_tf.load_checkpoint`, runs both on the same fixed batch (two rows, the
second one padded, both segments, ids across the whole vocabulary) and
returns the largest absolute differences of the sequence output, the pooled
output and, when the folder has them, the MLM and SOP logits. With
``atol`` it raises when any difference is larger than ``atol`` times the
output's scale (its largest magnitude, at least 1): float32 kernels differ
by a few ulps of the values they add up, so the bound grows with them. Needs torch and
transformers (the [bench] extra).

    python -m bench.hf_equivalence path/to/hf_folder

Example:

```python
from bench.hf_equivalence import compare_with_transformers
diffs = compare_with_transformers("runs/pretrained_hf", atol=1e-4)
```
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, Optional, Set

import numpy as np


def fixed_batch(vocab_size: int, max_length: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """[CLS] a [SEP] b [SEP] rows of ids 5 .. vocab-1; row 1 padded to half the length.

    Example:
    >>> b = fixed_batch(30, 16)
    >>> b["input_ids"].shape, int(b["input_mask"][1].sum()), int(b["input_ids"][0, 0])
    ((2, 16), 8, 2)
    """
    rng = np.random.default_rng(seed)
    length = min(max_length, 24)
    ids = np.zeros([2, length], np.int32)
    mask = np.zeros([2, length], np.int32)
    segments = np.zeros([2, length], np.int32)
    for row, used in enumerate((length, length // 2)):
        ids[row, :used] = rng.integers(5, vocab_size, used)
        half = used // 2
        ids[row, 0], ids[row, half - 1], ids[row, used - 1] = 2, 3, 3  # [CLS] a [SEP] b [SEP]
        mask[row, :used] = 1
        segments[row, half:used] = 1
    positions = np.array([[1, 2, length - 2], [1, 2, length // 2 - 2]], np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "masked_lm_positions": positions}


def _transformers_outputs(folder: str, batch: Dict[str, np.ndarray],
                          absent_heads: Set[str]) -> Dict[str, np.ndarray]:
    import torch
    import transformers

    model, info = transformers.AlbertForPreTraining.from_pretrained(folder, dtype=torch.float32,
                                                                    output_loading_info=True)
    # The decoder is tied to the word embeddings and predictions.bias; a head the folder lacks is random.
    allowed = ("predictions.decoder.",) + tuple(f"{head}." for head in absent_heads)
    missing = [k for k in info["missing_keys"] if not k.startswith(allowed)]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        raise AssertionError(f"{folder}: transformers did not load every weight: missing {missing}, "
                             f"unexpected {info['unexpected_keys']}, mismatched {info.get('mismatched_keys')}")
    model.eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                    token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                    output_hidden_states=True)
        hidden = out.hidden_states[-1].numpy()
        pooled = model.albert.pooler_activation(model.albert.pooler(out.hidden_states[-1][:, 0])).numpy()
    positions = batch["masked_lm_positions"]
    mlm = np.take_along_axis(out.prediction_logits.numpy(), positions[:, :, None], axis=1)
    return {"sequence_output": hidden, "pooled_output": pooled, "mlm_logits": mlm,
            "sop_logits": out.sop_logits.numpy()}


def compare_with_transformers(folder: str, atol: Optional[float] = None, seed: int = 0) -> Dict[str, float]:
    """Largest |transformers - ours| per output on a fixed batch (see the module docstring).

    Args:
        folder: a Hugging Face ALBERT folder (config.json, model.safetensors).
        atol: when given, raise AssertionError if any difference exceeds atol * max(1, max |output|).
        seed: seed of the fixed batch's ids.

    Returns:
        {"sequence_output": d, "pooled_output": d[, "mlm_logits": d][, "sop_logits": d]}:
        heads the folder lacks (random on both sides) are not compared.
    """
    import albert_tf

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        hf_config = json.load(f)
    batch = fixed_batch(hf_config["vocab_size"], hf_config["max_position_embeddings"], seed)
    ours_model, missing = albert_tf.checkpoints.load_checkpoint_with_report(folder)
    absent = {"predictions" if name.startswith("cls/predictions") else "sop_classifier" for name in missing}
    theirs = _transformers_outputs(folder, batch, absent)
    ours = {k: np.asarray(v) for k, v in ours_model(batch).items()}
    ours["mlm_logits"] = ours["mlm_logits"].reshape(theirs["mlm_logits"].shape)
    skip = {"mlm_logits" if head == "predictions" else "sop_logits" for head in absent}
    diffs = {key: float(np.max(np.abs(theirs[key] - ours[key]))) for key in theirs if key not in skip}
    if atol is not None:
        scales = {key: max(1.0, float(np.max(np.abs(theirs[key])))) for key in diffs}
        over = {k: (d, scales[k]) for k, d in diffs.items() if d > atol * scales[k]}
        if over:
            raise AssertionError(f"{folder}: transformers and albert_tf differ by more than {atol} times the "
                                 f"output's scale: {{output: (difference, scale)}} = {over}")
    return diffs


if __name__ == "__main__":
    print(json.dumps(compare_with_transformers(sys.argv[1]), indent=1))
