"""End-to-end tests of third-party extensions (examples/prism-extension-example)."""
