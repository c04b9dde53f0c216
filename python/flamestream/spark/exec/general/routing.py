"""Routing on executors: where a row goes next.

Which key partition (elastic routes) and what leaves a keyed task for the loop (the loop
router and a cut edge's loop writer).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from flamestream.errors import StepError
from flamestream.model import DataItem, GlobalTime
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.control.key_layout import Layout, read_layout
from flamestream.spark.durable import (
    batch_id_of_task,
)
from flamestream.spark.durable.loop import LoopStore
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_key,
    encode_payload,
    encode_trace,
)
from flamestream.spark.exec.general.partitioning import (
    partition_of,
    salts,
)
from flamestream.spark.exec.worker.worker_setup import setup_worker


class LoopRouter:
    """In a keyed task: which items coming round the cycle stay, and which go into the loop.

    ``reentry`` are the stage's steps from which an item reaches the grouping through merges
    only: there its key decides where it belongs. An item whose key lives in this partition
    stays; one whose key lives elsewhere is sent into the loop (and reaches its partition in
    the next batch). A tombstone, or an item that may invalidate, stays *and* sends an
    invalidator (a tombstone of its meta, salted with this partition) so that every other
    partition drops what it invalidates there too: versions of an item may have other keys.
    """

    def __init__(
        self,
        grouping: str,
        key: Callable[[Any], Any],
        reentry: frozenset[str],
        partitions: int,
        partition: int,
        where: Callable[[GlobalTime], Any],
        layout: Layout | None = None,
    ) -> None:
        self.grouping = grouping
        #: elastic: this batch's layout says where a key lives; invalidators then go to every
        #: partition (key None), since the next batch's layout may hold this partition's
        #: slots elsewhere and other slots here
        self.layout = layout
        self.key = key
        self.reentry = reentry
        self.partitions = partitions
        self.partition = partition
        self.where = where
        self.salt: bytes | None = salts(partitions)[partition] if layout is None else None
        self.sent: list[tuple[str, DataItem, bytes | None]] = []

    def route(self, outputs: list[tuple[str, DataItem]]) -> list[tuple[str, DataItem]]:
        """The outputs that stay in the task; the others are kept for :meth:`table`."""
        if self.partitions == 1:
            return outputs
        kept = []
        for dest, item in outputs:
            if dest not in self.reentry:
                kept.append((dest, item))
                continue
            if item.tombstone:
                kept.append((dest, item))
                self.sent.append((dest, item, self.salt))
                continue
            try:
                raw = self.key(item.payload)
                key = encode_payload(raw) if self.layout is None else encode_key(raw)
            except Exception as exc:  # the grouping's key function failed on this item
                where = self.where(item.global_time)
                raise StepError(self.grouping, self.key, item.global_time, where, exc) from exc
            home = (
                partition_of(key, self.partitions)
                if self.layout is None
                else self.layout.partition_of(key)
            )
            if home != self.partition:
                self.sent.append((dest, item, key))
                continue
            kept.append((dest, item))
            if item.may_invalidate:
                invalidator = DataItem(None, item.meta, may_invalidate=True, tombstone=True)
                self.sent.append((dest, invalidator, self.salt))
        return kept

    def table(self) -> pa.Table:
        """The item rows sent into the loop, in the order they were sent."""
        metas, determinants = [], []
        for _, item, _ in self.sent:
            metas.append(item.meta)
            determinants.append(self.where(item.global_time) or (None, None))
        return pa.table(
            {
                "ts": pa.array([m.global_time.ts for m in metas], pa.int64()),
                "front": pa.array([m.global_time.front for m in metas], pa.int32()),
                "trace": pa.array([encode_trace(m.trace) for m in metas], pa.binary()),
                "flags": pa.array([_flags(item) for _, item, _ in self.sent], pa.int8()),
                "source": pa.array([d[0] for d in determinants], pa.string()),
                "position": pa.array([d[1] for d in determinants], pa.int64()),
                "to": pa.array([dest for dest, _, _ in self.sent], pa.string()),
                "key": pa.array([key for _, _, key in self.sent], pa.binary()),
                "payload": pa.array(
                    [None if i.tombstone else encode_payload(i.payload) for _, i, _ in self.sent],
                    pa.binary(),
                ),
                "value": pa.nulls(len(self.sent), pa.string()),
            },
            schema=ITEM_SCHEMA,
        )


def _flags(item: DataItem) -> int:
    return (MAY_INVALIDATE if item.may_invalidate else 0) | (TOMBSTONE if item.tombstone else 0)


@dataclass(frozen=True)
class LoopSpec:
    """What a keyed stage whose cycle may change keys needs to route items into the loop."""

    stage: int  #: the stage's index (names its loop files)
    reentry: frozenset[str]  #: steps from which items reach the grouping through merges only
    partitions: int  #: the key partition count
    state_url: str  #: the graph's state folder (:attr:`QueryCheckpoint.graph_url`)


class LoopWriter:
    """Sends the rows of a cut edge into the loop channel (``mapInArrow``'s function).

    Used where a cycle through several groupings comes back to its entry: the rows are
    written with their ack contributions, and nothing is returned. The file is named by a
    digest of its rows (sorted), not by the task's ``partitionId()``, which is a position in
    Spark's plan: a retried task writes the same rows under the same name (overwriting, so
    the ack table XORs them once), and no plan change between a batch and its replay can
    give the same rows a second name. Two tasks can only write identical rows if those are
    tombstone copies of one item; one file of them is as good as two (the copies change
    nothing released, and their sends and receipts balance either way).
    """

    def __init__(self, state_url: str, name: str) -> None:
        self.state_url = state_url
        self.name = name

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write the task's rows; yield none."""
        setup_worker()
        rows = [batch for batch in batches if batch.num_rows]
        batch_id = batch_id_of_task()
        if rows and batch_id >= 0:
            table = pa.Table.from_batches(rows).select(ITEM_SCHEMA.names).cast(ITEM_SCHEMA)
            table = table.sort_by([(name, "ascending") for name in ITEM_SCHEMA.names])
            LoopStore(self.state_url).send(batch_id, f"{self.name}-{rows_digest(table)}", table)
            crash_point("graph.loop.sent", batch_id)
        yield from ()


def rows_digest(table: pa.Table) -> str:
    """A name for ``table``'s rows: 16 hex digits of a digest of their Arrow IPC bytes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=8).hexdigest()


def route_rows(layout: Layout, keys: pa.Array) -> pa.Array:
    """The ``route`` column for a ``key`` column under ``layout``."""
    return pa.array([layout.route(k) for k in keys.to_pylist()], pa.binary())


class Router:
    """``mapInArrow`` in front of an elastic keyed stage's shuffle: adds the ``route`` column."""

    def __init__(self, checkpoint: str, partitions: int) -> None:
        self.checkpoint = checkpoint
        self.partitions = partitions

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch with ``route`` appended."""
        setup_worker()
        layout = read_layout(self.checkpoint, batch_id_of_task(), self.partitions)
        for batch in batches:
            route = route_rows(layout, batch.column("key"))
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, route], names=[*batch.schema.names, "route"]
            )
