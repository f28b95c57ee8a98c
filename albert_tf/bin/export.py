r"""albert-export: a SavedModel for TF Serving, raw text in, predictions out.

    albert-export --checkpoint=runs/sst2 --head=classifier \
        --export_dir=exports/albert_sst2

writes exports/albert_sst2/1/ (the next free version number; --version=N to
choose; an existing version is never overwritten). Serve it with
`docker run -p 8501:8501 -v "$PWD/exports/albert_sst2:/models/albert_sst2"
-e MODEL_NAME=albert_sst2 <a TF Serving image with the tensorflow-text ops>`.

--checkpoint: for --head=encoder or pretrainer, anything
albert_tf.load_checkpoint reads (a released google-research folder, a Hugging
Face folder, an albert-tf folder, a checkpoint prefix), with its SentencePiece
model beside it (spm.model, 30k-clean.model, spiece.model, else the only
*.model file: albert_tf/model_folder.py) or given by --spm_model_file; for the
task heads (classifier, span_qa, multiple_choice, tagging), an albert-finetune
output directory. Signatures: serving_default (text in), serve_text_pair
(encoder, classifier, tagging), serve_token_ids (ids in); see
albert_tf/export/ for every head's inputs and outputs. The text signatures
need a model server with the tensorflow-text ops; --notext_signatures writes
an ids-only model (serve_token_ids, also as serving_default) that a stock
TF Serving loads, and needs no SentencePiece model (one found or given is
still written to assets/spm.model for the clients that tokenize).

--format=openvino writes <export_dir>/<version>/model.xml + model.bin, an
OpenVINO IR that OpenVINO Model Server serves with TF Serving's API (the
encoder or the classifier: text in, or ids with --notext_signatures; the dense
layers run on the real tokens only; see albert_tf/export/openvino.py).

--quantize=int8 (with --format=openvino) quantizes it with NNCF on
calibration text: --calibration_file (one text per line, text<TAB>text_pair
for a pair classifier), else a fine-tuned classifier's own train split (the
data folder its run recorded, or --calibration_data_dir). The float and the
int8 model answer the dev split (else the calibration texts) and both
figures are logged; an int8 classifier that loses more than
--int8_max_accuracy_drop points of dev accuracy is refused
(albert_tf/export/int8.py).
"""

from __future__ import annotations

from absl import app, flags, logging

import flags.export_flags as export_flags

FLAGS = flags.FLAGS
_PRETRAINED_HEADS = ("encoder", "pretrainer")


def _load_model(head: str):
    """The model to export and the SentencePiece file to use (None: the model's own, or none at all for an
    ids-only export of a checkpoint without one)."""
    import albert_tf
    from albert_tf import model_folder

    if head in _PRETRAINED_HEADS:
        spm = FLAGS.spm_model_file or model_folder.find_vocabulary(FLAGS.checkpoint)
        if spm is None and FLAGS.text_signatures:
            raise ValueError(
                f"--spm_model_file: no SentencePiece model beside --checkpoint={FLAGS.checkpoint!r} (looked for "
                f"{model_folder.vocabulary_search_text(FLAGS.checkpoint)}); pass --spm_model_file, or export "
                "ids only (--notext_signatures)."
            )
        if spm is None:
            logging.info("No SentencePiece model: an ids-only export without assets/spm.model%s.",
                         " and without top_k_pieces" if head == "pretrainer" else "")
        from albert_tf.checkpoints import load_checkpoint_with_report

        pretrainer, missing = load_checkpoint_with_report(FLAGS.checkpoint)
        masked_lm = [name for name in missing if name.startswith("cls/predictions/")]
        if head == "pretrainer" and masked_lm:
            # Fill-mask from random weights would be a silent wrong answer (e.g. a fine-tuned folder).
            raise ValueError(f"--head=pretrainer: --checkpoint={FLAGS.checkpoint!r} has no masked-LM head "
                             f"({len(masked_lm)} variable(s), e.g. {masked_lm[0]}): a fine-tuned model? Its "
                             "fill-mask would be random; export --head=encoder, or its own head.")
        return (pretrainer.encoder if head == "encoder" else pretrainer), spm
    load_task_model = getattr(albert_tf, "load_task_model", None)
    if load_task_model is None:
        raise ValueError(f"--head={head}: this installation has no albert_tf.load_task_model.")
    return load_task_model(FLAGS.checkpoint), FLAGS.spm_model_file


