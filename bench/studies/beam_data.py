"""Benchmark of the Beam pipeline of albert-create-pretraining-data (issue 17).

Study (2026-12-01). Question: What does the Beam pipeline cost on one machine? Answer: on the DirectRunner it
is slower than the single-machine tool (57 against 96 instances/s) and writes byte-identical shards
(bench/results/beam_data.md). Command: `python -m bench.studies.beam_data --megabytes 1 --repeats 1`.

On the same corpus (docstrings of the installed Python, as
bench/studies/pretraining_data.py builds it, split into --files files so that
Beam has work to split) and the same settings, each in a fresh process:

* the single-machine tool (`albert-create-pretraining-data`);
* the Beam pipeline on the DirectRunner in-process (`--runner=DirectRunner`);
* the Beam pipeline on the DirectRunner with two worker processes
  (`-- --direct_num_workers=2 --direct_running_mode=multi_processing`);

instances/s over the whole process (start to last shard, wall clock) and the
CPU seconds of the process tree, and whether the shards are byte-identical to
the tool's. The DirectRunner is Beam's test runner: it shows the pipeline's
overhead on one machine, not what Dataflow, Flink or Spark would reach.
Writes bench/results/beam_data.md.

Run from the repository root:
    python -m bench.studies.beam_data --megabytes 1 --repeats 1
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.studies.pretraining_data import build_corpus, load_average, timed_run  # noqa: E402


def split_corpus(corpus: str, out_dir: str, files: int) -> list:
    """The corpus's documents in `files` files of consecutive documents (the
    corpus order is kept: file i holds the i-th slice)."""
    with open(corpus, encoding="utf-8") as f:
        docs = [d for d in f.read().split("\n\n") if d.strip()]
    os.makedirs(out_dir, exist_ok=True)
    per_file = -(-len(docs) // files)
    paths = []
    for i in range(files):
        path = os.path.join(out_dir, f"part-{i:03d}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(d + "\n\n" for d in docs[i * per_file:(i + 1) * per_file]))
        paths.append(path)
    return paths


def command(pattern: str, spm: str, args, beam_args=()) -> list:
    cmd = [sys.executable, "-m", "pipelines.bin.create_pretraining_data", f"--input_file={pattern}",
           f"--spm_model_file={spm}", "--max_seq_length=128", "--max_predictions_per_seq=20",
           f"--dupe_factor={args.dupe_factor}", f"--num_shards={args.num_shards}", "--random_seed=12345"]
    return cmd + list(beam_args)


def same_shards(a: str, b: str) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--vocab_size", type=int, default=4000)
    parser.add_argument("--num_shards", type=int, default=4)
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--results", default=os.path.join("bench", "results", "beam_data.md"))
    args = parser.parse_args(argv)

    from pipelines import tokenizer as tokenizer_lib

    work = args.workdir or tempfile.mkdtemp(prefix="bench_beam_")
    whole = os.path.join(work, "corpus.txt")
    size = build_corpus(whole, int(args.megabytes * 1e6))
    split_corpus(whole, os.path.join(work, "corpus"), args.files)
    pattern = os.path.join(work, "corpus", "*.txt")
    spm = tokenizer_lib.train_sentencepiece([whole], os.path.join(work, "sp"), vocab_size=args.vocab_size,
                                            input_sentence_size=1_000_000)
    systems = {
        "single-machine tool": command(pattern, spm, args),
        "Beam DirectRunner, in-process": command(pattern, spm, args, ["--runner=DirectRunner"]),
        "Beam DirectRunner, 2 worker processes": command(
            pattern, spm, args, ["--runner=DirectRunner", "--", "--direct_num_workers=2",
                                 "--direct_running_mode=multi_processing"]),
    }
    load_before = load_average()
    runs = {name: [] for name in systems}
    outs = {name: os.path.join(work, f"out-{i}") for i, name in enumerate(systems)}
    for _ in range(args.repeats):  # interleaved: each system once per round
        for name, cmd in systems.items():
            # timed_run appends --output_dir; after a lone "--" it would be a Beam
            # option (which Beam discards), so it is given before it too.
            if "--" in cmd:
                cut = cmd.index("--")
                cmd = cmd[:cut] + [f"--output_dir={outs[name]}"] + cmd[cut:]
            wall, instances, rate, _, cpu = timed_run(cmd, outs[name])
            runs[name].append((wall, instances, rate, cpu))
            sys.stderr.write(f"{name}: {instances} instances in {wall:.1f} s ({rate:.0f}/s, {cpu:.0f} CPU-s)\n")
    load_after = load_average()
    tool = "single-machine tool"
    rows = []
    for name, results in runs.items():
        rate = statistics.median(r[2] for r in results)
        cpu = statistics.median(r[3] for r in results)
        instances = results[0][1]
        same = "(reference)" if name == tool else ("yes" if same_shards(outs[tool], outs[name]) else "NO")
        rows.append(f"| {name} | {instances} | {rate:.0f} | {cpu:.0f} | {instances / max(cpu, 1e-9):.0f} | "
                    f"{statistics.median(r[0] for r in results):.1f} | {same} |")
    text = "\n".join([
        "# Pretraining data on Apache Beam (DirectRunner) against the single-machine tool",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPU cores "
        f"UNDER LOAD (a machine shared with other jobs; load average before {load_before}, after "
        f"{load_after}): the rates are indicative only.",
        "",
        f"Corpus: {size / 1e6:.2f} MB of docstrings in {args.files} files; vocabulary {args.vocab_size}; "
        f"max_seq_length 128, dupe_factor {args.dupe_factor}, {args.num_shards} shards; "
        f"{args.repeats} run(s) each, medians; each run a fresh process (start-up included).",
        "",
        "| system | instances | instances/s (wall) | CPU-s | instances per CPU-s | wall s | same bytes |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Command: `python -m bench.studies.beam_data " + " ".join(argv if argv is not None else sys.argv[1:]) + "`.",
        "The DirectRunner runs the pipeline on this machine only (Beam's test runner); Dataflow, Flink and",
        "Spark could not be tried here. Beam reads every input file three times (facts, document counts,",
        "documents) and moves every instance through two shuffles, so on one machine it is slower than the",
        "single-machine tool; its use is running on many machines.",
        "",
    ])
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
