r"""What int8 costs in accuracy: our int8 export against NNCF on Hugging Face's graph of the same fine-tuned weights.

Study (2026-12-06, issue 33 item 2). Question: on the demo's task (7 topics of standard-library passages) and a
sentence-pair task (are two sentences from one module?), how many dev accuracy points does
`albert-export --format=openvino --quantize=int8` lose against our float export, and how many does the peer lose:
NNCF's transformer quantization (optimum-intel's call) of OpenVINO's own conversion of Hugging Face's `AlbertModel`
holding the same fine-tuned weights, with the same head, calibration texts and dev set? Answer: within a point
for both, and level with each other. bench/results/int8_accuracy.md (the demo's 611k-parameter model, seed
12345, AMD EPYC avx512-bf16 kind): topic, 600 dev texts: neither loses any accuracy (68.83 both ways; each breaks
one answer and fixes one); same-module pairs, 1000 dev texts: both 57.30 -> 57.20 (0.10 points; ours 3 answers
broken and 2 fixed, the peer 2 and 1). bench/results/int8_accuracy_amx.md (Intel with AMX, the demo rerun there,
2026-12-07; each system also as that CPU serves it, bfloat16 float parts): topic: ours loses 0.17 points, the
peer gains 0.17, one answer apart, within the standard error (0.17); pairs: no answer changed in float32, in
bfloat16 ours fixes one. Command: `python -m bench.studies.int8_accuracy --pretrained_dir=demo_output/model
--topic_task_dir=demo_output/topic_task [--output=bench/results/int8_accuracy_<kind>]`.

Each task is fine-tuned once from --pretrained_dir (an albert-tf model folder with spm.model, e.g. albert-demo's
demo_output/model) with the demo's recipe (mean pooling, AdamW, seed --seed). Then both systems quantize the
fine-tuned classifier on the same --calibration_size training texts and answer the same dev texts with the same
ids (our preprocessor's), the float and the int8 graph each, compiled with f32 inference (so only the
quantization differs; `albert_tf.export.int8.measure_cost` computes every figure, for both systems), and on a CPU
whose OpenVINO infers in bfloat16 by default, again as it serves them. The peer's
float graph is checked against ours before it is quantized (the largest logit difference is printed and kept).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
from typing import Any, Dict, List, Tuple

import numpy as np
from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

FLAGS = flags.FLAGS
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "int8_accuracy")
# A twin whose float logits differ from ours by more than this is not the same model: the study stops.
TWIN_TOLERANCE = 1e-3


def define_flags() -> None:
    """The study's flags, defined when it runs (a process importing several studies keeps one set)."""
    flags.DEFINE_string("pretrained_dir", None, "albert-tf model folder (albert_config.json, weights, spm.model).")
    flags.DEFINE_string("topic_task_dir", None, "the demo's topic task (train.csv, dev.csv); None: built here.")
    flags.DEFINE_string("output_dir", os.path.join(tempfile.gettempdir(), "albert-tf-int8-accuracy"),
                        "fine-tuning runs, task files and exports.")
    flags.DEFINE_integer("seed", 12345, "fine-tuning seed; also the pair task's documents and calibration sample.")
    flags.DEFINE_integer("calibration_size", 300, "training texts both systems calibrate on.")
    flags.DEFINE_integer("pair_examples", 4000, "training pairs of the pair task (dev: a quarter of it at most).")
    flags.DEFINE_float("learning_rate", 1e-3, "AdamW peak rate (the demo's).")
    flags.DEFINE_float("epochs", 4.0, "passes over the training split (the demo's).")
    flags.DEFINE_string("output", RESULTS, "result path without extension (.md and .json written).")


