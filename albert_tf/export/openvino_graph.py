"""Edits of the OpenVINO model that `export_openvino` writes: one node per shared weight, empty batches, the
`label` output, the assets.

The CPU plugin runs no string op but the string tensors' own (pack, unpack,
the tokenizer's), so these edits work on the unpacked form of strings
(begins, ends, bytes) and on numbers.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Optional, Sequence

import numpy as np

# Outputs with a sequence axis (axis 1): an empty batch gives them one position, as the SavedModel does.
SEQUENCE_OUTPUTS = ("sequence_output", "input_mask")


def _i64(values):
    import openvino.opset15 as ops

    return ops.constant(np.array(values, np.int64))


def share_equal_constants(model) -> int:
    """Makes every group of equal constants (type, shape and bytes) one node that all their users read.

    A Keras layer called in several places (ALBERT's cross-layer sharing: one weight set for every layer) is
    traced once per call, so the converted graph holds one copy of its weights per layer. Saving the IR stores
    equal constants once, but the tools that work on the graph see copies: NNCF's SmoothQuant gives each copy
    its own scale (an int8 IR of ALBERT-base then holds 12 weight sets, 90 instead of 12 MB, and a multiply
    before every layer's projections), where it leaves a shared weight as it is.

    Args:
        model: an `openvino.Model`, edited in place.

    Returns:
        How many constants now read another's node.
    """
    import hashlib

    first = {}
    merged = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        data = np.ascontiguousarray(op.get_data())
        key = (str(op.get_element_type()), tuple(op.get_output_shape(0)),
               hashlib.sha256(data.view(np.uint8).reshape(-1)).hexdigest())
        kept = first.setdefault(key, op)
        if kept is not op and np.array_equal(kept.get_data(), data):
            op.output(0).replace(kept.output(0))
            merged += 1
    return merged


def answers_empty_batches(model):
    """The text model, answering an empty batch with no rows instead of failing in the tokenizer.

    An empty batch gets one "" row appended (only then) and every output is
    cut back to the batch's rows; outputs in SEQUENCE_OUTPUTS are then also
    cut to one position, so the shapes are the SavedModel's ([0, 1] for
    input_mask). A batch with rows runs unchanged.

    Args:
        model: an `openvino.Model` whose first parameter is `text` (string [batch]).

    Returns:
        The same model, edited.
    """
    import openvino as ov
    import openvino.opset15 as ops

    old = model.get_parameters()[0]
    text = ops.parameter(ov.PartialShape([-1]), ov.Type.string)
    begins, ends, chars = ops.string_tensor_unpack(text).outputs()
    batch = ops.gather(ops.shape_of(begins, ov.Type.i64), _i64([0]), _i64(0))
    empty = ops.convert(ops.equal(batch, _i64([0])), ov.Type.i64)  # [1]: 1 for an empty batch, else 0
    filler = ops.broadcast(ops.constant(np.array([0], np.int32)), empty)  # begin = end = 0: ""
    packed = ops.string_tensor_pack(ops.concat([begins, filler], 0), ops.concat([ends, filler], 0), chars)
    for target in list(old.output(0).get_target_inputs()):
        target.replace_source_output(packed.output(0))
    model.replace_parameter(0, text)
    text.output(0).get_tensor().set_names({"text"})
    for result in model.get_results():
        source = result.input(0).get_source_output()
        names = set(source.get_names())
        start, stop, axes = [0], batch, [0]
        if names & set(SEQUENCE_OUTPUTS):
            length = ops.gather(ops.shape_of(source, ov.Type.i64), _i64([1]), _i64(0))
            stop = ops.concat([batch, ops.subtract(length, ops.multiply(ops.subtract(length, _i64([1])), empty))], 0)
            start, axes = [0, 0], [0, 1]
        cut = ops.slice(source, _i64(start), stop, _i64([1] * len(start)), _i64(axes))
        source.get_tensor().set_names(set())
        cut.output(0).get_tensor().set_names(names)
        result.input(0).replace_source_output(cut.output(0))
    model.validate_nodes_and_infer_types()
    return model


def with_label(model, label_names: Sequence[str]):
    """Adds the SavedModel's `label` output: the name of each row's largest logit (the first on a tie).

    Args:
        model: an `openvino.Model` with a `logits` output [batch, len(label_names)].
        label_names: the class names, in the order of the logits.

    Returns:
        The same model, with a string output `label` [batch].
    """
    import openvino as ov
    import openvino.opset15 as ops

    logits = next(r.input(0).get_source_output() for r in model.get_results()
                  if "logits" in r.input(0).get_source_output().get_names())
    encoded = [name.encode("utf-8") for name in label_names]
    width = max([len(name) for name in encoded] + [1])
    # StringTensorPack needs ascending offsets: row i's name is copied to bytes [i * width, i * width + length).
    table = np.zeros([len(encoded), width], np.uint8)
    for i, name in enumerate(encoded):
        table[i, :len(name)] = np.frombuffer(name, np.uint8)
    best = ops.topk(logits, ops.constant(1, ov.Type.i64), axis=-1, mode="max", sort="none",
                    index_element_type=ov.Type.i32).output(1)
    best = ops.squeeze(best, _i64([1]))
    rows = ops.gather(ops.shape_of(best, ov.Type.i32), ops.constant([0], np.int32), _i64(0))
    begins = ops.multiply(ops.range(ops.constant(0, np.int32), ops.squeeze(rows, _i64([0])),
                                    ops.constant(1, np.int32), ov.Type.i32), ops.constant(width, np.int32))
    lengths = ops.constant(np.array([len(name) for name in encoded], np.int32))
    ends = ops.add(begins, ops.gather(lengths, best, _i64(0)))
    chars = ops.reshape(ops.gather(ops.constant(table), best, _i64(0)), _i64([-1]), special_zero=False)
    label = ops.string_tensor_pack(begins, ends, chars)
    label.output(0).get_tensor().set_names({"label"})
    model.add_results([ops.result(label)])
    return model


def saved_label_names(saved_dir: str) -> Optional[list]:
    """The label names the SavedModel export wrote (assets/label_names.txt), or None (no such asset)."""
    import tensorflow as tf

    from albert_tf.export.assets import LABELS_ASSET
    from pipelines.fileio import read_text

    path = os.path.join(saved_dir, "assets", LABELS_ASSET)
    if not tf.io.gfile.exists(path):
        return None
    text = read_text(path)  # one name per line, each ending in "\n" (names may hold other line breaks)
    return text[:-1].split("\n") if text else []


def copy_assets(saved_dir: str, ir_dir: str, *, text_input: bool, pack_tokens: bool) -> None:
    """The SavedModel's assets/ (SentencePiece model, configs, label names) beside the IR, with
    preprocessing.json saying what the OpenVINO model applies.

    Args:
        saved_dir: the SavedModel the IR was converted from.
        ir_dir: the folder holding model.xml.
        text_input: the IR takes `text` (its tokenizer does not cut long texts first: no chars_per_piece).
        pack_tokens: the IR's dense layers run on the real tokens only.
    """
    import tensorflow as tf

    from albert_tf.export.assets import PREPROCESSING_ASSET
    from pipelines.fileio import read_json

    assets = os.path.join(ir_dir, "assets")
    shutil.copytree(os.path.join(saved_dir, "assets"), assets)
    path = os.path.join(assets, PREPROCESSING_ASSET)
    settings = read_json(path)
    settings.update(format="openvino", text_input=bool(text_input), pack_tokens=bool(pack_tokens),
                    differences="albert_tf.export.openvino.TEXT_DIFFERENCES")
    if text_input:
        settings.pop("chars_per_piece", None)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(settings, indent=2, sort_keys=True) + "\n")
