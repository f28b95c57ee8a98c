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

Resume is therefore not exact (`RESUME_NOTE`): the local pipeline resumes by
skipping the elements the completed steps consumed, which reproduces the
interrupted run's data exactly; with the service there is no fixed order to
skip into. The trainer joins a job named after its output folder
(`job_name`): a restarted trainer whose dispatcher kept running continues
that job with the batches not yet handed out (those the killed trainer had
prefetched are lost); after a dispatcher restart a new pass begins. Weights,
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
from typing import Optional

import tensorflow as tf

PROCESSING_MODE = "distributed_epoch"
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

    Example:

    >>> job_name("runs/base") == job_name("runs/base/"), job_name("runs/a") == job_name("runs/b")
    (True, False)
    """
    digest = hashlib.sha256(os.path.abspath(output_dir).encode()).hexdigest()[:16]
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


def start_dispatcher(port: int, work_dir: Optional[str] = None
                     ) -> tf.data.experimental.service.DispatchServer:
    """Starts a dispatcher on `port` (0: a free one; see `.target`).

    Args:
        port: the port to listen on.
        work_dir: if given, the dispatcher journals its state there and a
            restarted dispatcher continues its jobs (fault tolerance).
    """
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir))
    return tf.data.experimental.service.DispatchServer(config)


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
        worker_address=worker_address)
    return tf.data.experimental.service.WorkerServer(config)
