"""Is `--spm_model_file` the vocabulary the data or the model was made with? (issue 35, N7)

A SentencePiece model of the same size but other pieces gives every word other
ids: training or fine-tuning goes on without an error and learns from, or
answers with, the wrong words. Two places know the vocabulary a run must use:

* the shards' manifest (``PREFIX.manifest.json``, pipelines/create/manifest.py)
  records the fingerprint of the vocabulary albert-create-pretraining-data
  tokenized with (``spm_model``); albert-pretrain compares its
  --spm_model_file with it (`check_shards_vocabulary`);
* a model folder holds its vocabulary (albert_tf/model_folder.py);
  albert-finetune compares an explicit --spm_model_file with the one beside
  --init_checkpoint (`check_folder_vocabulary`).

A different file is refused in one line naming both files and their SHA-256
prefixes; `--allow_other_vocabulary` accepts it with a WARNING. Shards without
a manifest (or a manifest without ``spm_model``) are a WARNING only: nothing
records their vocabulary.
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import logging

ALLOW_FLAG = "--allow_other_vocabulary"


class VocabularyMismatch(ValueError):
    """--spm_model_file is not the vocabulary the data or the model was made with (one line)."""


def sha256_of(path: str) -> str:
    """Hex SHA-256 of a file (local or any tf.io.gfile path).

    Args:
        path: the file.
    """
    from pipelines.shard_manifest import sha256_of as file_sha256

    return file_sha256(path)


def check_same_vocabulary(given: str, expected_sha256: str, what: str, which: str, allow: bool) -> bool:
    """Compares the vocabulary file `given` with the fingerprint of the expected one.

    Args:
        given: the --spm_model_file path.
        expected_sha256: hex SHA-256 of the vocabulary the data or model was made with.
        what: what that vocabulary is, for the message (e.g. "the vocabulary of --init_checkpoint=runs/base").
        which: the file that is or records it (e.g. "runs/base/spm.model").
        allow: accept a different one with a WARNING (--allow_other_vocabulary).

    Returns:
        True when the files are the same; False when they differ and `allow`.

    Raises:
        VocabularyMismatch: they differ and not `allow` (one line naming both files and the flag).
    """
    digest = sha256_of(given)
    if digest == expected_sha256:
        return True
    message = (f"--spm_model_file={given} (sha256 {digest[:12]}) is not {what}: {which} "
               f"(sha256 {expected_sha256[:12]})")
    if not allow:
        raise VocabularyMismatch(f"{message}. Its ids stand for other pieces: give that vocabulary, or {ALLOW_FLAG} "
                                 "to use this one anyway.")
    logging.warning("%s; using it anyway (%s).", message, ALLOW_FLAG)
    return False


def check_shards_vocabulary(spm_model_file: str, files: Sequence[str], allow: bool) -> None:
    """albert-pretrain's --spm_model_file against the vocabulary the shards' manifests record.

    Args:
        spm_model_file: the vocabulary given.
        files: the input shards (expanded).
        allow: --allow_other_vocabulary.

    Raises:
        VocabularyMismatch: a manifest records another vocabulary (unless `allow`).
    """
    from pipelines import shard_check, shard_manifest

    groups, unchecked = shard_check.manifest_groups(
        [f for f in files if not f.endswith(shard_manifest.tfrecords.MANIFEST_SUFFIX)])
    for (folder, prefix), paths in sorted(groups.items()):
        manifest = shard_manifest.read_manifest(folder, prefix) or {}
        recorded = manifest.get("spm_model") if isinstance(manifest.get("spm_model"), dict) else None
        if not recorded or not recorded.get("sha256"):
            unchecked.extend(paths)
            continue
        path = shard_manifest.manifest_path(folder, prefix)
        check_same_vocabulary(spm_model_file, str(recorded["sha256"]), "the vocabulary the shards were made with",
                              f"{path} records {recorded.get('name')}", allow)
    if unchecked:
        logging.warning("--spm_model_file=%s is not checked against %d input file(s) whose manifest records no "
                        "vocabulary (e.g. %s): shards made with another vocabulary would train on other ids.",
                        spm_model_file, len(unchecked), unchecked[0])


def check_folder_vocabulary(given: str, folder: Optional[str], flag: str, allow: bool) -> None:
    """An explicit --spm_model_file against the vocabulary a model folder holds (`model_folder.find_vocabulary`).

    Args:
        given: the --spm_model_file path.
        folder: the model folder (or checkpoint prefix) the run reads; None: nothing to compare with.
        flag: the flag that named the folder, for the message (e.g. "--init_checkpoint").
        allow: --allow_other_vocabulary.

    Raises:
        VocabularyMismatch: the folder holds another vocabulary (unless `allow`).
    """
    from albert_tf import model_folder

    if not folder:
        return
    try:
        found = model_folder.find_vocabulary(folder)
    except ValueError:  # several *.model files: the explicit one settles it, there is nothing single to compare
        return
    if found is not None:
        check_same_vocabulary(given, sha256_of(found), f"the vocabulary of {flag}={folder}", found, allow)
