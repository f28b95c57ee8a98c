"""The files written beside the graph (assets/)."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from albert_tf.export.base import _Serving, _task_config, has_tokenizer

SPM_ASSET = "spm.model"
CONFIG_ASSET = "albert_config.json"
TASK_CONFIG_ASSET = "task_config.json"
LABELS_ASSET = "label_names.txt"
TAGS_ASSET = "tag_names.txt"
PREPROCESSING_ASSET = "preprocessing.json"


def _write_assets(saved_dir: str, model, preprocessor, serving: _Serving) -> None:
    """SentencePiece model, config, label names and the serving settings beside the graph.

    A text graph embeds the SentencePiece model itself; these copies are for
    the people and tools that look at the folder (an ids-only export's
    clients tokenize with spm.model). An ids-only export made without a
    SentencePiece model has no spm.model.
    """
    from pipelines.fileio import atomic_write

    assets = os.path.join(saved_dir, "assets")
    tf.io.gfile.makedirs(assets)
    if has_tokenizer(preprocessor):
        with atomic_write(os.path.join(assets, SPM_ASSET), "wb") as f:
            f.write(preprocessor.spm_model_proto)
    with atomic_write(os.path.join(assets, CONFIG_ASSET)) as f:
        f.write(model.config.to_json_string() if hasattr(model.config, "to_json_string")
                else json.dumps(model.config.to_dict(), indent=2, sort_keys=True) + "\n")
    task_config = _task_config(model)
    if task_config:
        with atomic_write(os.path.join(assets, TASK_CONFIG_ASSET)) as f:
            f.write(json.dumps(task_config, indent=2, sort_keys=True, default=str) + "\n")
    with atomic_write(os.path.join(assets, PREPROCESSING_ASSET)) as f:
        f.write(json.dumps(serving.serving_settings(), indent=2, sort_keys=True) + "\n")
    names = serving.names_asset()
    if names is not None:
        filename = {"label": LABELS_ASSET, "tag": TAGS_ASSET}[names[0]]
        with atomic_write(os.path.join(assets, filename)) as f:
            f.write("".join(n.decode("utf-8") + "\n" for n in names[1].numpy()))
