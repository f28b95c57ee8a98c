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

import contextlib
import hashlib
import os
import shutil
import stat

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
    # A wide initial range: outputs that differ by input (the default 0.02 gives near-constant logits).
    config = tl.tiny_config(vocab_size=vocab_size, max_position_embeddings=32, initializer_range=0.5)
    training.run_pretraining(config,
                             tl.make_dataset_fn(records, settings["train_batch_size"]), folder,
                             spm_model_file=spm, **tl.pretraining_kwargs(**settings))
    return folder


def folder_digests(folder: str) -> dict:
    """Every file under `folder` (hidden ones and locks included) -> sha256, and every folder's mode."""
    out = {}
    for path, dirs, names in os.walk(folder):
        out[os.path.relpath(path, folder) + "/"] = stat.S_IMODE(os.stat(path).st_mode)
        for name in names:
            with open(os.path.join(path, name), "rb") as f:
                out[os.path.relpath(os.path.join(path, name), folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


@contextlib.contextmanager
def read_only(folder: str):
    """`folder` and everything in it without write permission for the block, then as before.

    (A process running as root writes anyway: the tests also compare `folder_digests` before and after.)
    """
    paths = [os.path.join(p, n) for p, dirs, names in os.walk(folder) for n in dirs + names] + [folder]
    modes = {p: os.stat(p).st_mode for p in paths}
    for p in paths:
        os.chmod(p, modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield folder
    finally:
        for p in reversed(paths):
            os.chmod(p, modes[p])
