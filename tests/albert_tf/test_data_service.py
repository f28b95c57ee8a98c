"""The training input on tf.data service workers: a dispatcher and two workers on localhost.

The service's order depends on worker timing (processing mode distributed_epoch), so the
checks are on coverage: one pass through the service yields every record of the local
pipeline exactly once ("parallel_epochs", i.e. sharding OFF, would yield each once per worker), also for a
resumed run, and training through the service (library and albert-pretrain) runs.
"""

import collections
import contextlib
import gc
import math
import os
import re
import subprocess
import sys
import time

import pytest
import tensorflow as tf

import albert_tf
import pipelines
from albert_tf import training
from albert_tf.training import data_service, step

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

NUM_FILES, PER_FILE, BATCH = 4, 10, 2


@contextlib.contextmanager
def _servers():
    """A dispatcher and two workers in this process (gRPC on free localhost ports)."""
    dispatcher = data_service.start_dispatcher(0)
    workers = [data_service.start_worker(0, dispatcher.target) for _ in range(2)]
    deadline = time.time() + 30
    while dispatcher._num_workers() < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert dispatcher._num_workers() == 2
    try:
        yield dispatcher
    finally:
        gc.collect()  # release the trainers' iterators: their jobs end
        for worker in workers:
            worker._stop()
        dispatcher._stop()


@pytest.fixture(scope="module")
def service():
    with _servers() as dispatcher:
        yield dispatcher


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("service_shards")
    for i in range(NUM_FILES):
        tl.write_tfrecords(str(root / f"train-{i}.tfrecord"), PER_FILE, seed=10 + i)
    return str(root / "train-*.tfrecord")


def _rows(batches):
    """Multiset of examples (input ids + masked ids + label) of a sequence of batches."""
    rows = collections.Counter()
    for batch in batches:
        ids, masked, labels = (batch[k].numpy() for k in ("input_ids", "masked_lm_ids", "next_sentence_labels"))
        for i in range(ids.shape[0]):
            rows[(tuple(ids[i]), tuple(masked[i]), int(labels[i]))] += 1
    return rows


def _one_pass(ctx, shards):
    return pipelines.pretraining_dataset(shards, BATCH, tl.SEQ, tl.PREDS, is_training=False,
                                         vocab_size=tl.VOCAB, input_context=None)


@pytest.mark.parametrize("start_step", [0, 3])
def test_one_pass_through_two_workers_yields_every_record_once(service, shards, start_step):
    local = _rows(_one_pass(None, shards))
    assert sum(local.values()) == NUM_FILES * PER_FILE and len(local) == NUM_FILES * PER_FILE
    # The iterator albert-pretrain trains on; a resumed run (start_step 3) skips nothing.
    iterator = step.distributed_train_iterator(
        tf.distribute.get_strategy(), lambda ctx: _one_pass(ctx, shards), start_step, tl.SEQ, tl.PREDS,
        BATCH, data_service_address=service.target, data_service_job=f"coverage-{start_step}")
    served = _rows(list(iterator))
    assert served == local


def test_processing_mode_off_would_duplicate(service, shards):
    """Why distributed_epoch: with parallel_epochs (sharding OFF) every worker sends the whole pipeline."""
    ds = _one_pass(None, shards).apply(tf.data.experimental.service.distribute(
        processing_mode="parallel_epochs", service=service.target, job_name="parallel"))
    counts = _rows(ds)
    assert sum(counts.values()) == 2 * NUM_FILES * PER_FILE and set(counts.values()) == {2}


def test_pretraining_through_the_service(shards, tmp_path, caplog):
    def dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            shards, ctx.get_per_replica_batch_size(4), tl.SEQ, tl.PREDS, is_training=True,
            masking="dynamic", seed=3, vocab_size=tl.VOCAB)

    # Own servers, stopped at the end: the training job repeats forever.
    with _servers() as service, caplog.at_level("WARNING"):
        data = training.PretrainingDataConfig(max_seq_length=tl.SEQ, max_predictions_per_seq=tl.PREDS,
                                              data_service_address=service.target)
        result = training.run_pretraining(
            tl.tiny_config(), dataset_fn, str(tmp_path / "run"),
            optimization=training.OptimizationConfig(train_batch_size=4, num_train_steps=3,
                                                     num_warmup_steps=1),
            runtime=training.RuntimeConfig(log_steps=1, seed=3), data=data)
    assert result["global_step"] == 3 and math.isfinite(result["loss"])
    assert data_service.RESUME_NOTE in caplog.text and data_service.job_name(str(tmp_path / "run")) in caplog.text


