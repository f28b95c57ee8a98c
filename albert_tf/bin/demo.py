"""albert-demo: the whole system end to end on a small ALBERT, in minutes on a CPU.

1. corpus: the docstrings of the installed Python standard library (or
   --input_file), one sentence per line; some documents are held out;
2. a SentencePiece vocabulary (albert-create-vocab's settings);
3. pretraining TFRecord shards with SOP pairs and n-gram masking;
4. pretraining of a small all-shared ALBERT (E < H) with LAMB for a step
   budget (--pretrain_steps; flags/recipes/small_pretrain.cfg's rate, warmup
   and 40% dynamic masking); --minutes is only a safety cap, announced loudly
   when it cuts training short;
5. evaluation on the held-out documents: masked-LM and SOP accuracy against
   their chance levels;
6. fill-in-the-blank on held-out sentences: a few shown, 200 scored;
7. fine-tuning on a labelled task built from the same machine's text (which
   part of the standard library a docstring passage comes from; whole modules
   held out for dev), once from the pretrained weights and once from random
   weights with the same budget, beside naive Bayes on word counts and the
   majority class;
8. export of the fine-tuned classifier and of the pretrainer (fill-mask) as
   TF Serving SavedModels, then raw-text requests answered by the exported
   models loaded with tf.saved_model.load, as a server would.

It ends with a verdict computed from what it measured (`learning_verdict`):
"Learning happened" only when the masked LM and both fine-tuned classifiers
beat their baselines by more than the binomial spread; otherwise it names the
figure that failed.

Every stage writes under --output_dir and is skipped when its output is
already complete, so an interrupted demo continues where it stopped.

    albert-demo --output_dir=demo_output [--pretrain_steps=1500]
"""

import collections
import dataclasses
import glob
import hashlib
import math
import os
import time
from typing import List, Tuple

