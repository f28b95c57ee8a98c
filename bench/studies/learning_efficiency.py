"""Learning efficiency: held-out accuracy after N steps, ours against keras-hub, same data (issue 11).

Study (2026-12-01). Question: Does ours learn as much per step as keras-hub on the same shards? Answer: level
(held-out MLM accuracy 0.1561 against keras-hub's 0.1542 at full length, inside the seed spread); at the small
size LAMB 0.01 with 40% dynamic masking learns best per step, the recipe of flags/recipes/small_pretrain.cfg
(bench/results/learning_efficiency.md). Command: `python -m bench.studies.learning_efficiency --quick`.
One file over 500 lines on purpose: the variants, both systems' training, the one held-out scorer and the
table are one experiment, read together (a study, kept as it ran, not a library module).

Both systems train the issue's tiny ALBERT (E=64, H=128, 4 layers all shared,
2 heads, FFN 512, no dropout) on the SAME TFRecord shards, read in the same
order by the same reader, with the same batch, steps and seed, and are scored
by ONE evaluation function on the same held-out shards (weighted masked-LM
accuracy at the masked positions, MLM loss, and SOP accuracy where there is a
SOP head).

Data: the docstrings of albert-tf's installed dependencies (TensorFlow, Keras,
NumPy, ...; `pipelines.package_corpus`), held out by package folder, made into
shards by our own binaries: albert-create-vocab (8,000 pieces) and
albert-create-pretraining-data (20 predictions per 128 tokens, dupe factor 5).

Systems:

* ``ours``: `albert_tf.training.run_pretraining` (the custom loop of
  albert-pretrain): the original LAMB (no bias correction, decay in the trust
  ratio, LayerNorm/bias excluded), warmup + polynomial decay, clip 1.0;
* ``keras_hub``: keras_hub.models.AlbertMaskedLM (TensorFlow backend) trained
  with `fit`, keras.optimizers.Lamb, the same warmup + decay schedule and clip.

A variant is ``system[:key=value]*``; keys (defaults in `Variant`): lr, warmup,
power, wd, opt (lamb | adamw | keras_lamb), sop (SOP loss weight; 0 = MLM
only), mlm (MLM loss weight; 0 = SOP only), masking (static | dynamic),
mask_rate (> 0: dynamic masking at this rate, albert-pretrain's
--masking=dynamic --masked_lm_prob; up to rate x length predictions per row), ngram (the longest n-gram of dynamic
masking and mask_rate), init (initializer stddev), bias (zeros | unigram: the
MLM output bias starts at the log frequencies of the masked pieces), precision
(float32 | bfloat16), steps, resume_at (stop at this step with
num_train_steps=resume_at, then resume to `steps`), clip, b2 (beta_2), eps, seed
(the training seed: model init, shuffling, masks; the data keep --seed).
Named shortcuts: ``ours_mlm`` = ``ours:sop=0``; ``recipe`` = ours with
flags/recipes/small_pretrain.cfg.

    python -m bench.studies.learning_efficiency --quick
    python -m bench.studies.learning_efficiency --variants="keras_hub:lr=0.003 ours:lr=0.01 ours_mlm:lr=0.01"

Each variant runs in a fresh process (nothing carries over); results are
appended to bench/results/learning_efficiency.jsonl and the table in
bench/results/learning_efficiency.md is rebuilt from all recorded runs (the
text around the table is kept).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS_DIR = os.path.join(REPO, "bench", "results")
JSONL = os.path.join(RESULTS_DIR, "learning_efficiency.jsonl")
MARKDOWN = os.path.join(RESULTS_DIR, "learning_efficiency.md")
RECIPE = os.path.join(REPO, "flags", "recipes", "small_pretrain.cfg")
TABLE_START, TABLE_END = "<!-- runs:start -->", "<!-- runs:end -->"

# The model.
MODEL = dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
             intermediate_size=512)


@dataclasses.dataclass
class Variant:
    """One training run: system and the settings that differ between runs."""

    system: str = "ours"
    lr: float = 0.003
    warmup: int = 100
    power: float = 1.0
    wd: float = 0.01
    opt: str = "lamb"
    sop: float = 1.0
    mlm: float = 1.0
    masking: str = "static"
    init: float = 0.02
    precision: str = "float32"
    steps: int = 0  # 0: the command's --steps
    resume_at: int = 0
    clip: float = 1.0
    b2: float = 0.999
    eps: float = 1e-6
    ngram: int = 3  # with masking=dynamic: the longest masked n-gram (1: single tokens)
    mask_rate: float = 0.0  # > 0: dynamic n-gram masks at this rate (up to rate x length predictions per row)
    seed: int = 0  # training seed (model init, shuffling, masks); 0: the command's --seed (which also makes the data)
    bias: str = "zeros"  # MLM output bias at start: zeros | unigram (log frequency of masked pieces)
    spec: str = ""

    @classmethod
    def parse(cls, spec: str) -> "Variant":
        """``system[:key=value]*`` -> Variant (ValueError naming the bad part)."""
        head, *pairs = spec.strip().split(":")
        values: Dict[str, Any] = {}
        if head == "ours_mlm":
            head, values["sop"] = "ours", 0.0
        elif head == "recipe":
            head = "ours"
            values.update(read_recipe(RECIPE))
        elif head == "keras_hub":
            values.update(opt="keras_lamb", wd=0.0)
        if head not in ("ours", "keras_hub"):
            raise ValueError(f"Variant {spec!r}: unknown system {head!r} (ours, ours_mlm, recipe, keras_hub).")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key not in fields or key in ("system", "spec"):
                raise ValueError(f"Variant {spec!r}: unknown key {key!r}; known: {sorted(fields)}.")
            kind = type(getattr(cls(), key))
            values[key] = kind(float(value)) if kind in (int, float) else value
        return cls(system=head, spec=spec.strip(), **values)


def read_recipe(path: str) -> Dict[str, Any]:
    """The optimizer settings of a flagfile as Variant fields."""
    names = {"learning_rate": ("lr", float), "num_warmup_steps": ("warmup", int), "poly_power": ("power", float),
             "weight_decay_rate": ("wd", float), "optimizer": ("opt", str), "clip_norm": ("clip", float),
             "masking": ("masking", str), "masked_lm_prob": ("mask_rate", float)}
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"--(\w+)=(\S+)", line.strip())
            if m and m.group(1) in names:
                key, kind = names[m.group(1)]
                values[key] = kind(m.group(2))
    return values


# --------------------------------------------------------------------- data
def _run_tool(module: str, args: List[str]) -> None:
    cmd = [sys.executable, "-m", module] + args
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")


def prepare_data(work_dir: str, seq_len: int, preds: int, vocab_size: int, dupe: int, seed: int) -> Dict[str, str]:
    """Corpus, vocabulary and shards under work_dir (each made once, then reused)."""
    from pipelines.package_corpus import write_package_corpus

    # Made from `seed`: the default seed keeps the plain folder names of earlier runs.
    suffix = "" if seed == 12345 else f"_s{seed}"
    corpus = os.path.join(work_dir, "corpus" + suffix)
    if not os.path.exists(os.path.join(corpus, "eval.txt")):
        info = write_package_corpus(corpus, heldout_fraction=0.1, seed=seed)
        with open(os.path.join(corpus, "summary.json"), "w") as f:
            json.dump(info, f)
    prefix = os.path.join(work_dir, "vocab" + suffix, f"spm{vocab_size}")
    if not os.path.exists(prefix + ".model"):
        _run_tool("pipelines.bin.create_vocab", [f"--input_file={corpus}/train.txt", f"--model_prefix={prefix}",
                                                 f"--vocab_size={vocab_size}", f"--random_seed={seed}"])
    data = os.path.join(work_dir, f"data{seq_len}_{preds}_v{vocab_size}_d{dupe}{suffix}")
    for split, split_dupe, shards, split_seed in (("train", dupe, 4, seed), ("eval", 2, 1, seed + 1)):
        out = os.path.join(data, split)
        if os.path.exists(os.path.join(out, "DONE")):
            continue
        _run_tool("pipelines.bin.create_pretraining_data", [
            f"--input_file={corpus}/{split}.txt", f"--spm_model_file={prefix}.model", f"--output_dir={out}",
            f"--max_seq_length={seq_len}", f"--max_predictions_per_seq={preds}", f"--dupe_factor={split_dupe}",
            f"--num_shards={shards}", f"--random_seed={split_seed}", "--overwrite"])
        open(os.path.join(out, "DONE"), "w").close()
    return {"train": os.path.join(data, "train", "*.tfrecord"), "eval": os.path.join(data, "eval", "*.tfrecord"),
            "spm": prefix + ".model", "corpus": corpus}


# ---------------------------------------------------------------- evaluation
def heldout_metrics(predict, eval_pattern: str, seq_len: int, preds: int, max_batches: int) -> Dict[str, float]:
    """One scorer for every system: weighted MLM accuracy / loss and SOP accuracy on held-out shards.

    Args:
        predict: batch dict (the reader's features) -> (mlm logits [B, P, V],
            SOP logits [B, 2] or None).
    """
    import numpy as np
    import tensorflow as tf

    import pipelines

    ds = pipelines.pretraining_dataset(eval_pattern, 64, seq_len, preds, is_training=False).take(max_batches)
    hits = weight = nll = sop_hits = examples = 0.0
    for batch in ds:
        mlm_logits, sop_logits = predict(batch)
        logits = tf.cast(mlm_logits, tf.float32)
        labels = batch["masked_lm_ids"]
        w = batch["masked_lm_weights"].numpy()
        pred = tf.argmax(logits, -1, output_type=tf.int32).numpy()
        hits += float((w * (pred == labels.numpy())).sum())
        weight += float(w.sum())
        nll += float((w * tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits).numpy()).sum())
        if sop_logits is not None:
            sop_pred = np.argmax(np.asarray(sop_logits), -1)
            sop_hits += float((sop_pred == batch["next_sentence_labels"].numpy()).sum())
        examples += float(labels.shape[0])
    return {"mlm_acc": hits / weight, "mlm_loss": nll / weight,
            "sop_acc": sop_hits / examples if sop_logits is not None else None,
            "eval_predictions": int(weight), "eval_examples": int(examples)}


def masked_labels(pattern: str, seq_len: int, preds: int, batches: int):
    """(masked_lm_ids, masked_lm_weights) of the first `batches` batches of 64, flattened."""
    import numpy as np

    import pipelines

    ids, weights = [], []
    for batch in pipelines.pretraining_dataset(pattern, 64, seq_len, preds, is_training=False).take(batches):
        ids.append(batch["masked_lm_ids"].numpy().ravel())
        weights.append(batch["masked_lm_weights"].numpy().ravel())
    return np.concatenate(ids), np.concatenate(weights)


def frequent_piece_accuracy(paths, seq_len: int, preds: int, max_batches: int, train_batches: int = 100) -> float:
    """Held-out MLM accuracy of always answering the training data's most frequent masked piece.

    The plateau both systems sit on first: a model that has learned only the
    output bias scores this.
    """
    import numpy as np

    train_ids, train_w = masked_labels(paths["train"], seq_len, preds, train_batches)
    eval_ids, eval_w = masked_labels(paths["eval"], seq_len, preds, max_batches)
    top = np.bincount(train_ids[train_w > 0]).argmax()
    return float((eval_w * (eval_ids == top)).sum() / eval_w.sum())


# ------------------------------------------------------------------ training
def albert_config(vocab_size: int, seq_len: int, init: float):
    import albert_tf

    return albert_tf.AlbertConfig(vocab_size=vocab_size, num_hidden_groups=1, inner_group_num=1, hidden_act="gelu",
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  max_position_embeddings=max(128, seq_len), initializer_range=init, **MODEL)


def _train_dataset_fn(paths, args, v: Variant, vocab_size: int):
    import pipelines

    def dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            paths["train"], ctx.get_per_replica_batch_size(args.batch_size), args.seq_len, args.preds,
            is_training=True, masking="dynamic" if v.mask_rate else v.masking, seed=args.seed,
            input_context=ctx, vocab_size=vocab_size, ngram=v.ngram, masked_lm_prob=v.mask_rate or 0.15)

    return dataset_fn


def _optimization_config(v: Variant, args, steps: int):
    """Our OptimizationConfig; `opt=keras_lamb` swaps in keras.optimizers.Lamb (same schedule, clip)."""
    import keras

    from albert_tf import training

    class BenchOptimization(training.OptimizationConfig):
        def create_optimizer(self, schedule=None):
            schedule = schedule or self.create_schedule()
            if v.opt == "keras_lamb":
                opt = keras.optimizers.Lamb(schedule, beta_2=v.b2, epsilon=v.eps, global_clipnorm=v.clip or None,
                                            weight_decay=v.wd or None)
                if v.wd:
                    opt.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
                return opt
            from albert_tf import optimization

            return optimization.create_optimizer(self.optimizer, schedule, weight_decay_rate=v.wd, beta_2=v.b2,
                                                 epsilon=v.eps, global_clipnorm=v.clip or None)

    return BenchOptimization(train_batch_size=args.batch_size, num_train_steps=steps,
                             optimizer="adamw" if v.opt == "adamw" else "lamb", learning_rate=v.lr,
                             num_warmup_steps=v.warmup, poly_power=v.power, weight_decay_rate=v.wd,
                             clip_norm=v.clip)


def _weight_losses(mlm_weight: float, sop_weight: float) -> None:
    """Scales the MLM and SOP terms of our training loss (screening without a library option)."""
    from albert_tf.models import pretrainer
    from albert_tf.training import step

    if mlm_weight == 1.0 and sop_weight == 1.0:
        return

    def terms(batch, outputs):
        out = dict(pretrainer.pretraining_loss_terms(batch, outputs))
        out["mlm_nll_sum"] = mlm_weight * out["mlm_nll_sum"]
        out["sop_nll_sum"] = sop_weight * out["sop_nll_sum"]
        return out

    step.pretraining_loss_terms = terms


def _masked_piece_log_frequencies(paths, args, vocab_size: int, batches: int = 100):
    """log p(piece) of the masked labels in the first training batches (add-one smoothed)."""
    import numpy as np

    ids, weights = masked_labels(paths["train"], args.seq_len, args.preds, batches)
    counts = 1.0 + np.bincount(ids[weights > 0], minlength=vocab_size)[:vocab_size]
    return np.log(counts / counts.sum()).astype("float32")


def _init_mlm_bias(v: Variant, args, paths, vocab_size: int) -> None:
    """`bias=unigram`: a fresh model starts with the MLM output bias at the log frequencies."""
    from albert_tf.training import pretraining

    if v.bias == "zeros":
        return
    if v.bias != "unigram":
        raise ValueError(f"bias={v.bias!r}: expected zeros or unigram.")
    log_freq = _masked_piece_log_frequencies(paths, args, vocab_size)
    original = pretraining.restore_or_warm_start

    def restore_then_init(state, *a, **kw):
        latest = original(state, *a, **kw)
        if latest is None:
            state.model.mlm_head.output_bias.assign(log_freq)
        return latest

    pretraining.restore_or_warm_start = restore_then_init


def train_ours(v: Variant, args, paths, vocab_size: int, out_dir: str, curve: list):
    from albert_tf import training

    steps = v.steps or args.steps
    _weight_losses(v.mlm, v.sop)
    _init_mlm_bias(v, args, paths, vocab_size)
    config = albert_config(vocab_size, args.seq_len, v.init)
    legs = [v.resume_at, steps] if v.resume_at else [steps]
    result = None
    for leg_steps in legs:
        result = training.run_pretraining(
            config, _train_dataset_fn(paths, args, v, vocab_size), out_dir,
            optimization=_optimization_config(v, args, leg_steps),
            runtime=training.RuntimeConfig(mixed_precision=v.precision, log_steps=max(1, steps // 8),
                                           save_checkpoints_steps=v.resume_at or steps, seed=args.seed),
            data=training.PretrainingDataConfig(
                max_seq_length=args.seq_len, max_predictions_per_seq=args.preds,
                masking="dynamic" if v.mask_rate else v.masking, masked_lm_prob=v.mask_rate or 0.15),
            log_callback=lambda logs: curve.append(
                {"step": int(logs["step"]), "train_mlm_acc": float(logs["mlm_accuracy"])}))
    model = result["model"]

    def predict(batch):
        out = model(batch, training=False)
        return out["mlm_logits"], out["sop_logits"]

    return predict


def train_keras_hub(v: Variant, args, paths, vocab_size: int, curve: list):
    import keras
    import keras_hub
    import tensorflow as tf

    from albert_tf import optimization

    steps = v.steps or args.steps
    keras.utils.set_random_seed(args.seed)
    dtype = "mixed_bfloat16" if v.precision == "bfloat16" else "float32"
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=vocab_size, num_layers=MODEL["num_hidden_layers"], num_heads=MODEL["num_attention_heads"],
        embedding_dim=MODEL["embedding_size"], hidden_dim=MODEL["hidden_size"],
        intermediate_dim=MODEL["intermediate_size"], num_groups=1, num_inner_repetitions=1, dropout=0.0,
        max_sequence_length=max(128, args.seq_len), dtype=dtype)
    model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
    schedule = optimization.WarmupPolynomialDecay(v.lr, decay_steps=steps, warmup_steps=v.warmup, power=v.power)
    if v.opt == "keras_lamb":
        opt = keras.optimizers.Lamb(schedule, beta_2=v.b2, epsilon=v.eps, global_clipnorm=v.clip or None,
                                    weight_decay=v.wd or None)
    elif v.opt == "lamb":  # our LAMB on keras-hub's model
        opt = optimization.create_optimizer("lamb", schedule, weight_decay_rate=v.wd, global_clipnorm=v.clip or None)
    else:
        raise ValueError(f"keras_hub: opt={v.opt!r} not supported (keras_lamb, lamb).")
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="acc")], jit_compile=False)

    def to_keras_hub(batch):
        x = {"token_ids": batch["input_ids"], "padding_mask": batch["input_mask"] > 0,
             "segment_ids": batch["segment_ids"], "mask_positions": batch["masked_lm_positions"]}
        return x, batch["masked_lm_ids"], batch["masked_lm_weights"]

    ds = _train_dataset_fn(paths, args, v, vocab_size)(tf.distribute.InputContext())
    every = max(1, steps // 8)

    class Curve(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if (batch + 1) % every == 0:
                curve.append({"step": batch + 1, "train_mlm_acc": float(logs["acc"])})
                print(f"step {batch + 1}: {logs}", file=sys.stderr, flush=True)

    model.fit(ds.map(to_keras_hub), steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[Curve()])

    def predict(batch):
        x, _, _ = to_keras_hub(batch)
        # Not model(x): keras-hub 0.32's MaskedLMHead adds a float32 bias to
        # bfloat16 logits when called eagerly under mixed_bfloat16.
        return model.predict_on_batch(x), None

    return predict


def run_one(v: Variant, args) -> Dict[str, Any]:
    """Trains one variant in this process and scores it."""
    import keras
    import tensorflow as tf

    import pipelines

    paths = prepare_data(args.work_dir, args.seq_len, args.preds, args.vocab_size, args.dupe, args.seed)
    data_seed = args.seed
    if v.seed:
        args = argparse.Namespace(**{**vars(args), "seed": v.seed})
    vocab_size = pipelines.SentencePieceVocab.from_file(paths["spm"]).vocab_size
    curve: list = []
    start = time.time()
    with tempfile.TemporaryDirectory() as out_dir:
        if v.system == "ours":
            predict = train_ours(v, args, paths, vocab_size, out_dir, curve)
        else:
            predict = train_keras_hub(v, args, paths, vocab_size, curve)
        train_s = time.time() - start
        metrics = heldout_metrics(predict, paths["eval"], args.seq_len, args.preds, args.eval_batches)
    metrics["frequent_piece_acc"] = frequent_piece_accuracy(paths, args.seq_len, args.preds, args.eval_batches)
    return dict(dataclasses.asdict(v), steps=v.steps or args.steps, seq_len=args.seq_len, preds=args.preds,
                batch=args.batch_size, seed=args.seed, data_seed=data_seed, vocab_size=vocab_size,
                train_seconds=round(train_s, 1),
                curve=curve, tensorflow=tf.__version__, keras=keras.__version__, **metrics)


# ------------------------------------------------------------------- report
def _fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


# Runs recorded before this time under settings whose meaning has changed since:
# `recipe` was static 15% masking until flags/recipes/small_pretrain.cfg moved to
# dynamic 40%, and `mask_rate` re-masked the records with the bench's own code
# before albert-pretrain's --masking=dynamic --masked_lm_prob replaced it.
REDEFINED_BEFORE = "2026-11-29 19:35 UTC"


def stale_reason(record: Dict[str, Any]) -> str:
    """Why a recorded run's command no longer reproduces it ("" when it does)."""
    if record.get("date", "9999") >= REDEFINED_BEFORE:
        return ""
    if record.get("spec", "").startswith("recipe"):
        return "no: `recipe` was static 15% masking then"
    if record.get("mask_rate"):
        return "no: older masking code (the bench's own re-masking)"
    return ""


