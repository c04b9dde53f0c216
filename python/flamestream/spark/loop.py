"""Loop fronts and the ack table: cycles whose items change key, on Spark.

Inside a keyed stage, an item coming round a cycle back to the grouping stays in its task
when its key lives in the task's partition (map_reduce's items always do). An item whose new
key lives elsewhere cannot reach that partition within the micro-batch; it is **sent into
the loop front**: written durably by the task, it re-enters the graph in the next batch,
shuffled by its key like any entering item, with its original meta. Invalidators (see
:mod:`flamestream.spark.apply`) go the same way to the partitions that did not see them.

Layout under ``<checkpoint>/flamestream-graph/`` (any fsspec URL)::

    loop/<batch>/<stage>-<partition>.arrow    items a keyed task sent into the loop in <batch>
    loop/<batch>/cut<n>-<digest>.arrow         items a cut edge's task sent (named by content)
    ack/<batch>/send-<name>.json               that task's XOR contributions
    ack/<batch>/recv-<file>.json               a loop read task's XOR contributions
    ack/table/<batch>.json                     the ack table after <batch>

**The ack table** is the acker of the model, for what crosses a batch boundary: every item
sent into the loop XORs a 64-bit id of it into the slot of its global time, and XORs it again
when the loop front reads it back. Contributions are files named by (batch, task), so a
retried task overwrites its own instead of applying an XOR twice (which would cancel). The
table after batch ``b`` is the table after ``b - 1`` XOR every contribution of ``b``: a pure
function of durable files, computed by whichever needs it first (the sink's commit, the loop
front's planning, a keyed task's garbage collection) and cached. A non-zero slot is a global
time still in flight; the min-time is the least of the fronts' reports and those slots.

**The loop front** (``format("flamestream").option("front", "loop")``, created by
``apply``) offers, at each planning, the loop files of the batches committed since its last
offset: ``{"flamestreamLoop": 1, "through": <batch>}``. A replayed batch reads the same
files (they are kept until later batches committed), whose content is a pure function of the
batch that wrote them.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from flamestream.errors import StepError
from flamestream.model import DataItem, GlobalTime
from flamestream.spark.durable import (
    QueryCheckpoint,
    batch_id_of_task,
    filesystem,
    numbered,
    write_atomically,
)
from flamestream.spark.faults import crash_point
from flamestream.spark.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_key,
    encode_payload,
    encode_trace,
)
from flamestream.spark.layout import Layout
from flamestream.spark.partitioning import partition_of, salts

#: Version of the loop front's offset.
LOOP_OFFSET_VERSION = 1

#: Batches of loop files and ack contributions kept behind the newest read (for replays).
KEEP_BATCHES = 3

Xors = dict[tuple[int, int], int]


def loop_item_xors(table: pa.Table) -> Xors:
    """Per global time, the XOR of the ids of ``table``'s item rows.

    An id is 64 bits of a hash of the row's meta, flags and destination: the same row read
    back from the loop gives the same id, so its receipt cancels its send.
    """
    xors: Xors = {}
    columns = [table.column(c).to_pylist() for c in ("ts", "front", "trace", "flags", "to")]
    for ts, front, trace, flags, to in zip(*columns, strict=True):
        digest = hashlib.blake2b(
            struct.pack(">qib", ts, front, flags) + trace + to.encode(), digest_size=8
        ).digest()
        slot = (ts, front)
        xors[slot] = xors.get(slot, 0) ^ int.from_bytes(digest, "big")
    return xors


class AckTable:
    """The ack table of a graph's loop fronts (see the module docstring)."""

    def __init__(self, state_url: str) -> None:
        self.url = state_url.rstrip("/") + "/ack"

    def contribute(self, batch_id: int, name: str, xors: Mapping[tuple[int, int], int]) -> None:
        """Record one task's XORs for ``batch_id`` (a retry overwrites the same file)."""
        slots = [[ts, front, value] for (ts, front), value in sorted(xors.items()) if value]
        if not slots:
            return
        fs, root = filesystem(self.url)
        path = posixpath.join(root, str(batch_id), f"{name}.json")
        write_atomically(fs, path, json.dumps(slots).encode(), racing=True)

    def after(self, batch_id: int) -> Xors:
        """The table after ``batch_id``: non-zero slots only. Needs the batch's tasks done."""
        fs, root = filesystem(self.url)
        cached = posixpath.join(root, "table", f"{batch_id:012d}.json")
        if fs.exists(cached):
            return _parse(fs.cat_file(cached))
        earlier = numbered(fs, posixpath.join(root, "table"), ".json")
        known = max((b for b in earlier if b < batch_id), default=None)
        table: Xors = {} if known is None else self.after(known)
        first = -1 if known is None else known
        for batch in numbered(fs, root):
            if first < batch <= batch_id:
                folder = posixpath.join(root, str(batch))
                for path in sorted(fs.ls(folder, detail=False)):
                    if path.endswith(".json"):
                        for slot, value in _parse(fs.cat_file(path)).items():
                            table[slot] = table.get(slot, 0) ^ value
        table = {slot: value for slot, value in table.items() if value}
        slots = [[ts, front, value] for (ts, front), value in sorted(table.items())]
        write_atomically(fs, cached, json.dumps(slots).encode(), racing=True)
        return table

    def least(self, batch_id: int) -> GlobalTime | None:
        """The least global time still in flight after ``batch_id``, if any."""
        table = self.after(batch_id)
        return GlobalTime(*min(table)) if table else None

    def collect(self, before: int) -> None:
        """Delete contributions and cached tables of batches before ``before``.

        The newest cached table before ``before`` is kept: later tables start from it.
        """
        if before <= 0:
            return
        self.after(before - 1)  # cached first: later tables start from it
        fs, root = filesystem(self.url)
        for batch in numbered(fs, root):
            if batch < before:
                fs.rm(posixpath.join(root, str(batch)), recursive=True)
        tables = posixpath.join(root, "table")
        old = [batch for batch in numbered(fs, tables, ".json") if batch < before]
        for batch in old[:-1]:
            fs.rm(posixpath.join(tables, f"{batch:012d}.json"))


