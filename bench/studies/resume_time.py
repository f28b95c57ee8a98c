"""Time to the first step of a resumed pretraining run, at step 10, 1,000 and 10,000 (issue 36, F3).

Study (2026-12-05). Question: does a resume cost the same at any step, now that checkpoints save the input
position (`albert_tf.training.train_input`) instead of the run reading every consumed record again? Answer:
yes: 19.6, 24.3 and 21.5 s to the first step (medians of 3) at steps 10, 1,000 and 10,000, within the noise
of a loaded 2-core machine, where reading the input again to step 10,000 took 94 s by itself (figures and
ranges in docs/reliability.md). Command: `python -m bench.studies.resume_time --repeats 3 --skip_steps 1000`.

The demo's model (`albert_tf.demo.pretraining.demo_config`, vocabulary 6,000) and input (the demo's
dataset_fn: dynamic masking, files and records shuffled, batch --batch of 64 tokens) read shards of random
records that the study writes itself (--records in 4 files; seeded). For each step N, a setup in this
process makes a folder as a run preempted at step N leaves it: the state at its start with the step set to
N, and the input read for N steps (the one O(N) part, done once), saved as ckpt-N with
albert_config.json and training_settings.json. Then, interleaved (every N once, then again, --repeats
times), each figure in a fresh process on a fresh copy of its folder: `run_pretraining` with
num_train_steps N + 1, timed from its call to the log of step N + 1 (model built, checkpoint and input
restored, the step traced and run). With --skip_steps the same is measured for a checkpoint without
input state (the way before, kept as the fallback): the input is read again for N steps. Each row gives
the median over the repetitions and their range; the checkpoint's size with and without the input state
is printed too (the shuffle buffer is saved with it).

Run from the repository root:
    python -m bench.studies.resume_time --repeats 3 --skip_steps 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ = 64
VOCAB = 6000
FILES = 4
SEED = 12345


def parse_args(argv=None) -> argparse.Namespace:
    """The study's flags (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default="10,1000,10000", help="resume steps, comma-separated")
    parser.add_argument("--skip_steps", default="10,1000",
                        help="steps at which to time the fallback (no input state in the checkpoint)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="global batch (the demo's: 64)")
    parser.add_argument("--records", type=int, default=4000, help="records in the study's shards")
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def step_list(text: str) -> List[int]:
    """'10,1000' -> [10, 1000] (sorted, no duplicates; empty text: none).

    >>> step_list("1000,10, 10")
    [10, 1000]
    """
    return sorted({int(part) for part in text.split(",") if part.strip()})


def write_shards(folder: str, records: int, seed: int = SEED) -> str:
    """Random pretraining records of the demo's shape in FILES files; returns their glob."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.demo.settings import MAX_PREDICTIONS_PER_SEQ
    from pipelines.tfrecords import serialize_examples

    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    per_file, preds = records // FILES, MAX_PREDICTIONS_PER_SEQ
    for index in range(FILES):
        ids = rng.integers(5, VOCAB, size=(per_file, SEQ))
        positions = np.sort(rng.choice(np.arange(1, SEQ), size=(per_file, preds)), axis=1)
        features = {
            "input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": (np.arange(SEQ) >= SEQ // 2)
            .astype(np.int64)[None].repeat(per_file, 0), "token_boundary": np.ones_like(ids),
            "masked_lm_positions": positions, "masked_lm_ids": np.take_along_axis(ids, positions, 1),
            "masked_lm_weights": np.ones((per_file, preds), np.float32),
            "next_sentence_labels": rng.integers(0, 2, size=(per_file, 1))}
        with tf.io.TFRecordWriter(os.path.join(folder, f"train-{index}.tfrecord")) as writer:
            for record in serialize_examples(features).numpy():
                writer.write(record)
    return os.path.join(folder, "train-*.tfrecord")


def _run_parts(pattern: str, batch: int, steps: int):
    """(config, dataset_fn, run_pretraining's keyword arguments) of a run to `steps`."""
    from albert_tf import training
    from albert_tf.demo.pretraining import _dataset_fns, demo_config
    from albert_tf.demo.settings import MAX_PREDICTIONS_PER_SEQ, DemoSettings

    settings = DemoSettings(train_batch_size=batch, max_seq_length=SEQ, random_seed=SEED)
    config = demo_config(VOCAB, SEQ)
    dataset_fn = _dataset_fns(settings, config, pattern, pattern)[0]
    kwargs = dict(
        optimization=training.OptimizationConfig(train_batch_size=batch, num_train_steps=steps,
                                                 num_warmup_steps=1, learning_rate=settings.learning_rate),
        runtime=training.RuntimeConfig(log_steps=1, save_checkpoints_steps=10 ** 9, seed=SEED,
                                       mixed_precision="float32"),
        data=training.PretrainingDataConfig(max_seq_length=SEQ, max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
                                            masking="dynamic", masked_lm_prob=settings.masked_lm_prob))
    return config, dataset_fn, kwargs


def make_preempted_runs(workdir: str, pattern: str, batch: int, steps: Sequence[int]) -> Dict[int, dict]:
    """One folder per step N, as a run preempted after step N leaves it; returns the checkpoint sizes.

    The input is read once, from step 0 to the largest N, saving on the way.
    """
    import tensorflow as tf

    from albert_tf.training import state as state_lib
    from albert_tf.training import train_input
    from albert_tf.training.common import CHECKPOINT_NAME

    strategy = tf.distribute.get_strategy()
    sizes, done = {}, 0
    config, dataset_fn, kwargs = _run_parts(pattern, batch, max(steps) + 1)
    inputs = train_input.TrainInput(strategy, dataset_fn, 0, None, batch)
    state = state_lib.TrainState.create(config, kwargs["optimization"], "float32", strategy,
                                        os.path.join(workdir, "scratch"), 1)
    state.attach_input(inputs.saveable)
    for n in steps:
        train_input._advance(inputs.iterator, tf.constant(n - done, tf.int64))  # pylint: disable=protected-access
        done = n
        folder = os.path.join(workdir, f"resume-{n}")
        tf.io.gfile.makedirs(folder)
        optimization = _run_parts(pattern, batch, n + 1)[2]["optimization"]
        state_lib.check_or_write_config(config, folder, True)
        data = kwargs["data"]
        state_lib.check_run_settings(folder, state_lib.run_settings(
            optimization, 1, SEQ, data.max_predictions_per_seq, SEED, data.masking, data.masked_lm_prob), None,
            True)
        state.global_step.assign(n)
        path = tf.train.CheckpointManager(state.checkpoint, folder, 1, checkpoint_name=CHECKPOINT_NAME).save(
            checkpoint_number=n)
        bare = state.restorable.write(os.path.join(workdir, "scratch", f"bare-{n}"))
        sizes[n] = dict(with_input=_checkpoint_bytes(path), without_input=_checkpoint_bytes(bare))
    return sizes


def _checkpoint_bytes(prefix: str) -> int:
    folder, name = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.startswith(name + ".data") or f == name + ".index")


def child(spec: dict) -> dict:
    """In a fresh process: resume the folder for one step; seconds from the call to the step's log."""
    from albert_tf import training
    from albert_tf.training import train_input

    if spec["skip"]:  # a checkpoint of an earlier version: no input state
        train_input.has_input_state = lambda prefix: False
    config, dataset_fn, kwargs = _run_parts(spec["pattern"], spec["batch"], spec["step"] + 1)
    first = {}
    start = time.perf_counter()
    training.run_pretraining(config, dataset_fn, spec["folder"], log_callback=lambda m: first.setdefault(
        "seconds", time.perf_counter() - start), handle_preemption=False, **kwargs)
    return {"seconds": first["seconds"]}


def measure(spec: dict, workdir: str) -> float:
    """One figure: the resume of a fresh copy of the step's folder in a fresh process."""
    source = os.path.join(workdir, f"resume-{spec['step']}")
    folder = tempfile.mkdtemp(dir=workdir)
    shutil.rmtree(folder)
    shutil.copytree(source, folder)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "bench.studies.resume_time", "--child",
                           json.dumps(dict(spec, folder=folder))], cwd=REPO, env=env, capture_output=True,
                          text=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the resume at step {spec['step']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def table(figures: Dict[tuple, List[float]], sizes: Dict[int, dict]) -> str:
    """Markdown rows: step, how the input is positioned, median and range of the seconds, checkpoint size.

    >>> print(table({(10, False): [2.0, 3.0, 2.5]}, {10: dict(with_input=2e6, without_input=1e6)}))
    | resume at step | input position | time to first step, median (range), s | repetitions | checkpoint MB (without input) |
    |---|---|---|---|---|
    | 10 | restored from the checkpoint | 2.50 (2.00-3.00) | 3 | 2.0 (1.0) |
    """
    rows = ["| resume at step | input position | time to first step, median (range), s | repetitions "
            "| checkpoint MB (without input) |", "|---|---|---|---|---|"]
    for (step, skip), values in sorted(figures.items(), key=lambda item: (item[0][1], item[0][0])):
        how = "read again (no input state)" if skip else "restored from the checkpoint"
        size = sizes.get(step)
        mb = f"{size['with_input'] / 1e6:.1f} ({size['without_input'] / 1e6:.1f})" if size else ""
        rows.append(f"| {step:,} | {how} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}) "
                    f"| {len(values)} | {mb} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    steps, skip_steps = step_list(args.steps), step_list(args.skip_steps)
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_resume_")
    pattern = write_shards(os.path.join(workdir, "shards"), args.records)
    start = time.perf_counter()
    sizes = make_preempted_runs(workdir, pattern, args.batch, sorted(set(steps) | set(skip_steps)))
    print(f"setup (input read to step {max(steps + skip_steps)}): {time.perf_counter() - start:.0f} s",
          flush=True)
    specs = [(n, False) for n in steps] + [(n, True) for n in skip_steps]
    figures: Dict[tuple, List[float]] = {spec: [] for spec in specs}
    for _ in range(args.repeats):
        for step, skip in specs:
            figures[(step, skip)].append(measure(dict(step=step, skip=skip, pattern=pattern, batch=args.batch),
                                                 workdir))
            print(f"step {step} {'skip' if skip else 'restore'}: {figures[(step, skip)][-1]:.2f} s", flush=True)
    print("Command: python -m bench.studies.resume_time " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(table(figures, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
