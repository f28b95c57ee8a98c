"""User paths through tf.io.gfile: a scan of the code, and the binaries on a non-local file system.

A user's folder may be gs://, s3:// or hdfs://: `open()` and `os.path` see
only the local disk, so a config that exists on GCS reads as "No such file"
(review F1). The scan below fails on any new local-only call in albert_tf/
or pipelines/ outside the commented allow-list. The binary tests run on
`ram://`, TensorFlow's in-memory file system, which like gs:// is reachable
only through tf.io.gfile; it lives in one process, so each binary's `main`
is called in-process (as the user's second command would run).
"""

from __future__ import annotations

import ast
import os
import pathlib
import uuid
from typing import Dict, Iterator, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED_PACKAGES = ("albert_tf", "pipelines", "flags")

# Functions that read, write or test a path on the local disk only: called, or passed on as a value
# (`opener = gzip.open if ... else open` opens a user's gs:// file as surely as a call does).
LOCAL_ONLY_CALLS = frozenset({
    "open", "io.open", "codecs.open", "gzip.open", "bz2.open", "lzma.open", "tarfile.open", "zipfile.ZipFile",
    "os.open", "os.stat", "os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.getsize",
    "os.path.getmtime", "os.path.abspath", "os.path.realpath", "os.listdir", "os.makedirs", "os.mkdir",
    "os.rmdir", "os.remove", "os.unlink", "os.replace", "os.rename", "os.walk", "os.scandir", "shutil.rmtree",
    "shutil.move", "shutil.copytree", "shutil.copy", "shutil.copy2", "shutil.copyfile", "glob.glob",
    "np.load", "numpy.load", "pathlib.Path",
})

