"""What runs on executors, in four sub-packages by purpose.

* :mod:`.general`: the path every graph can take, whatever its functions: item rows
  (``items``), fused stateless stages (``stateless``) and their items and map-side combine
  (``combine``), keyed stages (``keyed``) and where their state comes from (``keyed_state``),
  stateless stages run in a keyed stage's tasks (``tails``) or in the fronts' reads
  (``front_stage``), stage work shipped to fronts and sinks (``shipping``), hashing
  (``partitioning``) and routes (``routing``).
* :mod:`.shuffle`: how item rows cross Spark's shuffle: packed, one row per distinct item
  (``packed``), or in Arrow blocks, one row per key partition (``blocks``).
* :mod:`.declared`: Arrow paths for steps the graph *declares* rather than computes with
  Python functions: ``count`` of ``str.split`` text (``columnar``), map_reduce's in-order
  cycle (``fastpath``) and its sums (``summed``, ``summed_state``), ``Template`` renders of a
  sum (``rendered``). Each is a shortcut of the general path: the same rows and state bytes
  (``tests/unit/test_fastpath.py``, ``test_columnar.py``, ``test_stage_runner.py``), taken only
  for the steps it recognizes by their declared type, never by a user function's code.
  Which stage takes which is decided once, by the plan (:mod:`flamestream.spark.plan.paths`);
  the runners build the shortcut from that decision and
  :meth:`~flamestream.spark.plan.execution.ExecutionPlan.describe` names it.
* :mod:`.worker`: what a Spark Python worker sets up once (``worker_setup``) and the garbage
  collector's pause per batch (``gc_pause``).
"""
