"""A SavedModel exported to a remote folder is never visible to TF Serving half-written (review F6).

On ram:// (a non-local tf.io.gfile file system, as gs:// is): the version is
written under a hidden name TF Serving ignores, unique per export (a uuid, not
the pid: two hosts' processes may share one), then moved into `N/` file by file
with `saved_model.pb`, the file that makes the folder loadable, last. Before,
the hidden name held the pid and the folder was renamed in one call, which an
object store carries out object by object in listing order (saved_model.pb
before variables/).
"""

import os
import re

import numpy as np
import tensorflow as tf

import albert_tf


def test_a_remote_export_publishes_saved_model_pb_last_from_a_uuid_named_hidden_folder(monkeypatch, tmp_path):
    pre = albert_tf.AlbertPretrainer(albert_tf.AlbertConfig.tiny())
    ids = np.array([[2, 5, 6, 3, 0, 0]], np.int32)
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": np.zeros_like(ids)}
    want = pre.encoder(inputs)
    export_dir = "ram://remote-export/models"
    moves, original_rename = [], tf.io.gfile.rename

    def rename(src, dst, overwrite=False):
        moves.append((src, dst, tf.io.gfile.exists(f"{export_dir}/1/saved_model.pb")))
        return original_rename(src, dst, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", rename)
    path = albert_tf.export_saved_model(pre.encoder, export_dir, text_signatures=False, version=1)
    assert path == f"{export_dir}/1"
    published = [(src, dst, seen) for src, dst, seen in moves if dst.startswith(f"{export_dir}/1")]
    assert all(dst != f"{export_dir}/1" for _, dst, _ in published)  # no folder rename
    assert published[-1][1] == f"{export_dir}/1/saved_model.pb"
    assert not any(seen for _, _, seen in published)  # saved_model.pb appeared only with the last move
    names = {dst[len(export_dir) + 3:] for _, dst, _ in published}
    assert "variables/variables.index" in names and "fingerprint.pb" in names
    monkeypatch.setattr(tf.io.gfile, "rename", original_rename)
    local = albert_tf.export_saved_model(pre.encoder, str(tmp_path), text_signatures=False, version=1)
    assert names == {os.path.relpath(os.path.join(root, name), local)  # every file of the same export
                     for root, _, files in os.walk(local) for name in files}
    staging = {src.split("/")[4] for src, _, _ in published}
    assert len(staging) == 1 and re.fullmatch(r"\.tmp-1-[0-9a-f]{12}", staging.pop()), published
    assert [n.rstrip("/") for n in tf.io.gfile.listdir(export_dir)] == ["1"]  # the hidden folder is gone

    loaded = tf.saved_model.load(path)
    signature = loaded.signatures["serving_default"]
    got = signature(**{k: tf.constant(v) for k, v in inputs.items()
                       if k in signature.structured_input_signature[1]})
    key = "pooled_output" if "pooled_output" in got else sorted(got)[0]
    np.testing.assert_allclose(got[key].numpy(), np.asarray(want[key]), rtol=1e-5, atol=1e-5)
