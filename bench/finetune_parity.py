r"""Side by side: fine-tuning in albert-tf, Hugging Face and keras-hub on the same data.

Systems (`--systems`):
  finetune   the albert-finetune binary (a subprocess; it reads the task's text files)
  api        our Python API: AlbertClassifier + albert_tf.optimizers.adamw + fit
  api_original  the same with the original's AdamW (no bias correction)
  hf         transformers' AlbertForSequenceClassification, torch AdamW, linear schedule, dynamic padding
  kerashub   keras-hub's AlbertTextClassifier (AlbertBackbone + its head), Keras AdamW, fit
(bench/systems/parity.py holds the runs.) Every system gets the same AlbertConfig,
SentencePiece model, token ids (tokenized once by our preprocessor; each run
reports a digest of the ids it trained on, and the binary's saved preprocessor
is checked to give the same ids), max length, batch, epochs and step schedule.

Starts (`--starts`): `random` (each system's own initialisation) and
`pretrained`: one checkpoint pretrained here with our binaries
(albert-create-vocab, albert-create-pretraining-data, albert-pretrain with
flags/recipes/small_pretrain.cfg, a fixed step budget), written for Hugging
Face by `albert-convert --to=huggingface`, loaded by transformers and by
keras-hub from that folder. Before any pretrained run the benchmark checks
that both peers compute what our encoder computes on the task's ids.

Tasks (`--tasks`), built from text on the machine (pipelines/stdlib_tasks.py,
pipelines/machine_tasks.py), written as jsonl files albert-finetune reads:
  topic          which part of the standard library a docstring passage is from (7 classes; the demo's)
  same_document  are two sentences from the same module of an installed package? (pair, 2 classes)
  position       where in its module a sentence stands, 0..1 (regression; Pearson)

Each system runs every rate of `--grid` with seed 0, keeps the rate with the
best final dev score, then runs the other seeds there. Raw runs are appended
to `<results>.jsonl` (a run already there with the same settings is not run
again), the table goes to `<results>.md`.

    nice -n 5 python -m bench.finetune_parity --tasks=topic,same_document,position \
      --systems=finetune,api,hf,kerashub --starts=random,pretrained --seeds=3 --grid=1e-4,3e-4,1e-3

`--smoke` runs the whole harness on a tiny model and data (seconds per run).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import app, flags, logging

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_DIR)

from bench.worker import RESULT_PREFIX  # noqa: E402

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command line, defined only when run as a program: importing this module (tests, other
    benchmarks) must not claim flag names such as max_seq_length that the binaries define."""
    flags.DEFINE_list("tasks", ["topic", "same_document", "position"], "Tasks to run.")
    flags.DEFINE_list("systems", ["finetune", "api", "hf", "kerashub", "recipe"], "Systems to run.")
    flags.DEFINE_list("starts", ["random", "pretrained"], "random and/or pretrained.")
    flags.DEFINE_integer("seeds", 3, "Seeds at each system's chosen learning rate.")
    flags.DEFINE_list("grid", ["1e-4", "3e-4", "1e-3"], "Peak learning rates tried with seed 0.")
    flags.DEFINE_integer("train_examples", 3000, "Training examples per task.")
    flags.DEFINE_integer("dev_examples", 600, "Dev examples per task.")
    flags.DEFINE_integer("max_seq_length", 64, "Packed tokens per example.")
    flags.DEFINE_integer("batch_size", 32, "Training batch.")
    flags.DEFINE_float("epochs", 3.0, "Training epochs.")
    flags.DEFINE_integer("pretrain_steps", 2000, "albert-pretrain steps of the pretrained start (batch 64).")
    flags.DEFINE_string("pretrained_dir", None, "Use this albert-tf checkpoint folder as the pretrained start instead "
                        "of pretraining one (it must have the benchmark's config and SentencePiece model).")
    flags.DEFINE_bool("report_only", False, "Write the report from the runs in the jsonl; run nothing.")
    flags.DEFINE_string("cache_dir", os.path.join(REPO_DIR, "bench_cache", "finetune_parity"),
                        "Corpus, vocabulary, tasks, the pretrained model and scratch runs (git-ignored).")
    flags.DEFINE_string("results", os.path.join(REPO_DIR, "bench", "results", "finetune_parity"),
                        "Writes <results>.jsonl (raw runs, appended) and <results>.md.")
    flags.DEFINE_integer("jobs", 2, "Runs at the same time (each a process).")
    flags.DEFINE_integer("threads", 1, "CPU threads per run (0: the framework's default).")
    flags.DEFINE_integer("timeout", 1800, "Seconds before a run is abandoned.")
    flags.DEFINE_bool("smoke", False, "Tiny model, tiny data, 1-2 steps: checks the harness, measures nothing.")
    flags.DEFINE_bool("in_process", False, "Every run in this process, one at a time (no thread limit).")


