"""Between-batch control: what the next tick reads and where its keys go.

The admission controller (read limits from a latency budget, :mod:`.admission`), the elastic
key layout policy (:mod:`.key_layout`), and the internal channel readers that carry a tick's
decisions and a loop's items into the query (:mod:`.channels`).
"""