# Where local-only is right: (file, enclosing function, call) -> why.
ALLOWED: Dict[Tuple[str, str, str], str] = {
    # Machine facts, not user paths.
    ("albert_tf/cpu.py", "cpu_flags", "open"): "/proc/cpuinfo",
    ("albert_tf/bin/common.py", "start_tensorflow_quietly", "os.path.exists"): "/proc/driver/nvidia",
    ("pipelines/locking.py", "_process_start_unix", "open"): "/proc/<pid>/stat and /proc/stat",
    ("pipelines/locking.py", "network_filesystem", "open"): "/proc/mounts",
    ("pipelines/locking.py", "network_filesystem", "os.path.realpath"): "a local folder's mount point",
    ("albert_tf/bin/common.py", "InternalNoticeFilter.__init__", "os.path.realpath"): "installed module files",
    ("albert_tf/bin/common.py", "InternalNoticeFilter.filter", "os.path.realpath"): "a log record's source file",
    ("albert_tf/bin/faults.py", "disk_full_message", "os.path.isdir"):
        "free space of a local disk (shutil.disk_usage); guarded by '://' not in folder",
    ("pipelines/fileio.py", "absolute", "os.path.abspath"): "the helper itself: URLs are returned as given",
    # Locks: flock and inode checks need a local file; remote folders take the gfile lease instead.
    ("pipelines/locking.py", "FolderLock._acquire_local", "os.makedirs"): "flock lock file (local folders only)",
    ("pipelines/locking.py", "FolderLock._release_local", "os.remove"): "flock lock file (local folders only)",
    ("pipelines/locking.py", "FolderLock._open_locked", "os.open"): "flock lock file (local folders only)",
    ("pipelines/locking.py", "FolderLock._open_locked", "os.stat"): "the lock file's inode (local folders only)",
    ("pipelines/shard_manifest.py", "_local_lock", "os.open"): "flock lock file; a no-op for URLs",
    ("pipelines/shard_manifest.py", "_local_lock", "os.stat"): "the lock file's inode; a no-op for URLs",
    ("pipelines/shard_manifest.py", "_local_lock", "os.unlink"): "flock lock file; a no-op for URLs",
    # Export version reservation: os.mkdir is the atomic step; URLs take another branch.
    ("albert_tf/export/versions.py", "reserve_version", "os.makedirs"): "local branch of the reservation",
    ("albert_tf/export/versions.py", "reserve_version", "os.mkdir"): "atomic local reservation",
    ("albert_tf/export/versions.py", "reserve_version", "os.path.exists"): "local branch of the reservation",
    ("albert_tf/export/versions.py", "release_version", "os.rmdir"): "a reservation made by the local branch "
                                                                     "(URLs reserve nothing)",
    # OpenVINO writes local files: it works in a temporary folder, published through gfile.
    ("albert_tf/export/openvino.py", "export_openvino", "shutil.rmtree"): "the process's temporary folder",
    ("albert_tf/export/openvino.py", "publish_folder", "shutil.move"): "local destination ('://' checked)",
    ("albert_tf/export/openvino.py", "publish_folder", "os.walk"): "the local temporary IR folder",
    ("albert_tf/export/openvino.py", "_hf_tokenizer", "shutil.rmtree"): "the same temporary folder",
    ("albert_tf/export/openvino_graph.py", "copy_assets", "shutil.copytree"): "temporary SavedModel to IR",
    # Local by nature or by a library that reads local files only.
    ("pipelines/beam_pipeline.py", "_file_index", "os.path.abspath"): "matching local names; URLs match first",
    ("pipelines/beam_pipeline.py", "build_pipeline", "os.path.abspath"): "local aliases of the input names",
    ("pipelines/stdlib_corpus.py", "iter_stdlib_documents", "os.walk"): "the installed Python sources",
    ("pipelines/package_corpus.py", "iter_package_documents", "os.walk"): "installed packages' sources",
    ("pipelines/tokenizer.py", "train_sentencepiece", "os.path.abspath"): "SentencePiece trains locally; "
                                                                          "URLs are refused first",
    ("pipelines/tokenizer.py", "train_sentencepiece", "os.makedirs"): "the same local folder",
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def local_only_calls(source: str) -> Iterator[Tuple[str, str, int]]:
    """(enclosing function, call, line) of every local-only call in `source`.

    >>> list(local_only_calls("def f(p):\\n    return open(p)"))
    [('f', 'open', 2)]
    """
    scopes = []

    class Visitor(ast.NodeVisitor):
        def visit_scope(self, node):
            scopes.append(node.name)
            self.generic_visit(node)
            scopes.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_scope

        def visit_Name(self, node):
            if node.id in LOCAL_ONLY_CALLS:
                found.append((".".join(scopes) or "<module>", node.id, node.lineno))

        def visit_Attribute(self, node):
            name = _dotted(node)
            if name in LOCAL_ONLY_CALLS:
                found.append((".".join(scopes) or "<module>", name, node.lineno))
            else:
                self.generic_visit(node)

    found = []
    Visitor().visit(ast.parse(source))
    return iter(found)


def _scan():
    for package in SCANNED_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for scope, call, line in local_only_calls(path.read_text(encoding="utf-8")):
                yield relative, scope, call, line


def test_library_code_reaches_user_paths_through_gfile_only():
    offending = [f"{f}:{line} {scope}: {call}()" for f, scope, call, line in _scan()
                 if (f, scope, call) not in ALLOWED]
    assert not offending, (
        "Local-only file calls on what may be a user's gs:// path; use tf.io.gfile or pipelines.fileio "
        "(read_text, read_json, read_bytes, open_binary, makedirs, absolute), or add the place to ALLOWED with the reason:\n  "
        + "\n  ".join(offending))


def test_allow_list_names_only_places_that_exist():
    found = {(f, scope, call) for f, scope, call, _ in _scan()}
    assert not set(ALLOWED) - found, f"Stale ALLOWED entries: {sorted(set(ALLOWED) - found)}"


def test_the_scan_finds_what_it_forbids():
    source = ("import os\nclass C:\n    def m(self, p):\n        os.makedirs(p)\n"
              "        return os.path.exists(p) and open(p).read()\n")
    assert [(s, c) for s, c, _ in local_only_calls(source)] == [
        ("C.m", "os.makedirs"), ("C.m", "os.path.exists"), ("C.m", "open")]


def test_the_scan_finds_local_openers_passed_as_values():
    source = ("import gzip\ndef lines(p):\n    opener = gzip.open if p.endswith('.gz') else open\n"
              "    return list(opener(p, 'rb'))\n")
    assert [(s, c) for s, c, _ in local_only_calls(source)] == [("lines", "gzip.open"), ("lines", "open")]


# --------------------------------------------------------------- on ram://
def _copy_to(local_path: str, url: str) -> str:
    import tensorflow as tf

    tf.io.gfile.makedirs(os.path.dirname(url))
    tf.io.gfile.copy(local_path, url, overwrite=True)
    return url


@pytest.fixture(scope="module")
def remote_inputs(tmp_path_factory):
    """A run's inputs as a GCS user has them: shards, config and vocabulary on the remote file system."""
    import uuid

    from tests.albert_tf import training_testlib as tl
    from tests.pipelines.conftest import write_corpus

    from pipelines import tokenizer

    local = tmp_path_factory.mktemp("remote_inputs")
    remote = f"ram://remote-{uuid.uuid4().hex[:8]}"
    tl.write_tfrecords(str(local / "train-0.tfrecord"), 40, seed=3)
    tl.tiny_config().to_json_file(str(local / "albert_config.json"))
    corpus = write_corpus(str(local / "corpus.txt"), num_docs=40)
    spm = tokenizer.train_sentencepiece([corpus], str(local / "sp"), vocab_size=tl.VOCAB, seed=1)
    return {
        "root": remote, "local": local, "config": tl.tiny_config(),
        "train": _copy_to(str(local / "train-0.tfrecord"), f"{remote}/data/train-0.tfrecord"),
        "config_file": _copy_to(str(local / "albert_config.json"), f"{remote}/albert_config.json"),
        "spm": _copy_to(spm, f"{remote}/vocab.model"),
    }


def _pretrain(inputs, output_dir: str, steps: int) -> None:
    from absl import flags

    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain

    albert_flags.define_all_pretraining_flags()  # as albert-pretrain's run() does
    argv = [f"--albert_config_file={inputs['config_file']}", f"--input_file={inputs['train']}",
            f"--output_dir={output_dir}", f"--spm_model_file={inputs['spm']}", "--preset=",
            "--train_batch_size=8", "--gradient_accumulation_steps=1", "--max_seq_length=16",
            "--max_predictions_per_seq=3", f"--num_train_steps={steps}", "--num_warmup_steps=1",
            "--learning_rate=0.01", "--save_checkpoints_steps=2", "--log_steps=1", "--do_train",
            "--nodo_eval", "--strategy=default", "--mixed_precision=float32", "--init_checkpoint="]
    _run_main(pretrain.main, "albert-pretrain", argv)


def _run_main(main, program: str, argv) -> None:
    """`main` with these flags parsed as on the command line (the others at their defaults)."""
    from absl import flags

    values = flags.FLAGS
    values.unparse_flags()
    values([program, *argv])
    try:
        main([program])
    finally:
        values.unparse_flags()


def _checkpoint_values(prefix: str):
    """name -> value of a TF checkpoint (the reader takes a prefix; tf.train.load_checkpoint
    would ask ram:// whether the prefix is a folder, which ram:// says of any prefix)."""
    import tensorflow as tf

    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith("input/")}  # the input iterator's state: a variant


