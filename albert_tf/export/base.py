"""The exported tf.Module every head builds on, and the helpers the heads share."""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Mapping

import tensorflow as tf

from albert_tf.layers.preprocessor import CHARS_PER_PIECE, at_least_one_position

ID_INPUTS = ("input_ids", "input_mask", "segment_ids")


class IdsOnlyPacking:
    """The stand-in for the preprocessor of an ids-only export that has no SentencePiece model.

    An ids-only graph holds no tokenizer, so it needs none; this object keeps
    the packing settings the export records for clients
    (assets/preprocessing.json) and the [MASK] id of the SentencePiece
    contract. What needs the SentencePiece model itself (tokenizing, piece
    names) raises a ValueError saying what to pass.

    Args:
        owner: the model's class name (for the message).
        max_seq_length, do_lower_case, normalization: the packing settings.

    Example:
    >>> packing = IdsOnlyPacking("AlbertEncoder", 128, True, "original")
    >>> packing.max_seq_length, packing.mask_id, has_tokenizer(packing)
    (128, 4, False)
    >>> packing.spm_model_proto
    Traceback (most recent call last):
    ...
    ValueError: A AlbertEncoder has no tokenizer, and this export needs one (...): pass spm_model_file (...).
    """

    mask_id = 4  # the SentencePiece contract: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4

    def __init__(self, owner: str, max_seq_length: int, do_lower_case: bool, normalization: str):
        self.owner = owner
        self.max_seq_length = int(max_seq_length)
        self.do_lower_case = bool(do_lower_case)
        self.normalization = normalization

    def get_config(self) -> Dict[str, Any]:
        return {"max_seq_length": self.max_seq_length, "do_lower_case": self.do_lower_case,
                "normalization": self.normalization}

    def missing(self) -> ValueError:
        """The error for anything that needs the SentencePiece model."""
        return ValueError(f"A {self.owner} has no tokenizer, and this export needs one (text inputs or text "
                          "outputs): pass spm_model_file (the SentencePiece model it was trained with).")

    @property
    def spm_model_proto(self) -> bytes:
        raise self.missing()

    def tokenize(self, *args, **kwargs):
        raise self.missing()

    def __call__(self, *args, **kwargs):
        raise self.missing()


def has_tokenizer(preprocessor) -> bool:
    """Whether the export has a SentencePiece model (not an `IdsOnlyPacking`)."""
    return not isinstance(preprocessor, IdsOnlyPacking)


