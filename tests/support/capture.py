"""Running the capture inside a test: in a thread (stoppable; the `start` fixture, under the
test's `prefix`) or as a process (killable)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
import weakref
from pathlib import Path

import pytest

from capture.run import run_capture
from capture.settings import load_settings


class CaptureThread:
    running: weakref.WeakSet[CaptureThread] = weakref.WeakSet()

    def __init__(self, **settings):
        self.settings = load_settings(**settings)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            run_capture(self.settings, self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    def start(self) -> CaptureThread:
        self.thread.start()
        CaptureThread.running.add(self)
        return self

    @classmethod
    def raise_failures(cls) -> None:
        """Called while a test waits: a capture that died should fail the test at once."""
        for capture in list(cls.running):
            if capture.error is not None:
                cls.running.discard(capture)
                raise capture.error

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "capture did not stop"
        if self.error:
            raise self.error

    def wait_failed(self, timeout: float = 60) -> BaseException:
        CaptureThread.running.discard(self)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "capture did not fail"
        assert self.error is not None, "capture ended without an error"
        return self.error


def capture_process(args: list[str], log: Path, env: dict[str, str] | None = None):
    """`bottler capture ARGS` as a child process, output to ``log``."""
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "capture", *args],
        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )


@pytest.fixture
def prefix():
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start(stack, source, prefix):
    """Start a capture of ``source`` with the test's prefix; stopped at the end of the test."""
    running = []

    def start_one(**overrides) -> CaptureThread:
        settings = dict(postgres=source, broker=stack.kafka, schema_registry=stack.registry_url,
                        slot=prefix, topic_prefix=prefix, heartbeat_interval=1.0,
                        snapshot_workers=1)
        capture = CaptureThread(**(settings | overrides)).start()
        running.append(capture)
        return capture

    yield start_one
    for capture in running:
        if capture.thread.is_alive():
            capture.stop()


# A snapshot in small chunks, by two workers: stopped mid-way in the tests that stop it.
CHUNK_PAGES = 40
WORKERS = 2


def start_capture(stack, source, prefix, log, *args: str):
    """`bottler capture` as a child process in a process group of its own, output to ``log``,
    its snapshot in chunks of CHUNK_PAGES by WORKERS workers; ``args``: more options."""
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "capture", "-d", source, "-s", prefix,
         "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix,
         "--snapshot-workers", str(WORKERS), "--snapshot-chunk-pages", str(CHUNK_PAGES),
         "--heartbeat-interval", "1", *args],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
