"""The hematology acquisition-shift audit as plugins that run on any source -> target task.

Modules (each importable on its own; importing this package imports nothing heavy):

* :mod:`.heads` - probe heads (``logistic_std``, ``knn1``, ``centroid``, ``centroid_cos``,
  ``linear_svm``) registered through the ``register_heads`` hook (with their ``linear`` trait).
* :mod:`.tta` - label-free test-time adaptation of one target batch (``tgtstd``, ``cbr``,
  ``cbr_mean``, ``bbse``, ``cbr_bbse``, ``shot_im``) and the labelled upper bound ``oracle_cb``,
  each a function registered in the adaptation registry; ``adapt`` dispatches through it.
* :mod:`.priors` - resampling a target to named or user-given class priors at batch size K.
* :mod:`.calibration` - top-label calibration metrics and calibration transfer (source, oracle,
  K-shot and CBR + source temperatures).
* :mod:`.selection` - label-free encoder-selection scores, Spearman and selection regret.
* :mod:`.stats` - rank-transfer Spearman with bootstrap CI, paired and hierarchical bootstraps,
  domain (scanner) decodability, between-domain subspace projection.
* :mod:`.generator` - a controlled-shift embedding generator where the right answers are known.
* :mod:`.plugin` - the ``register_heads``, ``register_adaptation`` and ``run_metrics`` hooks.
* :mod:`.config` - validation of the task keys ``adaptation`` (against the registry) and ``priors``.
* :mod:`.audit` / :mod:`.audit_plugin` - the cross-encoder audit tables, as ``summarize`` and
  ``report_sections`` hooks (``prism-run audit``).

Source: the hematology acquisition-shift audit (shared/papers/002_5586cbdc9a9951f6.txt).
"""
