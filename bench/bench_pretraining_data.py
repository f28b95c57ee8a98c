"""Benchmark of albert-create-pretraining-data (issue 3).

Builds a few MB of real English text from the docstrings of the Python
standard library (present on every Python install; then of the installed
packages when more text is asked for), in the original's format (one
sentence per line, blank line between documents; one docstring = one
document), trains a SentencePiece vocabulary on it once, then measures:

* the whole creation process, start to last shard, in a fresh subprocess
  (`python -m pipelines.bin.create_pretraining_data ...`, max_seq_length 128,
  dupe_factor 10): instances/s and peak memory (ru_maxrss of the child);
* the SentencePiece op's own tokens/s on the same text (tensorflow_text,
  batched), which bounds the pipeline;

medians over --repeats runs, written to bench/results/pretraining_data.md.

Run from the repository root:
    python bench/bench_pretraining_data.py --repeats 3
"""

import argparse
import ast
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def _docstrings(path):
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def _python_files():
    """The standard library's .py files, then the installed packages' (sorted)."""
    paths = sysconfig.get_paths()
    for base in (paths["stdlib"], paths["purelib"]):
        for root, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests"))
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(root, name)


def build_corpus(path: str, max_bytes: int) -> int:
    """Writes docstrings as documents (stdlib first); returns the bytes written."""
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for source in _python_files():
            for doc in _docstrings(source):
                # Prose only (skip doctest lines, tables and rules).
                text = " ".join(
                    line.strip() for line in doc.splitlines()
                    if line.strip() and not line.lstrip().startswith((">>>", "...", "|", "-")))
                sentences = [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 1]
                if len(sentences) < 2:
                    continue
                block = "\n".join(sentences) + "\n\n"
                out.write(block)
                written += len(block.encode("utf-8"))
                if written >= max_bytes:
                    return written
    return written


# The original tool's rate on this machine (a given figure, issue 10).
ORIGINAL_RATE = (450, 650)
# The section of the results file a rerun keeps (written by hand).
KEPT_SECTION = "## Changes, predicted and measured"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--num_shards", type=int, default=4)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--results",
                        default=os.path.join("bench", "results", "pretraining_data.md"))
    return parser.parse_args(argv)


def prepare_corpus(work: str, megabytes: float, vocab_size: int):
    """Writes the corpus and trains its vocabulary; returns (corpus path,
    model prefix, corpus stats)."""
    corpus = os.path.join(work, "corpus.txt")
    size = build_corpus(corpus, int(megabytes * 1e6))
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().splitlines()
    num_docs = sum(1 for line in lines if not line) or 1
    sys.stderr.write(f"corpus: {size / 1e6:.2f} MB, {len(lines)} lines, {num_docs} documents\n")
    sys.path.insert(0, os.getcwd())
    from pipelines import tokenizer as tokenizer_lib  # noqa: E402

    prefix = os.path.join(work, "sp")
    tokenizer_lib.train_sentencepiece([corpus], prefix, vocab_size=vocab_size,
                                      input_sentence_size=1_000_000)
    return corpus, prefix, {"bytes": size, "lines": lines, "documents": num_docs}


def sentencepiece_rate(prefix: str, lines, repeats: int):
    """The SentencePiece op's tokens/s on the same (normalised) text:
    (median rate, tokens, vocabulary size)."""
    import tensorflow as tf  # noqa: E402

    from pipelines import tokenizer as tokenizer_lib  # noqa: E402

    vocab = tokenizer_lib.SentencePieceVocab.from_file(prefix + ".model")
    tok = vocab.make_tokenizer()
    text = [tokenizer_lib.preprocess_text_py(line, True) for line in lines if line]
    batches = [tf.constant(text[i:i + 4096]) for i in range(0, len(text), 4096)]
    tokenize = tf.function(tok.tokenize)
    for b in batches[:2]:
        tokenize(b)
    rates, num_tokens = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        num_tokens = sum(int(tf.size(tokenize(b).flat_values)) for b in batches)
        rates.append(num_tokens / (time.perf_counter() - t0))
    return statistics.median(rates), num_tokens, vocab.vocab_size


def creation_command(corpus: str, prefix: str, num_shards: int):
    return [sys.executable, "-m", "pipelines.bin.create_pretraining_data",
            f"--input_file={corpus}", f"--spm_model_file={prefix}.model",
            "--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=10",
            f"--num_shards={num_shards}", "--random_seed=12345"]


