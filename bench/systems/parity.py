"""One fine-tuning run of each system on the same token ids (bench/finetune_parity.py).

Every run reads the task's ids from one `.npz` file (`encode_task`: our
SentencePiece model and packing, tokenized once), trains for the same number
of optimizer steps (`albert_tf.tasks.runner.training_schedule`: 3 epochs of
batch 32, 10% linear warmup then linear decay to 0, weight decay 0.01 except
LayerNorm and biases, gradients clipped to norm 1.0, classifier dropout 0.1)
and scores dev after every epoch with `albert_tf.metrics`:

* `api`: `AlbertClassifier` + `albert_tf.optimizers.adamw` + `model.fit` on
  batches of ids (fixed length), the Python API a user writes;
* `hf`: `AlbertForSequenceClassification`, torch AdamW,
  `get_linear_schedule_with_warmup`, each batch cut to its longest row
  (dynamic padding), the loop of transformers' run_glue_no_trainer;
* `kerashub`: `AlbertTextClassifier` (AlbertBackbone + its head), Keras
  AdamW, `fit` on ids (its preprocessor's fixed length).

The fourth system, the `albert-finetune` binary, is a subprocess of the
orchestrator (it reads the task's text files). Each function returns the
per-epoch dev metrics, the seconds of the run and `data_digest`, a hash of
the ids, segments and labels it trained and scored on (the benchmark checks
that every system's digest is the same).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Dict, List, Optional, Sequence

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

WEIGHT_DECAY = 0.01
WARMUP_PROPORTION = 0.1
CLIP_NORM = 1.0
CLASSIFIER_DROPOUT = 0.1
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


# ------------------------------------------------------------------- data
def encode_task(rows: Dict[str, Sequence[tuple]], spm_model_file: str, max_seq_length: int,
                regression: bool, path: str) -> Dict[str, object]:
    """Tokenizes a task once with our preprocessor and writes the ids to `path` (.npz).

    Args:
        rows: split -> (text, label) or (text, text_b, label) rows.
        spm_model_file: the SentencePiece model every system shares.
        max_seq_length: packed length ([CLS] A [SEP] (B [SEP])), padded to it.
        regression: float labels; else the label names are the sorted labels of train
            (as albert-finetune's reader learns them).
        path: the .npz file to write.

    Returns:
        label_names and per split the example count and `data_digest`.
    """
    import tensorflow as tf

    from albert_tf.layers.preprocessor import AlbertTextPreprocessor

    pre = AlbertTextPreprocessor(spm_model_file, max_seq_length=max_seq_length, pad_to_max_length=True)
    names = [] if regression else sorted({r[-1] for r in rows["train"]})
    arrays, info = {}, {"label_names": names}
    for split in ("train", "dev"):
        split_rows = rows[split]
        pair = len(split_rows[0]) == 3
        ids: Dict[str, List[np.ndarray]] = {"input_ids": [], "segment_ids": [], "input_mask": []}
        for i in range(0, len(split_rows), 1024):
            chunk = split_rows[i:i + 1024]
            texts = tf.constant([r[0] for r in chunk])
            out = pre(texts, tf.constant([r[1] for r in chunk])) if pair else pre(texts)
            for key in ids:
                ids[key].append(out[key].numpy().astype("int32"))
        labels = np.array([float(r[-1]) if regression else names.index(r[-1]) for r in split_rows],
                          "float32" if regression else "int32")
        for key, parts in ids.items():
            arrays[f"{split}_{key}"] = np.concatenate(parts)
        arrays[f"{split}_labels"] = labels
        info[f"{split}_examples"] = len(split_rows)
    temporary = f"{path}.{os.getpid()}.npz"  # replaced in one step: a reader never sees half a file
    np.savez(temporary, label_names=np.array(names, dtype=object), **arrays)
    os.replace(temporary, path)
    info["data_digest"] = data_digest(load_task(path))
    return info


def load_task(path: str) -> Dict[str, np.ndarray]:
    """The arrays `encode_task` wrote."""
    with np.load(path, allow_pickle=True) as f:
        return {key: f[key] for key in f.files}


def data_digest(task: Dict[str, np.ndarray]) -> str:
    """sha256 of each row's real ids, segments and label, train then dev (padding ignored).

    Example:
    >>> t = {f"{s}_{k}": np.array(v) for s in ("train", "dev") for k, v in (
    ...     ("input_ids", [[2, 9, 3, 0]]), ("segment_ids", [[0, 0, 0, 0]]), ("input_mask", [[1, 1, 1, 0]]),
    ...     ("labels", [1]))}
    >>> u = dict(t, train_input_ids=np.array([[2, 9, 3, 7]]))  # a different id in the padding only
    >>> data_digest(t) == data_digest(u), data_digest(t) == data_digest(dict(t, dev_labels=np.array([0])))
    (True, False)
    """
    h = hashlib.sha256()
    for split in ("train", "dev"):
        lengths = task[f"{split}_input_mask"].sum(axis=1)
        for row, n in enumerate(lengths):
            for key in ("input_ids", "segment_ids"):
                h.update(np.asarray(task[f"{split}_{key}"][row, :n], "int64").tobytes())
            h.update(np.asarray(task[f"{split}_labels"][row], "float64").tobytes())
    return h.hexdigest()[:16]


def dev_scores(labels: np.ndarray, outputs: np.ndarray, regression: bool) -> Dict[str, float]:
    """accuracy (argmax of the logits), or pearson and spearman of the predicted values.

    Example:
    >>> dev_scores(np.array([1, 0]), np.array([[0.0, 2.0], [1.0, 0.0]]), regression=False)
    {'accuracy': 1.0}
    """
    from albert_tf import metrics

    outputs = np.asarray(outputs, np.float64)
    if regression:
        values = outputs.reshape(len(labels), -1)[:, 0]
        if np.std(values) == 0.0:  # a constant prediction has no correlation (not NaN)
            return {"pearson": 0.0, "spearman": 0.0}
        return {"pearson": float(metrics.pearson(labels, values)),
                "spearman": float(metrics.spearman(labels, values))}
    return {"accuracy": float(metrics.accuracy(labels, outputs.argmax(-1)))}


def schedule(num_examples: int, batch_size: int, epochs: float) -> Dict[str, int]:
    """albert-finetune's step counts (total, warmup, epochs, steps per epoch) for every system."""
    from albert_tf.tasks.runner import FinetuneOptions, training_schedule

    return training_schedule(num_examples, FinetuneOptions("csv", "-", "-", train_batch_size=batch_size,
                                                           num_train_epochs=epochs,
                                                           warmup_proportion=WARMUP_PROPORTION))


def _set_threads(threads: int) -> None:
    import tensorflow as tf

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, threads))


