"""The Spark side of flamestream: graphs on DataFrames, options, offsets, stamping, the barrier.

``apply_graph(flow, df)`` runs a graph on the rows of ``format("flamestream")`` fronts
(:mod:`flamestream.spark.apply`); the rest is shared by every connector in
:mod:`pyspark_flamestream`. Importing this package's modules imports pyspark; the model, graph
and reference runtime never do.
"""

from flamestream.spark.apply import SparkGraph, apply_graph

__all__ = ["SparkGraph", "apply_graph"]