from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The demo's flags. Defined when the demo runs, not at import, so that a process that imports the
    demo's functions (the tests) keeps the defaults of the other binaries' flags of the same name."""
    flags.DEFINE_string("output_dir", "demo_output", "Where every stage writes its results.")
    flags.DEFINE_integer(
        "pretrain_steps", 1500,
        "Pretraining steps: the budget (about 6-7 minutes on a quiet 2-core CPU). A step budget, not a time budget, "
        "so a loaded machine trains the same model, only later.")
    flags.DEFINE_float(
        "minutes", 25.0,
        "Safety cap on pretraining wall time in minutes. When it stops training before --pretrain_steps, the demo "
        "says so loudly and its verdict counts the cut.")
    flags.DEFINE_string(
        "input_file",
        None,
        "Your own corpus instead of the standard library's docstrings: glob(s), one sentence per line, "
        "blank lines between documents.",
    )
    flags.DEFINE_integer(
        "vocab_size", 6000, "SentencePiece vocabulary size (an upper bound: small corpora get fewer pieces)."
    )
    flags.DEFINE_integer("max_seq_length", 64, "Tokens per training sequence.")
    flags.DEFINE_integer("train_batch_size", 64, "Sequences per optimizer step.")
    flags.DEFINE_integer("dupe_factor", 6, "Passes over the corpus with fresh masks and pairings.")
    flags.DEFINE_float("learning_rate", 0.01, "Peak LAMB learning rate (flags/recipes/small_pretrain.cfg).")
    flags.DEFINE_integer("warmup_steps", 100, "Linear warmup steps of pretraining (small_pretrain.cfg).")
    flags.DEFINE_float("masked_lm_prob", 0.4, "Share of tokens masked afresh in each pass (dynamic masking, "
                       "small_pretrain.cfg); the held-out evaluation keeps the shards' 15%.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice (corpus split, data, model).")
    flags.DEFINE_integer("finetune_train_examples", 3000,
                         "Training passages of the fine-tuning task (a seeded subset, to fit the time budget).")
    flags.DEFINE_integer("finetune_dev_examples", 600, "Dev passages (held-out modules) of the fine-tuning task.")
    # Fine-tuning: flags/recipes/small_finetune.cfg's optimizer and pooling, at batch 32 and 4 epochs (375 steps
    # a run, against the recipe's 940 at batch 16 and 5 epochs) to fit two runs in the demo's budget; at batch 32
    # the recipe's grid found 1e-3 the best rate (bench/results/demo_quality.md).
    flags.DEFINE_float("finetune_epochs", 4.0, "Fine-tuning epochs (the same for pretrained and random weights).")
    flags.DEFINE_float("finetune_learning_rate", 1e-3,
                       "Peak learning rate of fine-tuning (both runs; AdamW with bias correction).")
    flags.DEFINE_enum("finetune_pooling", "mean", ["pooled", "mean"],
                      "The classifier's input: the mean of the sequence output (what masked-LM pretraining trains) or "
                      "the original's pooled [CLS] (trained only by sentence order, which a model this small "
                      "barely learns).")
    flags.DEFINE_float("finetune_warmup_proportion", 0.1, "Linear warmup share of the fine-tuning steps.")
    flags.DEFINE_integer("finetune_batch_size", 32, "Fine-tuning batch size (both runs).")
    flags.DEFINE_enum(
        "mixed_precision",
        "auto",
        ["auto", "float32", "bfloat16"],
        "auto: bfloat16 where the CPU has AMX or AVX-512 bfloat16 units (or on a GPU), else float32.",
    )


MAX_PREDICTIONS_PER_SEQ = 10  # round(64 * 0.15); longer sequences cap at 15% as well
HELDOUT_FRACTION = 0.05
BLANK_EXAMPLES = 5  # printed
BLANK_SCORED = 200  # scored


def demo_config(vocab_size: int, max_seq_length: int):
    """A small all-shared ALBERT with a factorized embedding (E=64 < H=128).

    Sized for a 2-core CPU: about 3 steps/s at batch 64 x 64 tokens on a
    quiet machine; 1,500 steps reach a held-out MLM accuracy well above the
    most-frequent-piece baseline (bench/results/demo_quality.md).
    """
    import albert_tf

    return albert_tf.AlbertConfig(
        vocab_size=vocab_size,
        embedding_size=64,
        hidden_size=128,
        num_hidden_layers=4,
        num_hidden_groups=1,
        inner_group_num=1,
        num_attention_heads=2,
        intermediate_size=512,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=max(64, max_seq_length),
        sharing="all",
    )


@dataclasses.dataclass
class DemoFigures:
    """What the demo measured, the input of its verdict.

    Attributes:
        pretrain_steps / pretrain_steps_planned: steps reached and the step budget.
        mlm_accuracy: held-out masked-LM accuracy of the pretrained model.
        mlm_baseline: held-out accuracy of always answering the training data's most frequent masked piece.
        mlm_positions: held-out masked positions scored (the binomial n of both).
        pretrained_accuracy / random_accuracy: dev accuracy of fine-tuning from the
            pretrained and from random weights.
        majority_accuracy: dev accuracy of always answering the most frequent training label.
        bag_of_words_accuracy: dev accuracy of naive Bayes on word counts.
        dev_examples: dev passages (the binomial n of the dev accuracies).
    """

    pretrain_steps: int
    pretrain_steps_planned: int
    mlm_accuracy: float
    mlm_baseline: float
    mlm_positions: int
    pretrained_accuracy: float
    random_accuracy: float
    majority_accuracy: float
    bag_of_words_accuracy: float
    dev_examples: int


def chance_margin(rate: float, n: int, sigmas: float = 3.0) -> float:
    """`sigmas` binomial standard deviations of an accuracy measured on n items at `rate`.

    A classifier no better than a baseline scoring `rate` lands above
    rate + chance_margin(rate, n) with probability about 0.1% (3 sigmas).

    Example:
    >>> round(chance_margin(0.25, 600), 4)
    0.053
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n!r}.")
    return sigmas * math.sqrt(rate * (1.0 - rate) / n)


