"""The Spark driver's JVM, which pyspark launches as a child of this process (``bin/spark-submit``,
a shell script that runs Spark's launcher, a short-lived java, then execs the JVM).

pyspark counts on the JVM noticing the end of its stdin, which it reads only once started: tens
of seconds on a busy machine. So a driver stopped or killed during Spark's start left the JVM
running, orphaned. Here:

- the JVM dies with this process, ``kill -9`` included (PR_SET_PDEATHSIG), and runs in a process
  group of its own, so that ending it also ends the launcher it may still be running;
- SIGTERM or SIGINT during the start ends the JVM at once and raises :class:`Stopped`;
- :func:`stop` stops the session and waits until the JVM has exited.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import threading
from typing import Any

from common.children import die_with_parent

GRACE = 5.0  # seconds a JVM has to exit after SIGTERM (or the end of its stdin)


class Stopped(Exception):  # noqa: N818 - it is not an error: a stop was asked for
    """SIGTERM or SIGINT arrived while Spark was starting; its JVM is gone."""


class _Interrupt(BaseException):
    """Raised by the signal handler during the start: a BaseException, which py4j's
    ``except Exception`` does not turn into a network error."""


_launched: list[subprocess.Popen] = []  # the JVMs this process started and has not ended


class _JvmPopen(subprocess.Popen):
    """What pyspark's launch_gateway runs the JVM with: its own preexec (ignore SIGINT), then
    ours; a process group of its own; remembered, to be ended."""

    def __init__(self, *args: Any, preexec_fn=None, jvm_env: dict[str, str] | None = None,
                 **kwargs: Any):
        if jvm_env:  # the JVM's own variables over those pyspark passes (this process's)
            kwargs["env"] = {**(kwargs.get("env") or os.environ), **jvm_env}
        parent = os.getpid()
        main = threading.current_thread() is threading.main_thread()

        def preexec() -> None:
            if preexec_fn is not None:
                preexec_fn()
            if main:  # PDEATHSIG fires when the forking *thread* ends: only the main one lasts
                die_with_parent(parent)

        super().__init__(*args, preexec_fn=preexec, start_new_session=True, **kwargs)
        _launched.append(self)


def start(builder: Any, env: dict[str, str] | None = None) -> Any:
    """``builder.getOrCreate()``, with the JVM it launches made as the module docstring says
    (``env``: variables of the JVM's own, over this process's). Raises :class:`Stopped` when
    SIGTERM or SIGINT arrives during the start."""
    from pyspark import java_gateway

    state = {"starting": True, "signal": None}

    def on_signal(signum: int, _frame: Any) -> None:
        state["signal"] = signum
        if state["starting"]:
            raise _Interrupt

    watch = (signal.SIGTERM, signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()  # where handlers can go
    previous = {sig: signal.signal(sig, on_signal) for sig in watch} if in_main else {}
    original, java_gateway.Popen = java_gateway.Popen, functools.partial(_JvmPopen, jvm_env=env)
    try:
        spark = builder.getOrCreate()
        state["starting"] = False
    except BaseException as exc:
        state["starting"] = False
        _end_all()
        if state["signal"] is not None or isinstance(exc, KeyboardInterrupt):
            raise Stopped("stopped during Spark's start; its JVM is gone") from None
        raise
    finally:
        java_gateway.Popen = original
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:  # pyspark may have put its SIGINT's own
                signal.signal(sig, handler)
    if state["signal"] is not None:  # arrived between the start and the handlers' restore
        stop(spark)
        raise Stopped("stopped at the end of Spark's start; its JVM is gone")
    return spark


def stop(spark: Any, grace: float = GRACE) -> None:
    """Stop the session and end the JVMs this process launched: the end of its stdin tells a
    JVM to exit (pyspark's own way), SIGTERM and then SIGKILL follow if it lingers ``grace``
    seconds. A later session launches a new JVM."""
    from pyspark import SparkContext

    try:
        spark.stop()
    finally:
        gateway = SparkContext._gateway
        if gateway is not None:
            with contextlib.suppress(Exception):  # the JVM may be gone already
                gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
        _end_all(gently=True, grace=grace)


def _end_all(gently: bool = False, grace: float = GRACE) -> None:
    while _launched:
        _end(_launched.pop(), gently, grace)


def _end(proc: subprocess.Popen, gently: bool, grace: float = GRACE) -> None:
    """End the JVM's process group: the JVM and, early in the start, Spark's launcher."""
    steps = [(None, grace)] if gently else []
    steps += [(signal.SIGTERM, GRACE), (signal.SIGKILL, GRACE)]
    for sig, wait in steps:
        if sig is None:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the group still holds (a launcher)
