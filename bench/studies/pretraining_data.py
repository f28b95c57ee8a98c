"""Benchmark of albert-create-pretraining-data against the original tool (issues 3, 10, 18).

Study (2026-12-01). Question: How fast is albert-create-pretraining-data against the original tool? Answer:
14.7x the original in the same run on a hidden corpus, 10,039 against 685 instances/s
(bench/results/pretraining_data.md). Command: `python -m bench.studies.pretraining_data --repeats 3`.

Builds a few MB of real English text from the docstrings of the Python
standard library (present on every Python install; then of the installed
packages when more text is asked for), in the original's format (one
sentence per line, blank line between documents; one docstring = one
document), trains a SentencePiece vocabulary on it once, then measures, in
the same run and interleaved (ours, the original, ours, ...), each tool as a
whole process in a fresh subprocess, start-up included, on the same corpus,
vocabulary and flags (max_seq_length 128, 20 predictions, dupe factor 10,
the same masking settings and seed):

* ours: `python -m pipelines.bin.create_pretraining_data ...` (sharded);
* the original: google-research/albert's `create_pretraining_data.py`, run
  from --original_tool (default `../shared/reference/original_tool` beside
  the repository; see its README); when it is not there, the results say so
  and report no ratio;

instances/s, CPU time and peak memory (ru_maxrss of the children), and the
same-run ratio (median of the per-round ratios); also the SentencePiece op's
own tokens/s on the same text (tensorflow_text, batched), which bounds ours.
Written to bench/results/pretraining_data.md.

Run from the repository root:
    python -m bench.studies.pretraining_data --repeats 3
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


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The section of the results file a rerun keeps (written by hand).
KEPT_SECTION = "## Changes, predicted and measured"
# The flags both tools get (the original's names are the same).
SHARED_FLAGS = ("--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=10", "--random_seed=12345",
                "--masked_lm_prob=0.15", "--ngram=3", "--short_seq_prob=0.1", "--do_lower_case=true")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--num_shards", type=int, default=4)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--original_tool", default=os.path.join("..", "shared", "reference", "original_tool"),
                        help="Folder holding the original's `albert/` package (relative paths: to the repository "
                             "root).")
    parser.add_argument("--results",
                        default=os.path.join("bench", "results", "pretraining_data.md"))
    return parser.parse_args(argv)


def original_tool_dir(flag: str):
    """The original tool's folder, or None when its create_pretraining_data.py is not there."""
    folder = flag if os.path.isabs(flag) else os.path.normpath(os.path.join(REPO, flag))
    return folder if os.path.exists(os.path.join(folder, "albert", "create_pretraining_data.py")) else None


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
    """Ours; the output folder is appended per run."""
    return [sys.executable, "-m", "pipelines.bin.create_pretraining_data",
            f"--input_file={corpus}", f"--spm_model_file={prefix}.model", *SHARED_FLAGS,
            f"--num_shards={num_shards}"]


def original_command(corpus: str, prefix: str):
    """The original (one output file: appended per run as --output_file)."""
    return [sys.executable, "-m", "albert.create_pretraining_data", f"--input_file={corpus}",
            f"--vocab_file={prefix}.vocab", f"--spm_model_file={prefix}.model", *SHARED_FLAGS]


def original_env(tool: str) -> dict:
    """PYTHONPATH for the original: its folder and its empty tensorflow_hub stub."""
    path = os.pathsep.join([tool, os.path.join(tool, "albert", "stubs")])
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")


