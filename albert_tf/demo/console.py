"""The demo's console: its story in plain lines a person reads.

Every line names its stage, `[4/8] pretraining: step 500/1500, mlm_acc 0.15,
2.3 steps/s, ETA 6 min`, and figure blocks follow indented. The story goes to
stdout; the library's own log (absl, stderr) is hidden at the default
verbosity (`hide_library_log`) except its warnings, and shown again with
--verbosity=0 (--verbosity=1 adds TensorFlow's notices). Long library work
that has no progress hook of its own (fine-tuning) is relayed: its INFO lines
from chosen source files become story lines while `relaying` is active.

Example:

>>> import io
>>> console = Console(io.StringIO())
>>> console.stage(4, "pretraining", "a small ALBERT")
>>> console.say("step %d/%d, %s", 500, 1500, format_minutes(361))
>>> console.block(["first figure", "second figure"])
>>> print(console.stream.getvalue(), end="")
[4/8] pretraining: a small ALBERT
[4/8] pretraining: step 500/1500, 6 min
    first figure
    second figure
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from typing import Iterable, Iterator, Optional, TextIO

from albert_tf.demo.settings import STAGES


def format_minutes(seconds: float) -> str:
    """A duration as a person says it: `45 s`, `6 min`, `1 h 20 min`; "?" when unknown.

    Example:
    >>> [format_minutes(s) for s in (44.6, 361, 4800, float("nan"))]
    ['45 s', '6 min', '1 h 20 min', '?']
    """
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


class Console:
    """Writes the story, each line prefixed by its stage.

    Args:
        stream: where the lines go (default: stdout, flushed after each line).
        stages: how many stages the story has (the n in `[k/n]`).
    """

    def __init__(self, stream: Optional[TextIO] = None, stages: int = STAGES):
        self.stream = stream if stream is not None else sys.stdout
        self._stages = stages
        self._prefix = ""
        self._stage_start = time.time()

    def stage(self, number: Optional[int], name: str, what: str) -> None:
        """Starts stage `number` (None: the ending, unnumbered): its first line says what it does."""
        self._prefix = f"{name}:" if number is None else f"[{number}/{self._stages}] {name}:"
        self._stage_start = time.time()
        self.say("%s", what)

    def say(self, message: str, *args) -> None:
        """One line of the current stage (`message % args`, as logging formats)."""
        text = message % args if args else message
        self._write(f"{self._prefix} {text}" if self._prefix else text)

    def warn(self, message: str, *args) -> None:
        """A line that must not be missed: between rows of exclamation marks."""
        self._write("!" * 72)
        self.say("WARNING: " + message, *args)
        self._write("!" * 72)

    def block(self, lines: Iterable[str]) -> None:
        """Figures under the current line, indented."""
        for line in lines:
            self._write("    " + line)

    def elapsed(self) -> float:
        """Seconds since the current stage started."""
        return time.time() - self._stage_start

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    @contextlib.contextmanager
    def relaying(self, *sources: str) -> Iterator[None]:
        """While inside, INFO lines logged from these source files are story lines too.

        Args:
            *sources: path endings of the logging modules, e.g.
                "albert_tf/tasks/callbacks.py".
        """
        handler = _Relay(self, sources)
        logger = logging.getLogger("absl")  # absl.logging's records start here
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)


class _Relay(logging.Handler):
    """Copies INFO records of chosen source files to a `Console`."""

    def __init__(self, console: Console, sources: Iterable[str]):
        super().__init__(logging.INFO)
        self._console = console
        self._sources = tuple(s.replace("/", os.sep) for s in sources)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.INFO and record.pathname.endswith(self._sources):
            self._console.say("%s", record.getMessage())


class _BelowWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def hide_library_log() -> logging.Filter:
    """Hides the library's INFO and DEBUG lines on absl's stderr handler (warnings stay).

    The demo tells its own story; the library's log (every step, every file
    written) is what --verbosity=0 asks for. Returns the filter (remove it from
    `absl.logging.get_absl_handler()` to show the log again).
    """
    from absl import logging as absl_logging

    quiet = _BelowWarning()
    absl_logging.get_absl_handler().addFilter(quiet)
    return quiet
