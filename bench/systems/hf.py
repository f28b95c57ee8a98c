"""Hugging Face transformers on PyTorch: AlbertForPreTraining's weights (MLM head
on the masked positions only, as ours), AlbertModel and
its text path (AlbertTokenizer, the Rust tokenizer, from the SentencePiece model, padding to
the batch's longest, or rows sorted by length within the batch, `sort_rows` at a time).
`shape`: "base" or "tiny" (`common.SHAPES`). Threads: `threads.uses("torch")`.

bfloat16 is `torch.autocast("cpu", dtype=torch.bfloat16)` (weights stay
float32, as Keras's mixed_bfloat16). The optimizer is torch's AdamW: PyTorch
has no LAMB; both are one elementwise pass over the parameters.
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, List, Optional

from bench.systems import common, threads


def _config(vocab_size: int = common.ALBERT_BASE["vocab_size"], shape: str = "base"):
    import transformers

    s = common.shape_dims(shape)
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


def masked_pretraining_loss(model, inputs):
    """MLM + SOP loss of `transformers.AlbertForPreTraining` computed as ours is:
    the encoder on every position, the MLM head (`model.predictions`) on the
    gathered masked positions only, and the SOP head on the pooled output.

    inputs: input_ids, attention_mask, token_type_ids, masked_lm_positions,
    masked_lm_ids (long), masked_lm_weights (float), sentence_order_label.
    MLM loss: the weighted mean of the per-position cross-entropy.
    """
    import torch

    out = model.albert(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                       token_type_ids=inputs["token_type_ids"])
    positions = inputs["masked_lm_positions"]
    rows = torch.arange(positions.shape[0], device=positions.device)[:, None]
    logits = model.predictions(out.last_hidden_state[rows, positions])  # [B, P, V]
    nll = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), inputs["masked_lm_ids"].flatten(),
                                            reduction="none")
    weights = inputs["masked_lm_weights"].flatten()
    mlm = (nll * weights).sum() / weights.sum().clamp_min(1e-5)
    sop = torch.nn.functional.cross_entropy(model.sop_classifier(out.pooler_output).float(),
                                            inputs["sentence_order_label"])
    return mlm + sop


def pretraining_inputs(ex) -> Dict[str, object]:
    """`common.synthetic_pretraining_batch` as torch tensors for masked_pretraining_loss."""
    import torch

    long = lambda k: torch.from_numpy(ex[k]).long()  # noqa: E731
    return dict(input_ids=long("input_ids"), attention_mask=long("input_mask"), token_type_ids=long("segment_ids"),
                masked_lm_positions=long("masked_lm_positions"), masked_lm_ids=long("masked_lm_ids"),
                masked_lm_weights=torch.from_numpy(ex["masked_lm_weights"]).float(),
                sentence_order_label=long("next_sentence_labels"))


@threads.uses("torch")
def train(precision: str, batch: int, seq: int, warmup: int, steps: int, compile: bool = False,
          shape: str = "base") -> Dict[str, float]:
    """AlbertForPreTraining's weights, MLM head on the masked positions only + SOP
    (`masked_pretraining_loss`: the same work as ours); with compile, the loss
    function through `torch.compile` (inductor on CPU)."""
    import torch
    import transformers

    _seed()
    model = transformers.AlbertForPreTraining(_config(shape=shape))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    inputs = pretraining_inputs(common.synthetic_pretraining_batch(
        batch, seq, common.PREDICTIONS_PER_SEQ, common.ALBERT_BASE["vocab_size"]))
    loss_fn = masked_pretraining_loss
    if compile:
        loss_fn = torch.compile(masked_pretraining_loss)

    def step():
        with _autocast(precision):
            loss = loss_fn(model, inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    try:
        times = common.timed_calls(step, warmup, steps)
    except Exception as e:  # noqa: BLE001 - the row shows why torch.compile failed
        if not compile:
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        raise RuntimeError(f"torch.compile failed: {type(e).__name__}: {first[:200]}") from e
    return common.per_second(batch, times)


@threads.uses("torch")
def infer(precision: str, batch: int, seq: int, warmup: int, steps: int, shape: str = "base",
          compile: bool = False) -> Dict[str, float]:
    """AlbertModel forward (pooled output) under torch.inference_mode; with compile, the model through
    `torch.compile` (inductor on CPU; it compiles in the first warm-up call)."""
    import torch
    import transformers

    _seed()
    model = transformers.AlbertModel(_config(shape=shape)).eval()
    if compile:
        model = torch.compile(model)
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


def encode_sorted(tokenizer, texts: List[str], sort_rows: int, return_tensors: str = "pt"):
    """The batch's encodings: one padded to its longest row (sort_rows 0), or chunks of
    `sort_rows` rows sorted by length, each padded to its own longest
    (`common.length_sorted_chunks`). Returns (chunks of row indices, encodings)."""
    import numpy as np

    if not sort_rows:
        return [np.arange(len(texts))], [tokenizer(texts, padding="longest", truncation=True,
                                                   max_length=common.TEXT_MAX_SEQ_LENGTH,
                                                   return_tensors=return_tensors)]
    enc = tokenizer(texts, truncation=True, max_length=common.TEXT_MAX_SEQ_LENGTH)
    chunks = common.length_sorted_chunks([len(ids) for ids in enc["input_ids"]], sort_rows)
    return chunks, [tokenizer.pad({k: [enc[k][i] for i in c] for k in enc}, padding="longest",
                                  return_tensors=return_tensors) for c in chunks]


@threads.uses("torch")
def text(precision: str, spm_path: str, pool_file: str, feed: str, warmup: int, steps: int,
         sort_rows: int = 0, shape: str = "base") -> Dict[str, float]:
    """HF's AlbertTokenizer (truncation at 128) + AlbertModel over `steps` batches of the
    pool, tokenizing inside the timed call; each batch padded to its longest row, or with
    sort_rows its rows sorted by length and run `sort_rows` at a time (`encode_sorted`)."""
    import torch
    import transformers

    _seed()
    tokenizer = _tokenizer(spm_path)
    model = transformers.AlbertModel(_config(vocab_size=len(tokenizer), shape=shape)).eval()
    sentences, warm, timed = common.read_text_pool(pool_file, feed, warmup, steps)

    def forward(batch):
        chunks, encodings = encode_sorted(tokenizer, [sentences[i] for i in batch], sort_rows)
        with torch.inference_mode(), _autocast(precision):
            pooled = [model(**enc).pooler_output.float().numpy() for enc in encodings]
        return common.in_input_order(chunks, pooled)

    times = common.timed_pass(forward, warm, timed)
    masks = [enc["attention_mask"].numpy() for b in timed
             for enc in encode_sorted(tokenizer, [sentences[i] for i in b], sort_rows)[1]]
    return common.text_pass_result(times, masks)
