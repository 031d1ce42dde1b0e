"""Test-time adaptation, a library: methods (:mod:`.tta`), class priors, calibration transfer,
encoder selection, statistics, and the adaptation plugin's hooks (:mod:`.plugin`).

Each module imports on its own; importing this package imports nothing heavy. The hematology audit
built on it is the study :mod:`prism_plugin.studies.hematology` (source: the hematology
acquisition-shift audit, shared/papers/002_5586cbdc9a9951f6.txt).
"""
