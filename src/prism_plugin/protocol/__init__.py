"""The PRISM protocol: sampling, probes, temperature and the run grid (PROTOCOL §2)."""
