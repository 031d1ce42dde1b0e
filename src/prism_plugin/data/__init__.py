"""Dataset sources and fingerprints."""
