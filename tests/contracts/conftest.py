"""Shared tiny fixtures of the contract matrix: one SentencePiece model, a hidden-16 config, and every head.

`HEADS` is the matrix's rows: every fine-tuning head and variant, each as the
albert-finetune task, a function writing its tiny data folder, and its own
flags. `finetune_argv` gives the full command line (every flag explicit, as
tests/albert_tf/test_finetune_binary.py does: another binary's test in the same
process may have defined a shared flag first with its own default).
"""

import csv
import hashlib
import os
from typing import Callable, Dict, List, NamedTuple, Tuple

import pytest

from tests.albert_tf.task_testlib import SPM_VOCAB_SIZE, tiny_config, train_tiny_spm
from tests.albert_tf.tasks import finetune_data


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
    """spm: the tiny SentencePiece model; other_spm: another one of the same size; config: albert_config.json."""
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    folder = str(tmp_path_factory.mktemp("contract_assets"))
    spm = train_tiny_spm(folder)
    other_corpus = write_corpus(os.path.join(folder, "other_corpus.txt"), num_docs=60, seed=7)
    other = tokenizer.train_sentencepiece([other_corpus], os.path.join(folder, "other_sp"),
                                          vocab_size=SPM_VOCAB_SIZE, seed=1)
    config = os.path.join(folder, "albert_config.json")
    tiny_config().to_json_file(config)
    return {"spm": spm, "other_spm": other, "config": config, "folder": folder}
