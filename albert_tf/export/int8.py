"""int8 OpenVINO exports: post-training quantization with NNCF, and its cost measured on the user's text.

`export_openvino(..., quantize="int8", calibration=TextSet(...))` quantizes the
ids graph (before the tokenizer is attached): NNCF's post-training
quantization with its transformer settings (`nncf.ModelType.TRANSFORMER`:
the MatMuls and their inputs in int8, SmoothQuant where a weight is not
shared, LayerNorm / Softmax / GELU left in float) from statistics of the
calibration texts, one text (or pair) per item, as optimum-intel and NNCF's
own BERT examples calibrate. A weight shared by several layers is one node of
the graph (`openvino_graph.share_equal_constants`), so it stays one int8
tensor: the int8 IR of ALBERT-base holds 12 MB of weights, not 12 copies.

The cost is measured, not assumed (`measure_cost`): the float and the int8
graph answer the same texts (the dev split when given, else the calibration
texts) and the export logs both metrics, first with both graphs computing
in float32 (the quantization's cost alone), then, on a CPU whose OpenVINO
plugin infers in bfloat16 by default (AVX-512 BF16, AMX), as that CPU serves
them (`on_this_cpu`: bfloat16 float parts in both). A classifier with labelled dev
texts reports accuracy (a regression head: Pearson correlation), each x 100;
past `max_accuracy_drop` points the export is refused and nothing is
written. Without labels it reports how often the two agree on the class; the
encoder reports the cosine similarity of their pooled outputs. The figures
are written to `<version>/assets/quantization.json`.

Example (needs the [openvino] extra, which holds NNCF):

    from albert_tf.export.int8 import TextSet
    from albert_tf.export.openvino import export_openvino

    export_openvino(classifier, "exports/topic_int8", quantize="int8",
                    calibration=TextSet(train_texts),
                    dev=TextSet(dev_texts, labels=dev_label_ids))
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

QUANTIZATIONS = ("int8",)
# Items NNCF takes statistics from by default (nncf.quantize's subset_size); optimum-intel uses the same.
DEFAULT_CALIBRATION_SIZE = 300
# Points of accuracy (x 100) an int8 export may lose against the float one on the dev texts. OpenVINO publishes
# 0.11-0.57 points on SST-2 for bert-base, so 1 point leaves room for small dev sets without hiding a broken model.
DEFAULT_MAX_ACCURACY_DROP = 1.0
QUANTIZATION_ASSET = "quantization.json"


@dataclasses.dataclass
class TextSet:
    """Texts to calibrate or measure an int8 export with.

    Attributes:
        texts: first texts.
        text_pairs: second texts (a pair classifier), or None.
        labels: label ids (a classifier), float targets (regression), or None.
        source: where the texts came from, for the log and quantization.json.
    """

    texts: List[str]
    text_pairs: Optional[List[str]] = None
    labels: Optional[np.ndarray] = None
    source: str = "given texts"

    def __post_init__(self):
        if not self.texts:
            raise ValueError(f"{self.source}: no texts to calibrate or measure the int8 export with.")
        if self.text_pairs is not None and len(self.text_pairs) != len(self.texts):
            raise ValueError(f"{self.source}: {len(self.texts)} texts but {len(self.text_pairs)} second texts.")
        if self.labels is not None and len(self.labels) != len(self.texts):
            raise ValueError(f"{self.source}: {len(self.texts)} texts but {len(self.labels)} labels.")

    def __len__(self) -> int:
        return len(self.texts)

    def sample(self, size: int, seed: int) -> "TextSet":
        """At most `size` of the items, chosen with `seed` (all of them, in order, when there are fewer)."""
        if len(self) <= size:
            return self
        keep = np.sort(np.random.default_rng(seed).choice(len(self), size, replace=False))
        return TextSet([self.texts[i] for i in keep],
                       None if self.text_pairs is None else [self.text_pairs[i] for i in keep],
                       None if self.labels is None else np.asarray(self.labels)[keep],
                       f"{self.source} ({size} of {len(self)}, seed {seed})")


def read_lines(path: str) -> TextSet:
    """A calibration file: one text per line, or `text<TAB>text_pair` for a pair classifier; blank lines skipped.

    Args:
        path: the file (any tf.io.gfile path).

    Raises:
        ValueError: no text in it, or some lines hold a pair and others not.
    """
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"--calibration_file={path!r} does not exist.")
    with tf.io.gfile.GFile(path, "r") as f:
        rows = [line.rstrip("\r\n").split("\t") for line in f if line.strip()]
    if not rows:
        raise ValueError(f"--calibration_file={path!r} holds no text (one text per line, or text<TAB>text_pair).")
    widths = sorted({len(row) for row in rows})
    if widths not in ([1], [2]):
        raise ValueError(f"--calibration_file={path!r}: lines of {widths} tab-separated fields; give one text per "
                         "line, or text<TAB>text_pair on every line.")
    return TextSet([row[0] for row in rows], [row[1] for row in rows] if widths == [2] else None,
                   source=f"--calibration_file={path}")


def ids_items(preprocessor, texts: TextSet, batch_size: int = 1) -> List[Dict[str, np.ndarray]]:
    """The ids graph's inputs for `texts`: `batch_size` texts an item, cut after the longest real token.

    Args:
        preprocessor: the export's `AlbertTextPreprocessor` (the SavedModel's tokenization).
        texts: what to tokenize.
        batch_size: texts per item.
    """
    items = []
    for start in range(0, len(texts), batch_size):
        first = texts.texts[start:start + batch_size]
        second = None if texts.text_pairs is None else texts.text_pairs[start:start + batch_size]
        packed = {key: value.numpy().astype(np.int32) for key, value in preprocessor(first, second).items()}
        length = max(1, int(packed["input_mask"].sum(axis=1).max()))
        items.append({key: value[:, :length] for key, value in packed.items()})
    return items


def quantize_ids_model(ir: Any, calibration_items: Sequence[Dict[str, np.ndarray]]) -> Any:
    """The int8 form of an ids graph (`ov.Model`), from NNCF's statistics over `calibration_items`.

    Args:
        ir: the float32 ids graph (inputs input_ids, input_mask, segment_ids).
        calibration_items: its inputs (`ids_items`); every item is used.
    """
    import nncf
    from absl import logging

    logging.info("int8: NNCF post-training quantization (transformer settings) on %d calibration item(s).",
                 len(calibration_items))
    return nncf.quantize(ir, nncf.Dataset(list(calibration_items)), model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(calibration_items))


def _outputs(compiled, items: Sequence[Dict[str, np.ndarray]], name: str) -> np.ndarray:
    return np.concatenate([compiled(item)[name] for item in items], axis=0)


def default_inference_precision() -> str:
    """The float precision OpenVINO's CPU plugin infers in on this machine by default: "bf16" on CPUs with
    bfloat16 arithmetic (AVX-512 BF16, AMX), "f32" elsewhere."""
    import openvino as ov

    return ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def measure_cost(float_ir: Any, int8_ir: Any, items: Sequence[Dict[str, np.ndarray]], texts: TextSet,
                 head: str, precision: str = "f32") -> Dict[str, Any]:
    """What the int8 graph loses against the float one on `items` (the ids of `texts`).

    Args:
        float_ir, int8_ir: the two ids graphs (`ov.Model`).
        items: their inputs.
        texts: the texts of `items`, with labels or without.
        head: "classifier" or "encoder".
        precision: the inference precision both graphs are compiled with ("f32": the quantization's cost
            alone; "bf16": as a bfloat16 CPU serves them by default).

    Returns:
        classifier with labels: `metric` ("accuracy" or "pearson"), `float`, `int8` (x 100) and `drop` (points);
        classifier without: `agreement` (% of texts given the same class; regression: Pearson of the two x 100);
        encoder: `mean_cosine` and `min_cosine` of the pooled outputs. Always `examples` and `source`.
    """
    import openvino as ov

    core = ov.Core()
    # The same precision on both, given: the CPU plugin would otherwise pick bf16 on a bf16 CPU.
    config = {"INFERENCE_PRECISION_HINT": precision}
    float_model, int8_model = core.compile_model(float_ir, "CPU", config), core.compile_model(int8_ir, "CPU", config)
    report: Dict[str, Any] = {"examples": len(texts), "source": texts.source}
    if head == "encoder":
        a, b = (_outputs(m, items, "pooled_output") for m in (float_model, int8_model))
        cosine = np.sum(a * b, axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
        report.update(mean_cosine=float(np.mean(cosine)), min_cosine=float(np.min(cosine)))
        return report
    a, b = (_outputs(m, items, "logits") for m in (float_model, int8_model))
    regression = a.shape[-1] == 1
    if texts.labels is None:
        report["agreement"] = (100.0 * _pearson(a[:, 0], b[:, 0]) if regression
                               else 100.0 * float(np.mean(np.argmax(a, -1) == np.argmax(b, -1))))
        return report
    labels = np.asarray(texts.labels)
    if regression:
        scores = [100.0 * _pearson(x[:, 0], labels.astype(np.float64)) for x in (a, b)]
        report["metric"] = "pearson"
    else:
        scores = [100.0 * float(np.mean(np.argmax(x, -1) == labels)) for x in (a, b)]
        report["metric"] = "accuracy"
    report.update({"float": scores[0], "int8": scores[1], "drop": scores[0] - scores[1]})
    return report


def measure_cost_as_served(float_ir: Any, int8_ir: Any, items: Sequence[Dict[str, np.ndarray]], texts: TextSet,
                           head: str) -> Optional[Dict[str, Any]]:
    """`measure_cost` in the precision this CPU serves both graphs in, with that `precision` named; None on a
    CPU that serves float32 (where `measure_cost`'s default figure already is the served one)."""
    served = default_inference_precision()
    if served == "f32":
        return None
    return dict(measure_cost(float_ir, int8_ir, items, texts, head, served), precision=served)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation (0 when either side is constant).

    Example:
    >>> round(_pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 7.0])), 4)
    0.9934
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    scale = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / scale) if scale > 0 else 0.0


