"""Every built-in probe head, one module per family, each declaring its settings.

* :mod:`.logistic` — ``logistic``, the PRISM probe (the default head);
* :mod:`.mlp` — ``mlp``, a one-hidden-layer MLP (``probe: {kind: mlp}``);
* :mod:`.standardised` — the audit's heads on source-standardised features: ``logistic_std``,
  ``knn1``, ``centroid``, ``centroid_cos``, ``linear_svm``;
* :mod:`.base` — :class:`~.base.ProbeOutput`, :class:`~.base.Setting` and the one validator of a
  ``probe`` mapping, :func:`~.base.resolve_probe`.

:mod:`.builtin` registers them through ``register_heads``, exactly as a third party's plugin does.
"""