def pair_task(output_dir: str, seed: int, examples: int) -> str:
    """Writes the same-module sentence-pair task of the standard library under output_dir/pair_task."""
    from pipelines import machine_tasks
    from pipelines.stdlib_corpus import iter_stdlib_documents

    task_dir = os.path.join(output_dir, "pair_task")
    if not os.path.exists(os.path.join(task_dir, "dev.jsonl")):
        rows = machine_tasks.same_document_pairs(iter_stdlib_documents(), seed=seed, max_train_examples=examples,
                                                 max_dev_examples=examples // 4)
        machine_tasks.write_task(task_dir, rows)
    return task_dir


def finetune(task_dir: str, pretrained_dir: str, output_dir: str, max_seq_length: int):
    """The classifier fine-tuned on task_dir from pretrained_dir with the demo's recipe, and its dev accuracy."""
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.runner import FinetuneOptions, run_finetuning

    options = FinetuneOptions(
        task="csv", data_dir=task_dir, output_dir=output_dir, init_checkpoint=pretrained_dir,
        task_options=TaskOptions(max_seq_length=max_seq_length, pooling="mean",
                                 spm_model_file=os.path.join(pretrained_dir, "spm.model")),
        train_batch_size=32, eval_batch_size=128, learning_rate=FLAGS.learning_rate,
        num_train_epochs=FLAGS.epochs, warmup_proportion=0.1, do_train=True, do_eval=True, seed=FLAGS.seed)
    run = run_finetuning(options)
    return run["model"], run["eval_results"]["accuracy"]


def text_sets(task_dir: str, label_names: List[str], size: int, seed: int):
    """(calibration, dev) `TextSet`s of a task folder: `size` training texts (labels dropped) and every dev row."""
    from albert_tf.export.int8 import TextSet
    from pipelines.finetune import tabular

    def split(name):
        rows = tabular.read_table(tabular.find_split_file(task_dir, name))
        pairs = [r.text_b for r in rows] if rows and rows[0].text_b is not None else None
        return [r.text_a for r in rows], pairs, [label_names.index(str(r.label)) for r in rows]

    texts, pairs, _ = split("train")
    calibration = TextSet(texts, pairs, source=f"{os.path.basename(task_dir)} train").sample(size, seed)
    texts, pairs, labels = split("dev")
    return calibration, TextSet(texts, pairs, labels=np.asarray(labels), source=f"{os.path.basename(task_dir)} dev")


def hf_twin(classifier):
    """A torch module computing `classifier`'s logits with Hugging Face's `AlbertModel` (our weights converted by
    `albert_tf.checkpoints.hf_state_dict`) and the same head (mean or pooled, then the output projection)."""
    import torch
    import transformers

    import albert_tf
    from albert_tf.checkpoints import hf_config_dict, hf_state_dict

    config = classifier.config
    pretrainer = albert_tf.AlbertPretrainer(config)
    pretrainer.encoder.set_weights(classifier.encoder.get_weights())
    tensors = {k[len("albert."):]: torch.from_numpy(v) for k, v in hf_state_dict(pretrainer).items()
               if k.startswith("albert.")}
    hf_config = transformers.AlbertConfig(**hf_config_dict(config))
    body = transformers.AlbertModel(hf_config, add_pooling_layer=True).eval()
    body.load_state_dict(tensors, strict=True)
    weights = classifier.head.output_weights.numpy()
    bias = classifier.head.output_bias.numpy() if getattr(classifier.head, "output_bias", None) is not None else None

    class Twin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body
            self.out = torch.nn.Linear(weights.shape[1], weights.shape[0], bias=bias is not None)
            with torch.no_grad():
                self.out.weight.copy_(torch.from_numpy(weights))
                if bias is not None:
                    self.out.bias.copy_(torch.from_numpy(bias))

        def forward(self, input_ids, input_mask, segment_ids):
            out = self.body(input_ids=input_ids, attention_mask=input_mask, token_type_ids=segment_ids)
            if classifier.pooling == "mean":
                mask = input_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
                pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            else:
                pooled = out.pooler_output
            return self.out(pooled)

    return Twin().eval()


def peer_graphs(classifier, calibration_items, dev_items) -> Tuple[Any, Any, float]:
    """(float ir, NNCF int8 ir, largest |logit difference| to ours on the dev items) of the Hugging Face twin,
    converted by OpenVINO's own converter from torch and quantized as optimum-intel does."""
    import openvino as ov
    import torch

    from albert_tf.export import int8

    twin = hf_twin(classifier)
    example = {k: torch.from_numpy(v.astype(np.int64)) for k, v in dev_items[0].items()}
    with torch.no_grad():
        ir = ov.convert_model(twin, example_input=example)
    for port, name in zip(ir.inputs, example):
        port.get_tensor().set_names({name})
    ir.outputs[0].get_tensor().set_names({"logits"})
    compiled = ov.Core().compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    theirs = np.concatenate([compiled(_int64(item))["logits"] for item in dev_items])
    ours = np.concatenate([classifier(item, training=False).numpy() for item in dev_items])
    difference = float(np.max(np.abs(theirs - ours)))
    if difference > TWIN_TOLERANCE * max(1.0, float(np.max(np.abs(ours)))):
        raise RuntimeError(f"the Hugging Face twin's logits differ from ours by {difference}: not the same model")
    quantized = int8.quantize_ids_model(ir, [_int64(item) for item in calibration_items])
    return ir, quantized, difference


def _int64(item: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {k: v.astype(np.int64) for k, v in item.items()}


def answer_changes(float_ir, int8_ir, items, labels: np.ndarray, precision: str = "f32") -> Dict[str, Any]:
    """How int8 changed the answers on labelled texts: `broken` (float right, int8 wrong), `fixed` (the reverse),
    `changed` (any other class), and the drop's standard error in points, sqrt(broken + fixed) / n x 100 (the
    paired difference of two accuracies on the same texts, as McNemar's test counts it).

    Both graphs compiled with `precision` inference, as `albert_tf.export.int8.measure_cost` does."""
    import openvino as ov

    core = ov.Core()
    predictions = []
    for ir in (float_ir, int8_ir):
        compiled = core.compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": precision})
        predictions.append(np.concatenate([np.argmax(compiled(item)["logits"], -1) for item in items]))
    before, after = (p == labels for p in predictions)
    broken, fixed = int(np.sum(before & ~after)), int(np.sum(~before & after))
    return {"changed": int(np.sum(predictions[0] != predictions[1])), "broken": broken, "fixed": fixed,
            "drop_standard_error": 100.0 * float(np.sqrt(broken + fixed)) / len(labels)}


def task_row(name: str, task_dir: str, max_seq_length: int) -> Dict[str, Any]:
    """Fine-tunes, exports ours in float and int8, quantizes the peer, and measures both on the same dev set."""
    import albert_tf
    import openvino as ov
    import tensorflow as tf

    from albert_tf.export import int8
    from albert_tf.export.openvino import export_openvino, float32_copy

    run_dir = os.path.join(FLAGS.output_dir, name)
    classifier, keras_accuracy = finetune(task_dir, FLAGS.pretrained_dir, os.path.join(run_dir, "finetune"),
                                          max_seq_length)
    classifier = float32_copy(classifier)  # trained in the kind's precision; both systems quantize float32 weights
    calibration, dev = text_sets(task_dir, list(classifier.label_names), FLAGS.calibration_size, FLAGS.seed)
    exports = {kind: export_openvino(classifier, os.path.join(run_dir, f"export_{kind}"), text_signatures=False,
                                     max_seq_length=max_seq_length, **options)
               for kind, options in (("float", {}), ("int8", {"quantize": "int8", "calibration": calibration,
                                                            "dev": dev, "max_accuracy_drop": 100.0}))}
    with tf.io.gfile.GFile(os.path.join(exports["int8"], "assets", int8.QUANTIZATION_ASSET)) as f:  # any --output_dir
        ours = json.load(f)["cost"]  # what albert-export itself reported
    pre = albert_tf.AlbertTextPreprocessor(os.path.join(FLAGS.pretrained_dir, "spm.model"),
                                           max_seq_length=max_seq_length)
    calibration_items, dev_items = int8.ids_items(pre, calibration), int8.ids_items(pre, dev)
    float_ir, int8_ir, difference = peer_graphs(classifier, calibration_items, dev_items)
    peer_items = [_int64(i) for i in dev_items]
    peer = int8.measure_cost(float_ir, int8_ir, peer_items, dev, "classifier")
    peer.update(answer_changes(float_ir, int8_ir, peer_items, dev.labels))
    core = ov.Core()
    our_irs = [core.read_model(os.path.join(exports[k], "model.xml")) for k in ("float", "int8")]
    ours.update(answer_changes(*our_irs, dev_items, dev.labels))
    served = int8.measure_cost_as_served(float_ir, int8_ir, peer_items, dev, "classifier")
    if served is not None:  # a bfloat16 CPU: both systems also as it serves them (the export measured ours so)
        peer["on_this_cpu"] = served
        peer["on_this_cpu"].update(answer_changes(float_ir, int8_ir, peer_items, dev.labels, served["precision"]))
        ours["on_this_cpu"].update(answer_changes(*our_irs, dev_items, dev.labels, served["precision"]))
    logging.info("%s: ours %s; peer %s", name, int8.describe(ours), int8.describe(peer))
    return {"task": name, "dev_examples": len(dev), "keras_accuracy": 100.0 * keras_accuracy, "ours": ours,
            "peer": peer, "twin_max_logit_difference": difference}


def render(rows: List[Dict[str, Any]], header: str) -> str:
    """The markdown table: per task and system, float and int8 dev accuracy, the drop (points) with its standard
    error, and the answers int8 broke, fixed and changed.

    >>> side = {"float": 70.0, "int8": 69.0, "drop": 1.0, "drop_standard_error": 1.0, "broken": 1, "fixed": 0,
    ...         "changed": 1}
    >>> row = {"task": "t", "dev_examples": 100, "twin_max_logit_difference": 1e-6, "ours": side, "peer": side}
    >>> render([row], "# h").splitlines()[-1]
    '| t | 100 | peer (NNCF on HF graph) | 70.00 | 69.00 | 1.00 +- 1.00 | 1 / 0 / 1 | 1e-06 |'
    """
    lines = [header, "", "| task | dev texts | system | float | int8 | drop +- s.e. (points) | "
             "answers int8 broke / fixed / changed | twin's largest logit difference |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sides = [("ours", r["ours"]), ("peer (NNCF on HF graph)", r["peer"])]
        sides += [(f"{system}, {side['on_this_cpu']['precision']} as served", side["on_this_cpu"])
                  for system, side in sides if "on_this_cpu" in side]
        for system, side in sides:
            twin = f"{r['twin_max_logit_difference']:.0e}" if system.startswith("peer") else ""
            lines.append(f"| {r['task']} | {r['dev_examples']} | {system} | {side['float']:.2f} | {side['int8']:.2f} "
                         f"| {side['drop']:.2f} +- {side['drop_standard_error']:.2f} | {side['broken']} / "
                         f"{side['fixed']} / {side['changed']} | {twin} |")
    return "\n".join(lines) + "\n"


def main(argv) -> None:
    del argv
    from bench.systems import common

    if not FLAGS.pretrained_dir:
        raise app.UsageError("--pretrained_dir is required (e.g. albert-demo's demo_output/model).")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    topic_dir = FLAGS.topic_task_dir
    if not topic_dir:
        from pipelines.stdlib_tasks import write_stdlib_topic_task

        topic_dir = os.path.join(FLAGS.output_dir, "topic_task")
        write_stdlib_topic_task(topic_dir, seed=FLAGS.seed)
    rows = [task_row("topic (the demo's task)", topic_dir, 64),
            task_row("same-module pairs", pair_task(FLAGS.output_dir, FLAGS.seed, FLAGS.pair_examples), 64)]
    command = ("python -m bench.studies.int8_accuracy --pretrained_dir=<albert-demo's demo_output/model> "
               "--topic_task_dir=<demo_output/topic_task>" + f" --seed={FLAGS.seed}"
               + ("" if FLAGS.output == RESULTS else f" --output=bench/results/{os.path.basename(FLAGS.output)}"))
    header = (f"# int8 accuracy cost, ours and NNCF on Hugging Face's graph, on {common.cpu_line()}\n\n"
              f"Command: `{command}` ({datetime.date.today()}); bench/studies/int8_accuracy.py says what runs. "
              "Accuracy x 100 on each task's dev split; drop = float - int8, in points; both systems f32 inference, "
              "the same calibration texts, dev ids and fine-tuned weights. On a CPU whose OpenVINO infers in "
              "bfloat16 by default, the rows 'as served' compile both graphs of each system so (bf16 float parts).")
    text = render(rows, header)
    print(text)
    with open(FLAGS.output + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(FLAGS.output + ".json", "w", encoding="utf-8") as f:
        json.dump({"command": command, "rows": rows}, f, indent=1, sort_keys=True, default=float)


if __name__ == "__main__":
    define_flags()
    app.run(main)