def describe(report: Dict[str, Any]) -> str:
    """One log line for `measure_cost`'s report (or its `on_this_cpu` part, which names its precision).

    Example:
    >>> describe({"examples": 40, "source": "dev", "metric": "accuracy", "float": 85.0, "int8": 84.5, "drop": 0.5})
    'int8 vs float on 40 texts of dev: accuracy 84.50 vs 85.00 (0.50 points lost)'
    """
    where = f"on {report['examples']} texts of {report['source']}"
    if "precision" in report:
        where += f", both inferring in {report['precision']} as this CPU serves them"
    if "drop" in report:
        return (f"int8 vs float {where}: {report['metric']} {report['int8']:.2f} vs {report['float']:.2f} "
                f"({report['drop']:.2f} points lost)")
    if "agreement" in report:
        return f"int8 vs float {where}: {report['agreement']:.2f}% agreement (no labels: the accuracy cost is unknown)"
    return (f"int8 vs float {where}: pooled_output cosine similarity mean {report['mean_cosine']:.4f}, "
            f"min {report['min_cosine']:.4f}")


def check_cost(report: Dict[str, Any], max_accuracy_drop: float) -> None:
    """Refuses an int8 model that loses more than `max_accuracy_drop` points on labelled dev texts, in float32
    inference or as this CPU serves it (`on_this_cpu`).

    Raises:
        ValueError: one line with both figures, the threshold's flag and what to do.
    """
    for measured in (report, report.get("on_this_cpu", {})):
        if "drop" in measured and measured["drop"] > max_accuracy_drop:
            raise ValueError(
                f"--quantize=int8: {describe(measured)}, more than --int8_max_accuracy_drop={max_accuracy_drop:g}; "
                "nothing was written. Calibrate on more or more typical text (--calibration_file, "
                "--calibration_size), allow a larger drop, or export float (no --quantize).")


