"""Child processes that die with their parent, even when the parent is killed with SIGKILL."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # Linux only


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Run in the child (a Popen ``preexec_fn``, a worker's first step): the kernel sends it
    ``sig`` when ``parent`` ends, however it ends. Strictly, when the *thread* that forked the
    child ends: fork from the main thread. A child whose parent is already gone ends now."""
    if _prctl is None or _prctl(_PR_SET_PDEATHSIG, int(sig)) != 0:
        def watch() -> None:  # elsewhere than Linux: look for the parent every second
            while os.getppid() == parent:
                time.sleep(1)
            os.kill(os.getpid(), sig)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # the parent died before the kernel knew to tell us
        os.kill(os.getpid(), sig)
