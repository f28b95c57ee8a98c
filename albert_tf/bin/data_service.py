r"""albert-data-service: a tf.data service dispatcher or worker for albert-pretrain.

The training input (reading shards, parsing, dynamic masking) then runs on
worker machines instead of the accelerator host:

    albert-data-service --role=dispatcher --port=5050 [--work_dir=gs://bucket/ds]
    albert-data-service --role=worker --port=5051 --dispatcher_address=grpc://dispatcher-host:5050 \
        --worker_address=worker-host-1:5051            # on each worker machine
    albert-pretrain ... --data_service_address=grpc://dispatcher-host:5050

Workers must be able to read --input_file (a shared or cloud file system).
Processing mode "distributed_epoch": each shard file goes to one worker, so
every record is used once per pass, but the order depends on worker timing,
so a resumed albert-pretrain run does not see exactly the data an
uninterrupted one would have (see albert_tf/training/data_service.py).
The process serves until it is stopped (Ctrl-C or SIGTERM).

Who can reach it: both servers listen on every network interface, in
plaintext gRPC, with no authentication (TensorFlow offers no TLS, no
authentication and no choice of listening address); anyone who can reach the
dispatcher's port can register a worker or read the training data, and a
worker's port serves the data it reads. Each server says so in one warning
line at startup. Run them on a private network or behind a firewall: the
dispatcher's port open to the trainers and workers only, each worker's port to
the trainers and the dispatcher only. --worker_addresses makes the dispatcher
refuse workers that name themselves otherwise (a guard against stray workers,
not authentication).
"""

import signal

from absl import app, flags, logging

FLAGS = flags.FLAGS


def _define_flags() -> None:
    flags.DEFINE_enum("role", None, ["dispatcher", "worker"], "Which server to start.")
    flags.DEFINE_integer("port", 0, "Port to listen on (0: a free one, logged).")
    flags.DEFINE_string("dispatcher_address", None,
                        "--role=worker: the dispatcher, grpc://HOST:PORT.")
    flags.DEFINE_string("worker_address", None,
                        "--role=worker: HOST:PORT under which trainers reach this worker "
                        "(default localhost:PORT: one machine only).")
    flags.DEFINE_string("work_dir", None,
                        "--role=dispatcher: journal folder; a restarted dispatcher "
                        "continues its jobs from it.")
    flags.DEFINE_list("worker_addresses", None,
                      "--role=dispatcher: the only workers that may register, as they name "
                      "themselves (--worker_address), HOST:PORT or HOST:%port% (any port); one "
                      "worker per entry. A guard against stray workers, not authentication.")


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    if FLAGS.role is None:
        raise app.UsageError("--role is required (dispatcher or worker).")
    if not 0 <= FLAGS.port <= 65535:
        raise app.UsageError(f"--port={FLAGS.port}: expected 0..65535.")
    if FLAGS.worker_addresses and FLAGS.role != "dispatcher":
        raise app.UsageError("--worker_addresses is a --role=dispatcher flag.")
    from albert_tf.training import data_service  # TensorFlow: after flag checks

    if FLAGS.role == "dispatcher":
        server = data_service.start_dispatcher(FLAGS.port, FLAGS.work_dir,
                                               FLAGS.worker_addresses)
        logging.warning("%s", data_service.exposure_warning(
            "dispatcher", int(server.target.rsplit(":", 1)[1])))
        logging.info("Dispatcher serving at %s (processing mode %s)", server.target,
                     data_service.PROCESSING_MODE)
    else:
        if not FLAGS.dispatcher_address:
            raise app.UsageError("--role=worker needs --dispatcher_address=grpc://HOST:PORT.")
        try:
            server = data_service.start_worker(FLAGS.port, FLAGS.dispatcher_address,
                                               FLAGS.worker_address)
        except ValueError as e:
            raise app.UsageError(str(e)) from None
        except RuntimeError as e:  # the dispatcher refused the worker (or could not be reached): one line
            raise ValueError(worker_refused_message(e, FLAGS.dispatcher_address)) from None
        # _address: where the worker listens (the chosen port when --port=0).
        address = getattr(server, "_address", f"localhost:{FLAGS.port}")
        logging.warning("%s", data_service.exposure_warning(
            "worker", int(str(address).rsplit(":", 1)[1]),
            int(FLAGS.dispatcher_address.rsplit(":", 1)[1])))
        logging.info("Worker at %s serving for %s", address, FLAGS.dispatcher_address)
    # A server holds nothing to save, and join() blocks in C++ where a Python handler never runs: SIGTERM ends
    # the process at once, as it did before run_binary caught SIGTERM for the training binaries.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    server.join()


def worker_refused_message(error: BaseException, dispatcher_address: str) -> str:
    """One line for a worker that could not start (TensorFlow raises a RuntimeError of several lines).

    >>> worker_refused_message(RuntimeError("Failed to perform worker heartbeat: Failed to assign an index "
    ...     "for worker otherhost:5999. Configured workers list: [localhost:5000]\\n  more"), "grpc://h:5050")
    "The dispatcher at grpc://h:5050 refused this worker: Failed to assign an index for worker otherhost:5999. \
Configured workers list: [localhost:5000]. Start the worker with --worker_address set to its entry in the \
dispatcher's --worker_addresses."
    """
    reason = " ".join(str(error).split("\n")[0].split())
    reason = reason.split("heartbeat: ", 1)[-1].rstrip(".")
    if "assign an index" in reason:
        return (f"The dispatcher at {dispatcher_address} refused this worker: {reason}. Start the worker with "
                "--worker_address set to its entry in the dispatcher's --worker_addresses.")
    return f"The worker could not start with the dispatcher at {dispatcher_address}: {reason}."


def run() -> None:
    """Console-script entry point (setup.py: albert-data-service)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, _define_flags, "albert-data-service", __doc__)


if __name__ == "__main__":
    run()
