"""Stage planning: a graph's steps grouped into Spark stages. Needs no Spark.

Condensation of cycles, fusion of stateless steps, loop edges (:mod:`.stages`).
"""
