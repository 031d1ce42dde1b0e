"""The report: sections contributed by plugins, rendered as Markdown (and HTML)."""
