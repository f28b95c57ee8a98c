"""Loading and saving weights: original TF1 checkpoints, Hugging Face, our own format.

One canonical naming drives every converter: the original google-research
checkpoint names (as in the released TF1 checkpoints), e.g.
`bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel`.
`original_variable_map` gives, for a built `AlbertPretrainer`, the variable
behind each canonical name; the Hugging Face reader only translates its key
names (and torch's [out, in] layout) to canonical names. With sharing other
than "all", attention and FFN groups are numbered separately under the same
scheme (group_<g> counts attention groups for `attention_1/...` names and
FFN groups for `ffn_1/...` and `LayerNorm_1` names).

Formats read by `load_checkpoint`:
- an original TF1 checkpoint prefix (`.../model.ckpt-125000`) or a folder
  (a released one: its only `model.ckpt-*` prefix, or the one its
  `checkpoint` file names) whose variables are named `bert/...`;
  `albert_config.json` next to it (or pass `config=`);
- a Hugging Face ALBERT folder: `config.json` + `model.safetensors` (read with
  safetensors' NumPy API: no torch needed);
- our format: a folder with `albert_config.json` + `model.weights.safetensors`
  (written by `save_pretrained` and `albert-convert`): the canonical names
  above as safetensors keys, so the file does not depend on how the Keras
  layers are nested and any mismatch is reported by variable name;
- a training checkpoint of this project (`tf.train.Checkpoint(model=...)`),
  prefix or folder, with `albert_config.json` in the same folder.

Which file of a folder is read follows `albert_tf.model_folder` (the rule every
binary uses); files are read through `tf.io.gfile`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf import model_folder
from albert_tf.config import AlbertConfig
from albert_tf.models.pretrainer import AlbertPretrainer

CONFIG_FILENAME = model_folder.CONFIG_NAME
WEIGHTS_FILENAME = model_folder.WEIGHTS_NAME
SPM_MODEL_FILENAME = model_folder.VOCABULARY_NAMES[0]
SPM_VOCAB_FILENAME = "spm.vocab"

# Variables of original checkpoints that are not model weights.
_ORIGINAL_NON_MODEL = re.compile(r"(^global_step$|/adam_[mv]$|/lamb_[mv]$|^good_steps$|^loss_scale$)")


# ----------------------------------------------------------------------- names
def original_variable_map(model: AlbertPretrainer) -> Dict[str, "tf.Variable"]:
    """Canonical (original checkpoint) name -> variable of a built pretrainer."""
    names = encoder_variable_map(model.encoder)
    mlm = model.mlm_head
    names["cls/predictions/transform/dense/kernel"] = mlm.transform.kernel
    names["cls/predictions/transform/dense/bias"] = mlm.transform.bias
    names["cls/predictions/transform/LayerNorm/gamma"] = mlm.layer_norm.gamma
    names["cls/predictions/transform/LayerNorm/beta"] = mlm.layer_norm.beta
    names["cls/predictions/output_bias"] = mlm.output_bias
    names["cls/seq_relationship/output_weights"] = model.sop_head.output_weights
    names["cls/seq_relationship/output_bias"] = model.sop_head.output_bias
    return names


def encoder_variable_map(enc) -> Dict[str, "tf.Variable"]:
    """Canonical name -> variable of a built `AlbertEncoder` (the `bert/` names)."""
    emb = enc.embeddings
    names: Dict[str, tf.Variable] = {
        "bert/embeddings/word_embeddings": emb.word_embeddings,
        "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        "bert/embeddings/LayerNorm/gamma": emb.layer_norm.gamma,
        "bert/embeddings/LayerNorm/beta": emb.layer_norm.beta,
    }
    if enc.embedding_projection is not None:
        names["bert/encoder/embedding_hidden_mapping_in/kernel"] = enc.embedding_projection.kernel
        names["bert/encoder/embedding_hidden_mapping_in/bias"] = enc.embedding_projection.bias
    prefix = "bert/encoder/transformer"
    for g, group in enumerate(enc.transformer.attention_groups):
        for k, attn in enumerate(group):
            base = f"{prefix}/group_{g}/inner_group_{k}"
            for part in ("query", "key", "value"):
                dense = getattr(attn, part)
                names[f"{base}/attention_1/self/{part}/kernel"] = dense.kernel
                names[f"{base}/attention_1/self/{part}/bias"] = dense.bias
            names[f"{base}/attention_1/output/dense/kernel"] = attn.output_dense.kernel
            names[f"{base}/attention_1/output/dense/bias"] = attn.output_dense.bias
            names[f"{base}/LayerNorm/gamma"] = attn.layer_norm.gamma
            names[f"{base}/LayerNorm/beta"] = attn.layer_norm.beta
    for g, group in enumerate(enc.transformer.ffn_groups):
        for k, ffn in enumerate(group):
            base = f"{prefix}/group_{g}/inner_group_{k}"
            names[f"{base}/ffn_1/intermediate/dense/kernel"] = ffn.intermediate.kernel
            names[f"{base}/ffn_1/intermediate/dense/bias"] = ffn.intermediate.bias
            names[f"{base}/ffn_1/intermediate/output/dense/kernel"] = ffn.output_dense.kernel
            names[f"{base}/ffn_1/intermediate/output/dense/bias"] = ffn.output_dense.bias
            names[f"{base}/LayerNorm_1/gamma"] = ffn.layer_norm.gamma
            names[f"{base}/LayerNorm_1/beta"] = ffn.layer_norm.beta
    names["bert/pooler/dense/kernel"] = enc.pooler.kernel
    names["bert/pooler/dense/bias"] = enc.pooler.bias
    return names


def _is_head(name: str) -> bool:
    return name.startswith("cls/")


_PROJECTION = "bert/encoder/embedding_hidden_mapping_in/"


def _carries_nothing(values: Mapping[str, np.ndarray], name: str) -> bool:
    """Whether `name` is the embedding projection of a model without one (E = H) as Hugging Face stores it: the
    identity and a zero bias (`hf_state_dict`), which a model that adds the embeddings unprojected computes too."""
    if not name.startswith(_PROJECTION):
        return False
    kernel, bias = values.get(_PROJECTION + "kernel"), values.get(_PROJECTION + "bias")
    if kernel is None or bias is None or kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1]:
        return False
    return bool(np.array_equal(kernel, np.eye(kernel.shape[0], dtype=kernel.dtype)) and not np.any(bias))


def assign_by_name(
    model: AlbertPretrainer,
    values: Mapping[str, np.ndarray],
    source: str,
    ignore_unused: Optional[re.Pattern] = None,
) -> List[str]:
    """Assigns canonical-named arrays to the model's variables.

    Every encoder variable must be present; missing head variables are
    reported (a warning: an encoder-only checkpoint leaves the heads at their
    initial values). Encoder (``bert/``) names the model has no place for are
    an error, other unused names are reported. A shape mismatch is an error
    in one line naming the first variable and both shapes.

    Returns:
        The canonical names of the head variables the values lacked.
    """
    targets = original_variable_map(model)
    mismatched = [
        f"{name} has shape {tuple(values[name].shape)} there and {tuple(var.shape)} in the model"
        for name, var in targets.items()
        if name in values and tuple(values[name].shape) != tuple(var.shape)
    ]
    if mismatched:
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise ValueError(f"{source} does not match its config: {mismatched[0]}{more}; the checkpoint is a model "
                         "of another size, or the config beside it is not its own.")
    missing = [name for name in targets if name not in values]
    missing_encoder = [name for name in missing if not _is_head(name)]
    if missing_encoder:
        raise ValueError(
            f"{source} lacks {len(missing_encoder)} encoder variable(s) the config needs, e.g. "
            + ", ".join(missing_encoder[:5])
            + ". Check that the config matches the checkpoint (num_hidden_groups, inner_group_num, sharing)."
        )
    unused = [
        name
        for name in values
        if name not in targets and not (ignore_unused is not None and ignore_unused.search(name))
    ]
    unused_encoder = sorted(name for name in unused
                            if name.startswith("bert/") and not _carries_nothing(values, name))
    if unused_encoder:  # more layers or groups than the config has: they would be dropped silently
        raise ValueError(
            f"{source} holds {len(unused_encoder)} encoder variable(s) the config has no place for, e.g. "
            f"{unused_encoder[0]}. Check that the config matches the checkpoint (num_hidden_layers, "
            "num_hidden_groups, inner_group_num, sharing).")
    if missing:
        logging.warning(
            "%s has no values for %d head variable(s); they keep their random initialisation: %s",
            source,
            len(missing),
            ", ".join(missing),
        )
    if unused:
        logging.warning("%s: %d variable(s) not used by the model: %s", source, len(unused), ", ".join(sorted(unused)))
    for name, var in targets.items():
        if name in values:
            var.assign(np.asarray(values[name], dtype=var.dtype))
    return missing


# --------------------------------------------------------------- original TF1
def checkpoint_reader(prefix: str):
    """The reader of the TF checkpoint `prefix` (e.g. run/ckpt-4).

    Not tf.train.load_checkpoint / list_variables: they first ask the file
    system whether `prefix` is a folder, which ram:// answers yes for any
    prefix of a file name, and then look for a `checkpoint` file in it.
    """
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def checkpoint_variable_names(prefix: str) -> List[str]:
    """The variable names a TF checkpoint prefix holds, sorted."""
    return sorted(checkpoint_reader(prefix).get_variable_to_shape_map())


def _read_tf1_checkpoint(prefix: str) -> Dict[str, np.ndarray]:
    reader = checkpoint_reader(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _is_original_checkpoint(prefix: str) -> bool:
    return any(name.startswith("bert/") for name in checkpoint_variable_names(prefix))


# --------------------------------------------------------------- Hugging Face
_HF_ACTIVATIONS = {
    "gelu_new": "gelu",  # tanh approximation, the original's "gelu"
    "gelu_pytorch_tanh": "gelu",
    "gelu": "gelu_exact",  # Hugging Face's "gelu" is the erf form
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}


def config_from_hf(hf: Mapping) -> AlbertConfig:
    """An `AlbertConfig` from a Hugging Face ALBERT `config.json` dict."""
    if hf.get("model_type", "albert") != "albert":
        raise ValueError(f"config.json has model_type={hf.get('model_type')!r}, expected 'albert'.")
    act = hf.get("hidden_act", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise ValueError(f"Unsupported Hugging Face hidden_act {act!r}; supported: {sorted(_HF_ACTIVATIONS)}.")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"Unsupported position_embedding_type {position_type!r}; only 'absolute' exists in ALBERT.")
    # Hugging Face uses the original's field names (and our layer_norm_eps),
    # except for the activation. Its defaults differ from the original's
    # (hidden_size 4096, ...), so required fields must be present.
    keys = [f.name for f in dataclasses.fields(AlbertConfig) if f.name not in ("hidden_act", "sharing")]
    values = {k: hf[k] for k in keys if k in hf}
    return AlbertConfig.from_dict({**values, "hidden_act": _HF_ACTIVATIONS[act]})


# Hugging Face keys (without the "albert." prefix) outside the layer groups ->
# (canonical name, transposed?): torch's Linear weights are [out, in].
_HF_SIMPLE_NAMES = {
    "embeddings.word_embeddings.weight": ("bert/embeddings/word_embeddings", False),
    "embeddings.token_type_embeddings.weight": ("bert/embeddings/token_type_embeddings", False),
    "embeddings.position_embeddings.weight": ("bert/embeddings/position_embeddings", False),
    "embeddings.LayerNorm.weight": ("bert/embeddings/LayerNorm/gamma", False),
    "embeddings.LayerNorm.bias": ("bert/embeddings/LayerNorm/beta", False),
    "encoder.embedding_hidden_mapping_in.weight": ("bert/encoder/embedding_hidden_mapping_in/kernel", True),
    "encoder.embedding_hidden_mapping_in.bias": ("bert/encoder/embedding_hidden_mapping_in/bias", False),
    "pooler.weight": ("bert/pooler/dense/kernel", True),
    "pooler.bias": ("bert/pooler/dense/bias", False),
    "predictions.dense.weight": ("cls/predictions/transform/dense/kernel", True),
    "predictions.dense.bias": ("cls/predictions/transform/dense/bias", False),
    "predictions.LayerNorm.weight": ("cls/predictions/transform/LayerNorm/gamma", False),
    "predictions.LayerNorm.bias": ("cls/predictions/transform/LayerNorm/beta", False),
    "predictions.bias": ("cls/predictions/output_bias", False),
    "sop_classifier.classifier.weight": ("cls/seq_relationship/output_weights", False),
    "sop_classifier.classifier.bias": ("cls/seq_relationship/output_bias", False),
}
# Parts of a Hugging Face AlbertLayer -> the original's names inside group_<g>/inner_group_<k>.
_HF_DENSE_PARTS = {
    "attention.query": "attention_1/self/query",
    "attention.key": "attention_1/self/key",
    "attention.value": "attention_1/self/value",
    "attention.dense": "attention_1/output/dense",
    "ffn": "ffn_1/intermediate/dense",
    "ffn_output": "ffn_1/intermediate/output/dense",
}
_HF_NORM_PARTS = {"attention.LayerNorm": "LayerNorm", "full_layer_layer_norm": "LayerNorm_1"}


def _hf_to_original_name(key: str) -> Optional[Tuple[str, bool]]:
    """Hugging Face key -> (canonical name, transpose?) or None if not a weight."""
    key = key[len("albert."):] if key.startswith("albert.") else key
    if key in _HF_SIMPLE_NAMES:
        return _HF_SIMPLE_NAMES[key]
    match = re.fullmatch(r"encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.(.+)\.(weight|bias)", key)
    if not match:
        return None
    g, k, part, kind = match.groups()
    base = f"bert/encoder/transformer/group_{g}/inner_group_{k}"
    if part in _HF_DENSE_PARTS:
        return f"{base}/{_HF_DENSE_PARTS[part]}/{'kernel' if kind == 'weight' else 'bias'}", kind == "weight"
    if part in _HF_NORM_PARTS:
        return f"{base}/{_HF_NORM_PARTS[part]}/{'gamma' if kind == 'weight' else 'beta'}", False
    return None


# Keys of Hugging Face files that are buffers or tied copies, not extra weights.
_HF_REDUNDANT = re.compile(r"(position_ids$|^predictions\.decoder\.(weight|bias)$)")


def _read_hf_folder(folder: str) -> Tuple[AlbertConfig, Dict[str, np.ndarray]]:
    config = model_folder.read_config(os.path.join(folder, model_folder.HF_CONFIG_NAME))
    tensors = _read_safetensors(os.path.join(folder, model_folder.HF_WEIGHTS_NAME))
    values: Dict[str, np.ndarray] = {}
    unused: List[str] = []
    for key, array in tensors.items():
        mapped = _hf_to_original_name(key)
        if mapped is None:
            if not _HF_REDUNDANT.search(key):
                unused.append(key)
            continue
        name, transpose = mapped
        values[name] = array.T if transpose else array
    if "cls/predictions/output_bias" not in values and "predictions.decoder.bias" in tensors:
        values["cls/predictions/output_bias"] = tensors["predictions.decoder.bias"]
    if unused:
        logging.warning("%s: %d tensor(s) not used by the model: %s", folder, len(unused), ", ".join(sorted(unused)))
    return config, values


# -------------------------------------------------------------------- loading
def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """A safetensors file's arrays, read through tf.io.gfile (gs:// and ram:// work): safetensors' load_file takes
    local paths only."""
    from safetensors.numpy import load  # local import: only this path needs it

    with tf.io.gfile.GFile(path, "rb") as f:
        return load(f.read())


def load_checkpoint(path: str, config: Optional[AlbertConfig] = None, dtype=None) -> AlbertPretrainer:
    """Builds an `AlbertPretrainer` and loads weights from any supported source.

    Args:
        path: an original TF1 checkpoint prefix or folder, a Hugging Face ALBERT
            folder, a folder written by `save_pretrained`, or a training
            checkpoint (prefix or folder) of this project.
        config: overrides the config found next to the weights (not for
            Hugging Face folders, whose config.json is authoritative).
        dtype: optional Keras dtype policy for the model, e.g. "mixed_bfloat16".

    Returns:
        The pretrainer with weights; `.encoder` is the encoder.

    Example:
    >>> pre = albert_tf.load_checkpoint("albert_base_v2/model.ckpt-best")  # doctest: +SKIP
    """
    return load_checkpoint_with_report(path, config, dtype)[0]


def load_checkpoint_with_report(path: str, config: Optional[AlbertConfig] = None,
                                dtype=None) -> Tuple[AlbertPretrainer, List[str]]:
    """`load_checkpoint`, also returning the canonical names of the head
    variables the source lacked (they keep their random initialisation), so
    that a converter writes only the heads the source had.

    Example:
    >>> pre, missing = load_checkpoint_with_report("finetuned_sst2")  # doctest: +SKIP
    >>> missing[:1]                                                    # doctest: +SKIP
    ['cls/predictions/transform/dense/kernel']
    """
    weights, weights_format = model_folder.find_weights(path)
    kwargs = {} if dtype is None else {"dtype": dtype}
    if weights_format == model_folder.HUGGING_FACE:
        hf_config, values = _read_hf_folder(path)
        model = AlbertPretrainer(hf_config, **kwargs)
        return model, assign_by_name(model, values, source=path)
    model = AlbertPretrainer(config or model_folder.model_config(path), **kwargs)
    if weights_format == model_folder.ALBERT_TF:
        return model, assign_by_name(model, _read_safetensors(weights), source=weights)
    prefix = weights
    if _is_original_checkpoint(prefix):
        return model, assign_by_name(model, _read_tf1_checkpoint(prefix), source=prefix,
                                     ignore_unused=_ORIGINAL_NON_MODEL)
    else:
        status = tf.train.Checkpoint(model=model).read(prefix)
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(f"Training checkpoint {prefix} does not match the config: {e}") from e
        status.expect_partial()
    return model, []  # a training checkpoint holds the whole pretrainer


# -------------------------------------------------------------------- saving
def sorted_metadata(blob: bytes) -> bytes:
    """A safetensors file's bytes with its `__metadata__` keys in sorted order.

    safetensors' serializer writes the metadata in hash order, which changes
    from process to process: equal weights gave different files, so a rerun of
    a finished run rewrote its model. The header keeps its length (the same
    keys, values and compact JSON), so the tensors' offsets do not move.

    Args:
        blob: what `safetensors.numpy.save` returned.

    Returns:
        The same file with the metadata sorted.

    Example:

    >>> from safetensors.numpy import save
    >>> blob = sorted_metadata(save({"w": np.zeros(2, np.float32)}, metadata={"b": "1", "a": "2"}))
    >>> blob[8:45]
    b'{"__metadata__":{"a":"2","b":"1"},"w"'
    """
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    if "__metadata__" not in header:
        return blob
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > size:  # cannot happen for the serializer's compact JSON; never write a broken header
        return blob
    return blob[:8] + text.ljust(size, b" ") + blob[8 + size:]


def save_pretrained(model: AlbertPretrainer, output_dir: str, spm_model_file: Optional[str] = None,
                    step: Optional[int] = None) -> str:
    """Writes our format: albert_config.json + model.weights.safetensors (+ spm.model).

    Files are written under temporary names and renamed, so a crash never
    leaves a half-written weights file under the final name.

    Args:
        model: an `AlbertPretrainer`.
        output_dir: folder to write (created if needed).
        spm_model_file: optional SentencePiece model to copy as spm.model (and
            its .vocab, when it sits next to it, as spm.vocab).
        step: the training step of the weights, recorded in the file's
            metadata, so that `load_checkpoint` of a folder that also holds
            training checkpoints takes the newer (`model_folder.find_weights`).

    Returns:
        output_dir.
    """
    from safetensors.numpy import save

    from pipelines.fileio import atomic_copy, atomic_write

    tf.io.gfile.makedirs(output_dir)
    arrays = {name: np.asarray(var.numpy()) for name, var in original_variable_map(model).items()}
    with atomic_write(os.path.join(output_dir, WEIGHTS_FILENAME), "wb") as f:
        metadata = {"format": "albert-tf", "sharing": model.config.sharing}
        if step is not None:
            metadata[model_folder.STEP_METADATA] = str(int(step))
        f.write(sorted_metadata(save(arrays, metadata=metadata)))
    model.config.to_json_file(os.path.join(output_dir, CONFIG_FILENAME))
    if spm_model_file:
        atomic_copy(spm_model_file, os.path.join(output_dir, SPM_MODEL_FILENAME))
        vocab = os.path.splitext(spm_model_file)[0] + ".vocab"
        if tf.io.gfile.exists(vocab):
            atomic_copy(vocab, os.path.join(output_dir, SPM_VOCAB_FILENAME))
    return output_dir


# ------------------------------------------------------ writing Hugging Face
HF_CONFIG_FILENAME = model_folder.HF_CONFIG_NAME
HF_WEIGHTS_FILENAME = model_folder.HF_WEIGHTS_NAME
HF_SPM_MODEL_FILENAME = "spiece.model"
# Our activation -> Hugging Face's hidden_act (the inverse of _HF_ACTIVATIONS).
_TO_HF_ACTIVATIONS = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu", "relu": "relu",
                      "tanh": "tanh", "linear": "linear"}
# The SentencePiece ids every vocabulary of this project (and the original's) has.
_SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}  # <pad>, [CLS], [SEP]


def hf_num_hidden_groups(config: AlbertConfig) -> int:
    """The `num_hidden_groups` of the Hugging Face model that computes what `config` does.

    Hugging Face ALBERT keeps attention and FFN of a layer in one group, so
    it can express sharing "all" (G groups) and "none" (L groups), and
    "attention" / "ffn" only when G = L (nothing is then shared). Its layer
    l uses group ``int(l / (L / G))``, which differs from the original's
    ``int(l / L * G)`` in floating point for a few (l, L, G) (e.g. l = 15,
    L = G = 22); those configs are refused too.

    Raises:
        ValueError: one line naming the setting Hugging Face cannot express.

    Example:
    >>> hf_num_hidden_groups(AlbertConfig.tiny(sharing="none", num_hidden_layers=4))
    4
    """
    from albert_tf.layers.transformer_stack import group_for_layer

    groups = config.num_attention_groups
    if groups != config.num_ffn_groups:
        raise ValueError(
            f"sharing={config.sharing!r} with num_hidden_groups={config.num_hidden_groups} < "
            f"num_hidden_layers={config.num_hidden_layers} cannot be written for Hugging Face: its ALBERT "
            "shares a layer's attention and FFN together (sharing 'all' or 'none' only).")
    layers = config.num_hidden_layers
    for layer in range(layers):
        ours, theirs = group_for_layer(layer, layers, groups), int(layer / (layers / groups))
        if ours != theirs:
            raise ValueError(
                f"num_hidden_layers={layers} with {groups} parameter groups cannot be written for Hugging Face: "
                f"layer {layer} uses group {ours} here (int(l / L * G)) but {theirs} there (int(l / (L / G))).")
    return groups


def hf_config_dict(config: AlbertConfig, architectures: Sequence[str] = ("AlbertForPreTraining",)) -> dict:
    """The Hugging Face `config.json` (transformers' AlbertConfig fields) for `config`.

    Example:
    >>> d = hf_config_dict(AlbertConfig.tiny())
    >>> d["model_type"], d["hidden_act"], d["pad_token_id"], d["bos_token_id"], d["eos_token_id"]
    ('albert', 'gelu_new', 0, 2, 3)
    """
    c = config
    return {
        "architectures": list(architectures), "model_type": "albert",
        "vocab_size": c.vocab_size, "embedding_size": c.embedding_size, "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers, "num_hidden_groups": hf_num_hidden_groups(c),
        "inner_group_num": c.inner_group_num, "num_attention_heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size, "hidden_act": _TO_HF_ACTIVATIONS[c.hidden_act],
        "hidden_dropout_prob": c.hidden_dropout_prob,
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        # The classifier head's dropout: the original run_classifier's (and our AlbertClassifier's) 0.1.
        "classifier_dropout_prob": 0.1,
        "max_position_embeddings": c.max_position_embeddings, "type_vocab_size": c.type_vocab_size,
        "initializer_range": c.initializer_range, "layer_norm_eps": c.layer_norm_eps,
        "position_embedding_type": "absolute", "tie_word_embeddings": True, **_SPECIAL_IDS,
    }


def _hf_keys(config: AlbertConfig, groups: int) -> List[str]:
    """Every Hugging Face AlbertForPreTraining weight key of `config` (heads included)."""
    keys = [key if key.startswith(("predictions.", "sop_classifier.")) else f"albert.{key}"
            for key in _HF_SIMPLE_NAMES]
    for g in range(groups):
        for k in range(config.inner_group_num):
            layer = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{k}"
            keys += [f"{layer}.{part}.{kind}" for part in (*_HF_DENSE_PARTS, *_HF_NORM_PARTS)
                     for kind in ("weight", "bias")]
    return keys


def hf_state_dict(model: AlbertPretrainer, missing_heads: Sequence[str] = ()) -> Dict[str, np.ndarray]:
    """Hugging Face AlbertForPreTraining tensors (key -> float32 array) of `model`.

    A head (MLM: ``predictions.*``, SOP: ``sop_classifier.*``) is left out when
    any of its variables is in `missing_heads`. Without an E -> H projection
    (E = H) Hugging Face still has one: it gets the identity and a zero bias,
    which compute exactly the same.
    """
    config = model.config
    groups = hf_num_hidden_groups(config)  # refuse before reading variables
    ours = {name: np.asarray(var.numpy(), np.float32) for name, var in original_variable_map(model).items()}
    projection = "bert/encoder/embedding_hidden_mapping_in"
    if f"{projection}/kernel" not in ours:
        ours[f"{projection}/kernel"] = np.eye(config.hidden_size, dtype=np.float32)
        ours[f"{projection}/bias"] = np.zeros(config.hidden_size, np.float32)
    skipped_heads = {name.split("/")[1] for name in missing_heads}  # "predictions", "seq_relationship"
    tensors = {}
    for key in _hf_keys(config, groups):
        name, transpose = _hf_to_original_name(key)
        if name.startswith("cls/") and name.split("/")[1] in skipped_heads:
            continue
        tensors[key] = np.ascontiguousarray(ours[name].T if transpose else ours[name])
    return tensors


def save_huggingface(model: AlbertPretrainer, output_dir: str, spm_model_file: Optional[str] = None, *,
                     missing_heads: Sequence[str] = (), do_lower_case: bool = True) -> str:
    """Writes a Hugging Face ALBERT folder that `transformers` and `load_checkpoint` read.

    Files: config.json (`hf_config_dict`), model.safetensors (`hf_state_dict`:
    transformers' parameter names, torch's [out, in] Linear layout, the MLM
    and SOP heads unless `missing_heads` names them), spiece.model (a copy
    of the SentencePiece model) and tokenizer_config.json (AlbertTokenizer,
    do_lower_case). architectures is AlbertForPreTraining with both heads,
    AlbertForMaskedLM with the MLM head only, else AlbertModel.

    Args:
        model: an `AlbertPretrainer` (e.g. from `load_checkpoint_with_report`).
        output_dir: the folder to write (created if needed).
        spm_model_file: the SentencePiece model to copy as spiece.model.
        missing_heads: canonical names of head variables the source lacked.
        do_lower_case: recorded for transformers' AlbertTokenizer.

    Returns:
        output_dir.

    Raises:
        ValueError: for a sharing layout Hugging Face cannot express
            (`hf_num_hidden_groups`), before anything is written.

    Example:
    >>> import tempfile
    >>> pre = AlbertPretrainer(AlbertConfig.tiny())
    >>> folder = save_huggingface(pre, tempfile.mkdtemp())
    >>> sorted(os.listdir(folder))
    ['config.json', 'model.safetensors', 'tokenizer_config.json']
    >>> load_checkpoint(folder).config.hidden_size == pre.config.hidden_size
    True
    """
    from safetensors.numpy import save

    from pipelines.fileio import atomic_copy, atomic_write

    tensors = hf_state_dict(model, missing_heads)  # raises for an inexpressible config first
    has_mlm = "predictions.bias" in tensors
    has_sop = "sop_classifier.classifier.weight" in tensors
    architecture = ("AlbertForPreTraining" if has_mlm and has_sop else "AlbertForMaskedLM" if has_mlm
                    else "AlbertModel")
    tf.io.gfile.makedirs(output_dir)
    with atomic_write(os.path.join(output_dir, HF_WEIGHTS_FILENAME), "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))  # transformers expects "pt"
    with atomic_write(os.path.join(output_dir, HF_CONFIG_FILENAME), "w") as f:
        json.dump(hf_config_dict(model.config, [architecture]), f, indent=2, sort_keys=True)
    with atomic_write(os.path.join(output_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "AlbertTokenizer", "do_lower_case": bool(do_lower_case),
                   "model_max_length": model.config.max_position_embeddings}, f, indent=2, sort_keys=True)
    if spm_model_file:
        atomic_copy(spm_model_file, os.path.join(output_dir, HF_SPM_MODEL_FILENAME))
    return output_dir
