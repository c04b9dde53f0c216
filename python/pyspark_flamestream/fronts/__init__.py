"""Fronts: one module per kind of source (files, kafka, generator)."""
