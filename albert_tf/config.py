"""AlbertConfig: the model hyperparameters, presets and parameter-sharing modes.

The JSON form is the original google-research `albert_config.json`, so released
configs load unchanged and configs written here load in the original code.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any, Dict, Optional

# Strategies of the paper's cross-layer sharing ablation (Lan et al. 2019, Table 4).
SHARING_MODES = ("all", "attention", "ffn", "none")

# "gelu" is the tanh approximation, as in the original modeling.py. "gelu_new"
# is Hugging Face's name for the same function; "gelu_exact" is the erf form
# (what Hugging Face calls "gelu").
ACTIVATIONS = ("gelu", "gelu_new", "gelu_exact", "relu", "tanh", "linear")

# Fields every released albert_config.json carries: a config file without one
# of them is an error (a default would silently change the model: a "large"
# config without num_hidden_layers would train 12 layers). The other fields
# may be absent and take their defaults.
REQUIRED_FIELDS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
)

# Keys found in released albert_config.json files that modeling.py never reads.
_UNUSED_ORIGINAL_KEYS = (
    "down_scale_factor",
    "net_structure_type",
    "gap_size",
    "num_memory_blocks",
    "layers_to_keep",
)


@dataclasses.dataclass(frozen=True)
class AlbertConfig:
    """Hyperparameters of an ALBERT (or BERT-style) encoder.

    Args:
        vocab_size: number of SentencePiece ids (V).
        embedding_size: width E of the word, position and type tables. When it
            differs from `hidden_size`, a dense layer projects E -> H
            (factorized embedding parameterization).
        hidden_size: transformer width H.
        num_hidden_layers: number of layers L applied in sequence.
        num_hidden_groups: G parameter groups; layer l uses group int(l / L * G)
            (computed in floating point, as the original).
        inner_group_num: K attention+FFN blocks inside each group, applied in
            sequence within a layer.
        num_attention_heads: heads N; H must be divisible by N.
        intermediate_size: FFN inner width.
        hidden_act: "gelu" (tanh approximation, as the original), "gelu_new"
            (same), "gelu_exact" (erf), "relu", "tanh" or "linear".
        hidden_dropout_prob: dropout on embeddings and sublayer outputs.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest supported sequence.
        type_vocab_size: number of segment ids.
        initializer_range: stddev of the truncated-normal initializer.
        sharing: "all" (the original: attention and FFN shared per group),
            "attention" (only attention shared; every layer has its own FFN),
            "ffn" (only the FFN shared) or "none" (BERT: nothing shared).
        layer_norm_eps: epsilon of every LayerNorm (1e-12 in the original;
            Hugging Face configs may carry another value).

    Example:
    >>> cfg = AlbertConfig.from_preset("albert_base_v2")
    >>> cfg.hidden_size, cfg.embedding_size
    (768, 128)
    >>> AlbertConfig.tiny(hidden_dropout_prob=0).hidden_dropout_prob  # ints are fine for floats
    0.0
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    sharing: str = "all"
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        self._check_types()
        positive = (
            "vocab_size",
            "embedding_size",
            "hidden_size",
            "num_hidden_layers",
            "num_hidden_groups",
            "inner_group_num",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"AlbertConfig.{name} must be a positive integer, got {value!r}."
                )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"AlbertConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}."
            )
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ValueError(
                f"AlbertConfig.num_hidden_groups={self.num_hidden_groups} is larger "
                f"than num_hidden_layers={self.num_hidden_layers}."
            )
        if self.sharing not in SHARING_MODES:
            raise ValueError(
                f"AlbertConfig.sharing={self.sharing!r} is not one of {SHARING_MODES}."
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"AlbertConfig.hidden_act={self.hidden_act!r} is not one of "
                f"{ACTIVATIONS}."
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"AlbertConfig.{name} must be in [0, 1), got {value!r}.")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"AlbertConfig.{name} must be positive, got {value!r}.")

    def _check_types(self) -> None:
        """Each field has its declared type; ints become floats where a float is due.

        A bool is not an int here (JSON `true` for a layer count is a mistake).
        """
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            expected = field.type if isinstance(field.type, str) else field.type.__name__
            if expected == "int" and isinstance(value, numbers.Integral) and not isinstance(value, bool):
                object.__setattr__(self, field.name, int(value))
            elif expected == "float" and isinstance(value, numbers.Real) and not isinstance(value, bool):
                object.__setattr__(self, field.name, float(value))
            elif expected == "str" and isinstance(value, str):
                pass
            else:
                raise ValueError(
                    f"AlbertConfig.{field.name} must be {'an' if expected == 'int' else 'a'} {expected}, "
                    f"got {value!r} ({type(value).__name__})."
                )

    # ----------------------------------------------------------------- sharing
    @property
    def num_attention_groups(self) -> int:
        """Distinct attention parameter sets (each holding K inner blocks)."""
        return self.num_hidden_groups if self.sharing in ("all", "attention") else self.num_hidden_layers

    @property
    def num_ffn_groups(self) -> int:
        """Distinct feed-forward parameter sets (each holding K inner blocks)."""
        return self.num_hidden_groups if self.sharing in ("all", "ffn") else self.num_hidden_layers

    # ---------------------------------------------------------------- dict/json
    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict (the original JSON format plus `sharing`, `layer_norm_eps`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> "AlbertConfig":
        """Builds a config from a dict in the original JSON format.

        Args:
            values: field -> value. `REQUIRED_FIELDS` must be present; keys
                that released configs carry but the model never uses are
                accepted and dropped; any other unknown key is an error (a typo
                would otherwise silently keep the default).

        Returns:
            The config.

        Raises:
            ValueError: a missing or unknown field, or a value of the wrong
                type (the message names the field, the value and the type).

        Example:
        >>> values = AlbertConfig.tiny().to_dict()
        >>> del values["num_hidden_layers"]
        >>> AlbertConfig.from_dict(values)
        Traceback (most recent call last):
        ...
        ValueError: AlbertConfig lacks the required field(s) ['num_hidden_layers'] ...
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in values if k not in known and k not in _UNUSED_ORIGINAL_KEYS)
        if unknown:
            raise ValueError(
                f"Unknown AlbertConfig keys {unknown}; known keys are {sorted(known)}."
            )
        missing = [k for k in REQUIRED_FIELDS if k not in values]
        if missing:
            raise ValueError(
                f"AlbertConfig lacks the required field(s) {missing} (every released albert_config.json "
                f"carries them; only {sorted(known - set(REQUIRED_FIELDS))} may be left out)."
            )
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def from_json_file(cls, path: str) -> "AlbertConfig":
        """Reads an albert_config.json (the original's format); errors name the file.

        Args:
            path: the JSON file, local or a URL tf.io.gfile reads (gs://...).

        Returns:
            The config.

        Example:
        >>> AlbertConfig.from_json_file("albert_base/albert_config.json")  # doctest: +SKIP
        """
        from pipelines.fileio import read_text  # gfile: the config may lie in gs:// next to a checkpoint

        values = json_object(read_text(path), path)
        try:
            return cls.from_dict(values)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def to_json_string(self) -> str:
        """The config as sorted, indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str) -> None:
        """Writes the config atomically (readers never see a partial file)."""
        from pipelines.fileio import atomic_write

        with atomic_write(path, "w") as f:
            f.write(self.to_json_string())

    # ------------------------------------------------------------------ presets
    @classmethod
    def presets(cls) -> Dict[str, Dict[str, Any]]:
        return dict(_PRESETS)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "AlbertConfig":
        """Returns a released configuration, e.g. "albert_base_v2" or "bert_base".

        Args:
            name: one of `AlbertConfig.presets()`.
            **overrides: fields to change, e.g. `vocab_size=8000`.
        """
        if name not in _PRESETS:
            raise ValueError(f"Unknown preset {name!r}; available: {sorted(_PRESETS)}.")
        return cls(**{**_PRESETS[name], **overrides})

    @classmethod
    def tiny(cls, **overrides: Any) -> "AlbertConfig":
        """A tiny config for tests and smoke runs (E=16, H=32, 2 layers)."""
        values = dict(
            vocab_size=100,
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        values.update(overrides)
        return cls(**values)


def _albert(hidden, layers, heads, dropout):
    return dict(
        vocab_size=30000,
        embedding_size=128,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_hidden_groups=1,
        inner_group_num=1,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        sharing="all",
    )


_PRESETS: Dict[str, Dict[str, Any]] = {
    # The released albert_config.json files: v1 uses dropout 0.1 (xxlarge 0), v2 none.
    "albert_base_v1": _albert(768, 12, 12, 0.1),
    "albert_large_v1": _albert(1024, 24, 16, 0.1),
    "albert_xlarge_v1": _albert(2048, 24, 16, 0.1),
    "albert_xxlarge_v1": _albert(4096, 12, 64, 0.0),
    "albert_base_v2": _albert(768, 12, 12, 0.0),
    "albert_large_v2": _albert(1024, 24, 16, 0.0),
    "albert_xlarge_v2": _albert(2048, 24, 16, 0.0),
    "albert_xxlarge_v2": _albert(4096, 12, 64, 0.0),
    # BERT-style equivalents for the ablation: E = H and nothing shared.
    "bert_base": {
        **_albert(768, 12, 12, 0.1),
        "embedding_size": 768,
        "num_hidden_groups": 12,
        "sharing": "none",
    },
    "bert_large": {
        **_albert(1024, 24, 16, 0.1),
        "embedding_size": 1024,
        "num_hidden_groups": 24,
        "sharing": "none",
    },
}


def json_object(text: str, path: str) -> Dict[str, Any]:
    """The JSON object a config file holds; errors name the file.

    Args:
        text: the file's text.
        path: the file, for messages.

    Raises:
        ValueError: not JSON, or not an object.

    Example:
    >>> json_object('{"hidden_size": 16}', "c.json")
    {'hidden_size': 16}
    """
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(values).__name__}.")
    return values


# The packed length fine-tuning, from_pretrained and the exports use when none is given, capped at the
# model's positions (`max_seq_length_for`).
DEFAULT_MAX_SEQ_LENGTH = 128


def max_seq_length_for(max_position_embeddings: int, requested: Optional[int] = None,
                       name: str = "max_seq_length") -> int:
    """The packed sequence length for a model: `requested`, or 128 capped at the model's positions.

    albert-finetune, albert-export and `TaskModel.from_pretrained` all use this rule, so a
    model with fewer positions (the demo's 64) works without a length, and a length the
    model cannot take is refused in one line before any TensorFlow op runs.

    Args:
        max_position_embeddings: the model's positions (`AlbertConfig.max_position_embeddings`).
        requested: the length asked for; None: ``min(DEFAULT_MAX_SEQ_LENGTH, max_position_embeddings)``.
        name: how the message names the setting, e.g. ``--max_seq_length``.

    Returns:
        The length.

    Raises:
        ValueError: `requested` exceeds the model's positions (one line naming the setting and both numbers).

    Example:
    >>> max_seq_length_for(64), max_seq_length_for(512), max_seq_length_for(512, 384)
    (64, 128, 384)
    >>> max_seq_length_for(64, 128, "--max_seq_length")
    Traceback (most recent call last):
    ...
    ValueError: --max_seq_length=128 exceeds the model's max_position_embeddings=64: give at most 64, or leave it out to use 64.
    """
    positions = int(max_position_embeddings)
    if requested is None:
        return min(DEFAULT_MAX_SEQ_LENGTH, positions)
    if int(requested) > positions:
        default = min(DEFAULT_MAX_SEQ_LENGTH, positions)
        raise ValueError(f"{name}={requested} exceeds the model's max_position_embeddings={positions}: give at "
                         f"most {positions}, or leave it out to use {default}.")
    return int(requested)
