"""The audit tests share the adaptation tests' data (:mod:`tests.adaptation.shift_data`) and fixture."""

from tests.adaptation.conftest import one_blas_thread  # noqa: F401
