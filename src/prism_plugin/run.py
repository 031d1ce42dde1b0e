"""What a metric plugin receives (kept for existing imports; the types live in :mod:`prism_plugin.contracts`)."""

from prism_plugin.contracts import CalibrationSet, RunContext, RunFeatures

__all__ = ["CalibrationSet", "RunContext", "RunFeatures"]