PRIMARY_METRIC = {False: "accuracy", True: "pearson"}
SYSTEM_NAMES = {"finetune": "ours: albert-finetune", "api": "ours: Python API (fit)",
                "api_original": "ours: Python API, original AdamW", "hf": "Hugging Face",
                "kerashub": "keras-hub",
                "recipe": "ours: albert-finetune defaults + small_finetune.cfg"}
PEERS = ("hf", "kerashub")
RECIPE = os.path.join("flags", "recipes", "small_finetune.cfg")


def recipe_learning_rate() -> float:
    """The peak rate small_finetune.cfg sets (the recipe system's only 'grid' point)."""
    with open(os.path.join(REPO_DIR, RECIPE), encoding="utf-8") as f:
        rates = [float(line.split("=", 1)[1]) for line in f if line.startswith("--learning_rate=")]
    if len(rates) != 1:
        raise ValueError(f"{RECIPE} should set --learning_rate once, found {rates!r}.")
    return rates[0]


def system_grid(system: str, grid: Sequence[float]) -> List[float]:
    """The rates a system is run at: the grid, except the recipe, which runs as a user runs it."""
    return [recipe_learning_rate()] if system == "recipe" else list(grid)


@dataclasses.dataclass
class Settings:
    """What every run of one benchmark shares (its hash keys the jsonl rows)."""

    config: Dict[str, object]
    max_seq_length: int
    batch_size: int
    epochs: float
    train_examples: int
    dev_examples: int
    smoke: bool = False

    def digest(self, *extra) -> str:
        blob = json.dumps([dataclasses.asdict(self), *extra], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def model_config(vocab_size: int, max_seq_length: int, smoke: bool) -> Dict[str, object]:
    """The demo's shape (E=64, H=128, L=4, all shared, no dropout inside the encoder); tiny with --smoke."""
    if smoke:
        shape = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64)
    else:
        shape = dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
                     intermediate_size=512)
    return dict(shape, vocab_size=vocab_size, num_hidden_groups=1, inner_group_num=1, hidden_act="gelu",
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                max_position_embeddings=max(64, max_seq_length), type_vocab_size=2, initializer_range=0.02)


# ------------------------------------------------------------------- tasks
@dataclasses.dataclass
class TaskSpec:
    name: str
    regression: bool
    description: str
    corpus: str  # "stdlib" or "packages"
    build: Callable[..., Dict[str, List[tuple]]]


def _topic(documents, train, dev, seed):
    from pipelines.stdlib_tasks import build_stdlib_topic_task, subsample

    rows = build_stdlib_topic_task(documents=documents, seed=seed)
    return {"train": subsample(rows["train"], train, seed), "dev": subsample(rows["dev"], dev, seed + 1)}


def _same_document(documents, train, dev, seed):
    from pipelines.machine_tasks import same_document_pairs

    return same_document_pairs(documents, seed=seed, max_train_examples=train, max_dev_examples=dev)


def _position(documents, train, dev, seed):
    from pipelines.machine_tasks import relative_position

    return relative_position(documents, seed=seed, max_train_examples=train, max_dev_examples=dev)


TASKS = {
    "topic": TaskSpec("topic", False, "docstring passage -> one of 7 stdlib topic groups (held-out modules)",
                      "stdlib", _topic),
    "same_document": TaskSpec("same_document", False, "two sentences: same package module or not (held-out "
                              "modules, balanced)", "packages", _same_document),
    "position": TaskSpec("position", True, "sentence -> its relative position in its package module, 0..1 "
                         "(held-out modules)", "packages", _position),
}
# Packages whose docstrings feed the package tasks: installed with albert-tf or its bench extra; the
# stdlib is the pretraining corpus, so these tasks test transfer to text the pretraining never saw.
TASK_PACKAGES = ("keras", "numpy", "absl", "google.protobuf", "rich", "pygments", "requests", "urllib3",
                 "markdown_it", "h5py", "packaging")


def _documents(corpus: str, smoke: bool) -> List[Tuple[str, List[str]]]:
    if corpus == "stdlib":
        from pipelines.stdlib_corpus import iter_stdlib_documents

        docs = iter_stdlib_documents()
    else:
        from pipelines.package_corpus import iter_package_documents

        docs = ((path, sentences) for _, path, sentences in
                iter_package_documents(("absl", "packaging") if smoke else TASK_PACKAGES))
    return list(itertools.islice(docs, 120 if smoke else None))


