r"""albert-convert: any supported checkpoint -> this project's format or Hugging Face's.

Reads an original google-research TF1 checkpoint (albert_config.json next to
it), a Hugging Face ALBERT folder (config.json + model.safetensors) or a
checkpoint of this project, and writes to --output_dir:

* --to=albert_tf (default): `albert_config.json` + `model.weights.safetensors`
  (+ the SentencePiece model as spm.model when given);
* --to=huggingface: a folder `transformers` loads (AlbertForPreTraining,
  AlbertModel, ...): config.json, model.safetensors (transformers' names,
  the MLM and SOP heads when the input has them), spiece.model and
  tokenizer_config.json. Sharing modes Hugging Face cannot express
  ("attention" / "ffn" with fewer groups than layers) are refused.

    albert-convert --input=albert_base/model.ckpt-best --output_dir=albert_base_tf2 \
        --spm_model_file=albert_base/30k-clean.model
    albert-convert --input=runs/pretrain --output_dir=runs/pretrain_hf --to=huggingface
"""

import os

from absl import app, flags, logging

FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_string("input", None, "Checkpoint prefix or folder to convert.")
    flags.DEFINE_string("output_dir", None, "Folder to write albert_config.json and model.weights.safetensors to.")
    flags.DEFINE_string(
        "albert_config_file", None, "Config to use instead of the albert_config.json next to --input (TF1 only)."
    )
    flags.DEFINE_string(
        "spm_model_file",
        None,
        "SentencePiece model to copy into --output_dir. Default: a *.model file next to --input, if exactly one.",
    )
    flags.DEFINE_enum("to", "albert_tf", ["albert_tf", "huggingface"],
                      "Output format: albert_tf (albert_config.json + model.weights.safetensors) or huggingface "
                      "(config.json + model.safetensors + spiece.model, read by transformers).")
    flags.DEFINE_bool("do_lower_case", True, "--to=huggingface: recorded in tokenizer_config.json.")


def _find_spm_model(path: str):
    import tensorflow as tf  # gfile: the checkpoint may be a gs:// folder

    folder = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    candidates = sorted(f for f in tf.io.gfile.listdir(folder or ".") if f.endswith(".model"))
    return os.path.join(folder, candidates[0]) if len(candidates) == 1 else None


def main(argv):
    del argv
    import albert_tf  # imported here so that --help stays fast

    if not FLAGS.input or not FLAGS.output_dir:
        raise app.UsageError("--input and --output_dir are required.")
    config = albert_tf.AlbertConfig.from_json_file(FLAGS.albert_config_file) if FLAGS.albert_config_file else None
    from albert_tf import checkpoints

    model, missing_heads = checkpoints.load_checkpoint_with_report(FLAGS.input, config=config)
    spm = FLAGS.spm_model_file or _find_spm_model(FLAGS.input)
    if FLAGS.to == "huggingface":
        # A sharing layout Hugging Face cannot express is a ValueError: one line from run_binary.
        checkpoints.save_huggingface(model, FLAGS.output_dir, spm_model_file=spm, missing_heads=missing_heads,
                                     do_lower_case=FLAGS.do_lower_case)
    else:
        albert_tf.save_pretrained(model, FLAGS.output_dir, spm_model_file=spm)
    logging.info(
        "Converted %s -> %s (%s, %d parameters%s).",
        FLAGS.input,
        FLAGS.output_dir,
        FLAGS.to,
        model.count_params(),
        f", SentencePiece model {spm}" if spm else ", no SentencePiece model",
    )


def run() -> None:
    """Console-script entry point (setup.py: albert-convert)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, _define_flags, "albert-convert", __doc__)


if __name__ == "__main__":
    run()
