"""albert-demo: the whole system end to end on a small ALBERT, in minutes on a CPU.

1. corpus: the docstrings of the installed Python standard library (or
   --input_file), one sentence per line; some documents are held out;
2. a SentencePiece vocabulary (albert-create-vocab's settings);
3. pretraining TFRecord shards with SOP pairs and n-gram masking;
4. pretraining of a small all-shared ALBERT (E < H) with LAMB for --minutes;
5. evaluation on the held-out documents: masked-LM and SOP accuracy against
   their chance levels;
6. a fill-in-the-blank example on held-out sentences;
7. fine-tuning on a labelled task built from the same machine's text (which
   part of the standard library a docstring passage comes from; whole modules
   held out for dev), once from the pretrained weights and once from random
   weights with the same budget: both dev accuracies and the majority-class
   baseline;
8. export of the fine-tuned classifier and of the pretrainer (fill-mask) as
   TF Serving SavedModels, then raw-text requests answered by the exported
   models loaded with tf.saved_model.load, as a server would.

Every stage writes under --output_dir and is skipped when its output is
already complete, so an interrupted demo continues where it stopped.

    albert-demo --output_dir=demo_output --minutes=5
"""

import collections
import glob
import hashlib
import os
import time

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "demo_output", "Where every stage writes its results.")
flags.DEFINE_float("minutes", 5.0, "Pretraining time budget in minutes (the other stages take about 3-5 minutes: "
                   "data about 1, fine-tuning twice about 3, export about 1).")
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
flags.DEFINE_float("learning_rate", 0.005, "Peak LAMB learning rate.")
flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice (corpus split, data, model).")
flags.DEFINE_integer("finetune_train_examples", 3000,
                     "Training passages of the fine-tuning task (a seeded subset, to fit the time budget).")
flags.DEFINE_integer("finetune_dev_examples", 600, "Dev passages (held-out modules) of the fine-tuning task.")
flags.DEFINE_float("finetune_epochs", 3.0, "Fine-tuning epochs (the same for pretrained and random weights).")
flags.DEFINE_float("finetune_learning_rate", 5e-4, "Peak AdamW learning rate of fine-tuning (both runs).")
flags.DEFINE_enum(
    "mixed_precision",
    "auto",
    ["auto", "float32", "bfloat16"],
    "auto: bfloat16 where the CPU has AMX or AVX-512 bfloat16 units (or on a GPU), else float32.",
)

MAX_PREDICTIONS_PER_SEQ = 10  # round(64 * 0.15); longer sequences cap at 15% as well
HELDOUT_FRACTION = 0.05
BLANK_EXAMPLES = 5


def demo_config(vocab_size: int, max_seq_length: int):
    """A small all-shared ALBERT with a factorized embedding (E=64 < H=128).

    Sized for a 2-core CPU: about 3-4 steps/s at batch 64 x 64 tokens, enough
    for held-out MLM accuracy well above the most-frequent-token baseline and
    SOP accuracy above chance within 5 minutes (measured; see the README).
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
    """Accuracy of always predicting the most frequent masked token of the training data."""
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
    return int(most_frequent), float((eval_ids[eval_w > 0] == most_frequent).mean())


def _fill_in_the_blanks(model, spm_model_file: str, eval_file: str, seed: int):
    """Masks one word in a few held-out sentences and prints the model's top guesses."""
    import numpy as np
    import sentencepiece as spm

    from pipelines.tokenizer import preprocess_text_py

    sp = spm.SentencePieceProcessor(model_file=spm_model_file)
    rng = np.random.default_rng(seed)
    with open(eval_file, encoding="utf-8") as f:
        sentences = [s.strip() for s in f if 40 <= len(s.strip()) <= 160]
    rng.shuffle(sentences)
    shown = 0
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
        if not candidates or len(pieces) + 2 > FLAGS.max_seq_length:
            continue
        target = int(rng.choice(candidates))
        ids = [2] + [sp.PieceToId(p) for p in pieces] + [3]
        answer = pieces[target]
        ids[target + 1] = 4  # [MASK]
        batch = {
            "input_ids": np.array([ids], np.int32),
            "input_mask": np.ones((1, len(ids)), np.int32),
            "segment_ids": np.zeros((1, len(ids)), np.int32),
            "masked_lm_positions": np.array([[target + 1]], np.int32),
        }
        logits = model(batch)["mlm_logits"].numpy()[0, 0]
        top = np.argsort(-logits)[:5]
        masked_text = "".join(p if i != target else "\u2581[MASK]" for i, p in enumerate(pieces))
        guesses = ", ".join(sp.IdToPiece(int(t)).replace("\u2581", "") or "(space)" for t in top)
        logging.info(
            "  %s\n      answer: %s | model's top 5: %s",
            masked_text.replace("\u2581", " ").strip(),
            answer.replace("\u2581", ""),
            guesses,
        )
        shown += 1
        if shown == BLANK_EXAMPLES:
            break