def timed_run(command, out_dir: str, original: bool = False, env=None):
    """One creation process: (wall s, instances, instances/s, peak RSS MB so
    far over children, CPU s)."""
    shutil.rmtree(out_dir, ignore_errors=True)  # else complete shards are skipped
    if original:
        os.makedirs(out_dir, exist_ok=True)
    output = [f"--output_file={os.path.join(out_dir, 'data.tfrecord')}"] if original else [f"--output_dir={out_dir}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    child = subprocess.run(command + output, capture_output=True, text=True, cwd=REPO,
                           env=env or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        sys.stderr.write(child.stderr[-4000:])
        raise SystemExit(f"{'the original' if original else 'our'} creation failed with code {child.returncode}")
    pattern = r"Wrote (\d+) total instances" if original else r"instances: (\d+)"
    instances = int(re.search(pattern, child.stderr).group(1))
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


def _tool_rows(name: str, runs) -> str:
    if not runs:
        return ""
    med = lambda i: statistics.median(r[i] for r in runs)  # noqa: E731
    return (f"| {name}: instances written | {runs[0][1]} |\n"
            f"| {name}: wall time, whole process | {med(0):.1f} s |\n"
            f"| **{name}: instances/s, whole process** | **{med(2):.0f}** |\n"
            f"| {name}: CPU time (user + system) | {med(4):.1f} s ({runs[0][1] / med(4):.0f} instances per "
            "CPU-second) |\n")


def ratio_rows(runs, original_runs) -> str:
    """Same-run ratios, ours / the original: median of the per-round ratios, wall and per CPU-second."""
    if not original_runs:
        return "| same-run ratio to the original tool | not measured: the original tool was not found |\n"
    wall = [a[2] / b[2] for a, b in zip(runs, original_runs)]
    cpu = [(a[1] / a[4]) / (b[1] / b[4]) for a, b in zip(runs, original_runs)]
    return (f"| **same-run ratio to the original tool, wall (instances/s)** | **{statistics.median(wall):.1f}x** "
            f"(rounds: {', '.join(f'{r:.1f}x' for r in wall)}) |\n"
            f"| same-run ratio to the original tool, per CPU-second | {statistics.median(cpu):.1f}x |\n")


def render(args, stats, vocab_size, sp_rate, num_tokens, commands, runs, original_runs, import_rss,
           loads, work, tool) -> str:
    shown = lambda c: " ".join(c[1:]).replace(work, "$WORK")  # noqa: E731
    sys.path.insert(0, REPO)
    from bench.systems.common import cpu_line  # noqa: E402

    original = (f"Original tool (`{args.original_tool}`, run as its README says, PYTHONPATH=its folder and "
                f"its stubs):\n\n    python {shown(commands[1])} --output_file=$WORK/origN/data.tfrecord\n"
                if tool else f"Original tool: **not found** at `{args.original_tool}` (relative to the repository "
                "root); no ratio is reported. Pass --original_tool=DIR (see `../shared/reference/original_tool`).\n")
    peak = max(r[3] for r in runs + original_runs)
    return f"""# Pretraining data creation benchmark (issues 3, 10 and 18)

Machine: {cpu_line()} Load average 1/5/15 min before the runs: {loads[0]}, after: {loads[1]}.
Corpus: {stats["bytes"] / 1e6:.2f} MB of English docstrings (the Python {sys.version.split()[0]} standard
library first, then the installed packages), {len(stats["lines"])} lines, {stats["documents"]} documents
(one docstring = one document), built by `bench/studies/pretraining_data.py`; SentencePiece
unigram vocabulary of {vocab_size} pieces trained on it with the original settings.

Benchmark command (from the repository root):

    python -m bench.studies.pretraining_data --megabytes {args.megabytes} --repeats {args.repeats} --num_shards {args.num_shards}

Each tool is timed as a whole process (start to last record, start-up included), fresh each time, on the same
corpus, vocabulary and flags; the rounds are interleaved (ours, then the original, {args.repeats} times).
Ours:

    python {shown(commands[0])} --output_dir=$WORK/outN

{original}
| measure | median of {args.repeats} |
|---|---|
{_tool_rows("ours", runs)}{_tool_rows("original tool", original_runs)}{ratio_rows(runs, original_runs)}| SentencePiece op alone (tensorflow_text, batches of 4096 lines) | {sp_rate / 1e6:.2f} M tokens/s ({num_tokens} tokens) |
| peak memory of a creation process (ru_maxrss of the children, max over runs) | {peak:.0f} MB |
| importing tensorflow + tensorflow_text alone | {import_rss:.0f} MB |

Per run, ours: {", ".join(f"{r[2]:.0f}/s ({r[0]:.1f} s wall, {r[4]:.1f} CPU-s)" for r in runs)}.
Per run, the original: {", ".join(f"{r[2]:.0f}/s ({r[0]:.1f} s wall, {r[4]:.1f} CPU-s)" for r in original_runs) or "-"}.
"""


def main(argv=None):
    args = parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="bench_pretraining_")
    os.makedirs(work, exist_ok=True)
    tool = original_tool_dir(args.original_tool)
    if tool is None:
        sys.stderr.write(f"original tool not found at {args.original_tool}: no ratio will be reported\n")
    corpus, prefix, stats = prepare_corpus(work, args.megabytes, args.vocab_size)
    sp_rate, num_tokens, vocab_size = sentencepiece_rate(prefix, stats["lines"], args.repeats)
    commands = [creation_command(corpus, prefix, args.num_shards), original_command(corpus, prefix)]
    loads = [load_average()]
    runs, original_runs = [], []
    for r in range(args.repeats):
        runs.append(timed_run(commands[0], os.path.join(work, f"out{r}")))
        _log("ours", r, runs[-1])
        if tool:
            original_runs.append(timed_run(commands[1], os.path.join(work, f"orig{r}"), original=True,
                                           env=original_env(tool)))
            _log("original", r, original_runs[-1])
    loads.append(load_average())
    table = render(args, stats, vocab_size, sp_rate, num_tokens, commands, runs, original_runs,
                   import_rss_mb(), loads, work, tool)
    table += kept_section(args.results)
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w", encoding="utf-8") as f:
        f.write(table)
    sys.stdout.write(table)


def _log(name, r, run):
    wall, instances, rate, rss_mb, cpu = run
    sys.stderr.write(f"{name} run {r}: {instances} instances in {wall:.1f} s = {rate:.0f}/s, {cpu:.1f} CPU-s, "
                     f"peak RSS so far {rss_mb:.0f} MB\n")


if __name__ == "__main__":
    main()
