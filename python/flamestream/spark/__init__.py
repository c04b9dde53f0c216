"""The Spark side of flamestream: options, offsets, stamping and the barrier's durable store.

Shared by every connector in :mod:`pyspark_flamestream`. Importing this package imports
pyspark; the model, graph and reference runtime never do.
"""
