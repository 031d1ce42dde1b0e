"""prism-adapter-example: how a third party ships a model adapter and a metric for prism-plugin."""

__version__ = "0.1.0"
