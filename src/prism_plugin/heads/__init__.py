"""Extra probe heads, registered through the ``register_heads`` hook like a third party's.

* ``mlp`` — :class:`prism_plugin.heads.mlp.MLPProbe`, a one-hidden-layer MLP
  (defaults: 256 ReLU units, Adam lr 1e-3, weight decay 1e-4, batch 256, up to
  200 epochs with early stopping on a 10 % class-stratified split of the
  training subset, patience 10; fixed 200 epochs when that split would hold
  fewer than 20 samples). Select it with ``probe: {kind: mlp}`` in a task YAML
  (the logistic settings ``C``/``max_iter``/``tol``/``backend`` that the
  protocol include sets are ignored by this head).

Importing this module does not import torch; the head imports it when it fits.
"""

from __future__ import annotations

from prism_plugin.hookspecs import hookimpl


#: logistic-probe settings that the shared protocol include gives every task; the MLP head accepts and
#: ignores them (as the adaptation heads do), so ``probe: {kind: mlp}`` works in a task that includes it
IGNORED_SETTINGS = frozenset({"C", "max_iter", "tol", "backend"})


def mlp_head(**settings):
    """Factory of the ``mlp`` head: ``mlp_head(seed=..., **settings)``.

    ``C``, ``max_iter``, ``tol`` and ``backend`` (logistic-probe settings
    inherited from the protocol include) are ignored; any other unknown setting
    is an error naming it.
    """
    from prism_plugin.errors import PrismError, suggest
    from prism_plugin.heads.mlp import DEFAULTS, MLPProbe

    allowed = {"seed", *DEFAULTS}
    for key in settings:
        if key not in allowed and key not in IGNORED_SETTINGS:
            raise PrismError(f"probe.{key}: unknown setting of the mlp probe head{suggest(str(key), allowed)} "
                             f"(allowed: kind, {', '.join(sorted(DEFAULTS))})")
    return MLPProbe(**{k: v for k, v in settings.items() if k not in IGNORED_SETTINGS})


@hookimpl
def register_heads(register):
    register("mlp", mlp_head, description="one-hidden-layer MLP (256 ReLU units, Adam, early stopping)")


__all__ = ["IGNORED_SETTINGS", "mlp_head", "register_heads"]