def learning_verdict(figures: DemoFigures) -> Tuple[bool, List[str]]:
    """Whether the demo's figures show learning, with one line per check (passed or failed).

    Learning happened when (1) the pretrained masked LM beats the
    most-frequent-piece baseline and (2) fine-tuning from the pretrained and
    (3) from random weights each beat the majority class, all by more than 3
    binomial standard deviations of the baseline on the items scored. Whether
    pretraining paid (pretrained over random by more than 2 standard
    deviations of a difference of two accuracies) and where both stand against
    the bag-of-words baseline are reported beside, not required: they are the
    targets of this size of model, not a sign that training works.

    Args:
        figures: the measured figures.

    Returns:
        (learning happened, lines).

    Example:
    >>> ok, lines = learning_verdict(DemoFigures(1500, 1500, 0.16, 0.06, 30000, 0.62, 0.55, 0.25, 0.65, 600))
    >>> ok, lines[0]
    (True, 'PASS masked LM: held-out accuracy 0.160 > most frequent piece 0.060 + 0.004 (3 sigma, 30000 positions)')
    """
    f = figures
    lines: List[str] = []
    checks = [
        ("masked LM", f"held-out accuracy {f.mlm_accuracy:.3f}", "most frequent piece", f.mlm_accuracy,
         f.mlm_baseline, f.mlm_positions, "positions"),
        ("fine-tuning from pretrained weights", f"dev accuracy {f.pretrained_accuracy:.3f}", "majority class",
         f.pretrained_accuracy, f.majority_accuracy, f.dev_examples, "dev passages"),
        ("fine-tuning from random weights", f"dev accuracy {f.random_accuracy:.3f}", "majority class",
         f.random_accuracy, f.majority_accuracy, f.dev_examples, "dev passages"),
    ]
    ok = True
    for name, measured, baseline_name, value, baseline, n, unit in checks:
        margin = chance_margin(baseline, n)
        passed = value > baseline + margin
        ok &= passed
        lines.append(f"{'PASS' if passed else 'FAIL'} {name}: {measured} {'>' if passed else '<='} "
                     f"{baseline_name} {baseline:.3f} + {margin:.3f} (3 sigma, {n} {unit})")
    gap = f.pretrained_accuracy - f.random_accuracy
    mean = (f.pretrained_accuracy + f.random_accuracy) / 2
    spread = chance_margin(mean, f.dev_examples, 2.0) * math.sqrt(2.0)
    if gap > spread:
        lines.append(f"pretraining paid: pretrained - random = {100 * gap:+.1f} points, beyond the 2-sigma spread "
                     f"of a difference ({100 * spread:.1f})")
    else:
        lines.append(f"pretraining did not clearly pay: pretrained - random = {100 * gap:+.1f} points, within the "
                     f"2-sigma spread of a difference ({100 * spread:.1f})")
    lines.append(f"bag of words (naive Bayes) {f.bag_of_words_accuracy:.3f}: pretrained "
                 f"{100 * (f.pretrained_accuracy - f.bag_of_words_accuracy):+.1f} points, random "
                 f"{100 * (f.random_accuracy - f.bag_of_words_accuracy):+.1f} points")
    if f.pretrain_steps < f.pretrain_steps_planned:
        lines.append(f"CUT pretraining stopped at {f.pretrain_steps} of {f.pretrain_steps_planned} steps "
                     "(the --minutes safety cap)")
    return ok, lines


def _split_user_corpus(patterns: str, corpus_dir: str, seed: int) -> dict:
    """Splits the user's documents into train.txt / eval.txt by a hash of each document."""
    files = sorted({f for p in patterns.split(",") for f in glob.glob(p.strip())})
    if not files:
        raise app.UsageError(f"--input_file={patterns!r} matches no file.")
    os.makedirs(corpus_dir, exist_ok=True)
    paths = {"train": os.path.join(corpus_dir, "train.txt"), "eval": os.path.join(corpus_dir, "eval.txt")}
    counts = collections.Counter()
    handles = {k: open(v + ".tmp", "w", encoding="utf-8") for k, v in paths.items()}
    try:
        document = []

        def flush():
            if document:
                digest = hashlib.sha256(f"{seed}:{counts['documents']}".encode()).digest()
                split = "eval" if int.from_bytes(digest[:8], "big") / 2**64 < HELDOUT_FRACTION else "train"
                handles[split].write("\n".join(document) + "\n\n")
                counts["documents"] += 1
                counts[f"{split}_documents"] += 1
                document.clear()

        for path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if line:
                        document.append(line)
                    else:
                        flush()
            flush()
    finally:
        for handle in handles.values():
            handle.close()
    if counts["train_documents"] == 0 or counts["eval_documents"] == 0:
        raise app.UsageError(
            f"--input_file gave {counts['documents']} document(s); the demo needs enough blank-line separated "
            "documents to hold some out (at least ~40)."
        )
    for k, v in paths.items():
        os.replace(v + ".tmp", v)
    return {"train_file": paths["train"], "eval_file": paths["eval"], **counts}


def _stage(number: int, title: str) -> float:
    logging.info("=" * 20 + " %d/8 %s " + "=" * 20, number, title)
    return time.time()


def _masked_token_baseline(train_pattern: str, eval_pattern: str, max_seq_length: int) -> tuple:
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

    train_ids, train_w = labels(train_pattern, 20)
    eval_ids, eval_w = labels(eval_pattern, 1000)
    most_frequent = np.bincount(train_ids[train_w > 0]).argmax()
    scored = eval_ids[eval_w > 0]
    return int(most_frequent), float((scored == most_frequent).mean()), int(scored.size)


