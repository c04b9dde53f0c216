"""Between-batch control: what the next tick reads and where its keys go.

The budget policy, one owner of a graph's between-batch decisions from its latency, memory
and CPU budgets (:mod:`.policy` and its CPU rule :mod:`.cpu`, pure; wired by :mod:`.budgeted`);
the latency rule a front hosts alone without them (:mod:`.admission`); the elastic key layout
policy (:mod:`.key_layout`); and the internal channel readers that carry a tick's decisions
and a loop's items into the query (:mod:`.channels`).
"""
