"""Whole analyses built on the public pieces (registries, hooks, the report toolkit), one package each."""
