"""The built-in probe heads, registered through ``register_heads`` like a third party's."""

from __future__ import annotations

from prism_plugin.heads import logistic, mlp, standardised
from prism_plugin.hookspecs import hookimpl


@hookimpl
def register_heads(register) -> None:
    # lbfgs ignores the seed: identical training subsets share one fit
    register("logistic", logistic.LogisticProbe, settings=logistic.SETTINGS, seed_invariant=True, linear=True,
             description="PRISM probe: LogisticRegression(C=1, lbfgs, max_iter=1000) on float32 features")
    for kind, spec in standardised.HEADS.items():
        register(kind, spec.factory, settings=spec.settings, linear=spec.linear,
                 description=(spec.factory.__doc__ or "").strip().split("\n")[0])
    register("mlp", mlp.MLPProbe, settings=mlp.SETTINGS,
             description="one-hidden-layer MLP (256 ReLU units, Adam, early stopping)")
