"""The entry point every albert-tf binary shares: `run_binary`.

It gives each console script the same behaviour:

* TensorFlow's C++ start-up log (oneDNN notices, "failed call to cuInit" on a
  machine without a GPU, CPU-feature notices) stays quiet unless the user set
  TF_CPP_MIN_LOG_LEVEL themselves;
* TensorFlow's and Keras's Python INFO notices, which reach the same absl log
  as the binary's own lines (`functional_saver.py:440] Sharding callback
  duration: 51 microseconds` after every checkpoint save), are hidden at the
  default verbosity (`hide_internal_notices`); --verbosity=1 shows everything;
* `--help` / `--helpshort` print the binary's usage text and its own flags,
  grouped by flag group (absl alone looks for both in `__main__`, which for an
  installed console script is the generated wrapper, and prints neither);
  `--helpfull` lists every flag as usual;
* library errors (bad files, bad values, TensorFlow op errors, training
  errors) end the program with one line `NAME: message` on stderr and exit
  code 1 instead of a traceback; `app.UsageError` keeps absl's behaviour; a
  full disk names the folder and what is complete in it, a corrupt TFRecord
  record names its file and offset (albert_tf/bin/faults.py).

Usage, at the bottom of a binary module (which imports TensorFlow only inside
`main`, so that the log setting applies):

    def run() -> None:
        \"\"\"Console-script entry point.\"\"\"
        from albert_tf.bin.common import run_binary
        run_binary(main, _define_flags, "albert-finetune", __doc__)
"""

from __future__ import annotations

import importlib.util
import logging as std_logging
import os
import re
import signal
import sys
import tempfile
import threading
from typing import Callable

from absl import app, flags, logging

FLAGS = flags.FLAGS

# TensorFlow C++ messages below this level are hidden by default in the
# binaries. 3 hides ERROR lines too: on a CPU-only machine TensorFlow logs
# harmless notices at ERROR ("failed call to cuInit", "oneDNN supports DT_INT32
# only on platforms with AVX-512"), while real failures reach Python as
# exceptions, which the binaries print in one line. TF_CPP_MIN_LOG_LEVEL=0
# shows everything.
DEFAULT_TF_CPP_MIN_LOG_LEVEL = "3"

# Start-up lines TensorFlow prints while it loads and looks for devices; none
# of them means that something is wrong on a CPU-only machine.
_STARTUP_NOISE = (
    re.compile(r"^I\d{4} "),  # absl C++ INFO lines (oneDNN, cudart stub, CPU features)
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(r"^To enable the following instructions: "),
)
_NO_GPU_NOISE = re.compile(r"^E\d{4} .*(failed call to cuInit|Could not find cuda drivers)")


