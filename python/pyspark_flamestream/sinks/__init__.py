"""Barrier sinks: one module per kind of destination (files, kafka)."""