def timed_run(command, out_dir: str):
    """One creation process: (wall s, instances, instances/s, peak RSS MB so
    far over children, CPU s)."""
    shutil.rmtree(out_dir, ignore_errors=True)  # else complete shards are skipped
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    child = subprocess.run(command + [f"--output_dir={out_dir}"], capture_output=True,
                           text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        sys.stderr.write(child.stderr[-4000:])
        raise SystemExit(f"creation failed with code {child.returncode}")
    instances = int(re.search(r"instances: (\d+)", child.stderr).group(1))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, instances, instances / wall, after.ru_maxrss / 1024, cpu


def import_rss_mb() -> float:
    """Peak RSS of a process that only imports TensorFlow and tensorflow_text."""
    probe = subprocess.run(
        [sys.executable, "-c", "import resource, tensorflow_text; "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return int(probe.stdout.split()[-1]) / 1024


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def kept_section(path: str) -> str:
    """The hand-written KEPT_SECTION of an existing results file ("" if none)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    at = text.find(KEPT_SECTION)
    return "\n" + text[at:].rstrip() + "\n" if at >= 0 else ""


def render(args, stats, vocab_size, sp_rate, num_tokens, command, runs, import_rss,
           loads, work) -> str:
    med_rate = statistics.median(r[2] for r in runs)
    med_wall = statistics.median(r[0] for r in runs)
    instances = runs[0][1]
    peak = max(r[3] for r in runs)
    med_cpu = statistics.median(r[4] for r in runs)
    low, high = ORIGINAL_RATE
    shown = " ".join(command[1:]).replace(work, "$WORK") + " --output_dir=$WORK/outN"
    return f"""# Pretraining data creation benchmark (issues 3 and 10)

Machine: {os.cpu_count()} CPU cores (shared with other jobs while measured; load average
1/5/15 min before the runs: {loads[0]}, after: {loads[1]}).
Corpus: {stats["bytes"] / 1e6:.2f} MB of English docstrings (the Python {sys.version.split()[0]} standard
library first, then the installed packages), {len(stats["lines"])} lines, {stats["documents"]} documents
(one docstring = one document), built by `bench/bench_pretraining_data.py`; SentencePiece
unigram vocabulary of {vocab_size} pieces trained on it with the original settings.
Memory is bounded by design: the corpus streams through tf.data and each shard is shuffled
with a bounded buffer (--shuffle_buffer_size records), so the peak does not grow with the
corpus.

Benchmark command (from the repository root):

    python bench/bench_pretraining_data.py --megabytes {args.megabytes} --repeats {args.repeats} --num_shards {args.num_shards}

Creation command it times (whole process, start to last shard, fresh process each time):

    python {shown}

| measure | median of {args.repeats} |
|---|---|
| instances written | {instances} |
| wall time, whole process | {med_wall:.1f} s |
| **instances/s, whole process** | **{med_rate:.0f}** |
| CPU time of the process (user + system) | {med_cpu:.1f} s ({instances / med_cpu:.0f} instances per CPU-second) |
| ratio to the original tool ({low}-{high} instances/s here), wall | {med_rate / high:.1f}x - {med_rate / low:.1f}x |
| ratio to the original tool, per CPU-second | {instances / med_cpu / high:.1f}x - {instances / med_cpu / low:.1f}x |
| SentencePiece op alone (tensorflow_text, batches of 4096 lines) | {sp_rate / 1e6:.2f} M tokens/s ({num_tokens} tokens) |
| peak memory of the creation process (ru_maxrss, max over runs) | {peak:.0f} MB |
| of which: importing tensorflow + tensorflow_text alone | {import_rss:.0f} MB |

Per run: {", ".join(f"{r[2]:.0f}/s ({r[0]:.1f} s wall, {r[4]:.1f} CPU-s)" for r in runs)}.
The whole process includes about 2.3 CPU-s of Python/TensorFlow import and about 1.3 CPU-s
of graph tracing; the rest scales with the corpus. Wall times vary with the load other jobs
put on the shared cores; the CPU time is the steadier measure.
"""


def main(argv=None):
    args = parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="bench_pretraining_")
    os.makedirs(work, exist_ok=True)
    corpus, prefix, stats = prepare_corpus(work, args.megabytes, args.vocab_size)
    sp_rate, num_tokens, vocab_size = sentencepiece_rate(prefix, stats["lines"], args.repeats)
    command = creation_command(corpus, prefix, args.num_shards)
    loads = [load_average()]
    runs = []
    for r in range(args.repeats):
        runs.append(timed_run(command, os.path.join(work, f"out{r}")))
        wall, instances, rate, rss_mb, cpu = runs[-1]
        sys.stderr.write(f"run {r}: {instances} instances in {wall:.1f} s = {rate:.0f}/s "
                         f"({rate / ORIGINAL_RATE[1]:.1f}x - {rate / ORIGINAL_RATE[0]:.1f}x the "
                         f"original), {cpu:.1f} CPU-s, peak RSS so far {rss_mb:.0f} MB\n")
    loads.append(load_average())
    table = render(args, stats, vocab_size, sp_rate, num_tokens, command, runs,
                   import_rss_mb(), loads, work)
    table += kept_section(args.results)
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w", encoding="utf-8") as f:
        f.write(table)
    sys.stdout.write(table)


if __name__ == "__main__":
    main()