def _result(epochs: List[Dict[str, float]], started: float, task: Dict[str, np.ndarray], steps: int,
            **extra) -> Dict[str, object]:
    return dict(epochs=epochs, final=epochs[-1], seconds=time.perf_counter() - started, steps=steps,
                data_digest=data_digest(task), **extra)


def _batches(n: int, batch_size: int, seed: int, count: int) -> List[np.ndarray]:
    """`count` index batches from seeded permutations of range(n) (no partial batch)."""
    rng = np.random.default_rng(seed)
    per_pass = n // batch_size
    order = np.concatenate([rng.permutation(n)[:per_pass * batch_size] for _ in range(-(-count // per_pass))])
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count)]


# -------------------------------------------------------------- keras both
def _keras_run(model, task, regression, plan, batch_size, seed, features, started, **extra):
    """fit one epoch at a time on ids in seeded batches; dev scored after each epoch."""
    import tensorflow as tf

    train = features("train")
    order = np.concatenate(_batches(len(task["train_labels"]), batch_size, seed, plan["total_steps"]))
    dataset = tf.data.Dataset.from_tensor_slices(
        ({k: v[order] for k, v in train.items()}, task["train_labels"][order])).batch(batch_size)
    dev = features("dev")
    epochs = []
    per_epoch = plan["steps_per_epoch"]
    for epoch in range(plan["epochs"]):
        # Each fit call starts a new iterator: give it this epoch's batches only.
        model.fit(dataset.skip(epoch * per_epoch).take(per_epoch), verbose=0)
        outputs = model.predict(tf.data.Dataset.from_tensor_slices(dev).batch(128), verbose=0)
        epochs.append(dev_scores(task["dev_labels"], outputs, regression))
    return _result(epochs, started, task, plan["total_steps"], **extra)


def api(task_file: str, config: Dict[str, object], learning_rate: float, seed: int, regression: bool,
        init_checkpoint: str = "", epochs: float = 3.0, batch_size: int = 32, threads: int = 0,
        optimizer: str = "adamw", epsilon: Optional[float] = None,
        decay_after_warmup: Optional[bool] = None, head_init: str = "") -> Dict[str, object]:
    """Ours through the Python API: `AlbertClassifier` on id dicts, `optimizers.adamw`, `fit`.

    optimizer: "adamw" (the library default) or "adamw_original" (no bias correction).
    epsilon: Adam's epsilon (None: the library's default, 1e-8 for adamw as torch's), for diagnosis.
    decay_after_warmup: the schedule (None: the library's default), for diagnosis.
    head_init: "normal": the classifier's weights redrawn from normal(0, 0.02) (torch's), for diagnosis.
    """
    import keras

    import albert_tf

    _set_threads(threads)
    started = time.perf_counter()
    keras.utils.set_random_seed(seed)
    task = load_task(task_file)
    num_classes = 1 if regression else len(task["label_names"])
    if init_checkpoint:
        model = albert_tf.AlbertClassifier.from_pretrained(init_checkpoint, num_classes=num_classes,
                                                           dropout_rate=CLASSIFIER_DROPOUT)
    else:
        model = albert_tf.AlbertClassifier(albert_tf.AlbertConfig(**config), num_classes,
                                           dropout_rate=CLASSIFIER_DROPOUT)
    if head_init == "normal":
        weights = model.head.output_weights
        weights.assign(np.random.default_rng(seed).normal(0.0, 0.02, weights.shape).astype("float32"))
    plan = schedule(len(task["train_labels"]), batch_size, epochs)
    model.compile(optimizer=albert_tf.optimizers.adamw(
        learning_rate, num_train_steps=plan["total_steps"], num_warmup_steps=plan["warmup_steps"],
        weight_decay_rate=WEIGHT_DECAY, global_clipnorm=CLIP_NORM, bias_correction=optimizer == "adamw",
        epsilon=epsilon, **({} if decay_after_warmup is None else {"decay_after_warmup": decay_after_warmup})))

    def features(split):
        return {k: task[f"{split}_{k}"] for k in ("input_ids", "input_mask", "segment_ids")}

    return _keras_run(model, task, regression, plan, batch_size, seed, features, started, optimizer=optimizer,
                      epsilon=epsilon, decay_after_warmup=decay_after_warmup, head_init=head_init)


def kerashub(task_file: str, config: Dict[str, object], learning_rate: float, seed: int, regression: bool,
             hf_dir: str = "", epochs: float = 3.0, batch_size: int = 32, threads: int = 0) -> Dict[str, object]:
    """keras-hub's AlbertTextClassifier on its own inputs (token_ids, segment_ids, padding_mask), Keras AdamW.

    hf_dir: a Hugging Face folder to load the backbone from (keras-hub's
    transformers converter); empty: keras-hub's random initialisation.
    """
    import keras
    import keras_hub

    from albert_tf.optimizers import linear_warmup_decay

    _set_threads(threads)
    started = time.perf_counter()
    keras.utils.set_random_seed(seed)
    task = load_task(task_file)
    num_classes = 1 if regression else len(task["label_names"])
    backbone = kerashub_backbone(config, hf_dir)
    model = keras_hub.models.AlbertTextClassifier(backbone, num_classes, preprocessor=None,
                                                  dropout=CLASSIFIER_DROPOUT)
    plan = schedule(len(task["train_labels"]), batch_size, epochs)
    opt = keras.optimizers.AdamW(linear_warmup_decay(learning_rate, plan["total_steps"],
                                                     num_warmup_steps=plan["warmup_steps"]),
                                 weight_decay=WEIGHT_DECAY, global_clipnorm=CLIP_NORM)
    opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])  # LayerNorm scale/offset and biases
    loss = (keras.losses.MeanSquaredError() if regression
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.compile(optimizer=opt, loss=loss)

    def features(split):
        return {"token_ids": task[f"{split}_input_ids"], "segment_ids": task[f"{split}_segment_ids"],
                "padding_mask": task[f"{split}_input_mask"].astype(bool)}

    return _keras_run(model, task, regression, plan, batch_size, seed, features, started)


def kerashub_backbone(config: Dict[str, object], hf_dir: str = ""):
    """keras-hub's AlbertBackbone: from a Hugging Face folder, or randomly initialised in our config's shape."""
    import keras_hub

    if hf_dir:
        return keras_hub.models.AlbertBackbone.from_preset(hf_dir)
    return keras_hub.models.AlbertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], embedding_dim=config["embedding_size"],
        hidden_dim=config["hidden_size"], intermediate_dim=config["intermediate_size"],
        num_groups=config.get("num_hidden_groups", 1), num_inner_repetitions=config.get("inner_group_num", 1),
        dropout=config.get("hidden_dropout_prob", 0.0), max_sequence_length=config["max_position_embeddings"],
        num_segments=config.get("type_vocab_size", 2))


