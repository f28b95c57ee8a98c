r"""Why does one system fine-tune better than another from random weights? Controlled variants.

bench/finetune_parity.py compares systems each from its own random
initialisation. This script removes that difference and then varies one
thing at a time, on one task of the parity benchmark (its ids file):

* a **shared random start** per seed: an untrained `AlbertPretrainer`
  (our initialiser, `keras.utils.set_random_seed(seed)`) saved with
  `albert_tf.save_pretrained` and written for Hugging Face with
  `albert-convert --to=huggingface`; ours and transformers load the same
  weights (only the classifier head is drawn by each system);
* **variants** (`--variants`), each a call of `bench.systems.parity`:

  api / hf                     the shared start, each system's defaults
  api_own / hf_own             each system's own random initialisation
  api_peak                     ours with Hugging Face's schedule (decay after warmup)
  api_own_peak                 the same from our own random initialisation
  api_normal_head              ours with a normal(0, 0.02) head, as torch draws it
  hf_truncated_head            transformers with a truncated-normal head, as Keras draws it
  hf_fixed_padding             transformers on rows padded to max_seq_length

`bench.hf_training_equivalence` shows that with the same head, batches and
dropout masks the two systems take the same steps, so what these variants
can move is what each system draws at random. Rows go to a jsonl (a row
already there is not run again) and a table of means to stdout.

    nice -n 5 python -m bench.parity_diagnosis --task=topic --seeds=4 --variants=api,hf,api_own,hf_own

Needs the parity benchmark's cache (run bench.finetune_parity first) and the [bench] extra.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import sys
from typing import Dict, List

from absl import app, flags, logging

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_DIR)

FLAGS = flags.FLAGS

# variant -> (parity function, uses the shared start, extra keyword arguments)
VARIANTS = {
    "api": ("api", True, {}),
    "hf": ("hf", True, {}),
    "api_own": ("api", False, {}),
    "hf_own": ("hf", False, {}),
    "api_peak": ("api", True, {"decay_after_warmup": True}),
    "api_own_peak": ("api", False, {"decay_after_warmup": True}),
    "api_normal_head": ("api", True, {"head_init": "normal"}),
    "hf_truncated_head": ("hf", True, {"head_init": "truncated"}),
    "hf_fixed_padding": ("hf", True, {"dynamic_padding": False}),
}


def define_flags() -> None:
    flags.DEFINE_string("task", "topic", "A task of bench.finetune_parity (its cached ids are used).")
    flags.DEFINE_integer("seeds", 4, "Seeds 0..N-1 (each its own shared start, head, dropout and batches).")
    flags.DEFINE_list("variants", ["api", "hf"], f"Any of {', '.join(VARIANTS)}.")
    flags.DEFINE_float("learning_rate", 5e-4, "Peak learning rate.")
    flags.DEFINE_string("cache_dir", os.path.join(REPO_DIR, "bench_cache", "finetune_parity"),
                        "bench.finetune_parity's cache (config, vocabulary, tasks).")
    flags.DEFINE_string("output", os.path.join(REPO_DIR, "bench", "results", "parity_diagnosis.jsonl"),
                        "jsonl of the runs.")
    flags.DEFINE_integer("jobs", 2, "Runs at the same time.")
    flags.DEFINE_integer("threads", 1, "CPU threads per run.")


def shared_start(cache: str, seed: int) -> Dict[str, str]:
    """The untrained checkpoint of `seed` in our format and in Hugging Face's (made once)."""
    from bench.finetune_parity import _binary, _check_call

    ours = os.path.join(cache, "random_starts", f"seed_{seed}")
    hf_dir = ours + "_hf"
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        import keras

        import albert_tf

        with open(os.path.join(cache, "albert_config.json"), encoding="utf-8") as f:
            config = albert_tf.AlbertConfig(**json.load(f))
        keras.utils.set_random_seed(seed)
        albert_tf.save_pretrained(albert_tf.AlbertPretrainer(config), ours, os.path.join(cache, "vocab", "spm.model"))
        _check_call(_binary("albert-convert") + ["--to=huggingface", f"--input={ours}", f"--output_dir={hf_dir}"],
                    hf_dir + ".log")
    return {"api": ours, "hf": hf_dir}