def write_report(ir_dir: str, report: Dict[str, Any], calibration: TextSet) -> None:
    """`assets/quantization.json` beside model.xml: the method, the calibration texts' source and the cost."""
    record = {"precision": "int8", "method": "NNCF post-training quantization, nncf.ModelType.TRANSFORMER",
              "calibration": {"examples": len(calibration), "source": calibration.source}, "cost": report}
    import tensorflow as tf

    with tf.io.gfile.GFile(os.path.join(ir_dir, "assets", QUANTIZATION_ASSET), "w") as f:
        f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")


def check_request(quantize: str, calibration: Optional[TextSet], dev: Optional[TextSet],
                  text_pairs: Optional[bool]) -> None:
    """Refuses an unknown quantization, int8 without calibration texts, single texts for a pair classifier (or
    pairs for a single-text one), or int8 without NNCF installed: before any export work.

    Args:
        quantize: the quantization asked for.
        calibration, dev: the texts given.
        text_pairs: whether the classifier was trained on pairs (None: an encoder, or not recorded).

    Raises:
        ValueError: one line naming the flag.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"--quantize={quantize!r}: the OpenVINO export quantizes to {QUANTIZATIONS} (or not at all).")
    if calibration is None:
        raise ValueError("--quantize=int8 needs calibration text: --calibration_file (one text per line), or a "
                         "fine-tuned classifier's task data (--calibration_data_dir).")
    for name, texts in (("calibration", calibration), ("dev", dev)):
        if texts is not None and text_pairs is not None and (texts.text_pairs is not None) != text_pairs:
            given = "text pairs" if texts.text_pairs is not None else "single texts"
            raise ValueError(f"--quantize=int8: the {name} texts ({texts.source}) are {given}, but the classifier "
                             f"was trained on {'text pairs' if text_pairs else 'single texts'} (task_config.json "
                             "\"text_pairs\"); give text<TAB>text_pair lines for a pair classifier, one text per "
                             "line otherwise.")
    try:
        import nncf  # noqa: F401
    except ImportError as e:
        raise ValueError(f"--quantize=int8 needs NNCF, part of the [openvino] extra: pip install -e '.[openvino]' in "
                         "the checkout, in an environment without [beam] (Beam's protobuf cap breaks the tokenizer "
                         f"conversion the export uses; setup.py) ({e}).") from None


def quantize_and_measure(ir: Any, pre: Any, head: str, calibration: TextSet, dev: Optional[TextSet],
                         max_accuracy_drop: Optional[float]):
    """(int8 ids graph, its measured cost `measure_cost`); refuses one that loses more than max_accuracy_drop points.

    Args:
        ir: the float32 ids graph.
        pre: the export's preprocessor (tokenizes the texts).
        head: "encoder" or "classifier".
        calibration: the texts NNCF takes statistics from.
        dev: the texts both graphs answer (None: the calibration texts).
        max_accuracy_drop: points (None: DEFAULT_MAX_ACCURACY_DROP).
    """
    from absl import logging

    if not hasattr(pre, "tokenize"):
        raise ValueError("--quantize=int8 needs the model's SentencePiece model (--spm_model_file) to tokenize the "
                         "calibration text.")
    quantized = quantize_ids_model(ir, ids_items(pre, calibration))
    measured = dev if dev is not None else calibration
    items = ids_items(pre, measured, batch_size=16)
    cost = measure_cost(ir, quantized, items, measured, head)
    logging.info("%s.", describe(cost))
    served = measure_cost_as_served(ir, quantized, items, measured, head)
    if served is not None:  # a bfloat16 CPU: also what it serves (both graphs' float parts in bfloat16)
        cost["on_this_cpu"] = served
        logging.info("%s.", describe(served))
    if max_accuracy_drop is None:
        max_accuracy_drop = DEFAULT_MAX_ACCURACY_DROP
    check_cost(cost, max_accuracy_drop)
    return quantized, cost
