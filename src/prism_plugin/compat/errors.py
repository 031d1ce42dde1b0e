"""The compatibility layer's error type."""

from prism_plugin.errors import PrismError


class CompatError(PrismError, ValueError):
    """Bad input to the compatibility API: a :class:`~prism_plugin.errors.PrismError` (one line on the
    CLI) and, as in the PRISM package, a ``ValueError``."""
