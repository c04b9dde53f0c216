"""Planning: a graph compiled into Spark stages and an execution plan. Needs no Spark.

:mod:`.stages` condenses cycles, fuses stateless steps and cuts loop edges; :mod:`.paths`
decides which path each stage takes (the general one or a declared shortcut);
:mod:`.execution` holds the result as an ``ExecutionPlan`` and describes it.
"""

from flamestream.spark.plan.execution import ExecutionPlan, plan_execution

__all__ = ["ExecutionPlan", "plan_execution"]
