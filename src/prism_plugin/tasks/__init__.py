"""Task loading: YAML loader, task index and the typed schema."""
