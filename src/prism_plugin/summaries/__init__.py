"""Built-in summary plugins: derived tables of PROTOCOL §6 computed from per-run tables."""
