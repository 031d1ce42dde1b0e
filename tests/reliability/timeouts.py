"""A wall-clock limit for fuzz cases: a hang becomes a test failure, not a stuck CI job."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def time_limit(seconds: int, what: str):
    def boom(*_):
        raise TimeoutError(f"{what} ran for more than {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
