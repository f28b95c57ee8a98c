"""Shared tiny fixtures of the contract matrix: one SentencePiece model, a hidden-16 config, and every head.

`HEADS` is the matrix's rows: every fine-tuning head and variant, each as the
albert-finetune task, a function writing its tiny data folder, and its own
flags. `finetune_argv` gives the full command line (every flag explicit, as
tests/albert_tf/test_finetune_binary.py does: another binary's test in the same
process may have defined a shared flag first with its own default).
"""

import csv
import hashlib
import json
import os
import subprocess
import sys
from typing import Callable, Dict, List, NamedTuple, Tuple

import pytest

from tests.albert_tf.task_testlib import SPM_VOCAB_SIZE, tiny_config, train_tiny_spm
from tests.albert_tf.tasks import finetune_data
from tests.shared_work import build_once

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def regression_csv(folder: str, n_train: int = 12, n_dev: int = 4) -> str:
    """train/dev.csv with text and a float label (the share of "ka" words)."""
    os.makedirs(folder, exist_ok=True)
    for split, n, offset in (("train", n_train, 0), ("dev", n_dev, 40)):
        with open(os.path.join(folder, f"{split}.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            for i in range(n):
                words = [finetune_data.WORDS[(i * 3 + k + offset) % 8] for k in range(4)]
                writer.writerow([" ".join(words), f"{words.count('ka') / 4:.2f}"])
    return folder


def file_digests(folder: str) -> Dict[str, str]:
    """sha256 of every file under `folder` (the model, run state, checkpoints, best_dev.json...), by relative path."""
    digests = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.path.relpath(path, folder).split(os.sep)[0] in ("train", "eval") or name.startswith(".albert-lock"):
                continue  # TensorBoard event files (a rerun may add empty ones) and the folder lock (pid, host)
            with open(path, "rb") as f:
                digests[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return digests


class Head(NamedTuple):
    """One row of the matrix: the --task, a data maker (folder -> folder) and the head's own flags."""

    task: str
    make_data: Callable[[str], str]
    flags: Tuple[str, ...] = ()


HEADS: Dict[str, Head] = {
    "classifier_single": Head("glue/sst-2", lambda d: finetune_data.glue_sst2(d, n_train=12, n_dev=4)),
    "classifier_pair": Head("csv", lambda d: finetune_data.csv_pairs(d, n_train=12, n_dev=4),
                            ("--text_b_column=text_b",)),
    "classifier_regression": Head("csv", regression_csv, ("--regression",)),
    "classifier_mean_pooling": Head("glue/sst-2", lambda d: finetune_data.glue_sst2(d, n_train=12, n_dev=4),
                                    ("--pooling=mean",)),
    "span_qa_v1": Head("squad_v1", lambda d: finetune_data.squad(d, n_train=9, n_dev=2),
                       ("--n_best_size=3", "--max_answer_length=4")),
    "span_qa_v2": Head("squad_v2", lambda d: finetune_data.squad(d, version_2=True, n_train=5, n_dev=2),
                       ("--n_best_size=3", "--max_answer_length=4")),
    "multiple_choice": Head("race", lambda d: finetune_data.race(d, n_train=6, n_dev=2)),
    "tagging": Head("tagging", lambda d: finetune_data.conll(d, n_train=12, n_dev=2)),
}


def finetune_argv(head: Head, data_dir: str, output_dir: str, assets: Dict[str, str], *extra: str) -> List[str]:
    """albert-finetune's command line for `head`: random init, 12 steps in two Keras epochs of 6, state every 2 steps.

    Every head's data holds 3 batches of 4 a pass (checked by the resume test: step 4 is mid-pass, and a run resumed
    there crosses a Keras epoch's end at step 6).
    Later flags win (absl), so `extra` can change any setting.
    """
    return [f"--task={head.task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--albert_config_file={assets['config']}", f"--spm_model_file={assets['spm']}",
            "--max_seq_length=32", "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3",
            "--num_train_epochs=1", "--train_step=12", "--warmup_step=1", "--steps_per_epoch=6",
            "--save_checkpoints_steps=2", "--strategy=default", "--mixed_precision=float32", "--seed=1",
            "--log_steps=1", "--max_query_length=8", "--doc_stride=8", "--max_qa_length=16", "--do_train",
            "--nodo_eval", "--nodo_predict", "--optimizer=adamw", "--pooling=pooled", *head.flags, *extra]


@pytest.fixture(scope="session")
def contract_assets(tmp_path_factory) -> Dict[str, str]:
    """spm: the tiny SentencePiece model; other_spm: another one of the same size; config: albert_config.json.

    Made once per test run (`build_once`): every worker's runs name the same files, so a folder fine-tuned in
    one worker (`finetuned_heads`) is resumed or compared in another with the same paths and bytes.
    """

    def build(folder):
        from pipelines import tokenizer
        from tests.pipelines.conftest import write_corpus

        train_tiny_spm(folder)
        other_corpus = write_corpus(os.path.join(folder, "other_corpus.txt"), num_docs=60, seed=7)
        tokenizer.train_sentencepiece([other_corpus], os.path.join(folder, "other_sp"), vocab_size=SPM_VOCAB_SIZE,
                                      seed=1)
        tiny_config().to_json_file(os.path.join(folder, "albert_config.json"))

    folder = build_once(tmp_path_factory, "contract-assets", build)
    return {"spm": os.path.join(folder, "sp.model"), "other_spm": os.path.join(folder, "other_sp.model"),
            "config": os.path.join(folder, "albert_config.json"), "folder": folder}


_FINETUNE_ALL = r"""
import json, sys
from absl import flags
from albert_tf.bin import finetune
finetune._define_flags()
for argv in json.load(open(sys.argv[1])):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["albert-finetune", *argv])
    finetune.main(["albert-finetune"])
"""


@pytest.fixture(scope="session")
def finetuned_heads(tmp_path_factory, contract_assets) -> Dict[str, Dict[str, str]]:
    """head name -> {"data", "run"}: its data folder and `finetune_argv`'s uninterrupted run (12 steps) on it.

    Made once per test run, in one subprocess: the resume, remote-folder and export contracts compare with or
    export these same runs (each used to fine-tune every head itself). Read only: copy a folder to change it (a
    rerun that trains nothing, or a refused one, leaves it as it was; test_resume.py checks that).
    """

    def build(root):
        runs = []
        for name, head in HEADS.items():
            data = head.make_data(os.path.join(root, name, "data"))
            runs.append(finetune_argv(head, data, os.path.join(root, name, "run"), contract_assets))
        with open(os.path.join(root, "runs.json"), "w", encoding="utf-8") as f:
            json.dump(runs, f)
        done = subprocess.run([sys.executable, "-c", _FINETUNE_ALL, os.path.join(root, "runs.json")], cwd=REPO,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    root = build_once(tmp_path_factory, "contract-finetuned-heads", build)
    return {name: {"data": os.path.join(root, name, "data"), "run": os.path.join(root, name, "run")}
            for name in HEADS}