def prepare_tasks(names: Sequence[str], cache: str, spm_model: str, s: Settings) -> Dict[str, dict]:
    """Builds (once) each task's jsonl files and the ids every system reads; returns their descriptions."""
    from bench.systems import parity
    from pipelines.machine_tasks import read_task, write_task

    out, docs = {}, {}
    for name in names:
        spec = TASKS[name]
        folder = os.path.join(cache, "tasks", f"{name}_{s.digest(spm_model_digest(spm_model))}")
        if not os.path.exists(os.path.join(folder, "dev.jsonl")):
            if spec.corpus not in docs:
                docs[spec.corpus] = _documents(spec.corpus, s.smoke)
            write_task(folder, spec.build(docs[spec.corpus], s.train_examples, s.dev_examples, 12345))
        # The ids are made again on every start (seconds): a change of the tokenizer changes the
        # digest, and runs of other ids are then not reused.
        rows = read_task(folder)
        info = {"train_examples": len(rows["train"]), "dev_examples": len(rows["dev"]),
                "baseline": baseline(rows, spec.regression)}
        info.update(parity.encode_task(rows, spm_model, s.max_seq_length, spec.regression,
                                       os.path.join(folder, "ids.npz")))
        out[name] = dict(info, folder=folder, npz=os.path.join(folder, "ids.npz"), regression=spec.regression,
                         metric=PRIMARY_METRIC[spec.regression], description=spec.description)
        logging.info("Task %s: %d train / %d dev, data digest %s", name, info["train_examples"],
                     info["dev_examples"], info["data_digest"])
    return out


def baseline(rows: Dict[str, List[tuple]], regression: bool) -> Dict[str, object]:
    """Majority class and its dev accuracy (classification); the dev label spread (regression)."""
    if regression:
        dev = [float(r[-1]) for r in rows["dev"]]
        return {"dev_label_mean": statistics.mean(dev), "dev_label_std": statistics.pstdev(dev)}
    from pipelines.stdlib_tasks import majority_baseline

    label, accuracy = majority_baseline([r[-1] for r in rows["train"]], [r[-1] for r in rows["dev"]])
    return {"majority_label": label, "majority_accuracy": accuracy}


def weights_digest(pretrained_dir: str) -> str:
    """sha256 of our checkpoint's weights and of its Hugging Face conversion beside it (when written)."""
    h = hashlib.sha256()
    for path in (os.path.join(pretrained_dir, "model.weights.safetensors"),
                 os.path.join(pretrained_dir.rstrip("/") + "_hf", "model.safetensors")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def spm_model_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


# ------------------------------------------------------- vocabulary, pretraining
def _binary(name: str) -> List[str]:
    """A console script of this project, run from the same interpreter's environment."""
    return [os.path.join(os.path.dirname(sys.executable), name)]


def _check_call(cmd: List[str], log_path: str, env: Optional[dict] = None) -> None:
    logging.info("Running: %s", " ".join(cmd))
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.call(cmd, cwd=REPO_DIR, stdout=log, stderr=subprocess.STDOUT, env=env)
    if code != 0:
        with open(log_path, encoding="utf-8") as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{cmd[0]} failed (exit {code}); the end of {log_path}:\n{tail}")


def prepare_vocabulary(cache: str, smoke: bool) -> str:
    """The stdlib corpus (train/eval by module) and a 6000-piece SentencePiece model (albert-create-vocab)."""
    corpus = os.path.join(cache, "corpus")
    prefix = os.path.join(cache, "vocab", "spm_smoke" if smoke else "spm")
    if os.path.exists(prefix + ".model"):
        return prefix + ".model"
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    if smoke:
        from pipelines.tokenizer import train_sentencepiece

        text = os.path.join(corpus, "smoke.txt")
        os.makedirs(corpus, exist_ok=True)
        with open(text, "w", encoding="utf-8") as f:
            for _, sentences in _documents("stdlib", True) + _documents("packages", True):
                f.write("\n".join(sentences) + "\n\n")
        return train_sentencepiece([text], prefix, vocab_size=400, seed=1,
                                   extra_options={"hard_vocab_limit": False})
    if not os.path.exists(os.path.join(corpus, "train.txt")):
        from pipelines.stdlib_corpus import write_stdlib_corpus

        write_stdlib_corpus(corpus, seed=12345)
    _check_call(_binary("albert-create-vocab") + [f"--input_file={corpus}/train.txt", f"--model_prefix={prefix}",
                                                  "--vocab_size=6000"], prefix + ".log")
    return prefix + ".model"


def prepare_pretrained(cache: str, config: Dict[str, object], spm_model: str, steps: int, smoke: bool) -> str:
    """Our pretrained checkpoint folder: albert-create-pretraining-data + albert-pretrain (small recipe).

    With smoke, an untrained model saved as a checkpoint (exercises conversion and loading only).
    """
    out = os.path.join(cache, f"pretrained_{'smoke' if smoke else steps}")
    if os.path.exists(os.path.join(out, "albert_config.json")) and os.path.exists(os.path.join(out, "DONE")):
        return out
    os.makedirs(out, exist_ok=True)
    config_file = os.path.join(cache, "albert_config.json" if not smoke else "albert_config_smoke.json")
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, sort_keys=True)
    if smoke:
        import albert_tf

        albert_tf.save_pretrained(albert_tf.AlbertPretrainer(albert_tf.AlbertConfig(**config)), out, spm_model)
    else:
        data = os.path.join(cache, "pretrain_data")
        _check_call(_binary("albert-create-pretraining-data") + [
            f"--input_file={cache}/corpus/train.txt", f"--spm_model_file={spm_model}", f"--output_dir={data}",
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=5", "--num_shards=2",
            "--random_seed=12345"], os.path.join(cache, "pretrain_data.log"))
        _check_call(_binary("albert-pretrain") + [
            "--flagfile=flags/recipes/small_pretrain.cfg", f"--albert_config_file={config_file}",
            f"--spm_model_file={spm_model}", f"--input_file={data}/*.tfrecord", f"--output_dir={out}",
            "--train_batch_size=64", f"--num_train_steps={steps}", "--max_seq_length=64",
            "--max_predictions_per_seq=10", "--seed=12345", "--do_train", "--log_steps=100",
            "--save_checkpoints_steps=500"], os.path.join(cache, "pretrain.log"))
    with open(os.path.join(out, "DONE"), "w", encoding="utf-8") as f:
        f.write("complete\n")
    return out


