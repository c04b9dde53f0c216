"""The connector framework shared by every front and sink of :mod:`pyspark_flamestream`.

Typed options (:mod:`.options`), the front contract and generic reader (:mod:`.front`, with
:mod:`.offsets` and :mod:`.stamping`), the sink contract and barrier writer (:mod:`.sink`,
with the barrier's rules in :mod:`.barrier`), crash points (:mod:`.faults`).
"""