def test_addresses_are_checked():
    assert data_service.check_address("grpc://host-1:5050") == "grpc://host-1:5050"
    for bad in ("localhost", "http://host:5050", "host:port", ""):
        with pytest.raises(ValueError, match=f"--data_service_address={bad!r}"):
            data_service.check_address(bad)
    with pytest.raises(ValueError, match="'localhost'"):
        training.run_pretraining(
            tl.tiny_config(), lambda ctx: None, "unused",
            optimization=training.OptimizationConfig(train_batch_size=4, num_train_steps=1),
            data=training.PretrainingDataConfig(data_service_address="localhost"))


def _start_dispatcher():
    """albert-data-service --role=dispatcher --port=0: (process, the port it chose, the stderr lines read so far).

    The server picks its port (0: a free one), so two tests running at once can never race for one probed port.
    """
    server = subprocess.Popen([sys.executable, "-m", "albert_tf.bin.data_service", "--role=dispatcher",
                               "--port=0"], cwd=REPO, env=_env(), stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = server.stderr.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"Dispatcher serving at grpc://localhost:(\d+)", line)
        if found:
            return server, int(found.group(1)), lines
    server.kill()
    raise AssertionError("the dispatcher never said where it serves:\n" + "".join(lines)[-3000:])


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def test_albert_data_service_and_albert_pretrain(shards, tmp_path):
    """The two binaries end to end: dispatcher and worker processes, a trainer reading from them."""
    dispatcher, port, dispatcher_lines = _start_dispatcher()
    servers = [dispatcher]
    try:
        servers.append(subprocess.Popen(
            [sys.executable, "-m", "albert_tf.bin.data_service", "--role=worker", "--port=0",
             f"--dispatcher_address=grpc://localhost:{port}"], cwd=REPO, env=_env(),
            stderr=subprocess.PIPE, text=True))
        tl.tiny_config().to_json_file(str(tmp_path / "albert_config.json"))
        out = tmp_path / "run"
        train = subprocess.run(
            [sys.executable, "-m", "albert_tf.bin.pretrain", f"--albert_config_file={tmp_path / 'albert_config.json'}",
             f"--input_file={shards}", f"--output_dir={out}", "--train_batch_size=4",
             f"--max_seq_length={tl.SEQ}", f"--max_predictions_per_seq={tl.PREDS}", "--num_train_steps=2",
             "--num_warmup_steps=1", "--log_steps=1", "--mixed_precision=float32",
             f"--data_service_address=grpc://localhost:{port}"],
            cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
        assert train.returncode == 0, train.stderr[-3000:]
        assert "resume is not exact" in train.stderr and "step 2/2 loss" in train.stderr
        assert (out / "ckpt-2.index").exists()
    finally:
        for server in servers:
            server.terminate()
        logs = [server.communicate(timeout=30)[1] for server in servers]
    logs[0] = "".join(dispatcher_lines) + logs[0]
    assert f"Dispatcher serving at grpc://localhost:{port}" in logs[0], logs[0][-2000:]
    assert "Worker at localhost:" in logs[1], logs[1][-2000:]
    # Each server says who can reach it (the worker names its port and the dispatcher's).
    assert "tf.data service dispatcher: plaintext gRPC, unauthenticated" in logs[0], logs[0][-2000:]
    assert f"dispatcher's port {port} only to" in logs[1], logs[1][-2000:]


@pytest.mark.parametrize("args,message", [
    (["--role=worker"], "--role=worker needs --dispatcher_address"),
    (["--role=dispatcher", "--port=70000"], "--port=70000"),
])
def test_albert_data_service_usage_errors(args, message):
    done = subprocess.run([sys.executable, "-m", "albert_tf.bin.data_service", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and message in done.stderr, done.stderr[-2000:]


def test_job_name_comes_from_the_path_as_given(tmp_path, monkeypatch):
    """Hosts and restarts in other working directories join one job; relative paths are refused."""
    import hashlib

    def expected(path):  # the reference: SHA-256 of the path string itself
        return "albert-pretrain-" + hashlib.sha256(path.encode()).hexdigest()[:16]

    names = collections.defaultdict(set)
    for cwd in (tmp_path / "host-a", tmp_path / "host-b" / "deeper"):
        cwd.mkdir(parents=True)
        monkeypatch.chdir(cwd)
        for given in ("gs://bucket/runs/base", "gs://bucket/runs/base/", "hdfs://nn:8020/runs/base"):
            names[given.rstrip("/")].add(data_service.job_name(given))
        for given in ("/shared/runs/base", "/shared//runs/./base/"):
            names["/shared/runs/base"].add(data_service.job_name(given))
    for path, seen in names.items():
        assert seen == {expected(path)}, (path, seen)
    assert data_service.job_name("gs://bucket/runs/a") != data_service.job_name("gs://bucket/runs/b")
    for relative in ("runs/base", "./run", "run"):
        with pytest.raises(ValueError, match=f"output_dir={relative!r} is relative"):
            data_service.job_name(relative)


def _same_layout_shard(path, num, seed):
    """`num` full-length records, all with one layout ([CLS] at 0, [SEP] at the end, whole-word
    boundaries everywhere, no static masks): the masked positions depend only on the mask key."""
    rng = __import__("numpy").random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num):
            ids = [2] + [int(x) for x in rng.integers(5, tl.VOCAB, tl.SEQ - 2)] + [3]
            ints = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))  # noqa: E731
            feature = {"input_ids": ints(ids), "input_mask": ints([1] * tl.SEQ),
                       "segment_ids": ints([0] * tl.SEQ), "token_boundary": ints([1] * tl.SEQ),
                       "masked_lm_positions": ints([0] * tl.PREDS), "masked_lm_ids": ints([0] * tl.PREDS),
                       "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0] * tl.PREDS)),
                       "next_sentence_labels": ints([0])}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def test_dynamic_masks_differ_between_workers_and_repeat_on_one(tmp_path):
    """A data-service worker runs the pipeline on the files it is given, numbering its records from 0.

    Two workers' k-th records (one file each, same layout) must get different masks; the same
    worker on the same file twice the same masks. Keyed by the element number alone (before the
    fix), every k-th record got the same positions.
    """
    num = 8
    files = [_same_layout_shard(str(tmp_path / f"w{i}.tfrecord"), num, seed=i) for i in range(2)]

    def worker(path):
        return pipelines.pretraining_dataset(path, num, tl.SEQ, tl.PREDS, is_training=False, masking="dynamic",
                                             seed=7, vocab_size=tl.VOCAB)

    on_first = worker(files[0])  # iterated twice: a restarted worker, or a rerun
    first, second, again = next(iter(on_first)), next(iter(worker(files[1]))), next(iter(on_first))
    for name in ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        tf.debugging.assert_equal(first[name], again[name], message=name)
    positions = [b["masked_lm_positions"].numpy() for b in (first, second)]
    differ = (positions[0] != positions[1]).any(axis=1)
    assert differ.sum() >= num // 2, (positions, differ)


