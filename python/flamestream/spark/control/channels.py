"""The internal channel readers: the loop channel and the control channel.

Neither is a user's source: ``apply`` adds them to a graph's query. The loop channel reads back
what keyed tasks sent into the loop (:mod:`flamestream.spark.durable.loop`); the control channel
carries each tick's key layout (:mod:`flamestream.spark.control.key_layout`) in its offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from flamestream.spark.connector.faults import crash_point
from flamestream.spark.control.key_layout import ElasticPolicy, Layout, plan_layout
from flamestream.spark.control.swaps import CONSUMED, SWAPS, consume_swap
from flamestream.spark.durable import (
    QueryCheckpoint,
    batch_id_of_task,
)
from flamestream.spark.durable.loop import KEEP_BATCHES, AckTable, LoopStore
from flamestream.spark.durable.requests import Request, RequestStore
from flamestream.spark.durable.slots import SlotLoads
from flamestream.spark.exec.worker_setup import setup_worker

_log = logging.getLogger(__name__)

#: Version of the loop channel's offset.
LOOP_OFFSET_VERSION = 1


@dataclass(frozen=True)
class LoopRange:
    """One read task of the loop channel: one loop file."""

    path: str


class LoopReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The loop channel's stream reader (``format("flamestream").option("channel", "loop")``).

    It supports ``Trigger.AvailableNow`` by offering everything, always: a loop's items are
    made by the query itself, so an AvailableNow run goes on until the loop is empty.
    """

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.state_url = QueryCheckpoint(checkpoint).graph_url

    def initialOffset(self) -> dict[str, Any]:
        """Nothing read yet."""
        return {"flamestreamLoop": LOOP_OFFSET_VERSION, "through": -1}

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: the loop is read until it is empty."""

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Through the newest committed batch that sent items into the loop."""
        after = int(start["through"])
        committed = QueryCheckpoint(self.checkpoint).last_committed_batch()
        store = LoopStore(self.state_url)
        files = store.files(after, committed)
        if not files:
            return start
        store.collect(after - KEEP_BATCHES)
        AckTable(self.state_url).collect(after - KEEP_BATCHES)
        return {"flamestreamLoop": LOOP_OFFSET_VERSION, "through": max(b for b, _ in files)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per loop file."""
        files = LoopStore(self.state_url).files(int(start["through"]), int(end["through"]))
        return [InputPartition(LoopRange(path)) for _, path in files]

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: what was read is in Spark's offset log."""

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The loop file's items; their receipt goes into the ack table."""
        setup_worker()
        part: LoopRange = partition.value
        batch_id = batch_id_of_task()
        table = LoopStore(self.state_url).receive(batch_id, part.path)
        crash_point("graph.loop.received", batch_id)
        yield from table.to_batches()


class ControlReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The control channel: no rows; its offset is the layout of the batch (see module doc).

    It is also where the user's requests (:mod:`flamestream.spark.durable.requests`) become
    decisions: each planning consumes the requests submitted since the last one it consumed
    (:meth:`_consume`, one handler per request kind) and records what they decided, and the
    name of the last one, in its end offset.
    """

    def __init__(
        self, checkpoint: str, partitions: int, policy: ElasticPolicy | None = None
    ) -> None:
        self.checkpoint = checkpoint
        self.key_partitions = partitions
        self.policy = policy or ElasticPolicy()
        self._judged = -1  # the newest batch whose loads were judged (driver side)

    def initialOffset(self) -> dict[str, Any]:
        """The default layout."""
        return _offset(Layout.default(self.key_partitions), 0, "default", {})

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: a layout decision is the only thing that moves this offset."""

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        """The requests consumed, then the layout for the next batch (see :meth:`_relayout`)."""
        return self._relayout(self._consume(start))

    def _consume(self, start: dict[str, Any]) -> dict[str, Any]:
        """``start`` with the requests submitted since its last consumed one decided.

        One listing of the request store per planning; nothing else when none is new.
        Requests of a kind this reader has no handler for are consumed and logged.
        """
        store = RequestStore(QueryCheckpoint(self.checkpoint).graph_url)
        requests = store.after(str(start.get(CONSUMED, "")))
        if not requests:
            return start
        handlers = {"swap": self._swap}
        offset = dict(start)
        offset[SWAPS] = list(start.get(SWAPS, ()))
        for request in requests:
            handler = handlers.get(request.kind)
            if handler is None:
                _log.warning("control request %s of unknown kind %r", request.name, request.kind)
            else:
                handler(request, offset)
            offset[CONSUMED] = request.name
        store.forget_through(offset[CONSUMED])
        return offset

    def _swap(self, request: Request, offset: dict[str, Any]) -> None:
        """A ``swap`` request: the swap joins the swaps in force (see :mod:`.swaps`)."""
        consume_swap(self.checkpoint, request, offset[SWAPS])

    def _relayout(self, start: dict[str, Any]) -> dict[str, Any]:
        """The layout for the next batch: a new one only when the last batch's loads say so."""
        current = Layout(int(start["partitions"]), tuple(start["assignment"]))
        checkpoint = QueryCheckpoint(self.checkpoint)
        last = checkpoint.last_committed_batch()
        if last <= self._judged:
            return start
        self._judged = last
        store = SlotLoads(checkpoint.graph_url)
        loads = store.read(last)
        store.forget_before(last)
        if not loads:
            return start
        better, reason = plan_layout(current, loads, self.policy)
        if better is None:
            return start
        reason = f"after batch {last}: {reason}"
        return _offset(better, int(start["decisions"]) + 1, reason, start)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Nothing to read."""
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Never called (no partitions)."""
        setup_worker()
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the layout lives in Spark's offset log."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_judged"] = -1
        return state


def _offset(
    layout: Layout, decisions: int, reason: str, requests: dict[str, Any]
) -> dict[str, Any]:
    """The control offset: the layout, then what requests decided (carried from ``requests``)."""
    return {
        "flamestreamLayout": 1,
        "partitions": layout.partitions,
        "assignment": list(layout.assignment),
        "decisions": decisions,
        "reason": reason,
        CONSUMED: str(requests.get(CONSUMED, "")),
        SWAPS: list(requests.get(SWAPS, ())),
    }
