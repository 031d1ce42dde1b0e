"""Child processes that end with their parent (stdlib only: imported first thing by a spawned worker).

:func:`die_with_parent` is the initializer of the ``--jobs N`` process pool. It runs before the worker imports
anything heavy, so a driver killed at any moment (``kill -9`` included) takes its workers with it at once, and
``prism-run ... | tee log`` ends when the driver does: on Linux the kernel sends the worker SIGKILL the moment the
parent dies (``PR_SET_PDEATHSIG``); everywhere a worker whose parent is already gone when it starts exits. The
multiprocessing resource tracker exits by itself once its last client (driver and workers) is gone.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no prctl
        return False


def die_with_parent(parent_pid: int) -> None:
    """Pool-worker initializer: end with the driver ``parent_pid``; leave Ctrl-C to the driver
    (which stops its workers itself, so there is no traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the driver died before the death signal was armed
        os._exit(1)


__all__ = ["PR_SET_PDEATHSIG", "die_with_parent", "set_parent_death_signal"]