# Like for like (issue 18): both systems, the same masking, learning-rate sweep and training seeds.
LIKE_FOR_LIKE = {"static": "", "dynamic": ":mask_rate=0.4"}
LIKE_FOR_LIKE_RATES, LIKE_FOR_LIKE_SEEDS = (0.003, 0.01, 0.02), (1, 2, 3)


def like_for_like_variants(masking: str) -> List[str]:
    """ours and keras_hub at every rate and seed, with the same masking: "static" (the
    shards' 15%) or "dynamic" (fresh n-gram masks at 40%, albert-pretrain's dynamic masking)."""
    if masking not in LIKE_FOR_LIKE:
        raise ValueError(f"--like_for_like must be one of {sorted(LIKE_FOR_LIKE)}, got {masking!r}.")
    return [f"{system}:lr={lr:g}:seed={seed}:precision=bfloat16{LIKE_FOR_LIKE[masking]}"
            for system in ("ours", "keras_hub") for lr in LIKE_FOR_LIKE_RATES for seed in LIKE_FOR_LIKE_SEEDS]


def write_markdown(records: List[Dict[str, Any]]) -> None:
    """Rebuilds the runs table in learning_efficiency.md, keeping the text around it."""
    lines = [TABLE_START, "",
             "| # | system | variant | lr | warmup | steps | len | held-out MLM acc | MLM loss | SOP acc | "
             "frequent-piece acc | train s | command | command reproduces it? |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(records, 1):
        cmd = f"`python -m bench.studies.learning_efficiency {r.get('command_args', '')}`".replace("|", "\\|")
        lines.append(
            f"| {i} | {r['system']} | `{r['spec']}` | {r['lr']:g} | {r['warmup']} | {r['steps']} | {r['seq_len']} | "
            f"{_fmt(r['mlm_acc'])} | {_fmt(r['mlm_loss'], 3)} | {_fmt(r.get('sop_acc'))} | "
            f"{_fmt(r.get('frequent_piece_acc'))} | {r['train_seconds']:.0f} | {cmd} | {stale_reason(r) or 'yes'} |")
    machines: Dict[str, List[int]] = {}
    for i, r in enumerate(records, 1):
        machines.setdefault(r.get("machine", "not recorded"), []).append(i)
    lines += ["", "Machines of the runs (CPU model and AMX recorded since issue 18): " + "; ".join(
        f"{m} (runs {_span(nums)})" for m, nums in machines.items()) + ".", "", TABLE_END]
    table = "\n".join(lines)
    if os.path.exists(MARKDOWN):
        with open(MARKDOWN, encoding="utf-8") as f:
            text = f.read()
        if TABLE_START in text and TABLE_END in text:
            text = text[:text.index(TABLE_START)] + table + text[text.index(TABLE_END) + len(TABLE_END):]
        else:
            text = text.rstrip() + "\n\n" + table + "\n"
    else:
        text = ("# Learning efficiency: ours vs keras-hub on the same data (issue 11)\n\n"
                "Made by `bench/studies/learning_efficiency.py` (see its docstring). Every run of the table, in the order "
                "run; raw records in learning_efficiency.jsonl.\n\n" + table + "\n")
    from pipelines.fileio import atomic_write

    with atomic_write(MARKDOWN) as f:
        f.write(text)


def _span(numbers: List[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    parts, start = [], numbers[0]
    for prev, cur in zip(numbers, numbers[1:] + [None]):
        if cur != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(parts)


def load_records() -> List[Dict[str, Any]]:
    if not os.path.exists(JSONL):
        return []
    with open(JSONL, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _machine() -> str:
    """CPU model, cores and AMX (`bench.systems.common.cpu_line`)."""
    from bench.systems import common

    return common.cpu_line()


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default="keras_hub:lr=0.001 keras_hub:lr=0.003 keras_hub:lr=0.01 ours_mlm:lr=0.01 recipe",
                        help="Space- or semicolon-separated variants (see the module docstring).")
    parser.add_argument("--like_for_like", default="", choices=["", *LIKE_FOR_LIKE],
                        help="Instead of --variants: ours and keras_hub with the same masking (static 15% or "
                             f"dynamic 40%), rates {LIKE_FOR_LIKE_RATES} and training seeds {LIKE_FOR_LIKE_SEEDS} "
                             "(18 runs: hours at full length).")
    parser.add_argument("--quick", action="store_true",
                        help="Length 64, 10 predictions, 400 steps: a screening run (minutes per variant).")
    parser.add_argument("--steps", type=int, default=None, help="Optimizer steps (1600; --quick: 400).")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=None, help="Sequence length (128; --quick: 64).")
    parser.add_argument("--preds", type=int, default=None, help="Masked positions (20; --quick: 10).")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--dupe", type=int, default=5)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--eval_batches", type=int, default=40, help="Held-out batches of 64 at most.")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "albert_learning_efficiency"),
                        help="Corpus, vocabulary and shards (made once, reused).")
    parser.add_argument("--no_record", action="store_true", help="Print results without writing bench/results.")
    parser.add_argument("--run_one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for key, full, quick in (("seq_len", 128, 64), ("preds", 20, 10), ("steps", 1600, 400)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if args.run_one:
        from absl import logging

        logging.set_verbosity(logging.INFO)
        result = run_one(Variant.parse(args.run_one), args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    variants = (like_for_like_variants(args.like_for_like) if args.like_for_like
                else [s for s in re.split(r"[;\s]+", args.variants) if s])
    parsed = [Variant.parse(spec) for spec in variants]  # fail before any training
    if any(v.system == "keras_hub" for v in parsed):
        import importlib.util

        if importlib.util.find_spec("keras_hub") is None:
            parser.error("keras_hub variants need keras-hub: pip install -e '.[bench]' (this Python: "
                         f"{sys.executable}).")
    prepare_data(args.work_dir, args.seq_len, args.preds, args.vocab_size, args.dupe, args.seed)
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])
                   if not a.startswith(("--variants", "--like_for_like"))]
    for spec in variants:
        cmd = [sys.executable, "-m", "bench.studies.learning_efficiency", f"--run_one={spec}"] + passthrough
        log_path = os.path.join(args.work_dir, "logs", re.sub(r"[^\w.=-]+", "_", spec) + ".log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "w") as log:  # the child's training log, to follow a long run
            done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
        lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
        if done.returncode or not lines:
            with open(log_path) as log:
                print(f"{spec}: FAILED (log {log_path})\n{log.read()[-4000:]}", flush=True)
            continue
        result = json.loads(lines[-1][len("RESULT "):])
        result["command_args"] = " ".join(shlex.quote(a) for a in passthrough + [f"--variants={spec}"])
        result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        result["machine"] = _machine()
        print(f"{spec}: held-out MLM acc {result['mlm_acc']:.4f}, MLM loss {result['mlm_loss']:.3f}, "
              f"SOP acc {_fmt(result['sop_acc'])}, {result['train_seconds']:.0f} s", flush=True)
        if not args.no_record:
            os.makedirs(RESULTS_DIR, exist_ok=True)
            with open(JSONL, "a", encoding="utf-8") as f:
                f.write(json.dumps(result) + "\n")
            write_markdown(load_records())


if __name__ == "__main__":
    main()
