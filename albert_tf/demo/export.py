"""Stage 8, export: the fine-tuned classifier and the pretrainer (fill-mask) as TF Serving SavedModels, then
raw-text requests answered by the exported models loaded with tf.saved_model.load, as a server would.
"""

from __future__ import annotations

import os

from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.settings import DemoSettings

FILL_MASK_REQUESTS = ("Return the [MASK] of the file.", "Raise an [MASK] if the socket is closed.")


def export_once(console: Console, model, export_base: str, **kwargs) -> str:
    """The existing version folder under export_base, or a new export (version 1)."""
    import tensorflow as tf

    from albert_tf.export import export_saved_model

    versions = (sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(export_base) if n.rstrip("/").isdigit())
                if tf.io.gfile.isdir(export_base) else [])
    if versions:
        console.say("Export already at %s.", os.path.join(export_base, str(versions[-1])))
        return os.path.join(export_base, str(versions[-1]))
    return export_saved_model(model, export_base, **kwargs)


def _one_passage_per_topic(task_dir: str, limit: int = 4):
    """(texts, their topics): the first dev passage of each of the first `limit` topics."""
    import csv
    import io

    from pipelines.fileio import read_text

    rows = list(csv.DictReader(io.StringIO(read_text(os.path.join(task_dir, "dev.csv")), newline="")))
    by_label = {}
    for row in rows:
        by_label.setdefault(row["label"], row["text"])
    topics = sorted(by_label)[:limit]
    return [by_label[k] for k in topics], topics


def export_stage(settings: DemoSettings, console: Console, classifier, pretrainer, spm_model: str,
                 task_dir: str) -> None:
    """Stage 8: exports both models (once) and queries them with raw text."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece op, as on a server)

    console.stage(8, "export", "TF Serving SavedModels, asked with raw text as a server would")
    out = settings.output_dir
    classifier_dir = export_once(console, classifier, os.path.join(out, "export", "topic_classifier"))
    fill_mask_dir = export_once(console, pretrainer, os.path.join(out, "export", "fill_mask"),
                                spm_model_file=spm_model, max_seq_length=settings.max_seq_length)
    console.say("Exported: %s (classifier), %s (fill-mask).", classifier_dir, fill_mask_dir)

    texts, topics = _one_passage_per_topic(task_dir)
    served = tf.saved_model.load(classifier_dir).signatures["serving_default"]
    answer = served(text=tf.constant(texts))
    for text, label, truth, probs in zip(texts, answer["label"].numpy(), topics, answer["probabilities"].numpy()):
        shown = text[:100] + ("..." if len(text) > 100 else "")
        console.block([f"classifier <- {shown!r}",
                       f"    -> {label.decode()} (p={probs.max():.2f}; the passage comes from {truth})"])
    fill = tf.saved_model.load(fill_mask_dir).signatures["serving_default"]
    answer = fill(text=tf.constant(list(FILL_MASK_REQUESTS)))
    for text, pieces, scores in zip(FILL_MASK_REQUESTS, answer["top_k_pieces"].numpy(),
                                    answer["top_k_scores"].numpy()):
        guesses = ", ".join(f"{p.decode().replace(chr(0x2581), '') or '(space)'} {s:.2f}"
                            for p, s in zip(pieces[0], scores[0]))
        console.block([f"fill-mask <- {text!r}", f"    -> {guesses}"])
    console.say("done in %s.", format_minutes(console.elapsed()))
