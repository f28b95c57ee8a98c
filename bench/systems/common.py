"""What every system's benchmark shares: the model shape, batches, FLOPs, text.

Nothing here imports TensorFlow or PyTorch, so the orchestrator and the
framework-free test can use it.
"""

from __future__ import annotations

import os
import random
import resource
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

# ALBERT-base (albert_base_v2): the shape every system builds, random weights.
ALBERT_BASE = dict(vocab_size=30000, embedding_size=128, hidden_size=768,
                   num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=512,
                   type_vocab_size=2)
# The text benchmarks use the SentencePiece model trained here, so the
# vocabulary is its size (only the embedding lookup depends on it).
TEXT_VOCAB_SIZE = 8000
TEXT_MAX_SEQ_LENGTH = 128
PREDICTIONS_PER_SEQ = 20


# The smoke plan's shape (`bench.run --plan smoke`): every system runs, in seconds.
TINY = dict(ALBERT_BASE, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64)
SHAPES = {"base": ALBERT_BASE, "tiny": TINY}


def shape_dims(shape: str, vocab_size: Optional[int] = None) -> Dict[str, int]:
    """The dimensions of a measurement's `shape` ("base" or "tiny"), with vocab_size when given.

    >>> shape_dims("tiny", 8000)["hidden_size"], shape_dims("tiny", 8000)["vocab_size"]
    (32, 8000)
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {shape!r}.")
    return dict(SHAPES[shape], **({"vocab_size": vocab_size} if vocab_size else {}))


def model_shape(preset: str) -> Dict[str, int]:
    """H, E, L, I, V of the presets the benchmark uses (no TF import); "base" and "tiny" are the SHAPES."""
    shapes = {
        "albert_base_v2": dict(ALBERT_BASE), "base": dict(ALBERT_BASE), "tiny": dict(TINY),
        "albert_large_v2": dict(ALBERT_BASE, hidden_size=1024, num_hidden_layers=24,
                                num_attention_heads=16, intermediate_size=4096),
        "bert_large": dict(ALBERT_BASE, hidden_size=1024, embedding_size=1024,
                           num_hidden_layers=24, num_attention_heads=16,
                           intermediate_size=4096),
    }
    if preset not in shapes:
        raise ValueError(f"Unknown preset {preset!r}; expected one of {sorted(shapes)}.")
    return shapes[preset]


def forward_flops(shape: Dict[str, int], seq: int, preds: Optional[int]) -> float:
    """Matmul FLOPs of one forward pass per sequence.

    Embedding projection 2*T*E*H (only when E != H); per layer (compute is
    not shared even when weights are): Q, K, V, O 8*T*H^2, scores and
    weighted sum 4*T^2*H, FFN 4*T*H*I; pooler 2*H^2; with `preds` the
    masked-LM head on the P masked positions 2*P*(H*E + E*V) and SOP 4*H.

    Example:
    >>> round(3 * forward_flops(model_shape("albert_base_v2"), 128, 20) / 1e9, 1)
    67.6
    """
    h, e, i, v = (shape["hidden_size"], shape["embedding_size"],
                  shape["intermediate_size"], shape["vocab_size"])
    layer = 8 * seq * h * h + 4 * seq * seq * h + 4 * seq * h * i
    total = shape["num_hidden_layers"] * layer + 2 * h * h
    if e != h:
        total += 2 * seq * e * h
    if preds:
        total += 2 * preds * (h * e + e * v) + 4 * h
    return float(total)


def training_flops(shape: Dict[str, int], seq: int, preds: int) -> float:
    """Training FLOPs per sequence: forward + backward (twice the forward)."""
    return 3.0 * forward_flops(shape, seq, preds)


def parameter_count(shape: Dict[str, int], shared: bool) -> int:
    """Weights of the encoder + MLM head (LayerNorms and biases included).

    Example:
    >>> round(parameter_count(model_shape("bert_large"), shared=False) / 1e6)
    336
    """
    h, e, i, v, n = (shape["hidden_size"], shape["embedding_size"],
                     shape["intermediate_size"], shape["vocab_size"],
                     shape["num_hidden_layers"])
    embeddings = (v + shape["max_position_embeddings"] + shape["type_vocab_size"]) * e + 2 * e
    projection = (e * h + h) if e != h else 0
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    layers = layer * (1 if shared else n)
    pooler = h * h + h
    mlm_head = h * e + e + 2 * e + v
    return embeddings + projection + layers + pooler + mlm_head + 2 * h + 2


def synthetic_pretraining_batch(batch: int, seq: int, preds: int, vocab: int,
                                seed: int = 0) -> Dict[str, np.ndarray]:
    """A full-length MLM + SOP batch with the TFRecord contract's names."""
    rng = np.random.default_rng(seed)
    positions = np.stack([np.sort(rng.choice(np.arange(1, seq - 1), size=preds, replace=False))
                          for _ in range(batch)])
    return {
        "input_ids": rng.integers(5, vocab, size=(batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype("int32"),
        "masked_lm_positions": positions.astype("int32"),
        "masked_lm_ids": rng.integers(5, vocab, size=(batch, preds)).astype("int32"),
        "masked_lm_weights": np.ones((batch, preds), "float32"),
        "next_sentence_labels": rng.integers(0, 2, size=(batch,)).astype("int32"),
    }


def timed_calls(fn: Callable[[], object], warmup: int, steps: int) -> List[float]:
    """Seconds of each of `steps` calls of fn after `warmup` untimed calls.

    fn must return only when its work is done (read a result back).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def per_second(items: int, times: Sequence[float]) -> Dict[str, float]:
    """items/s of the median call, with the fastest and slowest, and every call's seconds ("samples_s")."""
    return {"per_s": items / statistics.median(times), "best_per_s": items / min(times),
            "worst_per_s": items / max(times), "n_timed": len(times), "samples_s": [float(t) for t in times]}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (ru_maxrss), MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------- text
def _docstring_sentences(limit: int) -> List[str]:
    """Sentences from the standard library's docstrings (present everywhere)."""
    import ast
    import re
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    splitter = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
    out: List[str] = []
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests", "idlelib"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        text = " ".join(doc.split())
                        out.extend(s for s in splitter.split(text) if s)
            if len(out) >= limit:
                return out
    return out


def _is_prose(sentence: str) -> bool:
    """A sentence of words, not code: mostly alphabetic words, no REPL or markup."""
    words = sentence.split()
    if any(mark in sentence for mark in (">>>", "::", "=", "{", "`", "__")):
        return False
    alphabetic = sum(w.strip(".,;:!?()'\"").isalpha() for w in words)
    return sentence[-1] in ".!?" and alphabetic >= 0.85 * len(words)


def mixed_length_sentences(count: int = 32, min_words: int = 5, max_words: int = 60,
                           seed: int = 0) -> List[str]:
    """`count` real sentences whose word counts spread over min..max words.

    Whole prose sentences from the standard library's docstrings: a uniform
    word-count target per sentence, and an unused sentence of the nearest
    word count that is left (the shorter one on a tie).
    """
    pool = [s for s in _docstring_sentences(20000)
            if min_words <= len(s.split()) <= max_words and _is_prose(s)]
    if count > len(pool):
        raise ValueError(f"Asked for {count} sentences; the docstrings hold {len(pool)} of {min_words}-{max_words} "
                         "words.")
    rng = random.Random(seed)
    rng.shuffle(pool)
    by_words: Dict[int, List[str]] = {}
    for s in pool:
        by_words.setdefault(len(s.split()), []).append(s)
    chosen = []
    for _ in range(count):
        target = rng.randint(min_words, max_words)
        nearest = min((n for n in by_words if by_words[n]), key=lambda n: (abs(n - target), n))
        chosen.append(by_words[nearest].pop())
    return chosen


# ------------------------------------------------------ pools of batches
# The text and fine-tuning groups draw their batches from one pool of real
# sentences, written once by bench.run (`write_text_pool`) and read by every
# worker, so every system gets exactly the same batches in the same order.
# "grouped": batches of similar length, as Hugging Face's `group_by_length`
# sampler makes them (each system's best normal use); "random": plain random
# batches (the "same padding" comparison: every system pads each batch to
# its longest row).
GROUPED, RANDOM = "grouped", "random"
# keras-hub's pre-packed batches: padded to the next multiple of this.
BUCKET_STEP = 16


def random_batches(n: int, batch: int, seed: int) -> List[List[int]]:
    """Every full batch of a seeded permutation of range(n), in order.

    >>> random_batches(4, 2, seed=0)
    [[2, 0], [1, 3]]
    """
    order = np.random.default_rng(seed).permutation(n)
    return [order[i:i + batch].tolist() for i in range(0, n - batch + 1, batch)]


def length_grouped_batches(lengths: Sequence[int], batch: int, seed: int, mega: int = 50) -> List[List[int]]:
    """Hugging Face's `group_by_length` sampler (`get_length_grouped_indices`):
    a seeded permutation cut into mega-batches of `mega * batch`, each sorted
    by length (longest first) and cut into batches; the batches are then put
    in a seeded random order (the timed ones are a sample of all lengths).

    >>> length_grouped_batches([5, 1, 4, 2], 2, seed=0, mega=2)
    [[3, 1], [0, 2]]
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths)).tolist()
    out: List[List[int]] = []
    size = mega * batch
    for start in range(0, len(order), size):
        group = sorted(order[start:start + size], key=lambda i: -lengths[i])
        out += [group[i:i + batch] for i in range(0, len(group) - batch + 1, batch)]
    return [out[i] for i in rng.permutation(len(out))]


def bucket_length(longest: int, step: int = BUCKET_STEP, cap: int = TEXT_MAX_SEQ_LENGTH) -> int:
    """The padded length of a pre-packed bucket: `longest` rounded up to a multiple of step.

    >>> bucket_length(17), bucket_length(32), bucket_length(127)
    (32, 32, 128)
    """
    return min(cap, -(-longest // step) * step)


def token_lengths(spm_path: str, sentences: Sequence[str]) -> List[int]:
    """Pieces per sentence with [CLS] and [SEP] (the original's normalisation), capped at 128."""
    import sentencepiece

    from pipelines.tokenizer import preprocess_text_py

    sp = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    return [min(TEXT_MAX_SEQ_LENGTH, len(sp.encode(preprocess_text_py(s, True))) + 2) for s in sentences]


def write_text_pool(path: str, spm_path: str, count: int, batch: int, seed: int = 1) -> str:
    """The pool file: sentences, their token lengths and both batch orders (made once)."""
    if os.path.exists(path):
        return path
    import json

    sentences = mixed_length_sentences(count, seed=seed)
    lengths = token_lengths(spm_path, sentences)
    pool = {"sentences": sentences, "lengths": lengths, "batch": batch,
            GROUPED: length_grouped_batches(lengths, batch, seed), RANDOM: random_batches(len(sentences), batch, seed)}
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(pool, f)
    os.replace(path + ".tmp", path)
    return path


def length_sorted_chunks(lengths: Sequence[int], rows: int) -> List[np.ndarray]:
    """A batch's row indices sorted by length (stable, shortest first) and cut into chunks of `rows`:
    the in-batch sorting any server can do, as our length buckets do
    (`albert_tf.models.length_buckets`). Each chunk is then padded to its own longest row.

    >>> [c.tolist() for c in length_sorted_chunks([5, 2, 9, 2, 7], 2)]
    [[1, 3], [0, 4], [2]]
    """
    if int(rows) < 1:
        raise ValueError(f"rows must be >= 1, got {rows!r}.")
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i:i + rows] for i in range(0, len(order), rows)]


def in_input_order(chunks: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> np.ndarray:
    """The chunks' outputs (rows in chunk order) put back in the batch's row order.

    >>> in_input_order([np.array([1, 3]), np.array([0, 2])], [np.array([10, 30]), np.array([0, 20])]).tolist()
    [0, 10, 20, 30]
    """
    order = np.concatenate(chunks)
    out = np.empty_like(np.concatenate(outputs))
    out[order] = np.concatenate(outputs)
    return out


def read_text_pool(path: str, feed: str, warmup: int, steps: int):
    """(sentences, warm-up batches, timed batches) of a pool file: the first
    `warmup` batches of `feed`'s order, then the next `steps`."""
    import json

    with open(path, encoding="utf-8") as f:
        pool = json.load(f)
    if feed not in (GROUPED, RANDOM):
        raise ValueError(f"feed must be {GROUPED!r} or {RANDOM!r}, got {feed!r}.")
    batches = pool[feed]
    if len(batches) < warmup + steps:
        raise ValueError(f"{path} has {len(batches)} batches; {warmup} + {steps} asked.")
    return pool["sentences"], batches[:warmup], batches[warmup:warmup + steps]


def timed_pass(fn: Callable[[object], object], warm: Sequence[object], timed: Sequence[object]) -> List[float]:
    """fn(batch) once per warm-up batch, untimed; then the seconds of each timed batch.

    fn must return only when its work is done (read a result back).
    """
    for batch in warm:
        fn(batch)
    times = []
    for batch in timed:
        start = time.perf_counter()
        fn(batch)
        times.append(time.perf_counter() - start)
    return times


def text_pass_result(times: Sequence[float], masks: Sequence[np.ndarray]) -> Dict[str, float]:
    """sentences/s of a timed pass, with padded and real tokens per sentence from
    the timed batches' padding masks ([rows, padded length], 1 = real)."""
    rows = sum(int(m.shape[0]) for m in masks)
    result = pass_rate(rows, times)
    result["padded_tokens"] = sum(int(np.size(m)) for m in masks) / rows
    result["real_tokens"] = sum(float(np.sum(m)) for m in masks) / rows
    result["padded_length"] = max(int(m.shape[1]) for m in masks)
    return result


def pass_rate(items: int, times: Sequence[float]) -> Dict[str, float]:
    """items/s over a whole timed pass (batches of different lengths: not a median call)."""
    return {"per_s": items / sum(times), "seconds": float(sum(times)), "n_timed": len(times),
            "best_per_s": items / len(times) / min(times), "worst_per_s": items / len(times) / max(times),
            "samples_s": [float(t) for t in times]}


def text_corpus(path: str, max_sentences: int = 60000) -> str:
    """One sentence a line from the docstrings, for the SentencePiece model."""
    if not os.path.exists(path):
        sentences = _docstring_sentences(max_sentences)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(sentences) + "\n")
        os.replace(tmp, path)
    return path


def spm_model(cache_dir: str) -> str:
    """A TEXT_VOCAB_SIZE-piece SentencePiece model with ALBERT's special pieces.

    Trained once on docstring sentences with the project's own settings
    (pad 0, unk 1, [CLS] 2, [SEP] 3, [MASK] 4), cached in cache_dir.
    """
    os.makedirs(cache_dir, exist_ok=True)
    prefix = os.path.join(cache_dir, f"bench_sp{TEXT_VOCAB_SIZE}")
    if not os.path.exists(prefix + ".model"):
        from pipelines import tokenizer

        corpus = text_corpus(os.path.join(cache_dir, "docstrings.txt"))
        tokenizer.train_sentencepiece([corpus], prefix, vocab_size=TEXT_VOCAB_SIZE)
    return prefix + ".model"


# The flags that decide a run's kind and its hardware peak (`bench.peak`).
FLAGS_THAT_MATTER = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def parse_cpuinfo(text: str) -> Dict[str, object]:
    """The first CPU's model, clock ("cpu MHz") and flags of /proc/cpuinfo's text.

    >>> parse_cpuinfo("model name\\t: AMD EPYC\\ncpu MHz\\t\\t: 2445.420\\nflags\\t\\t: fpu avx2 fma\\n")
    {'model': 'AMD EPYC', 'mhz': 2445.42, 'flags': ['avx2', 'fma']}
    """
    out: Dict[str, object] = {}
    for line in text.splitlines():
        name, _, value = (s.strip() for s in line.partition(":"))
        if name == "model name" and "model" not in out:
            out["model"] = value
        elif name == "cpu MHz" and "mhz" not in out:
            out["mhz"] = float(value)
        elif name == "flags" and "flags" not in out:
            out["flags"] = [f for f in FLAGS_THAT_MATTER if f in value.split()]
    return out


def parse_lscpu(text: str) -> Dict[str, object]:
    """Topology and maximum clock from `lscpu`'s text (a field lscpu does not print is left out).

    >>> parse_lscpu("Thread(s) per core:  1\\nCore(s) per socket:  2\\nSocket(s):  1\\nCPU max MHz:  3529.0\\n")
    {'threads_per_core': 1, 'cores_per_socket': 2, 'sockets': 1, 'max_mhz': 3529.0}
    """
    fields = {"Thread(s) per core": ("threads_per_core", int), "Core(s) per socket": ("cores_per_socket", int),
              "Socket(s)": ("sockets", int), "CPU max MHz": ("max_mhz", float)}
    out: Dict[str, object] = {}
    for line in text.splitlines():
        name, _, value = (s.strip() for s in line.partition(":"))
        if name in fields:
            key, cast = fields[name]
            try:
                out[key] = cast(value)
            except ValueError:
                pass
    return out


def cpu_description() -> Dict[str, object]:
    """CPU model, logical CPUs ("cores"), the flags that matter, the clock and the topology (lscpu)."""
    import subprocess

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = parse_cpuinfo(f.read())
    except OSError:
        info = {}
    try:
        topology = parse_lscpu(subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30,
                                              env=dict(os.environ, LC_ALL="C")).stdout)
    except (OSError, subprocess.SubprocessError):
        topology = {}
    return dict({"model": info.get("model", "unknown"), "cores": os.cpu_count(), "flags": info.get("flags", [])},
                **{k: v for k, v in info.items() if k == "mhz"}, **topology)