def task_file(cache: str, task: str) -> str:
    """The ids file bench.finetune_parity made for `task` (the newest if several)."""
    folders = [os.path.join(cache, "tasks", d) for d in os.listdir(os.path.join(cache, "tasks"))
               if d.startswith(task + "_") and os.path.exists(os.path.join(cache, "tasks", d, "ids.npz"))]
    if not folders:
        raise FileNotFoundError(f"No ids for task {task!r} under {cache}/tasks: run bench.finetune_parity first.")
    return os.path.join(max(folders, key=os.path.getmtime), "ids.npz")


def run_variant(variant: str, seed: int, ids: str, config: dict, start: Dict[str, str], learning_rate: float,
                regression: bool, threads: int) -> dict:
    from bench.finetune_parity import worker_call

    function, shared, extra = VARIANTS[variant]
    kwargs = dict(task_file=ids, config=config, learning_rate=learning_rate, seed=seed, regression=regression,
                  threads=threads, **extra)
    if shared:
        kwargs["init_checkpoint" if function == "api" else "hf_dir"] = start[function]
    result = worker_call("parity", function, kwargs, threads)
    return {"variant": variant, "seed": seed, "learning_rate": learning_rate, "final": result["final"],
            "epochs": result["epochs"], "seconds": result["seconds"], "data_digest": result["data_digest"]}


def summary(rows: List[dict], variants: List[str]) -> str:
    """Markdown: per variant the final dev score of each seed and the mean."""
    lines = ["| variant | seeds | final per seed | mean |", "|---|---|---|---|"]
    for variant in variants:
        mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["seed"])
        if not mine:
            continue
        scores = [next(iter(r["final"].values())) for r in mine]
        lines.append(f"| {variant} | {len(mine)} | {' / '.join(f'{s:.3f}' for s in scores)} | "
                     f"{statistics.mean(scores):.3f} |")
    return "\n".join(lines)


def main(argv) -> None:
    del argv
    unknown = [v for v in FLAGS.variants if v not in VARIANTS]
    if unknown:
        raise app.UsageError(f"Unknown --variants {unknown}; choose from {', '.join(VARIANTS)}.")
    from bench.finetune_parity import TASKS

    cache = FLAGS.cache_dir
    with open(os.path.join(cache, "albert_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    ids, regression = task_file(cache, FLAGS.task), TASKS[FLAGS.task].regression
    rows = []
    if os.path.exists(FLAGS.output):
        with open(FLAGS.output, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    done = {(r["variant"], r["seed"], r["learning_rate"]) for r in rows if r.get("task") == FLAGS.task}
    todo = [(v, s) for s in range(FLAGS.seeds) for v in FLAGS.variants if (v, s, FLAGS.learning_rate) not in done]
    starts = {s: shared_start(cache, s) for s in range(FLAGS.seeds)}

    def work(item):
        variant, seed = item
        return run_variant(variant, seed, ids, config, starts[seed], FLAGS.learning_rate, regression, FLAGS.threads)

    with concurrent.futures.ThreadPoolExecutor(FLAGS.jobs) as pool:
        for item, future in [(item, pool.submit(work, item)) for item in todo]:
            row = dict(future.result(), task=FLAGS.task)
            rows.append(row)
            with open(FLAGS.output, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            logging.info("%s seed %d: %s", *item, row["final"])
    mine = [r for r in rows if r.get("task") == FLAGS.task and r["learning_rate"] == FLAGS.learning_rate]
    print(summary(mine, FLAGS.variants))


if __name__ == "__main__":
    define_flags()
    app.run(main)
