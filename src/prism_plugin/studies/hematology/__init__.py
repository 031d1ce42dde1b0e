"""The hematology acquisition-shift audit (``prism-run audit``), built on the adaptation library.

* :mod:`.inputs` - the audited runs of results directories, split-seed means, exposure, artifacts.
* :mod:`.tables`, :mod:`.selectors`, :mod:`.per_example` - the audit's tables (one CSV each).
* :mod:`.exposure` - whether an encoder saw the target dataset in pretraining.
* :mod:`.sections`, :mod:`.figures` - the report sections and figures (report toolkit only).
* :mod:`.plugin` - the ``summarize`` and ``report_sections`` hooks (plugin name ``audit``).
* :mod:`.generator` - a controlled-shift embedding generator where the right answers are known.

Source: the hematology acquisition-shift audit (shared/papers/002_5586cbdc9a9951f6.txt).
"""
