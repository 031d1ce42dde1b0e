"""prism-extension-example: one of each kind of prism-plugin extension, with no edit to the core.

Everything is registered by the hooks of :mod:`prism_extension_example.plugin`, published in the
``prism_plugin`` entry-point group (see ``pyproject.toml``).
"""

__version__ = "0.1.0"