# ---------------------------------------------------------- Hugging Face
def hf_config(config: Dict[str, object], num_labels: int):
    """transformers.AlbertConfig of our config, as our Hugging Face converter writes it."""
    import transformers

    import albert_tf
    from albert_tf.checkpoints import hf_config_dict

    fields = hf_config_dict(albert_tf.AlbertConfig(**config), ["AlbertForSequenceClassification"])
    return transformers.AlbertConfig(**dict(fields, classifier_dropout_prob=CLASSIFIER_DROPOUT, num_labels=num_labels))


def torch_adamw(model, learning_rate: float):
    """torch AdamW with weight decay WEIGHT_DECAY except on biases and LayerNorm (the original's exclusions)."""
    import torch

    named = list(model.named_parameters())
    return torch.optim.AdamW(
        [{"params": [p for n, p in named if not any(k in n for k in NO_DECAY)], "weight_decay": WEIGHT_DECAY},
         {"params": [p for n, p in named if any(k in n for k in NO_DECAY)], "weight_decay": 0.0}],
        lr=learning_rate)


def hf(task_file: str, config: Dict[str, object], learning_rate: float, seed: int, regression: bool,
       hf_dir: str = "", epochs: float = 3.0, batch_size: int = 32, threads: int = 0,
       dynamic_padding: bool = True, head_init: str = "") -> Dict[str, object]:
    """AlbertForSequenceClassification, torch AdamW (no decay on biases and LayerNorm),
    get_linear_schedule_with_warmup, batches padded to their longest row
    (dynamic_padding=False: to max_seq_length, for diagnosis; head_init="truncated": the classifier's
    weights redrawn from a normal(0, 0.02) truncated at 2 std, Keras's TruncatedNormal, for diagnosis)."""
    import torch
    import transformers

    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    transformers.set_seed(seed)
    task = load_task(task_file)
    num_labels = 1 if regression else len(task["label_names"])
    if hf_dir:
        model = transformers.AlbertForSequenceClassification.from_pretrained(
            hf_dir, num_labels=num_labels, classifier_dropout_prob=CLASSIFIER_DROPOUT)
    else:
        model = transformers.AlbertForSequenceClassification(hf_config(config, num_labels))
    if head_init == "truncated":
        with torch.no_grad():
            torch.nn.init.trunc_normal_(model.classifier.weight, std=0.02, a=-0.04, b=0.04)
    opt = torch_adamw(model, learning_rate)
    plan = schedule(len(task["train_labels"]), batch_size, epochs)
    lr_schedule = transformers.get_linear_schedule_with_warmup(opt, plan["warmup_steps"], plan["total_steps"])
    label_dtype = torch.float32 if regression else torch.long

    def batch(split, index):
        # Dynamic padding (as DataCollatorWithPadding): the batch is cut to its longest row.
        longest = (int(task[f"{split}_input_mask"][index].sum(1).max()) if dynamic_padding
                   else task[f"{split}_input_mask"].shape[1])
        return {name: torch.as_tensor(task[f"{split}_{key}"][index, :longest], dtype=torch.long)
                for name, key in (("input_ids", "input_ids"), ("token_type_ids", "segment_ids"),
                                  ("attention_mask", "input_mask"))}

    steps = _batches(len(task["train_labels"]), batch_size, seed, plan["total_steps"])
    results = []
    for epoch in range(plan["epochs"]):
        model.train()
        for index in steps[epoch * plan["steps_per_epoch"]:(epoch + 1) * plan["steps_per_epoch"]]:
            inputs = batch("train", index)
            loss = model(**inputs, labels=torch.as_tensor(task["train_labels"][index], dtype=label_dtype)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
            opt.step()
            lr_schedule.step()
            opt.zero_grad(set_to_none=True)
        model.eval()
        outputs = []
        with torch.inference_mode():
            for i in range(0, len(task["dev_labels"]), 128):
                outputs.append(model(**batch("dev", np.arange(i, min(i + 128, len(task["dev_labels"]))))).logits)
        results.append(dev_scores(task["dev_labels"], torch.cat(outputs).numpy(), regression))
    return _result(results, started, task, plan["total_steps"], dynamic_padding=dynamic_padding,
                   head_init=head_init)


# ------------------------------------------------------------------ checks
def peers_match_ours(pretrained_dir: str, hf_dir: str, task_file: str, rows: int = 16,
                     tolerance: float = 1e-4) -> Dict[str, object]:
    """Do transformers and keras-hub, loading `hf_dir`, compute what our encoder computes from `pretrained_dir`?

    Compares sequence outputs (real positions) and pooled outputs on the first
    `rows` dev examples of `task_file`, float32; first runs the converter's own
    check (`bench.hf_equivalence.compare_with_transformers`: transformers
    against our loader on the same folder, heads included), which raises
    beyond `tolerance`.

    Returns:
        max absolute differences per peer and output, and `<peer>_matches`.
    """
    import torch
    import transformers

    import albert_tf
    from bench.hf_equivalence import compare_with_transformers

    roundtrip = compare_with_transformers(hf_dir, atol=tolerance)

    task = load_task(task_file)
    ids = {k: task[f"dev_{k}"][:rows] for k in ("input_ids", "input_mask", "segment_ids")}
    mask = ids["input_mask"].astype(bool)
    ours = albert_tf.load_checkpoint(pretrained_dir).encoder(ids, training=False)
    ours = {k: np.asarray(ours[k]) for k in ("sequence_output", "pooled_output")}
    with torch.inference_mode():
        out = transformers.AlbertModel.from_pretrained(hf_dir).eval()(
            input_ids=torch.as_tensor(ids["input_ids"], dtype=torch.long),
            attention_mask=torch.as_tensor(ids["input_mask"], dtype=torch.long),
            token_type_ids=torch.as_tensor(ids["segment_ids"], dtype=torch.long))
    hf_out = {"sequence_output": out.last_hidden_state.numpy(), "pooled_output": out.pooler_output.numpy()}
    kh = kerashub_backbone({}, hf_dir)({"token_ids": ids["input_ids"], "segment_ids": ids["segment_ids"],
                                        "padding_mask": mask}, training=False)
    kh_out = {k: np.asarray(kh[k]) for k in ("sequence_output", "pooled_output")}
    result: Dict[str, object] = {"rows": rows, "tolerance": tolerance,
                                 "hf_equivalence_max_diff": max(roundtrip.values())}
    for peer, theirs in (("hf", hf_out), ("kerashub", kh_out)):
        seq = float(np.abs(theirs["sequence_output"] - ours["sequence_output"])[mask].max())
        pooled = float(np.abs(theirs["pooled_output"] - ours["pooled_output"]).max())
        result[f"{peer}_sequence_max_diff"], result[f"{peer}_pooled_max_diff"] = seq, pooled
        result[f"{peer}_matches"] = max(seq, pooled) <= tolerance
    return result


def finetune_digest(output_dir: str, task_dir: str, regression: bool) -> Dict[str, str]:
    """`data_digest` of the ids albert-finetune's saved model makes of the task files.

    The task is read with the binary's own reader (labels as it encodes them)
    and tokenized by the preprocessor saved in output_dir, so an equal digest
    shows that the binary trained on exactly the ids the other systems got.
    """
    import tensorflow as tf

    import albert_tf
    from albert_tf.tasks.classification import from_text_examples
    from pipelines.finetune.tabular import read_tabular_task

    pre = albert_tf.load_task_model(output_dir).preprocessor
    table = read_tabular_task(task_dir, regression=regression)
    task: Dict[str, np.ndarray] = {}
    for split in ("train", "dev"):
        data = from_text_examples(getattr(table, split), table.label_names, regression)
        out = pre(tf.constant(data.texts), tf.constant(data.text_pairs) if data.text_pairs else None)
        for key in ("input_ids", "segment_ids", "input_mask"):
            task[f"{split}_{key}"] = out[key].numpy()
        task[f"{split}_labels"] = np.asarray(data.labels, "float32" if regression else "int32")
    return {"data_digest": data_digest(task)}