def _exporter():
    """export_saved_model, or export_openvino for --format=openvino (checked before any model is loaded)."""
    if FLAGS.format == "savedmodel":
        from albert_tf.export import export_saved_model

        return export_saved_model
    from albert_tf.export.openvino import OPENVINO_HEADS, export_openvino

    if FLAGS.head not in OPENVINO_HEADS:
        raise app.UsageError(f"--format=openvino exports --head={' or '.join(OPENVINO_HEADS)}, not {FLAGS.head}.")
    try:
        import openvino  # noqa: F401
        import openvino_tokenizers  # noqa: F401
    except ImportError as e:
        raise ValueError(f"--format=openvino needs the [openvino] extra: pip install -e '.[openvino]' in the "
                         "checkout, in an environment without [beam] (Beam's protobuf cap breaks the "
                         f"tokenizer conversion the export uses; setup.py) ({e}).") from None
    return export_openvino


def _int8_settings(head: str, checkpoint: str) -> dict:
    """export_openvino's quantize, calibration and dev arguments from the int8 flags (and, for a fine-tuned
    classifier, its task's train and dev splits: dev texts measure the cost even with --calibration_file)."""
    from albert_tf.export import int8

    calibration = int8.read_lines(FLAGS.calibration_file) if FLAGS.calibration_file else None
    dev = None
    if head == "classifier":
        from albert_tf.tasks.calibration import task_text_sets

        try:
            train, dev = task_text_sets(checkpoint, FLAGS.calibration_data_dir)
        except (ValueError, FileNotFoundError) as e:
            if FLAGS.calibration_data_dir or calibration is None:
                raise
            logging.warning("No dev texts for the int8 cost (%s): it is measured as agreement on the "
                            "calibration texts.", e)
            train = None
        calibration = calibration or train
    if calibration is None:
        where = "" if head == "encoder" else ", or --calibration_data_dir (--checkpoint records no task data)"
        raise ValueError(f"--quantize=int8 needs calibration text: --calibration_file (one text per line){where}.")
    if dev is not None:
        dev = dev.sample(FLAGS.int8_dev_size, FLAGS.calibration_seed)
    return dict(quantize=FLAGS.quantize, calibration=calibration.sample(FLAGS.calibration_size,
                                                                        FLAGS.calibration_seed),
                dev=dev, max_accuracy_drop=FLAGS.int8_max_accuracy_drop)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    for name in ("checkpoint", "export_dir", "head"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required.")
    if FLAGS.quantize != "none" and FLAGS.format != "openvino":
        raise app.UsageError(f"--quantize={FLAGS.quantize} quantizes an OpenVINO export: add --format=openvino.")
    if FLAGS.openvino_target_cpu != "auto" and FLAGS.format != "openvino":
        raise app.UsageError(f"--openvino_target_cpu={FLAGS.openvino_target_cpu} chooses an OpenVINO export's form: "
                             "add --format=openvino.")
    export = _exporter()
    import tensorflow as tf

    from albert_tf.config import max_seq_length_for

    if not tf.io.gfile.exists(FLAGS.checkpoint) and not tf.io.gfile.exists(FLAGS.checkpoint + ".index"):
        raise FileNotFoundError(f"--checkpoint={FLAGS.checkpoint!r} does not exist.")
    model, spm = _load_model(FLAGS.head)
    if FLAGS.max_seq_length is not None:  # refused in one line naming the flag, before any export work
        max_seq_length_for(model.config.max_position_embeddings, FLAGS.max_seq_length, "--max_seq_length")
    settings = dict(head=FLAGS.head, version=FLAGS.version, max_seq_length=FLAGS.max_seq_length, spm_model_file=spm,
                    do_lower_case=FLAGS.do_lower_case, text_signatures=FLAGS.text_signatures,
                    normalization=FLAGS.normalization)
    if FLAGS.format == "savedmodel":
        settings.update(top_k=FLAGS.top_k, max_answer_length=FLAGS.max_answer_length, doc_stride=FLAGS.doc_stride,
                        n_best_size=FLAGS.n_best_size,
                        max_context_length=FLAGS.max_context_length, freeze_weights=FLAGS.freeze_weights)
    if FLAGS.format == "openvino":
        settings.update(target_cpu=None if FLAGS.openvino_target_cpu == "auto" else FLAGS.openvino_target_cpu)
    if FLAGS.quantize != "none":
        settings.update(_int8_settings(FLAGS.head, FLAGS.checkpoint))
    path = export(model, FLAGS.export_dir, **settings)
    if FLAGS.format == "openvino":
        logging.info("Exported the %s of %s to %s (OpenVINO IR for OpenVINO Model Server).", FLAGS.head,
                     FLAGS.checkpoint, path)
        return
    logging.info("Exported the %s of %s to %s (signatures: saved_model_cli show --dir %s --all).",
                 FLAGS.head, FLAGS.checkpoint, path, path)


def _define_flags() -> None:
    export_flags.define_export_flags()
    flags.DEFINE_enum("format", "savedmodel", ["savedmodel", "openvino"],
                      "savedmodel: a TF Serving SavedModel. openvino: an OpenVINO IR (model.xml + model.bin) for "
                      "OpenVINO Model Server: the encoder or the classifier (needs the [openvino] extra).")
    from albert_tf.export.openvino_form import CPU_KINDS

    flags.DEFINE_enum("openvino_target_cpu", "auto", ["auto", *CPU_KINDS],
                      "--format=openvino: the CPU kind that will serve the model, whose fastest graph form is "
                      "written (float32 kinds: the GELU outside the matmuls; bfloat16 kinds, AMX and AVX-512 BF16: "
                      "fused). auto: this machine's kind. The model answers the same on any CPU.")
    _define_int8_flags()


def _define_int8_flags() -> None:
    from albert_tf.export import int8

    flags.DEFINE_enum("quantize", "none", ["none", *int8.QUANTIZATIONS],
                      "--format=openvino: none (float32 weights) or int8 (NNCF post-training quantization on "
                      "--calibration_file, or a fine-tuned classifier's train split).")
    flags.DEFINE_string("calibration_file", None,
                        "--quantize=int8: calibration text, one text per line (text<TAB>text_pair for a pair "
                        "classifier). Default for a fine-tuned classifier: its task's train split.")
    flags.DEFINE_string("calibration_data_dir", None,
                        "--quantize=int8, a fine-tuned classifier: its task's data folder (train calibrates, dev "
                        "measures). Default: the data folder its fine-tuning run recorded (finetune_run.json).")
    flags.DEFINE_integer("calibration_size", int8.DEFAULT_CALIBRATION_SIZE,
                         "--quantize=int8: calibration texts used (a random choice of them, --calibration_seed, "
                         "when there are more).", lower_bound=1)
    flags.DEFINE_integer("int8_dev_size", 2000,
                         "--quantize=int8: dev texts the float and int8 models both answer (a random choice, "
                         "--calibration_seed, when there are more).", lower_bound=1)
    flags.DEFINE_integer("calibration_seed", 0, "--quantize=int8: seed of the choice of calibration and dev texts.")
    flags.DEFINE_float("int8_max_accuracy_drop", int8.DEFAULT_MAX_ACCURACY_DROP,
                       "--quantize=int8: points of dev accuracy (x 100; regression: Pearson x 100) the int8 "
                       "classifier may lose against the float one; past it the export is refused.")


def run() -> None:
    """Console-script entry point (setup.py: albert-export)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, _define_flags, "albert-export", __doc__)


if __name__ == "__main__":
    run()
