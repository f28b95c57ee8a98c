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
"""

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


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    if FLAGS.role is None:
        raise app.UsageError("--role is required (dispatcher or worker).")
    if not 0 <= FLAGS.port <= 65535:
        raise app.UsageError(f"--port={FLAGS.port}: expected 0..65535.")
    from albert_tf.training import data_service  # TensorFlow: after flag checks

    if FLAGS.role == "dispatcher":
        server = data_service.start_dispatcher(FLAGS.port, FLAGS.work_dir)
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
        # _address: where the worker listens (the chosen port when --port=0).
        logging.info("Worker at %s serving for %s", getattr(server, "_address", FLAGS.port),
                     FLAGS.dispatcher_address)
    server.join()


def run() -> None:
    """Console-script entry point (setup.py: albert-data-service)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, _define_flags, "albert-data-service", __doc__)


if __name__ == "__main__":
    run()