def _safetensors(path: str):
    from safetensors.numpy import load

    from pipelines.fileio import read_bytes

    return load(read_bytes(path))


@pytest.fixture(scope="module")
def remote_run(remote_inputs):
    """albert-pretrain on a ram:// output_dir for 2 steps, then the same command with 4 (a resume)."""
    import tensorflow as tf

    run = f"{remote_inputs['root']}/run"
    _pretrain(remote_inputs, run, 2)
    first = _checkpoint_values(tf.train.latest_checkpoint(run))
    _pretrain(remote_inputs, run, 4)  # reads albert_config.json, run settings and ckpt-2 from ram://
    return {"run": run, "first": first}


def test_pretraining_resumes_from_a_remote_output_dir(remote_run, remote_inputs, tmp_path):
    import numpy as np
    import tensorflow as tf

    from tests.albert_tf import training_testlib as tl

    run = remote_run["run"]
    assert int(remote_run["first"]["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2
    latest = tf.train.latest_checkpoint(run)
    assert latest == f"{run}/ckpt-4"
    assert int(_checkpoint_values(latest)["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 4
    # The same two commands on a local folder give the same model: the run on
    # ram:// restored ckpt-2's weights, slots and data position (a fresh start
    # would differ), as the local resume does.
    local = tmp_path / "local_run"
    tl.write_tfrecords(str(tmp_path / "train-0.tfrecord"), 40, seed=3)
    local_inputs = dict(remote_inputs, train=str(tmp_path / "train-0.tfrecord"))
    _pretrain(local_inputs, str(local), 2)
    _pretrain(local_inputs, str(local), 4)
    on_ram = _safetensors(f"{run}/model.weights.safetensors")
    on_disk = _safetensors(str(local / "model.weights.safetensors"))
    assert sorted(on_ram) == sorted(on_disk)
    for name in on_disk:
        np.testing.assert_allclose(on_ram[name], on_disk[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert albert_tf_load(run).config == remote_inputs["config"]


def albert_tf_load(path: str):
    import albert_tf

    return albert_tf.load_checkpoint(path)


def test_export_reads_a_remote_checkpoint_folder(remote_run, tmp_path):
    from absl import flags

    import tensorflow as tf

    from albert_tf.bin import export

    if "format" not in flags.FLAGS:  # defined once per process
        export._define_flags()
    export_dir = tmp_path / "exports"
    _run_main(export.main, "albert-export",
              [f"--checkpoint={remote_run['run']}", f"--export_dir={export_dir}", "--head=encoder",
               "--max_seq_length=16", "--spm_model_file=", "--text_signatures", "--version=1"])
    assert (export_dir / "1" / "saved_model.pb").exists()
    # The SentencePiece model was found in the ram:// folder and packed as an asset.
    assert tf.io.gfile.GFile(f"{remote_run['run']}/spm.model", "rb").read() == \
        (export_dir / "1" / "assets" / "spm.model").read_bytes()


def _finetune(argv):
    from albert_tf.bin import finetune

    finetune._define_flags()
    _run_main(finetune.main, "albert-finetune", argv)


def test_finetuning_from_and_into_remote_folders(remote_run, remote_inputs, tmp_path):
    import tensorflow as tf

    import albert_tf
    from albert_tf.tasks.runner import read_eval_results
    from tests.albert_tf.tasks import finetune_data

    local_data = finetune_data.glue_sst2(str(tmp_path / "sst2"))
    data_dir = f"{remote_inputs['root']}/glue/SST-2"
    for name in os.listdir(local_data):
        _copy_to(os.path.join(local_data, name), f"{data_dir}/{name}")
    output_dir = f"{remote_inputs['root']}/finetuned"
    argv = [f"--task=glue/sst-2", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--init_checkpoint={remote_run['run']}", "--albert_config_file=", "--spm_model_file=",
            "--max_seq_length=16", "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3",
            "--num_train_epochs=1", "--warmup_proportion=0.1", "--strategy=default",
            "--mixed_precision=float32", "--seed=1", "--log_steps=1", "--do_train", "--do_eval",
            "--nodo_predict", "--optimizer=adamw", "--save_checkpoints_steps=1000"]
    _finetune(argv)
    names = tf.io.gfile.listdir(output_dir)
    for name in ("task_config.json", "model.weights.safetensors", "spm.model", "eval_results.txt",
                 "finetune_run.json", "best_dev.json"):
        assert name in names, names
    results = read_eval_results(f"{output_dir}/eval_results.txt")
    assert 0.0 <= results["accuracy"] <= 1.0
    model = albert_tf.load_task_model(output_dir)
    assert model.config == remote_inputs["config"]
    # The run's settings were read back from ram://: another learning rate is refused, naming it.
    with pytest.raises(ValueError, match=r"learning_rate: 0\.001 there, 0\.002 now"):
        _finetune([a if not a.startswith("--learning_rate") else "--learning_rate=2e-3" for a in argv])


def test_config_round_trip_on_a_remote_file_system():
    from albert_tf.config import AlbertConfig

    config = AlbertConfig(vocab_size=99, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32)
    path = "ram://remote-config/albert_config.json"
    config.to_json_file(path)
    assert AlbertConfig.from_json_file(path) == config
    with pytest.raises(FileNotFoundError, match="ram://remote-config/missing.json"):
        AlbertConfig.from_json_file("ram://remote-config/missing.json")


def test_load_checkpoint_reads_remote_folders_and_prefixes(remote_run):
    import numpy as np

    import albert_tf
    from albert_tf.checkpoints import original_variable_map, save_huggingface

    pretrainer = albert_tf.AlbertPretrainer(albert_tf_load(remote_run["run"]).config)
    for folder, save in (("ram://remote-load/ours", albert_tf.save_pretrained),
                         ("ram://remote-load/hf", save_huggingface)):
        save(pretrainer, folder)
        loaded = albert_tf.load_checkpoint(folder)
        for name, var in original_variable_map(pretrainer).items():
            np.testing.assert_array_equal(original_variable_map(loaded)[name].numpy(), var.numpy(),
                                          err_msg=f"{folder}: {name}")
    # A training checkpoint prefix on ram:// (ram:// also calls it a folder) with the config beside it.
    from_prefix = albert_tf.load_checkpoint(f"{remote_run['run']}/ckpt-2")
    saved = _checkpoint_values(f"{remote_run['run']}/ckpt-2")
    np.testing.assert_array_equal(original_variable_map(from_prefix)["cls/seq_relationship/output_weights"].numpy(),
                                  saved["model/sop_head/output_weights/.ATTRIBUTES/VARIABLE_VALUE"])


def test_the_demo_reads_a_users_corpus_on_a_remote_file_system(tmp_path):
    """albert-demo --input_file=gs://...: the user's documents are globbed and read through tf.io.gfile."""
    import tensorflow as tf

    from albert_tf.demo.corpus import split_user_corpus

    remote = f"ram://remote-corpus-{uuid.uuid4().hex[:8]}"
    documents = [f"Document {i} opens here.\nIt has a second line, {i}." for i in range(300)]
    tf.io.gfile.makedirs(remote)
    for part in range(2):
        with tf.io.gfile.GFile(f"{remote}/part-{part}.txt", "w") as f:
            f.write("\n\n".join(documents[part::2]) + "\n")
    counts = split_user_corpus(f"{remote}/part-*.txt", str(tmp_path / "corpus"), seed=3)
    assert counts["documents"] == 300 and counts["eval_documents"] > 0
    written = [d for name in ("train.txt", "eval.txt")
               for d in (tmp_path / "corpus" / name).read_text(encoding="utf-8").split("\n\n") if d.strip()]
    assert sorted(d.strip() for d in written) == sorted(documents)


def test_vocabulary_training_and_the_corpus_check_read_remote_and_gzipped_text(tmp_path):
    """albert-create-data / the vocabulary trainer with --input_file=gs://...txt.gz: the same
    vocabulary as from the same text on the local disk, and an empty remote corpus still refused."""
    import gzip

    import tensorflow as tf

    from pipelines import corpus, tokenizer

    plain = "".join(f"Plain line {i} talks about the river {i % 7}.\n" for i in range(200))
    zipped = "".join(f"Zipped note {i} mentions marble quarries {i % 11}.\n" for i in range(200))
    (tmp_path / "a.txt").write_text(plain, encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write(zipped)
    remote = f"ram://remote-text-{uuid.uuid4().hex[:8]}"
    for name in ("a.txt", "b.txt.gz"):
        _copy_to(str(tmp_path / name), f"{remote}/{name}")

    assert corpus.resolve_input_files([f"{remote}/*"]) == [f"{remote}/a.txt", f"{remote}/b.txt.gz"]
    vocabularies = {}
    for where, files in (("local", [tmp_path / "a.txt", tmp_path / "b.txt.gz"]),
                         ("remote", [f"{remote}/a.txt", f"{remote}/b.txt.gz"]), ("plain only", [tmp_path / "a.txt"])):
        prefix = str(tmp_path / f"spm-{len(vocabularies)}")
        tokenizer.train_sentencepiece([str(f) for f in files], prefix, vocab_size=60, seed=5)
        vocabularies[where] = (pathlib.Path(prefix + ".vocab")).read_text(encoding="utf-8")
    assert vocabularies["remote"] == vocabularies["local"]
    assert vocabularies["remote"] != vocabularies["plain only"]  # the gzipped half was read, not skipped

    with tf.io.gfile.GFile(f"{remote}/blank.txt.gz", "wb") as f:
        f.write(gzip.compress(b"\n  \n"))
    with pytest.raises(ValueError, match="Empty corpus"):
        corpus.resolve_input_files([f"{remote}/blank.txt.gz"])


def test_the_demo_refuses_a_remote_output_folder_before_any_work():
    from albert_tf.demo.run import run_demo
    from albert_tf.demo.settings import DemoSettings

    with pytest.raises(ValueError, match="--output_dir='gs://bucket/demo'.*local folder"):
        run_demo(DemoSettings(output_dir="gs://bucket/demo"))