def convert_for_peers(pretrained: str, task_npz: str, threads: int, in_process: bool) -> Tuple[str, dict]:
    """albert-convert --to=huggingface, then checks transformers and keras-hub compute what we compute."""
    hf_dir = pretrained.rstrip("/") + "_hf"
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        _check_call(_binary("albert-convert") + ["--to=huggingface", f"--input={pretrained}",
                                                 f"--output_dir={hf_dir}"], hf_dir + ".log")
    checks = call("peers_match_ours", dict(pretrained_dir=pretrained, hf_dir=hf_dir, task_file=task_npz), threads,
                  600, in_process)
    for peer in ("hf", "kerashub"):
        if not checks[f"{peer}_matches"]:
            raise RuntimeError(f"{peer} does not compute what our encoder computes from {hf_dir}: {checks}")
    return hf_dir, checks


# ------------------------------------------------------------------- runs
@dataclasses.dataclass
class Run:
    task: str
    start: str
    system: str
    learning_rate: float
    seed: int

    @property
    def key(self) -> str:
        return f"{self.task}/{self.start}/{self.system}/lr={self.learning_rate:g}/seed={self.seed}"


def worker_call(module: str, function: str, kwargs: dict, threads: int, timeout: float = 1800) -> dict:
    """bench.worker in a fresh process with `threads` CPU threads; its BENCH_RESULT."""
    spec = json.dumps({"system": module, "function": function, "kwargs": kwargs})
    proc = subprocess.run([sys.executable, "-m", "bench.worker", spec], cwd=REPO_DIR, env=thread_env(threads),
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench.worker {module}.{function} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def thread_env(threads: int) -> dict:
    """Environment that limits TensorFlow, oneDNN and torch to `threads` threads (0: no limit)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO_DIR)
    if threads:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            env[name] = str(threads)
    return env


def finetune_run(run: Run, task: dict, s: Settings, init: dict, scratch: str, threads: int,
                 timeout: float, in_process: bool = False) -> dict:
    """albert-finetune as a user runs it; per-epoch dev scores from its log, final from the last epoch.

    in_process: the library call the binary makes (`run_finetuning`) in this process (the smoke test).
    """
    out = os.path.join(scratch, run.key.replace("/", "_"))
    shutil.rmtree(out, ignore_errors=True)
    if in_process:
        return _finetune_in_process(run, task, s, init, out)
    # The recipe system: the binary's defaults + small_finetune.cfg (its rate, batch, epochs, pooling).
    schedule = ([f"--flagfile={os.path.join(REPO_DIR, RECIPE)}"] if run.system == "recipe" else [
        f"--train_batch_size={s.batch_size}", f"--learning_rate={run.learning_rate}",
        f"--num_train_epochs={s.epochs}"])
    cmd = _binary("albert-finetune") + schedule + [
        "--task=csv", f"--data_dir={task['folder']}", f"--output_dir={out}", f"--spm_model_file={init['spm']}",
        f"--max_seq_length={s.max_seq_length}", f"--seed={run.seed}",
        "--do_train", "--do_eval", "--mixed_precision=float32", "--log_steps=1000"]
    cmd.append(f"--init_checkpoint={init['ours']}" if run.start == "pretrained"
               else f"--albert_config_file={init['config_file']}")
    if task["regression"]:
        cmd.append("--regression")
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_DIR, env=thread_env(threads), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"albert-finetune failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    epochs = epoch_scores(proc.stderr + proc.stdout)
    if not epochs:
        raise RuntimeError(f"No 'Epoch N dev:' line in albert-finetune's log:\n{proc.stderr[-3000:]}")
    result = {"epochs": epochs, "final": epochs[-1], "seconds": time.perf_counter() - started,
              "output_dir": os.path.relpath(out, REPO_DIR)}  # no machine path in the results
    return result


def _finetune_in_process(run: Run, task: dict, s: Settings, init: dict, out: str) -> dict:
    import logging as py_logging

    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.runner import FinetuneOptions, run_finetuning

    lines: List[str] = []

    class Collect(py_logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler = Collect()
    absl_logger = py_logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(py_logging.INFO)  # the epoch lines are INFO; a test process logs WARNING and up
    absl_logger.addHandler(handler)
    started = time.perf_counter()
    try:
        pretrained = run.start == "pretrained"
        run_finetuning(FinetuneOptions(
            task="csv", data_dir=task["folder"], output_dir=out, init_checkpoint=init["ours"] if pretrained else None,
            albert_config_file=None if pretrained else init["config_file"],
            task_options=TaskOptions(max_seq_length=s.max_seq_length, spm_model_file=init["spm"],
                                     regression=task["regression"]),
            train_batch_size=s.batch_size, learning_rate=run.learning_rate, num_train_epochs=s.epochs,
            seed=run.seed, do_train=True, do_eval=True, mixed_precision="float32", log_steps=1000))
    finally:
        absl_logger.removeHandler(handler)
        absl_logger.setLevel(level)
    epochs = epoch_scores("\n".join(lines))
    return {"epochs": epochs, "final": epochs[-1], "seconds": time.perf_counter() - started, "output_dir": out}


def epoch_scores(log: str) -> List[Dict[str, float]]:
    """The dev scores of each "Epoch N dev: key = value, ..." line of albert-finetune's log.

    Example:
    >>> epoch_scores("I1201 callbacks.py:12] Epoch 1 dev: accuracy = 0.5000, eval_loss = 0.7 (best)\\n")
    [{'accuracy': 0.5, 'eval_loss': 0.7}]
    """
    import re

    out = []
    for match in re.finditer(r"Epoch (\d+) dev: (.*)", log):
        scores = {}
        for key, value in re.findall(r"(\w+) = (-?[0-9.eE+-]+|nan)", match.group(2)):
            scores[key] = float(value)
        out.append(scores)
    return out


def call(function: str, kwargs: dict, threads: int, timeout: float, in_process: bool) -> dict:
    """bench.systems.parity.<function>(**kwargs) in a worker process, or here (in_process: no thread limit)."""
    if in_process:
        from bench.systems import parity

        return getattr(parity, function)(**dict(kwargs, **({"threads": 0} if "threads" in kwargs else {})))
    return worker_call("parity", function, kwargs, threads, timeout)


def execute(run: Run, task: dict, s: Settings, init: dict, scratch: str, threads: int, timeout: float,
            in_process: bool = False) -> dict:
    """One run of any system; the jsonl row."""
    kwargs = dict(task_file=task["npz"], config=init["config"], learning_rate=run.learning_rate, seed=run.seed,
                  regression=task["regression"], epochs=s.epochs, batch_size=s.batch_size, threads=threads)
    pretrained = run.start == "pretrained"
    if run.system in ("finetune", "recipe"):
        result = finetune_run(run, task, s, init, scratch, threads, timeout, in_process)
    elif run.system in ("api", "api_original"):
        kwargs.update(init_checkpoint=init["ours"] if pretrained else "",
                      optimizer="adamw_original" if run.system == "api_original" else "adamw")
        result = call("api", kwargs, threads, timeout, in_process)
    elif run.system in ("hf", "kerashub"):
        kwargs["hf_dir"] = init["hf"] if pretrained else ""
        result = call(run.system, kwargs, threads, timeout, in_process)
    else:
        raise ValueError(f"Unknown system {run.system!r}; expected one of {sorted(SYSTEM_NAMES)}.")
    return dict(dataclasses.asdict(run), key=run.key, metric=task["metric"], **result,
                finished=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                load_average=os.getloadavg()[0])




# ----------------------------------------------------------------- the plan
class Journal:
    """The jsonl of raw runs: rows of these settings are reused, new rows appended."""

    def __init__(self, path: str, settings_hash: str):
        self.path, self.settings_hash = path, settings_hash
        self.rows: Dict[str, dict] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    if row.get("settings") == settings_hash:
                        self.rows[row["key"]] = row

    def add(self, row: dict) -> None:
        row = dict(row, settings=self.settings_hash)
        self.rows[row["key"]] = row
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def run_all(runs: List[Run], journal: Journal, work: Callable[[Run], dict], jobs: int) -> None:
    """Runs what the journal lacks, `jobs` at a time; a failed run is logged and left out."""
    todo = [r for r in runs if r.key not in journal.rows]
    if not todo:
        return
    logging.info("%d run(s) to do (%d already in %s).", len(todo), len(runs) - len(todo), journal.path)

    def done(run: Run, future) -> None:
        try:
            row = future.result()
        except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
            logging.error("Run %s failed: %s", run.key, e)
            return
        journal.add(row)
        logging.info("%s: %s = %.4f (%.0f s)", run.key, row["metric"], row["final"][row["metric"]], row["seconds"])

    if jobs <= 1:  # in this thread (Keras's global dtype policy and seeds stay with one run at a time)
        for run in todo:
            future = concurrent.futures.Future()
            try:
                future.set_result(work(run))
            except Exception as e:  # noqa: BLE001
                future.set_exception(e)
            done(run, future)
        return
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(work, r): r for r in todo}
        for future in concurrent.futures.as_completed(futures):
            done(futures[future], future)


def best_rate(journal: Journal, task: str, start: str, system: str, grid: Sequence[float]) -> Optional[float]:
    """The grid rate whose seed-0 run has the best final dev score (ties: the smaller rate)."""
    scored = []
    for rate in system_grid(system, grid):
        row = journal.rows.get(Run(task, start, system, rate, 0).key)
        if row is not None:
            scored.append((row["final"][row["metric"]], -rate, rate))
    return max(scored)[2] if scored else None


# ------------------------------------------------------------------ report
def summary_rows(journal: Journal, tasks: Sequence[str], starts: Sequence[str], systems: Sequence[str],
                 grid: Sequence[float], seeds: int) -> List[dict]:
    """Per task x start x system: the chosen rate and the final dev score over seeds."""
    out = []
    for task, start, system in itertools.product(tasks, starts, systems):
        rate = best_rate(journal, task, start, system, grid)
        if rate is None:
            continue
        rows = [journal.rows[k] for k in (Run(task, start, system, rate, seed).key for seed in range(seeds))
                if k in journal.rows]
        values = [r["final"][r["metric"]] for r in rows]
        grid_scores = {}
        for g in system_grid(system, grid):
            row = journal.rows.get(Run(task, start, system, g, 0).key)
            if row is not None:
                grid_scores[g] = row["final"][row["metric"]]
        out.append(dict(task=task, start=start, system=system, learning_rate=rate, metric=rows[0]["metric"],
                        values=values, mean=statistics.mean(values), min=min(values), max=max(values),
                        std=statistics.stdev(values) if len(values) > 1 else 0.0, grid=grid_scores,
                        seconds=statistics.mean(r["seconds"] for r in rows),
                        digests=sorted({r.get("data_digest", "") for r in rows})))
    return out


def comparisons(summary: Sequence[dict]) -> List[str]:
    """Ours against each peer (mean over seeds, points) and pretrained against random, per task."""
    by = {(r["task"], r["start"], r["system"]): r for r in summary}
    lines = []
    for (task, start, system), row in sorted(by.items()):
        if system not in ("finetune", "api"):
            continue
        for peer in PEERS:
            other = by.get((task, start, peer))
            if other:
                gap = 100 * (row["mean"] - other["mean"])
                target = -0.5 if peer == "hf" else 0.0
                lines.append(f"| {task} | {start} | {SYSTEM_NAMES[system]} vs {SYSTEM_NAMES[peer]} | {gap:+.1f} | "
                             f"{'met' if gap >= target else '**missed**'} (target >= {target:+.1f}) |")
    for (task, start, system), row in sorted(by.items()):
        best = by.get((task, start, "finetune"))
        if system == "recipe" and best:
            gap = 100 * (row["mean"] - best["mean"])
            lines.append(f"| {task} | {start} | defaults + small_finetune.cfg vs albert-finetune at its best grid "
                         f"rate (lr {best['learning_rate']:g}) | {gap:+.1f} | "
                         f"{'met' if gap >= -1.0 else '**missed**'} (target >= -1.0) |")
    for (task, start, system), row in sorted(by.items()):
        if start != "pretrained" or (task, "random", system) not in by:
            continue
        gain = 100 * (row["mean"] - by[(task, "random", system)]["mean"])
        target = 5.0 if task == "topic" else 3.0
        lines.append(f"| {task} | pretrained - random | {SYSTEM_NAMES[system]} | {gain:+.1f} | "
                     f"{'met' if gain >= target else '**missed**'} (target >= +{target:.0f}) |")
    return lines


def render(summary: Sequence[dict], tasks: Dict[str, dict], header: Dict[str, object]) -> str:
    lines = ["# Fine-tuning side by side: albert-tf, Hugging Face, keras-hub", "",
             "Generated by `bench/finetune_parity.py` (the numbers below the analysis are regenerated on each "
             "run; raw runs in `finetune_parity.jsonl`).", "", "```", header["command"], "```", "",
             f"{header['date']}; CPU: {header['cpu']} ({header['cores']} cores), load average "
             f"{header['load_start']:.1f} at the start, {header['load_end']:.1f} at the end (machine shared: "
             "accuracy figures do not depend on load, seconds do); " + header["versions"] + ".", "",
             f"Model: {header['model']}. Every system: max length {header['max_seq_length']}, batch "
             f"{header['batch_size']}, {header['epochs']:g} epochs ({header['steps']}), float32 (except the recipe "
             f"row: albert-finetune's defaults with `{RECIPE}`, its own rate, batch, epochs and pooling). "
             "Score: the dev "
             "metric after the last epoch (accuracy, or Pearson for regression); mean over seeds at the rate "
             "chosen by the seed-0 grid run.", "", "| task | what | train / dev | baseline | data digest |",
             "|---|---|---|---|---|"]
    for name, t in tasks.items():
        base = (f"majority {t['baseline']['majority_accuracy']:.3f}" if not t["regression"]
                else f"constant prediction: Pearson 0 (dev std {t['baseline']['dev_label_std']:.3f})")
        lines.append(f"| {name} | {t['description']} | {t['train_examples']} / {t['dev_examples']} | {base} | "
                     f"`{t['data_digest']}` |")
    lines += ["", "| task | start | system | best lr | mean | min - max | std | seeds | seed-0 score per lr | "
              "s/run |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary:
        grid = ", ".join(f"{g:g}: {v:.3f}" for g, v in r["grid"].items())
        lines.append(f"| {r['task']} | {r['start']} | {SYSTEM_NAMES[r['system']]} | {r['learning_rate']:g} | "
                     f"**{r['mean']:.3f}** | {r['min']:.3f} - {r['max']:.3f} | {r['std']:.3f} | {len(r['values'])} | "
                     f"{grid} | {r['seconds']:.0f} |")
    comp = comparisons(summary)
    if comp:
        lines += ["", "Against the targets of issue 15 (points = 100 x difference of the means):", "",
                  "| task | comparison | systems | points | target |", "|---|---|---|---|---|", *comp]
    for key in ("checks",):
        if header.get(key):
            lines += ["", "Checks before the pretrained runs: " + header[key]]
    return "\n".join(lines) + "\n"


ANALYSIS_MARKER = "<!-- analysis: kept when the tables are regenerated -->"


def write_report(path: str, text: str) -> None:
    """Writes the generated part, keeping a hand-written analysis below ANALYSIS_MARKER."""
    kept = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            old = f.read()
        if ANALYSIS_MARKER in old:
            kept = old[old.index(ANALYSIS_MARKER):]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + ("\n" + kept if kept else ""))


def versions() -> str:
    from importlib import metadata

    out = []
    for name in ("tensorflow", "keras", "keras-hub", "torch", "transformers"):
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} missing")
    return ", ".join(out)


# -------------------------------------------------------------------- main
def benchmark(task_names: Sequence[str], systems: Sequence[str], starts: Sequence[str], seeds: int,
              grid: Sequence[float], s: Settings, cache: str, results: str, jobs: int, threads: int,
              timeout: float, pretrain_steps: int, in_process: bool = False, pretrained_dir: str = "",
              report_only: bool = False) -> Dict[str, object]:
    """Prepares data and starts, runs the grid then the seeds, writes the jsonl and the markdown.

    in_process: every run in this process, one after the other (the smoke test: no process start-ups).
    pretrained_dir: an existing checkpoint folder for the pretrained start (else pretrained here).
    report_only: no runs; the report from what the jsonl holds.
    """
    from bench.systems import common

    load_start = os.getloadavg()[0]
    unknown = [n for n in task_names if n not in TASKS] + [n for n in systems if n not in SYSTEM_NAMES] + [
        n for n in starts if n not in ("random", "pretrained")]
    if unknown:
        raise ValueError(f"Unknown task, system or start: {unknown!r}.")
    spm_model = prepare_vocabulary(cache, s.smoke)
    import sentencepiece

    vocab = sentencepiece.SentencePieceProcessor(model_file=spm_model).get_piece_size()
    s.config = model_config(vocab, s.max_seq_length, s.smoke)
    tasks = prepare_tasks(task_names, cache, spm_model, s)
    config_file = os.path.join(cache, "albert_config_smoke.json" if s.smoke else "albert_config.json")
    with open(config_file, "w", encoding="utf-8") as f:
        json.dump(s.config, f, indent=1, sort_keys=True)
    init = {"config": s.config, "config_file": config_file, "spm": spm_model}
    checks = {}
    if "pretrained" in starts and not report_only:
        init["ours"] = pretrained_dir or prepare_pretrained(cache, s.config, spm_model, pretrain_steps, s.smoke)
        checks_file = os.path.join(cache, "checks.json" if not s.smoke else "checks_smoke.json")
        weights = weights_digest(init["ours"])
        previous = {}
        if os.path.exists(checks_file):
            with open(checks_file, encoding="utf-8") as f:
                previous = json.load(f)
        if previous.get("weights_digest") == weights and previous.get("hf_matches") and previous.get(
                "kerashub_matches"):  # the same two folders were checked before
            init["hf"], checks = init["ours"].rstrip("/") + "_hf", previous
        else:
            init["hf"], checks = convert_for_peers(init["ours"], tasks[task_names[0]]["npz"], threads, in_process)
            checks.update(pretrained_dir=os.path.relpath(init["ours"], REPO_DIR),
                          weights_digest=weights_digest(init["ours"]))
            with open(checks_file, "w", encoding="utf-8") as f:
                json.dump(checks, f, indent=1, sort_keys=True)
    elif report_only and os.path.exists(os.path.join(cache, "checks.json")):
        with open(os.path.join(cache, "checks.json"), encoding="utf-8") as f:
            checks = json.load(f)
    journal = Journal(results + ".jsonl", s.digest(spm_model_digest(spm_model), pretrain_steps,
                                                   {n: t["data_digest"] for n, t in tasks.items()}))
    scratch = os.path.join(cache, "runs")

    def work(run: Run) -> dict:
        return execute(run, tasks[run.task], s, init, scratch, threads, timeout, in_process)

    combos = list(itertools.product(task_names, starts, systems))
    if report_only:
        jobs, combos = 0, []
    run_all([Run(t, st, sy, g, 0) for t, st, sy in combos for g in system_grid(sy, grid)], journal, work,
            1 if in_process else jobs)
    run_all([Run(t, st, sy, best_rate(journal, t, st, sy, grid), seed) for t, st, sy in combos
             if best_rate(journal, t, st, sy, grid) is not None for seed in range(1, seeds)], journal, work,
            1 if in_process else jobs)
    binary_digests = {} if report_only else check_binary_data(journal, tasks, in_process)
    summary = summary_rows(journal, task_names, starts, systems, grid, seeds)
    steps = {n: parity_schedule(t, s) for n, t in tasks.items()}
    header = dict(command="nice -n 5 python -m bench.finetune_parity " + " ".join(sys.argv[1:]),
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  cpu=common.cpu_description()["model"], cores=os.cpu_count(), load_start=load_start,
                  load_end=os.getloadavg()[0], versions=versions(), max_seq_length=s.max_seq_length,
                  batch_size=s.batch_size, epochs=s.epochs,
                  steps=", ".join(f"{n}: {v['total_steps']} steps, {v['warmup_steps']} warmup"
                                  for n, v in steps.items()),
                  model=", ".join(f"{k}={v}" for k, v in s.config.items()),
                  checks=json.dumps(checks, sort_keys=True) if checks else "")
    write_report(results + ".md", render(summary, tasks, header))
    return {"summary": summary, "tasks": tasks, "rows": list(journal.rows.values()), "checks": checks,
            "binary_digests": binary_digests, "spm_model": spm_model}


def parity_schedule(task: dict, s: Settings) -> Dict[str, int]:
    from bench.systems.parity import schedule

    return schedule(task["train_examples"], s.batch_size, s.epochs)


def check_binary_data(journal: Journal, tasks: Dict[str, dict], in_process: bool) -> Dict[str, str]:
    """Per task, the digest of the ids albert-finetune's saved preprocessor makes of the task files
    (read with its own reader); raises when they are not the ids every other system got."""
    out = {}
    for name, task in tasks.items():
        rows = [r for r in journal.rows.values() if r["task"] == name and r["system"] == "finetune"]
        folders = [os.path.join(REPO_DIR, r.get("output_dir", "")) for r in rows]  # relative to the repo
        kept = [f for f in folders if os.path.exists(os.path.join(f, "task_config.json"))]
        if kept:
            digest = call("finetune_digest", dict(output_dir=kept[-1], task_dir=task["folder"],
                                                  regression=task["regression"]), 0, 600, in_process)["data_digest"]
            if digest != task["data_digest"]:
                raise RuntimeError(f"albert-finetune trained on other ids than the other systems for {name}: "
                                   f"{digest} != {task['data_digest']}.")
            out[name] = digest
    return out


def main(argv) -> None:
    del argv
    smoke = FLAGS.smoke
    s = Settings(config={}, max_seq_length=32 if smoke else FLAGS.max_seq_length,
                 batch_size=16 if smoke else FLAGS.batch_size, epochs=1.0 if smoke else FLAGS.epochs,
                 train_examples=32 if smoke else FLAGS.train_examples,
                 dev_examples=16 if smoke else FLAGS.dev_examples, smoke=smoke)
    benchmark(FLAGS.tasks, FLAGS.systems, FLAGS.starts, FLAGS.seeds, [float(g) for g in FLAGS.grid], s,
              FLAGS.cache_dir, FLAGS.results, FLAGS.jobs, FLAGS.threads, FLAGS.timeout, FLAGS.pretrain_steps,
              FLAGS.in_process, FLAGS.pretrained_dir or "", FLAGS.report_only)


if __name__ == "__main__":
    define_flags()
    app.run(main)