def _parse(data: bytes) -> Xors:
    return {(int(ts), int(front)): int(value) for ts, front, value in json.loads(data)}


class LoopStore:
    """Items sent into a graph's loop front, by the batch that sent them."""

    def __init__(self, state_url: str) -> None:
        self.state_url = state_url.rstrip("/")
        self.url = self.state_url + "/loop"

    def send(self, batch_id: int, task: str, table: pa.Table) -> None:
        """Write a task's loop items and their ack contributions (a retry overwrites both)."""
        if not table.num_rows:
            return
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, ITEM_SCHEMA) as writer:
            writer.write_table(table)
        fs, root = filesystem(self.url)
        path = posixpath.join(root, str(batch_id), f"{task}.arrow")
        write_atomically(fs, path, sink.getvalue(), racing=True)
        AckTable(self.state_url).contribute(batch_id, f"send-{task}", loop_item_xors(table))

    def files(self, after: int, through: int) -> list[tuple[int, str]]:
        """(batch, path) of the loop files of batches in ``(after, through]``."""
        fs, root = filesystem(self.url)
        found = []
        for batch in numbered(fs, root):
            if after < batch <= through:
                folder = posixpath.join(root, str(batch))
                paths = sorted(p for p in fs.ls(folder, detail=False) if p.endswith(".arrow"))
                found += [(batch, path) for path in paths]
        return found

    def receive(self, batch_id: int, path: str) -> pa.Table:
        """Read one loop file in batch ``batch_id`` and record its receipt in the ack table."""
        fs, _ = filesystem(self.url)
        table = pa.ipc.open_file(pa.BufferReader(fs.cat_file(path))).read_all()
        sent_in = posixpath.basename(posixpath.dirname(path))
        name = f"recv-{sent_in}-{posixpath.basename(path).removesuffix('.arrow')}"
        AckTable(self.state_url).contribute(batch_id, name, loop_item_xors(table))
        return table

    def collect(self, before: int) -> None:
        """Delete the loop files of batches before ``before``."""
        fs, root = filesystem(self.url)
        for batch in numbered(fs, root):
            if batch < before:
                fs.rm(posixpath.join(root, str(batch)), recursive=True)


@dataclass(frozen=True)
class LoopRange:
    """One read task of the loop front: one loop file."""

    path: str


class LoopReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The loop front's stream reader (``format("flamestream").option("front", "loop")``).

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
        part: LoopRange = partition.value
        batch_id = batch_id_of_task()
        table = LoopStore(self.state_url).receive(batch_id, part.path)
        crash_point("graph.loop.received", batch_id)
        yield from table.to_batches()


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


_LOOPS: dict[str, bool] = {}


def loops_enabled(checkpoint: str) -> bool:
    """Whether the query's graph may send items into a loop front (its layout says so)."""
    known = _LOOPS.get(checkpoint)
    if known is None:
        fs, root = filesystem(QueryCheckpoint(checkpoint).graph_url)
        layout = posixpath.join(root, "layout.json")
        known = fs.exists(layout) and bool(json.loads(fs.cat_file(layout)).get("loops"))
        _LOOPS[checkpoint] = known
    return known


@dataclass(frozen=True)
class LoopSpec:
    """What a keyed stage whose cycle may change keys needs to route items into the loop."""

    stage: int  #: the stage's index (names its loop files)
    reentry: frozenset[str]  #: steps from which items reach the grouping through merges only
    partitions: int  #: the key partition count
    state_url: str  #: the graph's state folder (:attr:`QueryCheckpoint.graph_url`)


class LoopWriter:
    """Sends the rows of a cut edge into the loop front (``mapInArrow``'s function).

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