def has_amx(cpu: Dict[str, object]) -> bool:
    """AMX for bfloat16 matmuls: both amx_bf16 and amx_tile in /proc/cpuinfo's flags."""
    return {"amx_bf16", "amx_tile"} <= set(cpu.get("flags", ()))


def cpu_kind(cpu: Optional[Dict[str, object]] = None) -> str:
    """The kind of CPU a run is kept under (bench/results/<kind>.md): the instructions its bfloat16
    matmuls use. "amx", "avx512-bf16", "avx512", "avx2" or "other".

    >>> cpu_kind({"flags": ["avx2", "avx512f", "avx512_bf16"]}), cpu_kind({"flags": ["amx_bf16", "amx_tile"]})
    ('avx512-bf16', 'amx')
    """
    from albert_tf.cpu import cpu_kind as kind_of_flags  # the binaries' rule, so runs and defaults agree

    return kind_of_flags((cpu or cpu_description()).get("flags", ()))


def cpu_line(cpu: Optional[Dict[str, object]] = None) -> str:
    """The machine line every results file starts with: CPU model, cores, AMX, flags; then the clock and the
    topology where recorded (runs since issue 33).

    >>> line = cpu_line({"model": "AMD EPYC", "cores": 2, "flags": ["avx2", "fma"], "mhz": 2445.42, "sockets": 1,
    ...                  "cores_per_socket": 2, "threads_per_core": 1})
    >>> line.split(". ", 1)[1]
    'Clock: 2445 MHz (/proc/cpuinfo), no maximum recorded; 1 socket(s) x 2 core(s) x 1 thread(s) per core.'
    """
    cpu = cpu or cpu_description()
    line = (f"CPU: {cpu['model']}, {cpu['cores']} cores; AMX: {'yes' if has_amx(cpu) else 'no'}; "
            f"flags that matter: {', '.join(cpu['flags']) or 'none'}.")
    if "mhz" in cpu or "max_mhz" in cpu:
        line += (f" Clock: {_fmt_mhz(cpu.get('mhz'))} (/proc/cpuinfo), "
                 + (f"{_fmt_mhz(cpu['max_mhz'])} at most (lscpu)" if cpu.get("max_mhz") else "no maximum recorded")
                 + ";")
    if "sockets" in cpu:
        line += (f" {cpu['sockets']} socket(s) x {cpu.get('cores_per_socket', '?')} core(s) x "
                 f"{cpu.get('threads_per_core', '?')} thread(s) per core.")
    return line


def _fmt_mhz(mhz) -> str:
    return "unknown MHz" if mhz is None else f"{float(mhz):.0f} MHz"