def test_dispatcher_says_who_can_reach_it():
    """The startup line of albert-data-service --role=dispatcher: plaintext, unauthenticated, all interfaces."""
    server, port, lines = _start_dispatcher()
    server.terminate()
    try:
        rest = server.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        server.kill()
        rest = server.communicate()[1]
    log = "".join(lines) + rest
    warning = [line for line in log.splitlines() if "tf.data service dispatcher:" in line]
    assert len(warning) == 1, log[-3000:]
    for part in ("plaintext gRPC", "unauthenticated", "listening on all interfaces", f"port {port} ",
                 "register a worker or read the training data", "private network", "firewall",
                 f"open port {port} only to the trainers and the workers"):
        assert part in warning[0], (part, warning[0])
    assert warning[0].startswith("W"), warning[0]  # logged as a warning


def test_worker_warning_and_worker_allow_list():
    """A worker's line names its port and the dispatcher's; --worker_addresses refuses other workers."""
    line = data_service.exposure_warning("worker", 5051, 5050)
    assert "port 5051" in line and "dispatcher's port 5050" in line and "read the training data" in line
    with pytest.raises(ValueError, match="'router'"):
        data_service.exposure_warning("router", 1)
    dispatcher = data_service.start_dispatcher(0, worker_addresses=["localhost:%port%"])
    try:
        with pytest.raises(RuntimeError, match="otherhost"):
            data_service.start_worker(0, dispatcher.target, worker_address="otherhost:%port%")
        listed = data_service.start_worker(0, dispatcher.target)
        ds = data_service.distribute(tf.data.Dataset.range(4), dispatcher.target, None)
        assert sorted(int(x) for x in ds) == [0, 1, 2, 3]
        listed._stop()
    finally:
        dispatcher._stop()


def test_albert_data_service_worker_refused_by_the_allow_list_ends_in_one_line():
    """Before, the binary ended in a RuntimeError traceback (review F13)."""
    from albert_tf.bin import data_service as binary
    from tests.albert_tf.test_remote_paths import _run_main

    from absl import flags

    if "role" not in flags.FLAGS:
        binary._define_flags()
    dispatcher = data_service.start_dispatcher(0, worker_addresses=["localhost:%port%"])
    try:
        with pytest.raises(ValueError) as refused:
            _run_main(binary.main, "albert-data-service", ["--role=worker", "--port=0", "--worker_address=otherhost:5999",
                                                           f"--dispatcher_address={dispatcher.target}"])
    finally:
        dispatcher._stop()
    message = str(refused.value)
    assert message.startswith(f"The dispatcher at {dispatcher.target} refused this worker: Failed to assign an index "
                              "for worker otherhost:5999. Configured workers list: [localhost:"), message
    assert message.endswith("Start the worker with --worker_address set to its entry in the dispatcher's "
                            "--worker_addresses.") and "\n" not in message
