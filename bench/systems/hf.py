"""Hugging Face transformers on PyTorch: AlbertForPreTraining, AlbertModel and
its text path (AlbertTokenizer, the Rust tokenizer, from the SentencePiece model, padding to
the batch's longest).

bfloat16 is `torch.autocast("cpu", dtype=torch.bfloat16)` (weights stay
float32, as Keras's mixed_bfloat16). The optimizer is torch's AdamW: PyTorch
has no LAMB; both are one elementwise pass over the parameters.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, List

from bench.systems import common


def _config(vocab_size: int = common.ALBERT_BASE["vocab_size"]):
    import transformers

    s = common.ALBERT_BASE
    return transformers.AlbertConfig(
        vocab_size=vocab_size, embedding_size=s["embedding_size"], hidden_size=s["hidden_size"],
        num_hidden_layers=s["num_hidden_layers"], num_attention_heads=s["num_attention_heads"],
        intermediate_size=s["intermediate_size"], hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=s["max_position_embeddings"],
        type_vocab_size=s["type_vocab_size"], num_hidden_groups=1, inner_group_num=1)


def _autocast(precision: str):
    import torch

    if precision == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _seed():
    import torch

    torch.manual_seed(0)


def train(precision: str, batch: int, seq: int, warmup: int, steps: int) -> Dict[str, float]:
    """AlbertForPreTraining: MLM (labels -100 except at the masked positions) + SOP."""
    import torch
    import transformers

    _seed()
    model = transformers.AlbertForPreTraining(_config())
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ex = common.synthetic_pretraining_batch(batch, seq, common.PREDICTIONS_PER_SEQ,
                                            common.ALBERT_BASE["vocab_size"])
    labels = torch.full((batch, seq), -100, dtype=torch.long)
    rows = torch.arange(batch)[:, None]
    labels[rows, torch.from_numpy(ex["masked_lm_positions"]).long()] = torch.from_numpy(
        ex["masked_lm_ids"]).long()
    inputs = dict(input_ids=torch.from_numpy(ex["input_ids"]).long(),
                  attention_mask=torch.from_numpy(ex["input_mask"]).long(),
                  token_type_ids=torch.from_numpy(ex["segment_ids"]).long(), labels=labels,
                  sentence_order_label=torch.from_numpy(ex["next_sentence_labels"]).long())

    def step():
        with _autocast(precision):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    times = common.timed_calls(step, warmup, steps)
    return common.per_second(batch, times)


def infer(precision: str, batch: int, seq: int, warmup: int, steps: int) -> Dict[str, float]:
    """AlbertModel forward (pooled output) under torch.inference_mode."""
    import torch
    import transformers

    _seed()
    model = transformers.AlbertModel(_config()).eval()
    ex = common.synthetic_pretraining_batch(batch, seq, 1, common.ALBERT_BASE["vocab_size"])
    inputs = dict(input_ids=torch.from_numpy(ex["input_ids"]).long(),
                  attention_mask=torch.from_numpy(ex["input_mask"]).long(),
                  token_type_ids=torch.from_numpy(ex["segment_ids"]).long())

    def forward():
        with torch.inference_mode(), _autocast(precision):
            return model(**inputs).pooler_output.float().numpy()

    times = common.timed_calls(forward, warmup, steps)
    return common.per_second(batch, times)


def _tokenizer(spm_path: str):
    """HF's ALBERT tokenizer (the Rust "fast" one) from our SentencePiece model.

    transformers 5 reads the model only through from_pretrained, from a
    folder holding it as spiece.model (vocab_file= is ignored silently).
    """
    import shutil
    import tempfile

    import transformers

    folder = tempfile.mkdtemp(prefix="hf-albert-tokenizer-")
    shutil.copy(spm_path, os.path.join(folder, "spiece.model"))
    tokenizer = transformers.AlbertTokenizer.from_pretrained(folder, do_lower_case=True)
    shutil.rmtree(folder, ignore_errors=True)
    if len(tokenizer) != common.TEXT_VOCAB_SIZE:
        raise ValueError(f"HF tokenizer has {len(tokenizer)} pieces, expected {common.TEXT_VOCAB_SIZE}.")
    return tokenizer


def text(precision: str, spm_path: str, sentences: List[str], warmup: int, steps: int) -> Dict[str, float]:
    """HF's AlbertTokenizer (dynamic padding, truncation at 128) + AlbertModel."""
    import torch
    import transformers

    _seed()
    tokenizer = _tokenizer(spm_path)
    model = transformers.AlbertModel(_config(vocab_size=len(tokenizer))).eval()

    def forward():
        enc = tokenizer(sentences, padding="longest", truncation=True,
                        max_length=common.TEXT_MAX_SEQ_LENGTH, return_tensors="pt")
        with torch.inference_mode(), _autocast(precision):
            return model(**enc).pooler_output.float().numpy()

    padded = tokenizer(sentences, padding="longest", truncation=True,
                       max_length=common.TEXT_MAX_SEQ_LENGTH, return_tensors="pt")["input_ids"].shape[1]
    times = common.timed_calls(forward, warmup, steps)
    result = common.per_second(len(sentences), times)
    result["padded_length"] = int(padded)
    return result