def _blank_examples(sp, eval_file: str, seed: int, limit: int) -> List[Tuple[List[str], int]]:
    """Up to `limit` held-out sentences as (pieces, index of one masked whole word), seeded."""
    import numpy as np

    from pipelines.tokenizer import preprocess_text_py

    rng = np.random.default_rng(seed)
    with open(eval_file, encoding="utf-8") as f:
        sentences = [s.strip() for s in f if 40 <= len(s.strip()) <= 160]
    rng.shuffle(sentences)
    examples = []
    for sentence in sentences:
        pieces = sp.EncodeAsPieces(preprocess_text_py(sentence, True))
        # Whole words of one piece, alphabetic, at least 2 letters.
        candidates = [
            i
            for i, p in enumerate(pieces)
            if p.startswith("\u2581")
            and p[1:].isalpha()
            and len(p) >= 3
            and (i + 1 == len(pieces) or pieces[i + 1].startswith("\u2581") or not pieces[i + 1][0].isalnum())
        ]
        if candidates and len(pieces) + 2 <= FLAGS.max_seq_length:
            examples.append((pieces, int(rng.choice(candidates))))
            if len(examples) == limit:
                break
    return examples


def _fill_in_the_blanks(model, spm_model_file: str, eval_file: str, seed: int) -> dict:
    """Masks one whole word in held-out sentences: prints a few guesses, returns how often the model was right.

    Returns:
        dict with sentences, top1 and top5 (answers at rank 1 / in the top 5)
        and distinct_top1 (different first guesses: 1 means the model answers
        the same piece whatever the context).
    """
    import numpy as np
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model_file)
    examples = _blank_examples(sp, eval_file, seed, BLANK_SCORED)
    # One padded batch (the sentences fit max_seq_length): [CLS] pieces [SEP].
    ids = np.zeros((len(examples), FLAGS.max_seq_length), np.int32)
    mask = np.zeros_like(ids)
    answers = np.zeros(len(examples), np.int64)
    for row, (pieces, target) in enumerate(examples):
        row_ids = [2] + [sp.PieceToId(p) for p in pieces] + [3]
        answers[row] = row_ids[target + 1]
        row_ids[target + 1] = 4  # [MASK]
        ids[row, :len(row_ids)] = row_ids
        mask[row, :len(row_ids)] = 1
    top = np.zeros((len(examples), 5), np.int64)
    for start in range(0, len(examples), 64):
        rows = slice(start, start + 64)
        logits = model({"input_ids": ids[rows], "input_mask": mask[rows], "segment_ids": np.zeros_like(ids[rows]),
                        "masked_lm_positions": np.array([[t + 1] for _, t in examples[rows]], np.int32)})
        top[rows] = np.argsort(-logits["mlm_logits"].numpy()[:, 0], axis=-1)[:, :5]
    for (pieces, target), guesses in zip(examples[:BLANK_EXAMPLES], top):
        masked_text = "".join(p if i != target else "\u2581[MASK]" for i, p in enumerate(pieces))
        logging.info("  %s\n      answer: %s | model's top 5: %s", masked_text.replace("\u2581", " ").strip(),
                     pieces[target].replace("\u2581", ""),
                     ", ".join(sp.IdToPiece(int(t)).replace("\u2581", "") or "(space)" for t in guesses))
    n = len(examples)
    top1 = int((top[:, 0] == answers).sum())
    top5 = int((top == answers[:, None]).any(axis=1).sum())
    first_guesses = collections.Counter(int(t) for t in top[:, 0])
    favourite = first_guesses.most_common(1)[0][0] if n else 0
    common = ", ".join(f"{sp.IdToPiece(t).replace(chr(0x2581), '')!r} x{c}" for t, c in first_guesses.most_common(3))
    logging.info("Fill-in-the-blank on %d held-out sentences (one whole word masked): the answer first %d times "
                 "(%.1f%%; always answering %r would score %d), in the top 5 %d times (%.1f%%); %d different "
                 "first guesses (most common: %s).", n, top1, 100.0 * top1 / max(n, 1),
                 sp.IdToPiece(favourite).replace("\u2581", ""), int((answers == favourite).sum()), top5,
                 100.0 * top5 / max(n, 1), len(first_guesses), common)
    return {"sentences": n, "top1": top1, "top5": top5, "distinct_top1": len(first_guesses)}


