"""Loads exported SavedModels the way a model server would and answers requests.

Run in a fresh process by tests/albert_tf/test_export.py:

    python export_worker.py JOBS.json RESULTS.json

Only `tensorflow` and `tensorflow_text` (for the SentencePiece op) are
imported, never albert_tf: the export must stand on its own. Each job names a
SavedModel folder, a signature and either `inputs` (name -> nested lists,
fed as tensors of the signature's dtypes) or `rest` (a TF Serving REST
request body, turned into tensors the way TF Serving's row format does: a
list of per-instance dicts, or of bare values when the signature has one
input, becomes one batched tensor per input). Jobs with "graph_mode": true
also load the folder with the TF1 SavedModel loader in a session, as TF
Serving's C++ server does, and record those outputs separately.

Two more kinds of job: "empty": true calls EVERY signature of the folder with
a batch of no rows and records the output shapes; an input value "__10MB__"
is replaced by a 10 MB string and the call is measured (wall seconds and the
growth of peak RSS, after one warm-up call with a short text).

Bytes that are not UTF-8 (hostile requests) travel as "inputs_b64": the
same nested lists of base64 strings; outputs decode with backslash escapes.
"summary": true records each output's dtype, shape, whether every float is
finite and the call's seconds instead of its values (a batch of 5,000).
"""

import base64

import json
import sys
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece op)


def rest_to_inputs(body, input_specs):
    """A TF Serving REST row-format body -> {input name: tensor}."""
    if set(body) - {"instances", "signature_name"}:
        raise ValueError(f"Unsupported request keys: {sorted(body)}")
    instances = body["instances"]
    if all(isinstance(row, dict) for row in instances):
        names = set(instances[0])
        if any(set(row) != names for row in instances):
            raise ValueError("Every instance must name the same inputs.")
        if names != set(input_specs):
            raise ValueError(f"Request inputs {sorted(names)} != signature inputs {sorted(input_specs)}.")
        columns = {name: [row[name] for row in instances] for name in names}
    elif len(input_specs) == 1:
        columns = {next(iter(input_specs)): instances}
    else:
        raise ValueError("Bare instances need a signature with exactly one input.")
    return {name: tf.constant(values, dtype=input_specs[name].dtype) for name, values in columns.items()}


def to_json(value):
    array = value.numpy() if hasattr(value, "numpy") else value
    kind = array.dtype.kind
    if kind in "SO":
        values = tf.nest.map_structure(lambda b: b.decode("utf-8", "backslashreplace"), array.tolist())
    else:
        values = array.tolist()
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": values}


HUGE = "__10MB__"
HUGE_BYTES = 10_000_000


def expand(value, huge):
    """The job's inputs with every HUGE marker replaced by `huge`."""
    if value == HUGE:
        return huge
    if isinstance(value, list):
        return [expand(v, huge) for v in value]
    return value


def _status_kb(key):
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def measured_call(fn, inputs):
    """(outputs, CPU seconds, peak RSS growth in MB): Linux's peak (VmHWM) is reset first.

    CPU seconds of this process (every thread), not wall time: on shared cores another process's load does not
    change them."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")  # peak RSS := current RSS
    before = _status_kb("VmRSS")
    start = time.process_time()
    outputs = fn(**inputs)
    seconds = time.process_time() - start
    return outputs, seconds, (_status_kb("VmHWM") - before) / 1024


def summary(value):
    """dtype, shape and (floats) whether every value is finite."""
    array = value.numpy()
    finite = bool(tf.reduce_all(tf.math.is_finite(value)).numpy()) if array.dtype.kind == "f" else None
    return {"dtype": str(array.dtype), "shape": list(array.shape), "finite": finite}


def decode_b64(value):
    if isinstance(value, list):
        return [decode_b64(v) for v in value]
    return base64.b64decode(value)


def empty_outputs(signatures):
    """Every signature called with zero rows -> {signature: {output: shape}}."""
    shapes = {}
    for name, fn in sorted(signatures.items()):
        specs = fn.structured_input_signature[1]
        inputs = {key: tf.zeros([0] + [d if d is not None else 0 for d in spec.shape.as_list()[1:]], spec.dtype)
                  for key, spec in specs.items()}
        try:
            shapes[name] = {key: list(value.shape) for key, value in fn(**inputs).items()}
        except Exception as e:  # noqa: BLE001 - reported per signature, so that the test names each failure
            shapes[name] = {"error": str(e).splitlines()[-3:]}
    return shapes


def run_graph_mode(path, signature, inputs):
    """TF1 loader + session: how TF Serving and saved_model_cli load a SavedModel."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
        sig = meta.signature_def[signature]
        feeds = {sig.inputs[name].name: value.numpy() for name, value in inputs.items()}
        names = sorted(sig.outputs)
        values = sess.run([sig.outputs[name].name for name in names], feeds)
    return {name: to_json(value) for name, value in zip(names, values)}


def main(jobs_path, results_path):
    with open(jobs_path, encoding="utf-8") as f:
        jobs = json.load(f)
    loaded = {}
    results = {}
    for job in jobs:
        if job["path"] not in loaded:
            loaded[job["path"]] = tf.saved_model.load(job["path"])
        if job.get("empty"):
            results[job["id"]] = {"empty": empty_outputs(loaded[job["path"]].signatures)}
            continue
        fn = loaded[job["path"]].signatures[job["signature"]]
        specs = fn.structured_input_signature[1]
        huge = HUGE in json.dumps(job.get("inputs"))
        if "inputs_b64" in job:
            job["inputs"] = {name: decode_b64(value) for name, value in job["inputs_b64"].items()}
        if "rest" in job:
            inputs = rest_to_inputs(job["rest"], specs)
        elif huge:
            small = {name: tf.constant(expand(value, "a short text"), dtype=specs[name].dtype)
                     for name, value in job["inputs"].items()}
            fn(**small)  # warm-up: the first call's one-off allocations are not the request's
            text = ("ka lo mi ten ser qua vi don. " * (HUGE_BYTES // 29 + 1))[:HUGE_BYTES]
            inputs = {name: tf.constant(expand(value, text), dtype=specs[name].dtype)
                      for name, value in job["inputs"].items()}
        else:
            inputs = {name: tf.constant(value, dtype=specs[name].dtype) for name, value in job["inputs"].items()}
        if huge:
            outputs, seconds, peak_mb = measured_call(fn, inputs)
        else:
            start = time.perf_counter()
            outputs = fn(**inputs)
            seconds = time.perf_counter() - start
        if job.get("summary"):
            results[job["id"]] = {"outputs": {name: summary(value) for name, value in outputs.items()},
                                  "seconds": seconds}
            continue
        result = {
            "signatures": sorted(loaded[job["path"]].signatures.keys()),
            "inputs": sorted(specs),
            "input_shapes": {name: spec.shape.as_list() for name, spec in specs.items()},
            "outputs": {name: to_json(value) for name, value in outputs.items()},
        }
        if huge:
            result.update(seconds=seconds, peak_rss_growth_mb=peak_mb)
        if job.get("graph_mode"):
            result["graph_outputs"] = run_graph_mode(job["path"], job["signature"], inputs)
        results[job["id"]] = result
    results["__modules__"] = sorted(name for name in sys.modules if name.split(".")[0] in ("albert_tf", "keras",
                                                                                               "pipelines"))
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