def quiet_tensorflow_log() -> bool:
    """Sets TF_CPP_MIN_LOG_LEVEL for this process unless the user set it.

    Returns:
        True when the binary decides the log level (the user did not).

    Example:
        >>> import os
        >>> saved = os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        >>> quiet_tensorflow_log(), os.environ["TF_CPP_MIN_LOG_LEVEL"]
        (True, '3')
        >>> os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the user's choice wins
        >>> quiet_tensorflow_log(), os.environ["TF_CPP_MIN_LOG_LEVEL"]
        (False, '0')
        >>> _ = os.environ.pop("TF_CPP_MIN_LOG_LEVEL")
        >>> if saved is not None:
        ...     os.environ["TF_CPP_MIN_LOG_LEVEL"] = saved
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return False
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = DEFAULT_TF_CPP_MIN_LOG_LEVEL
    return True


def filter_startup_log(text: str, have_nvidia_driver: bool) -> str:
    """Drops TensorFlow's harmless start-up lines from captured stderr text.

    Args:
        text: what stderr received while TensorFlow loaded and listed devices.
        have_nvidia_driver: whether the machine has an NVIDIA driver; only then
            is a failed cuInit worth showing.

    Returns:
        The remaining lines (each with its newline).

    Example:
        >>> filter_startup_log(
        ...     "I0000 00:00:1.0 port.cc:153] oneDNN custom operations are on.\\n"
        ...     "E0000 00:00:1.0 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\\n"
        ...     "a real warning\\n", have_nvidia_driver=False)
        'a real warning\\n'
    """
    kept = []
    for line in text.splitlines(keepends=True):
        if any(pattern.match(line) for pattern in _STARTUP_NOISE):
            continue
        if not have_nvidia_driver and _NO_GPU_NOISE.match(line):
            continue
        kept.append(line)
    return "".join(kept)


def start_tensorflow_quietly() -> None:
    """Sets the CPU kind's TensorFlow defaults (`albert_tf.cpu`), then imports TensorFlow and lists its
    devices with stderr captured and filtered.

    TensorFlow prints its start-up notices from C++ before it reads
    TF_CPP_MIN_LOG_LEVEL, and the cuInit error when it first looks for GPUs
    (listing devices does not fix the runtime's device setup, so a binary can
    still configure logical devices afterwards).
    """
    if "tensorflow" not in sys.modules:  # TensorFlow reads these once, at import
        from albert_tf.cpu import apply_tensorflow_defaults

        for name, value in apply_tensorflow_defaults().items():
            logging.info("%s=%s: this CPU kind's default (docs/benchmarks.md); set %s yourself to choose.",
                         name, value, name)
    have_nvidia_driver = os.path.exists("/proc/driver/nvidia")
    gpus = []
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
        finally:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            sys.stderr.write(filter_startup_log(text, have_nvidia_driver))
            sys.stderr.flush()
    if have_nvidia_driver and not gpus:
        logging.warning(
            "This machine has an NVIDIA driver but TensorFlow sees no GPU; run with TF_CPP_MIN_LOG_LEVEL=0 "
            "to see TensorFlow's reasons.")


# Packages whose INFO lines are their own internal notices, not the binary's story.
INTERNAL_NOTICE_PACKAGES = ("tensorflow", "keras", "tf_keras", "tensorflow_text", "tensorboard")


def package_folders(names) -> list[str]:
    """The folders of the installed packages among `names` (found without importing them)."""
    folders = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            folders.extend(spec.submodule_search_locations)
    return folders


class InternalNoticeFilter(std_logging.Filter):
    """Drops INFO and DEBUG records logged by code inside `folders`; warnings and errors pass.

    The record's pathname is the file that called the logger (absl finds it),
    so TensorFlow's notices are told from the binary's lines by where they come
    from, not by their text.

    Args:
        folders: package folders (`package_folders`).

    Example:
        >>> notices = InternalNoticeFilter(["/site/tensorflow"])
        >>> def record(path, level=std_logging.INFO):
        ...     return std_logging.LogRecord("absl", level, path, 1, "a notice", None, None)
        >>> [notices.filter(record(p)) for p in ("/site/tensorflow/python/saver.py", "/src/albert_tf/x.py",
        ...                                      "/site/tensorflow_text/y.py")]
        [False, True, True]
        >>> notices.filter(record("/site/tensorflow/python/saver.py", std_logging.WARNING))
        True
    """

    def __init__(self, folders):
        super().__init__()
        self._folders = tuple(os.path.join(os.path.realpath(f), "") for f in folders)
        self._inside: dict[str, bool] = {}

    def filter(self, record: std_logging.LogRecord) -> bool:
        if record.levelno >= std_logging.WARNING:
            return True
        inside = self._inside.get(record.pathname)
        if inside is None:
            inside = os.path.realpath(record.pathname).startswith(self._folders)
            self._inside[record.pathname] = inside
        return not inside


def hide_internal_notices() -> InternalNoticeFilter:
    """Adds an `InternalNoticeFilter` of TensorFlow's and Keras's folders to absl's handler; returns it."""
    notices = InternalNoticeFilter(package_folders(INTERNAL_NOTICE_PACKAGES))
    logging.get_absl_handler().addFilter(notices)
    return notices


def _group_title(function_name: str) -> str:
    """`define_pretraining_data_flags` -> "pretraining data"."""
    return function_name.removeprefix("define_").removesuffix("_flags").replace("_", " ").strip()


def define_flags_by_group(define_flags: Callable[[], None]) -> dict[str, list[str]]:
    """Calls `define_flags` and returns the flags it defined, by flag group.

    A group is the innermost `define_*_flags` function that defined a flag
    (flags/core_flags.py, flags/pipeline_flags.py); flags defined elsewhere
    fall in the group "".

    Args:
        define_flags: the binary's flag-defining function.

    Returns:
        Group title -> names of the flags it defined, in definition order.
    """
    groups: dict[str, list[str]] = {}
    claimed: set[str] = set()
    open_groups: list[tuple[object, str, set[str]]] = []
    known = set(FLAGS)
    previous_profiler = sys.getprofile()

    def claim(title: str, names_before: set[str]) -> None:
        new = [name for name in FLAGS if name not in names_before and name not in claimed]
        for name in new:
            if FLAGS[name].name == name:  # not a short alias
                groups.setdefault(title, []).append(name)
            claimed.add(name)

    def profiler(frame, event, arg):
        del arg
        name = frame.f_code.co_name
        if not (name.startswith("define_") and name.endswith("_flags")):
            return
        if event == "call":
            open_groups.append((frame, _group_title(name), set(FLAGS)))
        elif event == "return" and open_groups and open_groups[-1][0] is frame:
            _, title, names_before = open_groups.pop()
            claim(title, names_before)

    sys.setprofile(profiler)
    try:
        define_flags()
    finally:
        sys.setprofile(previous_profiler)
    claim("", known)
    return groups


