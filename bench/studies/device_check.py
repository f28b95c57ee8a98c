"""Helpers of bench/studies/device_check.sh: inputs, the classifier query, the summary.

Study (2026-12-01). Question: Does every step run on a GPU machine (bench/studies/device_check.sh)? Answer:
not measured on a GPU yet; the CPU fallback passes every step (bench/results/device_check_cpu.md). Command:
`bash bench/studies/device_check.sh OUT_DIR`.

    python -m bench.studies.device_check prepare --out DIR --mode gpu|cpu
    python -m bench.studies.device_check serve --export_dir DIR/export/clf
    python -m bench.studies.device_check summary --out DIR --mode gpu|cpu

`prepare` writes the standard library's docstrings as a pretraining corpus
and a labelled topic task (nothing is downloaded) and the model config:
ALBERT-base with the corpus vocabulary's size on a GPU, a tiny ALBERT in the
CPU fallback. `serve` queries the exported classifier through TF Serving's
REST API when `tensorflow_model_server` is installed, else through
`albert_tf.export.rest_predict` (the same request bodies, no server).
`summary` turns the script's step log and the pretraining logs into
DIR/summary.md.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional

# Sizes per mode: ALBERT-base at length 128 on a GPU; a tiny model in the
# CPU fallback (it checks that every step runs, not how fast).
SIZES = {
    "gpu": dict(vocab_size=8000, task_train_examples=2000, task_dev_examples=500),
    "cpu": dict(vocab_size=1000, task_train_examples=200, task_dev_examples=100),
}
TINY = dict(embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=128, max_position_embeddings=64)


def prepare(out: str, mode: str) -> Dict[str, object]:
    """Corpus, topic task and albert_config.json under `out`."""
    import albert_tf
    from pipelines.stdlib_corpus import write_stdlib_corpus
    from pipelines.stdlib_tasks import write_stdlib_topic_task

    sizes = SIZES[mode]
    corpus = write_stdlib_corpus(os.path.join(out, "corpus"), seed=1)
    task = write_stdlib_topic_task(os.path.join(out, "task"),
                                   max_train_examples=sizes["task_train_examples"],
                                   max_dev_examples=sizes["task_dev_examples"])
    if mode == "gpu":
        config = dataclasses.replace(albert_tf.AlbertConfig.from_preset("albert_base_v2"),
                                     vocab_size=sizes["vocab_size"])
    else:
        config = albert_tf.AlbertConfig(vocab_size=sizes["vocab_size"], **TINY)
    config.to_json_file(os.path.join(out, "albert_config.json"))
    return {"corpus": corpus, "task": {k: v for k, v in task.items() if "count" in k or "examples" in k}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _model_server_query(export_dir: str, body: dict) -> Optional[dict]:
    """The REST answer of tensorflow_model_server, or None without one."""
    binary = shutil.which("tensorflow_model_server")
    if binary is None:
        return None
    port = _free_port()
    # The model server loads tensorflow-text ops only if built with them; a
    # failure is reported and the in-process path below is used.
    server = subprocess.Popen([binary, f"--rest_api_port={port}", "--model_name=clf",
                               f"--model_base_path={os.path.abspath(export_dir)}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(60):
            time.sleep(1)
            try:
                request = urllib.request.Request(
                    f"http://localhost:{port}/v1/models/clf:predict", json.dumps(body).encode(),
                    {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return json.load(answer)
            except OSError:
                if server.poll() is not None:
                    return None
        return None
    finally:
        server.terminate()
        server.wait(timeout=30)


def serve(export_dir: str) -> dict:
    """Two raw-text requests to the exported classifier; prints the answers."""
    body = {"instances": [{"text": "Open the file and return a stream."},
                          {"text": "Send the message to the SMTP server."}]}
    answer = _model_server_query(export_dir, body)
    how = "tensorflow_model_server REST"
    if answer is None:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the SentencePiece op of the export)

        from albert_tf.export import rest_predict

        versions = sorted(int(v) for v in os.listdir(export_dir) if v.isdigit())
        answer = rest_predict(tf.saved_model.load(os.path.join(export_dir, str(versions[-1]))), body)
        how = "albert_tf.export.rest_predict (no tensorflow_model_server on PATH)"
    predictions = answer["predictions"]
    if len(predictions) != 2 or "label" not in predictions[0]:
        raise SystemExit(f"unexpected answer from {how}: {answer!r}")
    result = {"served_by": how, "labels": [p["label"] for p in predictions]}
    print(json.dumps(result))
    return result


_DONE = re.compile(r"Done: (\{.*\})")
_STRATEGY = re.compile(r"Strategy (\S+) with (\d+) replica\(s\); precision (\S+)")


def _pretrain_row(name: str, log: str) -> List[str]:
    text = open(log, encoding="utf-8", errors="replace").read() if os.path.exists(log) else ""
    strategy, done = _STRATEGY.search(text), _DONE.search(text)
    try:
        result = ast.literal_eval(done.group(1)) if done else {}
    except (ValueError, SyntaxError):
        result = {}

    def fmt(key, digits):
        value = result.get(key)
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value if value is not None else "-")

    return [name, strategy.group(1) if strategy else "-", strategy.group(2) if strategy else "-",
            strategy.group(3) if strategy else "-", fmt("global_step", 0), fmt("loss", 3),
            fmt("examples_per_second", 1)]


def summary(out: str, mode: str) -> str:
    """DIR/summary.md from DIR/steps.tsv (name, exit code, seconds) and DIR/logs/."""
    steps = [line.rstrip("\n").split("\t") for line in open(os.path.join(out, "steps.tsv"), encoding="utf-8")]
    title = ("GPU run" if mode == "gpu" else
             "CPU FALLBACK (no GPU on this machine: mirrored over 2 logical CPU devices, tiny sizes; "
             "these are not GPU results)")
    lines = [f"# bench/studies/device_check.sh: {title}", "",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at the end "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.", "",
             "| step | exit code | seconds |", "|---|---|---|"]
    lines += [f"| {name} | {rc} | {float(sec):.0f} |" for name, rc, sec in steps]
    pretrain = [s[0] for s in steps if s[0].startswith("pretrain")]
    if pretrain:
        lines += ["", "Pretraining (from each run's log; examples/s of the last logging interval):", "",
                  "| run | strategy | replicas | precision (auto) | steps | loss | examples/s |",
                  "|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_pretrain_row(n, os.path.join(out, "logs", n + ".log"))) + " |"
                  for n in pretrain]
    evaluated = os.path.join(out, "runs", "classifier", "eval_results.txt")
    if os.path.exists(evaluated):
        results = open(evaluated, encoding="utf-8").read().split("\n")
        lines += ["", "Fine-tuned classifier (stdlib topic task, 1 epoch): " + "; ".join(r for r in results if r)]
    served = os.path.join(out, "logs", "serve.log")
    if os.path.exists(served):
        lines += ["", "Served classifier: `" + open(served, encoding="utf-8").read().strip().splitlines()[-1] + "`"]
    bench = os.path.join(out, "bench_RESULTS.md")
    if os.path.exists(bench):
        lines += ["", "Throughput against keras-hub and Hugging Face: bench_RESULTS.md in the output folder "
                      "(bench.run's tables)."]
    failed = [s[0] for s in steps if s[1] != "0"]
    lines += ["", "All steps passed." if not failed else f"FAILED steps: {', '.join(failed)}."]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["prepare", "serve", "summary"])
    parser.add_argument("--out", default="device_check_output")
    parser.add_argument("--mode", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--export_dir", default="")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        print(json.dumps(prepare(args.out, args.mode), default=str))
    elif args.command == "serve":
        serve(args.export_dir)
    else:
        summary(args.out, args.mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
