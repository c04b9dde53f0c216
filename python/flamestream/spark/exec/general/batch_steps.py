"""``map_batches`` in a stage: the user's function called once on a step's whole batch.

The stage runner hands a map_batches step all the items it gets in the task, like any step
(:class:`~.stateless.StageRunner` applies steps batch-wise); here the payloads of the items
that are not tombstones go to the function in one call (one per payload type without an
``input_type``, see :mod:`flamestream.runtime.batches`), and the results come back in item
order. Tombstones get ``None``, as a map gives them; the runner keeps the rows, flags and
trace suffixes as it does for a map.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from flamestream.graph.steps import MapBatches
from flamestream.model import GlobalTime
from flamestream.runtime.batches import batch_error, call_batch
from flamestream.spark.exec.general.combine import Items
from flamestream.spark.exec.general.items import TOMBSTONE


def batch_mapped(step: MapBatches, items: Items, batch: pa.RecordBatch) -> list[Any]:
    """The step's result per item of ``items`` (``None`` for a tombstone).

    A raising function, or one that does not return one result per payload, fails the task with
    :class:`~flamestream.errors.BatchStepError` naming the step, the batch's size and the
    global time and determinant of its first item.
    """
    flags = items.flags
    everyone = not any(flags)  # the usual batch, checked at C speed: no tombstone at all
    plain = [] if everyone else [k for k, flag in enumerate(flags) if not flag & TOMBSTONE]
    payloads = items.payloads if everyone else [items.payloads[k] for k in plain]
    try:
        results = call_batch(step, payloads)
    except Exception as exc:  # the user's function failed: name the step and the batch
        row = items.rows[0 if everyone else plain[0]]
        time = GlobalTime(batch.column("ts")[row].as_py(), batch.column("front")[row].as_py())
        where = (batch.column("source")[row].as_py(), batch.column("position")[row].as_py())
        raise batch_error(step, time, where, exc, len(payloads)) from exc
    if everyone or len(plain) == len(flags):
        return results
    out: list[Any] = [None] * len(flags)
    for k, result in zip(plain, results, strict=True):
        out[k] = result
    return out


__all__ = ["batch_mapped"]
