"""Reproducible benchmarks of the outbox relay: ``python -m bench`` (see README.md)."""
