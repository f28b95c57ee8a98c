"""The folders users start from, built in their exact layouts for the tests (nothing downloaded).

- `released_folder`: a google-research release (``albert_base_v2.tar.gz``): albert_config.json, 30k-clean.model
  (+ .vocab), model.ckpt-best.{index,data-00000-of-00001}, no ``checkpoint`` state file; weights of the golden
  fixture tests/fixtures/original_albert/g1_i1 (vocab 50, 32 positions).
- `hugging_face_folder`: config.json, spiece.model, model.safetensors; weights of the golden fixture
  tests/fixtures/hf_albert/gelu_new_g1_i1 (vocab 50, 32 positions).
- `demo_folder`: what albert-pretrain (and so albert-demo's ``demo_output/model``) leaves: training checkpoints
  ``ckpt-N`` with their ``checkpoint`` state file, training_settings.json, the final model.weights.safetensors
  recording its step, albert_config.json and spm.model; made by `albert_tf.training.run_pretraining` itself for
  two steps of a tiny model.

Each takes the 50-piece vocabulary of `vocabulary` (the golden fixtures' size) or, for the demo folder, any.
"""

import os
import shutil

from tests.albert_tf.task_testlib import train_tiny_spm

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
ORIGINAL = os.path.join(FIXTURES, "original_albert", "g1_i1")
HF = os.path.join(FIXTURES, "hf_albert", "gelu_new_g1_i1")
VOCABULARY_SIZE = 50  # the golden fixtures' vocab_size


def _copy(source_folder, source_name, folder, name):
    shutil.copyfile(os.path.join(source_folder, source_name), os.path.join(folder, name))


def vocabulary(root: str) -> str:
    """The 50-piece SentencePiece model (root/vocab.model, with its .vocab) the golden fixtures' models fit."""
    return train_tiny_spm(root, vocab_size=VOCABULARY_SIZE, name="vocab")


def released_folder(folder: str, spm: str) -> str:
    """`folder` laid out as a google-research release, with the golden TF1 checkpoint and `spm` as 30k-clean.model."""
    os.makedirs(folder)
    _copy(ORIGINAL, "albert_config.json", folder, "albert_config.json")
    _copy(ORIGINAL, "model.ckpt.index", folder, "model.ckpt-best.index")
    _copy(ORIGINAL, "model.ckpt.data-00000-of-00001", folder, "model.ckpt-best.data-00000-of-00001")
    shutil.copyfile(spm, os.path.join(folder, "30k-clean.model"))
    shutil.copyfile(spm[: -len(".model")] + ".vocab", os.path.join(folder, "30k-clean.vocab"))
    return folder


def hugging_face_folder(folder: str, spm: str) -> str:
    """`folder` laid out as a Hugging Face model, with the golden safetensors weights and `spm` as spiece.model."""
    os.makedirs(folder)
    for name in ("config.json", "model.safetensors"):
        _copy(HF, name, folder, name)
    shutil.copyfile(spm, os.path.join(folder, "spiece.model"))
    return folder


def demo_folder(folder: str, spm: str, vocab_size: int, steps: int = 2) -> str:
    """`folder` as albert-pretrain leaves it: `steps` LAMB steps of a tiny model (32 positions) on random records.

    Args:
        folder: the model folder to make (run_pretraining's output_dir).
        spm: the SentencePiece model copied in as spm.model.
        vocab_size: the model's vocabulary (the SentencePiece model's size).
        steps: training steps (a checkpoint at the last).
    """
    from albert_tf import training
    from tests.albert_tf import training_testlib as tl

    records = tl.write_tfrecords(os.path.join(folder + "-data", "a.tfrecord"), 16, seed=1)
    settings = dict(train_batch_size=4, num_train_steps=steps, num_warmup_steps=1, learning_rate=0.01,
                    save_checkpoints_steps=steps, log_steps=1, max_seq_length=tl.SEQ,
                    max_predictions_per_seq=tl.PREDS, seed=7, mixed_precision="float32")
    training.run_pretraining(tl.tiny_config(vocab_size=vocab_size, max_position_embeddings=32),
                             tl.make_dataset_fn(records, settings["train_batch_size"]), folder,
                             spm_model_file=spm, **tl.pretraining_kwargs(**settings))
    return folder
