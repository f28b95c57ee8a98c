"""The training input on tf.data service workers (TensorFlow's own servers).

At scale the CPU of an accelerator host is scarce; reading, parsing and
dynamic masking can run on other machines instead: a dispatcher
(`start_dispatcher`) hands out the work, workers (`start_worker`) run the
input pipeline, and the trainer only receives finished batches
(`distribute`, used by `run_pretraining` when
`PretrainingDataConfig.data_service_address` is set).

Processing mode: "distributed_epoch" (`PROCESSING_MODE`). The dispatcher
splits the pipeline's source (the list of shard files) and gives each split
to one worker, so every record is read once per pass over the files, by one
worker, and no worker reads everything. The alternative, "parallel_epochs"
(sharding policy OFF), has every worker run the whole pipeline: with the same seed each would send the same
batches, i.e. duplicates. The price of "distributed_epoch": the order in
which batches arrive depends on worker timing, so it is not deterministic,
and a batch holds records of one worker's files only (each worker batches
what it reads).

Resume is therefore not exact (`RESUME_NOTE`): the local pipeline resumes
from the input position its checkpoints save (`train_input`), which
reproduces the interrupted run's data exactly; with the service there is no
fixed order to return to, and TensorFlow cannot save the iterator of a
service dataset. The trainer joins a job named after its output folder
(`job_name`, from the path as given: absolute or a URL, never relative,
so the name does not depend on the working directory): a restarted trainer whose dispatcher kept running continues
that job with the batches not yet handed out (those the killed trainer had
prefetched are lost); after a dispatcher restart a new pass begins. With dynamic masking every
worker numbers its records from 0; the mask keys also fold in each record's
bytes (`pipelines.tfrecords`), so the workers do not repeat each other's
masks. Weights,
optimizer, step and dropout RNG still resume exactly.

Example (in-process servers on free ports):

>>> import tensorflow as tf
>>> dispatcher = start_dispatcher(0)
>>> worker = start_worker(0, dispatcher.target)
>>> ds = distribute(tf.data.Dataset.range(6), dispatcher.target, "doc")
>>> sorted(int(x) for x in ds)
[0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Optional, Sequence

import tensorflow as tf

PROCESSING_MODE = "distributed_epoch"
# The only protocol TensorFlow 2.21 registers for the service: plaintext gRPC
# ("No credentials factory has been registered for protocol grpc+local").
PROTOCOL = "grpc"
RESUME_NOTE = (
    "with a tf.data service the data order is not deterministic "
    "(processing mode distributed_epoch: each record once per pass, order by "
    "worker timing), so a resumed run does not see exactly the batches the "
    "interrupted run would have seen; weights, optimizer, step and dropout "
    "RNG resume exactly")
_ADDRESS = re.compile(r"^(grpc://)?[^/:\s]+:\d{1,5}$")


def check_address(address: str, flag: str = "data_service_address") -> str:
    """The address with its protocol: "grpc://HOST:PORT"; ValueError otherwise.

    Example:

    >>> check_address("localhost:5050")
    'grpc://localhost:5050'
    """
    if not _ADDRESS.match(address or ""):
        raise ValueError(
            f"--{flag}={address!r}: expected grpc://HOST:PORT (e.g. "
            "grpc://dispatcher-host:5050).")
    return address if address.startswith("grpc://") else "grpc://" + address


def job_name(output_dir: str) -> str:
    """The service job of a training run: every trainer of the run (all
    hosts, and a restarted one) shares it; other runs get their own.

    The name hashes the path as given, so it does not depend on the working
    directory: a URL (gs://, hdfs://, s3://...) is kept as it is (trailing
    "/" dropped), an absolute local path is normalised (os.path.normpath:
    "//", "/./", "a/.." and a trailing "/"; symlinks are not resolved, since
    hosts may mount one folder under different links).

    Args:
        output_dir: the run's output folder (albert-pretrain --output_dir).

    Returns:
        "albert-pretrain-" and 16 hex digits of the path's SHA-256.

    Raises:
        ValueError: a relative local path: it names different folders on
            hosts (or restarts) started in different directories, which
            would then join different jobs and see the same records twice;
            or two runs in different folders would share one job.

    Example:

    >>> job_name("/runs/base") == job_name("/runs/base/"), job_name("/runs/a") == job_name("/runs/b")
    (True, False)
    >>> job_name("gs://bucket/runs/base") == job_name("gs://bucket/runs/base/")
    True
    """
    path = str(output_dir or "")
    if "://" in path:
        path = path.rstrip("/")
    elif os.path.isabs(path):
        path = os.path.normpath(path)
    else:
        raise ValueError(
            f"output_dir={output_dir!r} is relative: with a tf.data service the "
            "job name comes from the output folder, and a relative path names a "
            "different folder on each host or restart started elsewhere (their "
            "trainers would join different jobs and read every record twice). "
            "Pass an absolute path or a URL (gs://BUCKET/run).")
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    return f"albert-pretrain-{digest}"


def distribute(dataset: tf.data.Dataset, address: str,
               job: Optional[str]) -> tf.data.Dataset:
    """`dataset` produced by the service's workers in `PROCESSING_MODE`.

    Args:
        dataset: the whole input pipeline (it must not shard itself by input
            context: the service splits the files among the workers, and
            consumers of one job must send the same pipeline).
        address: the dispatcher, grpc://HOST:PORT.
        job: consumers with the same job name share its elements (each
            element goes to one of them); None: a job of this consumer only.
    """
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=PROCESSING_MODE, service=check_address(address),
        job_name=job))


def start_dispatcher(port: int, work_dir: Optional[str] = None,
                     worker_addresses: Optional[Sequence[str]] = None
                     ) -> tf.data.experimental.service.DispatchServer:
    """Starts a dispatcher on `port` (0: a free one; see `.target`).

    It listens on every network interface, in plaintext gRPC, with no
    authentication (`exposure_warning`): TensorFlow offers no other protocol
    and no choice of listening address.

    Args:
        port: the port to listen on.
        work_dir: if given, the dispatcher journals its state there and a
            restarted dispatcher continues its jobs (fault tolerance).
        worker_addresses: if given, only workers that name themselves with
            one of these addresses ("host:port", or "host:%port%" for any
            port; one worker per entry) may register; others fail at start.
            This guards against stray workers; it is not authentication (the
            address is the worker's own claim, --worker_address).
    """
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, protocol=PROTOCOL, work_dir=work_dir, fault_tolerant_mode=bool(work_dir),
        worker_addresses=list(worker_addresses) if worker_addresses else None)
    return tf.data.experimental.service.DispatchServer(config)


def exposure_warning(role: str, port: int, dispatcher_port: Optional[int] = None) -> str:
    """The one line a server logs at startup: who can reach it, and the safe setup.

    Args:
        role: "dispatcher" or "worker".
        port: the port the server listens on (the chosen one when 0 was asked).
        dispatcher_port: a worker's dispatcher port, for the firewall advice.

    Example:

    >>> exposure_warning("dispatcher", 5050)[:66]
    'tf.data service dispatcher: plaintext gRPC, unauthenticated, liste'
    """
    if role == "dispatcher":
        reach = "register a worker or read the training data"
        rule = (f"open port {port} only to the trainers and the workers, and each worker's "
                "port (albert-data-service --role=worker --port) only to the trainers and "
                "this dispatcher")
    elif role == "worker":
        reach = "read the training data it serves"
        rule = (f"open port {port} only to the trainers and the dispatcher, and the "
                f"dispatcher's port{f' {dispatcher_port}' if dispatcher_port else ''} "
                "only to the trainers and the workers")
    else:
        raise ValueError(f"role must be 'dispatcher' or 'worker', got {role!r}.")
    return (f"tf.data service {role}: plaintext gRPC, unauthenticated, listening on all "
            f"interfaces, port {port} (TensorFlow offers neither TLS nor authentication "
            f"nor a choice of listening address); anyone who can reach it can {reach}. "
            f"Run it on a private network or behind a firewall: {rule}.")


def start_worker(port: int, dispatcher_address: str,
                 worker_address: Optional[str] = None
                 ) -> tf.data.experimental.service.WorkerServer:
    """Starts a worker on `port` that registers with the dispatcher.

    Args:
        port: the port to listen on (0: a free one).
        dispatcher_address: grpc://HOST:PORT or HOST:PORT of the dispatcher.
        worker_address: how the dispatcher and trainers reach this worker
            (default: localhost:PORT, right for one machine only).
    """
    dispatcher = check_address(dispatcher_address, "dispatcher_address")
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher[len("grpc://"):], port=port,
        worker_address=worker_address, protocol=PROTOCOL)
    return tf.data.experimental.service.WorkerServer(config)