def _render_flag(flag) -> str:
    prefix = "--[no]" if flag.boolean else "--"
    text = flags.text_wrap(f"{prefix}{flag.name}: {flag.help}", indent="    ", firstline_indent="  ")
    if flag.default is not None and flag.default_as_str:
        text += "\n" + flags.text_wrap(f"(default: {flag.default_as_str})", indent="    ")
    return text


def usage_text(name: str, doc: str | None, groups: dict[str, list[str]]) -> str:
    """The --help text: usage, then the binary's flags under their group titles.

    Args:
        name: the binary's name, e.g. "albert-convert".
        doc: its usage text (the module docstring).
        groups: group title -> flag names (`define_flags_by_group`).

    Returns:
        The text, ending with a pointer to --helpfull.
    """
    parts = [(doc or f"USAGE: {name} [flags]").strip() + "\n"]
    for title, names in groups.items():
        names = [n for n in names if n in FLAGS]
        if names:
            parts.append(f"\n{title or name} flags:")
            parts.extend(_render_flag(FLAGS[n]) for n in sorted(names))
    parts.append(f"\nTry --helpfull to get a list of all flags (absl's logging flags among them).\n")
    return "\n".join(parts)


class _UsageHelpFlag(flags.BooleanFlag):
    """--help / --helpshort that print the binary's own usage text and flags."""

    def __init__(self, flag_name: str, short_name: str | None, render: Callable[[], str]):
        super().__init__(
            flag_name, False, "show this help", short_name=short_name, allow_override=True, allow_hide_cpp=True
        )
        self._render_usage = render

    def parse(self, argument):
        if self._parse(argument):
            sys.stdout.write(self._render_usage())
            sys.stdout.flush()
            sys.exit(0)


def _op_error_line(text: str) -> list[str]:
    """The line of an op error that says what failed: not tf.function's
    "Graph execution error:" header nor its "Detected at node" traceback."""
    lines = text.strip().splitlines()
    if lines and lines[0].strip() == "Graph execution error:":
        for line in lines[1:]:
            if line.strip() and not line.startswith((" ", "\t")) and not line.startswith("Detected at node"):
                return [line]
    return lines[:1]


def _one_line(error: BaseException) -> str:
    """The error's message on one line (an op error: the line saying what failed)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.OpError):
        lines = _op_error_line(error.message or str(error))
    else:
        lines = str(error).strip().splitlines()
    message = " ".join(line.strip() for line in lines if line.strip())
    return message or type(error).__name__


def flag_named_in(message: str) -> str | None:
    """The flag whose value the message quotes (the longest such value), if any.

    Library errors name the file or value they failed on; the user typed a
    flag, so the binaries put the flag's name in front.
    """
    best, best_length = None, 0
    for name in FLAGS:
        flag = FLAGS[name]
        if flag.name != name or flag.using_default_value or not isinstance(flag.value, str):
            continue
        value = flag.value
        if len(value) >= 2 and value in message and len(value) > best_length:
            best, best_length = name, len(value)
    return best


def library_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions the binaries report in one line: bad values, files, ops, training.

    Modules are looked up, not imported: an error class whose module was never
    imported cannot have been raised.
    """
    types: list[type[BaseException]] = [ValueError, OSError]
    training = sys.modules.get("albert_tf.training")
    if training is not None and hasattr(training, "TrainingError"):
        types.append(training.TrainingError)
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "errors"):
        types.append(tf.errors.OpError)
    return tuple(types)


def preempted_types() -> tuple[type[BaseException], ...]:
    """Errors that mean "try again later" (exit code 75, one line), once imported:
    `albert_tf.preemption.Preempted` (SIGTERM/SIGINT, a lost lease) and
    `pipelines.locking.LeaseMayBeStale` (a refusal that clears if the holder is gone)."""
    found = []
    preemption = sys.modules.get("albert_tf.preemption")
    if preemption is not None:
        found.append(preemption.Preempted)
    locking = sys.modules.get("pipelines.locking")
    if locking is not None:
        found.append(locking.LeaseMayBeStale)
    return tuple(found)