def _read_task_split(task_dir: str, split: str) -> Tuple[List[str], List[str]]:
    import csv

    with open(os.path.join(task_dir, f"{split}.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def _finetune_stage(out: str, model_dir: str, precision: str, seed: int) -> dict:
    """Stage 7: the stdlib topic task, fine-tuned from pretrained and from random weights, beside naive Bayes."""
    from albert_tf.tasks.comparison import ComparisonSettings, compare_pretrained_vs_random
    from pipelines.stdlib_tasks import naive_bayes_baseline, write_stdlib_topic_task

    task_dir = os.path.join(out, "topic_task")
    if os.path.exists(os.path.join(task_dir, "dev.csv")):
        logging.info("Fine-tuning task already in %s.", task_dir)
    else:
        summary = write_stdlib_topic_task(task_dir, max_train_examples=FLAGS.finetune_train_examples,
                                          max_dev_examples=FLAGS.finetune_dev_examples, seed=seed)
        logging.info("Task: which part of the standard library wrote this docstring passage? %d training "
                     "passages, %d dev passages from held-out modules; dev labels: %s",
                     summary["train_examples"], summary["dev_examples"], summary["dev_labels"])
    settings = ComparisonSettings(
        max_seq_length=FLAGS.max_seq_length, train_batch_size=FLAGS.finetune_batch_size,
        learning_rate=FLAGS.finetune_learning_rate, num_train_epochs=FLAGS.finetune_epochs,
        warmup_proportion=FLAGS.finetune_warmup_proportion, mixed_precision=precision, seed=seed,
        pooling=FLAGS.finetune_pooling)
    result = compare_pretrained_vs_random(task_dir, model_dir, os.path.join(out, "finetune"), settings)
    train_texts, train_labels = _read_task_split(task_dir, "train")
    dev_texts, dev_labels = _read_task_split(task_dir, "dev")
    predictions = naive_bayes_baseline(train_texts, train_labels, dev_texts)
    result["bag_of_words_accuracy"] = sum(p == y for p, y in zip(predictions, dev_labels)) / len(dev_labels)
    result["dev_examples"] = len(dev_labels)
    rows = [("fine-tuned from the pretrained weights", result["pretrained_accuracy"]),
            ("fine-tuned from random weights", result["random_accuracy"]),
            ("naive Bayes on word counts (no neural network)", result["bag_of_words_accuracy"]),
            (f"always the most frequent topic {result['majority_label']!r}", result["majority_accuracy"])]
    logging.info(
        "Dev accuracy on %d passages of held-out modules (AdamW, lr %g, %g epoch(s), batch %d, %s pooling, the "
        "same for both runs):\n%s", len(dev_labels), FLAGS.finetune_learning_rate, FLAGS.finetune_epochs,
        FLAGS.finetune_batch_size, FLAGS.finetune_pooling,
        "\n".join(f"  {name:<52} {value:.3f}" for name, value in rows))
    return result


def forget_stale_finetuning(out: str, pretrain_step: int) -> bool:
    """Removes fine-tuning and export outputs made from another pretraining step than `pretrain_step`.

    A demo cut short by --minutes and re-run resumes pretraining; what was
    fine-tuned and exported from the cut model must then be made again.
    Records the step in out/finetune/pretrain_step.txt.

    Returns:
        True when stale outputs were removed.

    Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> forget_stale_finetuning(d, 10), forget_stale_finetuning(d, 10), forget_stale_finetuning(d, 30)
    (False, False, True)
    """
    import shutil

    marker = os.path.join(out, "finetune", "pretrain_step.txt")
    stale = False
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            previous = int(f.read().strip() or -1)
        if previous != pretrain_step:
            logging.info("The pretrained model changed (step %d -> %d): fine-tuning and export again.",
                         previous, pretrain_step)
            for path in (os.path.join(out, "finetune"), os.path.join(out, "export")):
                shutil.rmtree(path, ignore_errors=True)
            stale = True
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    with open(marker, "w", encoding="utf-8") as f:
        f.write(f"{pretrain_step}\n")
    return stale


def _export_once(model, export_base: str, **kwargs) -> str:
    """The existing version folder under export_base, or a new export (version 1)."""
    from albert_tf.export import export_saved_model

    versions = sorted(int(n) for n in os.listdir(export_base) if n.isdigit()) if os.path.isdir(export_base) else []
    if versions:
        logging.info("Export already at %s.", os.path.join(export_base, str(versions[-1])))
        return os.path.join(export_base, str(versions[-1]))
    return export_saved_model(model, export_base, **kwargs)


def _export_stage(out: str, classifier, pretrainer, spm_model: str, task_dir: str) -> None:
    """Stage 8: SavedModels for TF Serving, queried with raw text the way a server loads them."""
    import csv

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece op, as on a server)

    classifier_dir = _export_once(classifier, os.path.join(out, "export", "topic_classifier"))
    fill_mask_dir = _export_once(pretrainer, os.path.join(out, "export", "fill_mask"), spm_model_file=spm_model,
                                 max_seq_length=FLAGS.max_seq_length)
    logging.info("Exported: %s (classifier), %s (fill-mask).", classifier_dir, fill_mask_dir)

    with open(os.path.join(task_dir, "dev.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    by_label = {}
    for row in rows:  # one held-out passage per topic
        by_label.setdefault(row["label"], row["text"])
    texts = [by_label[k] for k in sorted(by_label)][:4]
    expected = sorted(by_label)[:4]
    served = tf.saved_model.load(classifier_dir).signatures["serving_default"]
    answer = served(text=tf.constant(texts))
    for text, label, truth, probs in zip(texts, answer["label"].numpy(), expected,
                                         answer["probabilities"].numpy()):
        logging.info("  classifier <- %r\n      -> %s (p=%.2f; the passage comes from %s)",
                     text[:100] + ("..." if len(text) > 100 else ""), label.decode(), probs.max(), truth)
    fill = tf.saved_model.load(fill_mask_dir).signatures["serving_default"]
    requests = ["Return the [MASK] of the file.", "Raise an [MASK] if the socket is closed."]
    answer = fill(text=tf.constant(requests))
    for text, pieces, scores in zip(requests, answer["top_k_pieces"].numpy(), answer["top_k_scores"].numpy()):
        guesses = ", ".join(f"{p.decode().replace(chr(0x2581), '') or '(space)'} {s:.2f}"
                            for p, s in zip(pieces[0], scores[0]))
        logging.info("  fill-mask <- %r\n      -> %s", text, guesses)


def _corpus_stage(out: str, seed: int):
    """1. The corpus: train.txt and eval.txt (held-out documents) under out/corpus."""
    from pipelines.stdlib_corpus import write_stdlib_corpus

    t = _stage(1, "corpus")
    corpus_dir = os.path.join(out, "corpus")
    train_txt, eval_txt = os.path.join(corpus_dir, "train.txt"), os.path.join(corpus_dir, "eval.txt")
    if os.path.exists(train_txt) and os.path.exists(eval_txt):
        logging.info("Corpus already in %s.", corpus_dir)
    elif FLAGS.input_file:
        logging.info("Corpus: %s", _split_user_corpus(FLAGS.input_file, corpus_dir, seed))
    else:
        logging.info("Corpus from the standard library's docstrings: %s", write_stdlib_corpus(corpus_dir, seed=seed))
    logging.info("Corpus stage: %.0f s.", time.time() - t)
    return train_txt, eval_txt


def _vocabulary_stage(out: str, train_txt: str, seed: int):
    """2. The SentencePiece model (its .model file appears last, when complete)."""
    import pipelines

    t = _stage(2, "SentencePiece vocabulary")
    spm_prefix = os.path.join(out, "vocab", "spm")
    spm_model = spm_prefix + ".model"
    if os.path.exists(spm_model):
        logging.info("Vocabulary already at %s.", spm_model)
    else:
        os.makedirs(os.path.dirname(spm_prefix), exist_ok=True)
        pipelines.train_sentencepiece(
            [train_txt],
            spm_prefix + ".tmp",
            vocab_size=FLAGS.vocab_size,
            seed=seed,
            extra_options={"hard_vocab_limit": False},
        )
        for ext in (".vocab", ".model"):  # the .model last: its presence marks completion
            os.replace(spm_prefix + ".tmp" + ext, spm_prefix + ext)
    vocab_size = pipelines.SentencePieceVocab.from_file(spm_model).vocab_size
    logging.info("Vocabulary: %d pieces (%.0f s).", vocab_size, time.time() - t)
    return spm_model, vocab_size


def _data_stage(out: str, train_txt: str, eval_txt: str, spm_model: str, seed: int):
    """3. Pretraining shards of the training and the held-out documents; returns their globs."""
    import pipelines

    t = _stage(3, "pretraining data (SOP pairs, n-gram masking)")
    data_dir = os.path.join(out, "data")
    data_config = pipelines.PretrainingDataConfig(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
        dupe_factor=FLAGS.dupe_factor,
        num_shards=4,
        random_seed=seed,
        progress_interval_s=15.0,
    )
    train_summary = pipelines.create_pretraining_data(
        [train_txt], spm_model, os.path.join(data_dir, "train"), data_config
    )
    eval_summary = pipelines.create_pretraining_data(  # the held-out set: more masks, one shard
        [eval_txt], spm_model, os.path.join(data_dir, "eval"), data_config, dupe_factor=10, num_shards=1
    )
    logging.info("Training data:\n%s", train_summary.to_text())
    logging.info("Held-out data:\n%s", eval_summary.to_text())
    logging.info("Data stage: %.0f s.", time.time() - t)
    return os.path.join(data_dir, "train", "*.tfrecord"), os.path.join(data_dir, "eval", "*.tfrecord")


def _pretraining_stage(out: str, vocab_size: int, spm_model: str, train_pattern: str, eval_pattern: str,
                       seed: int):
    """4. Pretraining for the time budget, then evaluation on the held-out shards."""
    import albert_tf
    import pipelines
    from albert_tf import runtime, training

    t = _stage(4, "pretraining")
    precision = runtime.resolve_mixed_precision(FLAGS.mixed_precision)
    config = demo_config(vocab_size, FLAGS.max_seq_length)
    data = training.PretrainingDataConfig(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
        max_eval_steps=1000,
        masking="dynamic",
        masked_lm_prob=FLAGS.masked_lm_prob,
    )
    logging.info(
        "Model: ALBERT all-shared, E=%d, H=%d, L=%d, %s parameters, %s; %d LAMB steps of %d sequences, "
        "%d masked positions per row (dynamic masking at %g); safety cap %.1f minutes.",
        config.embedding_size,
        config.hidden_size,
        config.num_hidden_layers,
        f"{albert_tf.AlbertEncoder(config).count_params():,}",
        precision,
        FLAGS.pretrain_steps,
        FLAGS.train_batch_size,
        data.train_predictions_per_seq(),
        FLAGS.masked_lm_prob,
        FLAGS.minutes,
    )

    def train_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            train_pattern,
            ctx.get_per_replica_batch_size(FLAGS.train_batch_size),
            FLAGS.max_seq_length,
            MAX_PREDICTIONS_PER_SEQ,
            is_training=True,
            masking="dynamic",
            masked_lm_prob=FLAGS.masked_lm_prob,
            seed=seed,
            input_context=ctx,
            vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size,
        )

    def eval_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            eval_pattern,
            ctx.get_per_replica_batch_size(64),
            FLAGS.max_seq_length,
            MAX_PREDICTIONS_PER_SEQ,
            is_training=False,
            input_context=ctx,
            vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size,
        )

    model_dir = os.path.join(out, "model")
    result = training.run_pretraining(
        config,
        train_dataset_fn,
        model_dir,
        optimization=training.OptimizationConfig(
            train_batch_size=FLAGS.train_batch_size,
            num_train_steps=FLAGS.pretrain_steps,
            optimizer="lamb",
            learning_rate=FLAGS.learning_rate,
            num_warmup_steps=min(FLAGS.warmup_steps, FLAGS.pretrain_steps // 10),
        ),
        runtime=training.RuntimeConfig(
            mixed_precision=precision,
            # XLA loses on CPUs (with bfloat16 it halves throughput where the
            # CPU has avx512_bf16: bench/RESULTS.md); it pays off on GPUs.
            jit_compile=runtime.default_jit_compile(),
            save_checkpoints_steps=250,
            log_steps=50,
            seed=seed,
            max_train_seconds=FLAGS.minutes * 60,
        ),
        data=data,
        spm_model_file=spm_model,
        eval_dataset_fn=eval_dataset_fn,
    )
    steps = int(result["global_step"])
    logging.info("Pretraining stage: %.0f s, %d of %d steps.", time.time() - t, steps, FLAGS.pretrain_steps)
    if steps < FLAGS.pretrain_steps:
        logging.warning(
            "!" * 60 + "\nPRETRAINING WAS CUT SHORT by the %.1f-minute safety cap: %d of %d steps (the machine is "
            "slower or busier than a quiet 2-core CPU). The model is undertrained; re-run the same command with a "
            "larger --minutes to finish the remaining steps (it resumes).\n" + "!" * 60,
            FLAGS.minutes, steps, FLAGS.pretrain_steps)
    return result, model_dir, precision


def _evaluation_stage(result: dict, vocab_size: int, spm_model: str, train_pattern: str,
                      eval_pattern: str) -> dict:
    """5. Held-out masked-LM and SOP accuracy against their baselines."""
    import pipelines

    t = _stage(5, "evaluation on held-out documents")
    most_frequent, baseline, positions = _masked_token_baseline(train_pattern, eval_pattern, FLAGS.max_seq_length)
    mlm_acc = result["eval_masked_lm_accuracy"]
    sop_acc = result["eval_sentence_order_accuracy"]
    logging.info(
        "Held-out masked-LM accuracy %.3f on %d masked positions (chance 1/V = %.5f; always guessing the most "
        "frequent piece %r: %.3f)",
        mlm_acc,
        positions,
        1.0 / vocab_size,
        pipelines.SentencePieceVocab.from_file(spm_model).pieces[most_frequent],
        baseline,
    )
    # SOP is reported, not judged: at this size it stays near chance (bench/results/learning_efficiency.md).
    logging.info("Held-out sentence-order accuracy %.3f (chance 0.5), on %d instances.", sop_acc,
                 result.get("eval_num_examples", 0))
    logging.info("Evaluation stage: %.0f s.", time.time() - t)
    return {"mlm_accuracy": mlm_acc, "mlm_baseline": baseline, "mlm_positions": positions}


def _report_verdict(figures: DemoFigures) -> bool:
    learned, lines = learning_verdict(figures)
    logging.info("What the demo measured:\n  %s", "\n  ".join(lines))
    if learned:
        logging.info("Learning happened: the masked LM beats its frequent-piece baseline and both fine-tuned "
                     "classifiers beat the majority class, each by more than 3 binomial standard deviations.")
    else:
        failed = "; ".join(line[len("FAIL "):] for line in lines if line.startswith("FAIL"))
        logging.warning("Learning did NOT clearly happen: %s.%s", failed,
                        " Pretraining was cut short: re-run with a larger --minutes (it resumes)."
                        if figures.pretrain_steps < figures.pretrain_steps_planned else "")
    return learned


def main(argv):
    del argv
    start = time.time()
    out = FLAGS.output_dir
    os.makedirs(out, exist_ok=True)
    seed = FLAGS.random_seed

    train_txt, eval_txt = _corpus_stage(out, seed)
    spm_model, vocab_size = _vocabulary_stage(out, train_txt, seed)
    train_pattern, eval_pattern = _data_stage(out, train_txt, eval_txt, spm_model, seed)
    result, model_dir, precision = _pretraining_stage(out, vocab_size, spm_model, train_pattern, eval_pattern, seed)
    mlm = _evaluation_stage(result, vocab_size, spm_model, train_pattern, eval_pattern)

    # 6. Fill in the blanks.
    _stage(6, "fill in the blank (held-out sentences)")
    _fill_in_the_blanks(result["model"], spm_model, eval_txt, seed)

    # 7. Fine-tuning: pretrained vs random weights on a labelled task.
    t = _stage(7, "fine-tuning: pretrained vs random weights")
    forget_stale_finetuning(out, int(result["global_step"]))
    finetuned = _finetune_stage(out, model_dir, precision, seed)
    logging.info("Fine-tuning stage: %.0f s (pretrained %.0f s, random %.0f s).", time.time() - t,
                 finetuned["pretrained_seconds"], finetuned["random_seconds"])

    # 8. Export and serve raw text.
    t = _stage(8, "export (TF Serving SavedModels) and raw-text requests")
    _export_stage(out, finetuned["pretrained_model"], result["model"], spm_model, os.path.join(out, "topic_task"))
    logging.info("Export stage: %.0f s.", time.time() - t)

    logging.info(
        "Done in %.1f minutes. Model, config and vocabulary: %s (load with albert_tf.load_checkpoint(%r)).",
        (time.time() - start) / 60,
        model_dir,
        model_dir,
    )
    _report_verdict(DemoFigures(
        pretrain_steps=int(result["global_step"]), pretrain_steps_planned=FLAGS.pretrain_steps, **mlm,
        **{k: finetuned[k] for k in ("pretrained_accuracy", "random_accuracy", "majority_accuracy",
                                     "bag_of_words_accuracy", "dev_examples")}))


def run() -> None:
    """Console-script entry point (setup.py: albert-demo)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, define_flags, "albert-demo", __doc__)


if __name__ == "__main__":
    run()
