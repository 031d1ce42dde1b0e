"""The hematology acquisition-shift audit as plugins that run on any source -> target task.

Modules (each importable on its own; importing this package imports nothing heavy):

* :mod:`.heads` - probe heads (``logistic_std``, ``knn1``, ``centroid``, ``centroid_cos``,
  ``linear_svm``) registered through the ``probe_heads`` hook.
* :mod:`.tta` - label-free test-time adaptation of one target batch (``tgtstd``, ``cbr``,
  ``cbr_mean``, ``bbse``, ``cbr_bbse``, ``shot_im``) and the labelled upper bound ``oracle_cb``.
* :mod:`.priors` - resampling a target to named or user-given class priors at batch size K.
* :mod:`.calibration` - top-label calibration metrics and calibration transfer (source, oracle,
  K-shot and CBR + source temperatures).
* :mod:`.selection` - label-free encoder-selection scores, Spearman and selection regret.
* :mod:`.stats` - rank-transfer Spearman with bootstrap CI, paired and hierarchical bootstraps,
  domain (scanner) decodability, between-domain subspace projection.
* :mod:`.generator` - a controlled-shift embedding generator where the right answers are known.
* :mod:`.plugin` - the ``run_metrics`` and ``probe_heads`` hook implementations.
* :mod:`.config` - validation of the task keys ``adaptation`` and ``priors``.

Source: the hematology acquisition-shift audit (shared/papers/002_5586cbdc9a9951f6.txt).
"""