class SignalStop(KeyboardInterrupt):
    """SIGTERM outside the training loop's watcher (loading, final outputs, a second signal), raised by the
    binaries' own handler; a KeyboardInterrupt, so that no `except Exception` of library code swallows it."""


def _raise_signal_stop(signum, frame) -> None:
    raise SignalStop(signal.Signals(signum).name)


def signal_stop_line(name: str, error: KeyboardInterrupt) -> str:
    """The one line of a SIGTERM / SIGINT that came outside a training step (exit code 75).

    >>> signal_stop_line("albert-pretrain", SignalStop("SIGTERM"))[:60]
    'albert-pretrain: stopped by SIGTERM outside a training step;'
    """
    which = str(error) if isinstance(error, SignalStop) else "SIGINT"
    return (f"{name}: stopped by {which} outside a training step; nothing incomplete is taken for complete: "
            "run the same command again to go on (exit code 75).")


def run_binary(main: Callable[[list[str]], object], define_flags: Callable[[], None], name: str, doc: str) -> None:
    """Defines the binary's flags, parses them and runs `main` the albert-tf way.

    Args:
        main: the absl main, `main(argv)`.
        define_flags: defines the binary's flags (flag groups from flags/*.py).
        name: the binary's name, e.g. "albert-finetune" (prefix of error lines).
        doc: its usage text (the module docstring), shown by --help.
    """
    choose_log_level = quiet_tensorflow_log()
    groups = define_flags_by_group(define_flags)
    main_module = getattr(main, "__module__", None)
    if main_module:  # flags defined at import by the binary's own module
        module_key = sys.argv[0] if main_module == "__main__" else main_module
        own = [f.name for f in FLAGS.get_flags_for_module(module_key)]
        listed = {n for names in groups.values() for n in names}
        groups.setdefault("", []).extend(n for n in own if n not in listed)
    groups = {title: names for title, names in groups.items() if names}

    # absl's usage-error and --helpfull output read both from __main__.
    main_doc_module = sys.modules.get("__main__")
    if main_doc_module is not None and not getattr(main_doc_module, "__doc__", None):
        main_doc_module.__doc__ = doc
    for names in groups.values():
        for flag_name in names:
            FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[flag_name])
    app.define_help_flags()
    render = lambda: usage_text(name, doc, groups)  # noqa: E731
    flags.DEFINE_flag(_UsageHelpFlag("help", "?", render))
    flags.DEFINE_flag(_UsageHelpFlag("helpshort", None, render))

    def parse_flags(argv: list[str]) -> list[str]:
        remaining = app.parse_flags_with_usage(argv)
        # Before absl's after-init callbacks: TensorFlow registers one that
        # looks for GPUs (the cuInit error).
        if choose_log_level:
            start_tensorflow_quietly()
        return remaining

    def guarded_main(argv):
        if FLAGS.verbosity < 1:  # --verbosity=1 shows TensorFlow's notices too
            hide_internal_notices()
        # SIGTERM outside the training loop (whose watcher checkpoints the step): one line and exit 75, and the
        # `finally` blocks run (a remote lease is given back), instead of a silent death.
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_signal_stop)
        try:
            return main(argv)
        except app.UsageError:
            raise
        except KeyboardInterrupt as error:  # SIGINT (Ctrl-C) or SIGTERM outside a training step
            sys.stderr.write(signal_stop_line(name, error) + "\n")
            sys.stderr.flush()
            sys.exit(75)
        except preempted_types() as error:  # a checkpoint was written: "try again later"
            sys.stderr.write(f"{name}: {error}\n")
            sys.stderr.flush()
            sys.exit(error.exit_code)
        except library_error_types() as error:
            logging.debug("%s failed", name, exc_info=True)  # the traceback with --verbosity=1
            from albert_tf.bin import faults  # a full disk, a corrupt record: what and where

            message = faults.fault_message(error, FLAGS)
            if message is None:
                message = _one_line(error)
                flag_name = flag_named_in(message)
                if flag_name and f"--{flag_name}" not in message:
                    message = f"--{flag_name}: {message}"
            sys.stderr.write(f"{name}: {message}\n")
            sys.stderr.flush()
            sys.exit(1)
        finally:
            if signal.getsignal(signal.SIGTERM) is _raise_signal_stop:  # a process that goes on gets it back
                signal.signal(signal.SIGTERM, previous)

    app.run(guarded_main, flags_parser=parse_flags)