def _finetune_stage(out: str, model_dir: str, precision: str, seed: int) -> dict:
    """Stage 7: the stdlib topic task, fine-tuned from pretrained and from random weights."""
    from albert_tf.tasks.comparison import ComparisonSettings, compare_pretrained_vs_random
    from pipelines.stdlib_tasks import write_stdlib_topic_task

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
        max_seq_length=FLAGS.max_seq_length, train_batch_size=32, learning_rate=FLAGS.finetune_learning_rate,
        num_train_epochs=FLAGS.finetune_epochs, mixed_precision=precision, seed=seed)
    result = compare_pretrained_vs_random(task_dir, model_dir, os.path.join(out, "finetune"), settings)
    logging.info(
        "Dev accuracy (held-out modules): from the pretrained weights %.3f, from random weights %.3f "
        "(same data, %g epoch(s), lr %g); always answering the most frequent topic %r: %.3f.",
        result["pretrained_accuracy"], result["random_accuracy"], FLAGS.finetune_epochs,
        FLAGS.finetune_learning_rate, result["majority_label"], result["majority_accuracy"])
    return result


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
    logging.info(
        "Model: ALBERT all-shared, E=%d, H=%d, L=%d, %s parameters, %s; training for %.1f minutes.",
        config.embedding_size,
        config.hidden_size,
        config.num_hidden_layers,
        f"{albert_tf.AlbertEncoder(config).count_params():,}",
        precision,
        FLAGS.minutes,
    )

    def train_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            train_pattern,
            ctx.get_per_replica_batch_size(FLAGS.train_batch_size),
            FLAGS.max_seq_length,
            MAX_PREDICTIONS_PER_SEQ,
            is_training=True,
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
    # The learning rate decays over the steps expected in the time budget at
    # about 3.5 steps/s (this 2-core CPU); on a slower machine the time budget
    # ends training first, on a faster one the step count does.
    max_steps = max(100, int(FLAGS.minutes * 60 * 3.5))
    result = training.run_pretraining(
        config,
        train_dataset_fn,
        model_dir,
        optimization=training.OptimizationConfig(
            train_batch_size=FLAGS.train_batch_size,
            num_train_steps=max_steps,
            optimizer="lamb",
            learning_rate=FLAGS.learning_rate,
            num_warmup_steps=min(100, max_steps // 10),
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
        data=training.PretrainingDataConfig(
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
            max_eval_steps=1000,
        ),
        spm_model_file=spm_model,
        eval_dataset_fn=eval_dataset_fn,
    )
    logging.info("Pretraining stage: %.0f s, %d steps.", time.time() - t, result["global_step"])
    return result, model_dir, precision


def _evaluation_stage(result: dict, vocab_size: int, spm_model: str, train_pattern: str, eval_pattern: str):
    """5. Held-out masked-LM and SOP accuracy against their baselines; True when learning happened."""
    import pipelines

    t = _stage(5, "evaluation on held-out documents")
    most_frequent, baseline = _masked_token_baseline(train_pattern, eval_pattern, FLAGS.max_seq_length)
    mlm_acc = result["eval_masked_lm_accuracy"]
    sop_acc = result["eval_sentence_order_accuracy"]
    logging.info(
        "Held-out masked-LM accuracy %.3f (chance 1/V = %.5f; always guessing the most frequent token %r: %.3f)",
        mlm_acc,
        1.0 / vocab_size,
        pipelines.SentencePieceVocab.from_file(spm_model).pieces[most_frequent],
        baseline,
    )
    logging.info("Held-out sentence-order accuracy %.3f (chance 0.5), on %d instances.", sop_acc,
                 result.get("eval_num_examples", 0))
    logging.info("Evaluation stage: %.0f s.", time.time() - t)
    return mlm_acc > max(2 * baseline, 0.1) and sop_acc > 0.5


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
    learned = _evaluation_stage(result, vocab_size, spm_model, train_pattern, eval_pattern)

    # 6. Fill in the blanks.
    _stage(6, "fill in the blank (held-out sentences)")
    _fill_in_the_blanks(result["model"], spm_model, eval_txt, seed)

    # 7. Fine-tuning: pretrained vs random weights on a labelled task.
    t = _stage(7, "fine-tuning: pretrained vs random weights")
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
    logging.info("Learning %s.", "happened" if learned else "was weak: try more --minutes")


def run() -> None:
    """Console-script entry point (setup.py: albert-demo)."""
    from albert_tf.bin.common import run_binary

    # The demo's flags are defined at import (above); nothing more to define.
    run_binary(main, lambda: None, "albert-demo", __doc__)


if __name__ == "__main__":
    run()
