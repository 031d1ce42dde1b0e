"""Fixtures of the adaptation tests (the shared data: :mod:`.shift_data`)."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Small problems: one BLAS thread is faster and immune to a busy CI box."""
    with threadpool_limits(limits=1):
        yield
