"""prism-plugin: reliability evaluation of frozen pathology foundation models.

Public entry points:

* :data:`hookimpl` - the marker for plugin hook implementations.
* :func:`evaluate` - run the PRISM protocol on embeddings you already have.
* :mod:`prism_plugin.metrics` - the metric functions (ECE, AUROC, temperature ...).
"""

from prism_plugin.hookspecs import hookimpl

__version__ = "0.1.0"


def evaluate(*args, **kwargs):
    """Evaluate train/val/test embeddings under the PRISM protocol; see :func:`prism_plugin.api.evaluate`."""
    from prism_plugin.api import evaluate as _evaluate

    return _evaluate(*args, **kwargs)


__all__ = ["hookimpl", "evaluate", "__version__"]