def _piece_table(preprocessor) -> List[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(preprocessor.spm_model_proto)
    return [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]


def _task_config(model) -> Dict[str, Any]:
    return dict(getattr(model, "task_config", None) or {})


def _names(model, given, attr: str, key: str, count: int, what: str) -> List[str]:
    names = given if given is not None else getattr(model, attr, None) or _task_config(model).get(key)
    if not names:
        return [str(i) for i in range(count)]
    names = [str(n) for n in names]
    if len(names) != count:
        raise ValueError(f"{len(names)} {what} names {names!r} for a model with {count} outputs.")
    if any("\n" in n for n in names):
        raise ValueError(f"{what} names must not contain newlines: {names!r}.")
    return names


def _spec(shape, dtype, name):
    return tf.TensorSpec(shape, dtype, name=name)


def _argmax_last(x: tf.Tensor) -> tf.Tensor:
    """int32 argmax over the last axis; 0 where that axis is empty (a request with no choices)."""
    pad = [[0, 0]] * (x.shape.rank - 1) + [[0, tf.maximum(0, 1 - tf.shape(x)[-1])]]
    return tf.argmax(tf.pad(x, pad, constant_values=x.dtype.min), axis=-1, output_type=tf.int32)


def _f32(x):
    return tf.cast(x, tf.float32)


class _Serving(tf.Module):
    """The exported object: model + preprocessor + the serving functions.

    Subclasses implement `outputs(ids)` (ids dict -> output dict) and may
    override `text_ids(...)`/the text signatures.
    """

    ids_rank = 2

    def __init__(self, model, preprocessor, head: str):
        super().__init__(name=f"albert_{head}_serving")
        # Not tracked: only what the graphs capture is saved (see signatures()),
        # so an ids-only export holds no SentencePiece op at all.
        self._refs = types.SimpleNamespace(model=model, preprocessor=preprocessor, frozen={})
        self.head = head
        self.text_signatures = True
        self.freeze_weights = False

    @property
    def model(self):
        return self._refs.model

    @property
    def preprocessor(self):
        return self._refs.preprocessor

    def outputs(self, ids: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def names_asset(self):
        """("label" or "tag", tf.string names) to write as an asset, or None."""
        return None

    def _id_specs(self):
        shape = [None] * self.ids_rank
        return [_spec(shape, tf.int32, name) for name in ID_INPUTS]

    def text_functions(self) -> Dict[str, Callable]:
        """Signature name -> tf.function over string inputs.

        Every serving function is traced with `autograph=False`: the graphs hold no tensor-dependent Python
        control flow (tf.cond / tf.while_loop where needed), and autograph's conversion of every function the
        model calls was a sixth of an export's CPU time.
        """

        @tf.function(autograph=False, input_signature=[_spec([None], tf.string, "text")])
        def serve_text(text):
            return self.outputs(self.text_ids(text))

        @tf.function(autograph=False,
                     input_signature=[_spec([None], tf.string, "text"), _spec([None], tf.string, "text_pair")])
        def serve_text_pair(text, text_pair):
            return self.outputs(self.text_ids(text, text_pair))

        return {"serving_default": serve_text, "serve_text_pair": serve_text_pair}

    def text_ids(self, text, text_pair=None) -> Dict[str, tf.Tensor]:
        """Strings -> id tensors, packed as the model packs them in training."""
        if hasattr(self.model, "features"):  # task models own their packing
            return self.model.features({"text": text} if text_pair is None else
                                       {"text": text, "text_pair": text_pair})
        return self.preprocessor(text, text_pair)

    def signatures(self) -> Dict[str, Any]:
        """Signature name -> concrete function (traced here, once per call).

        With `text_signatures` False only `serve_token_ids` exists (also as
        `serving_default`) and the graph holds no tensorflow-text op, so a
        stock TF Serving loads it.
        """

        @tf.function(autograph=False, input_signature=self._id_specs())
        def serve_token_ids(input_ids, input_mask, segment_ids):
            return self.outputs({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids})

        if self.text_signatures:
            # The SentencePiece resources the text graphs use must be saved with them.
            self.text_preprocessor = self.preprocessor
            # A task model's text graphs use its own preprocessor's resources.
            self.model_preprocessor = getattr(self.model, "preprocessor", None)
            functions = dict(self.text_functions())
        else:
            functions = {"serving_default": serve_token_ids}
        functions["serve_token_ids"] = serve_token_ids
        concrete = {name: fn.get_concrete_function() for name, fn in functions.items()}
        # Track the tf.Variables the graphs capture (not only the Keras
        # wrappers): the TF1-style loader of TF Serving and saved_model_cli
        # restores exactly these, else "Could not find variable ...".
        captured = {}
        for fn in concrete.values():
            # Only what the graph reads: tracing the frozen model (`run_model`)
            # also registers the model's variables with the signature's graph.
            handles = {id(t) for t in fn.captured_inputs}
            for var in fn.variables:
                if id(var.handle) in handles:
                    captured.setdefault(id(var), var)
        self._captured_variables = list(captured.values())
        return concrete

    def _call_model(self, ids):
        # An empty request has no [CLS] column; the encoder reads position 0.
        ids = at_least_one_position({k: tf.cast(ids[k], tf.int32) for k in ID_INPUTS})
        return self.run_model(ids)

    def run_model(self, inputs: Dict[str, tf.Tensor]):
        """`model(inputs, training=False)`; with `freeze_weights`, through a
        copy of the model's graph whose weights are constants."""
        if not self.freeze_weights:
            return self.model(inputs, training=False)
        frozen, outputs = self._frozen_model(inputs)
        flat = frozen(*tf.nest.flatten(inputs))
        return tf.nest.pack_sequence_as(outputs, flat)

    def _frozen_model(self, inputs):
        """`freeze_model_call` for inputs shaped like `inputs`, built once per
        input structure, eagerly (converting reads the variables' values) even
        while a signature is being traced."""
        specs = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in inputs.items()}
        key = tuple(sorted((k, str(spec.shape), spec.dtype.name) for k, spec in specs.items()))
        if key not in self._refs.frozen:
            with tf.init_scope():
                self._refs.frozen[key] = freeze_model_call(self.model, specs)
        return self._refs.frozen[key]

    def serving_settings(self) -> Dict[str, Any]:
        """What the graph applies to requests, written to assets/preprocessing.json."""
        pre = self.preprocessor
        return {"head": self.head, "max_seq_length": int(pre.max_seq_length), "do_lower_case": pre.do_lower_case,
                "normalization": pre.normalization, "chars_per_piece": CHARS_PER_PIECE}


def freeze_model_call(model, specs: Mapping[str, tf.TensorSpec]):
    """`model(inputs, training=False)` as a graph whose weights are constants.

    The model is traced with every bias add fused (the fast form for constant
    weights, see `albert_tf.layers.fused.tracing_for_constant_weights`), then
    its variables become constants. Call it eagerly.

    Args:
        model: a built Keras model taking a dict of tensors.
        specs: input name -> `tf.TensorSpec`.

    Returns:
        (function, outputs): call `function(*tf.nest.flatten(inputs))`, and
        `tf.nest.pack_sequence_as(outputs, result)` gives the model's outputs.

    Example:
    >>> enc = albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())  # doctest: +SKIP
    >>> specs = {k: tf.TensorSpec([None, None], tf.int32) for k in ID_INPUTS}  # doctest: +SKIP
    >>> frozen, outputs = freeze_model_call(enc, specs)  # doctest: +SKIP
    """
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from albert_tf.layers.fused import tracing_for_constant_weights

    with tracing_for_constant_weights():
        concrete = tf.function(lambda x: model(x, training=False), autograph=False).get_concrete_function(
            dict(specs))
    return convert_variables_to_constants_v2(concrete), concrete.structured_outputs


def _max_len(preprocessor) -> int:
    return int(preprocessor.get_config()["max_seq_length"])


def _num_outputs(model, key: str, attr: str) -> int:
    value = getattr(model, attr, None) or _task_config(model).get(key)
    if not value:
        raise ValueError(f"Cannot tell {key} of the {type(model).__name__} (no .{attr} or task_config[{key!r}]).")
    return int(value)
