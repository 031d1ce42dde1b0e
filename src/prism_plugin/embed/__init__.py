"""Embedding extraction: adapters, the extraction loop and the content-addressed cache."""
