"""A tiny third-party prism-plugin extension (test fixture)."""
