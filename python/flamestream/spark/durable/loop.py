"""Loop channels and the ack table: cycles whose items change key, on Spark.

Inside a keyed stage, an item coming round a cycle back to the grouping stays in its task
when its key lives in the task's partition (map_reduce's items always do). An item whose new
key lives elsewhere cannot reach that partition within the micro-batch; it is **sent into
the loop channel**: written durably by the task, it re-enters the graph in the next batch,
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
when the loop channel reads it back. Contributions are files named by (batch, task), so a
retried task overwrites its own instead of applying an XOR twice (which would cancel). The
table after batch ``b`` is the table after ``b - 1`` XOR every contribution of ``b``: a pure
function of durable files, computed by whichever needs it first (the sink's commit, the loop
front's planning, a keyed task's garbage collection) and cached. A non-zero slot is a global
time still in flight; the min-time is the least of the fronts' reports and those slots.

**The loop channel** (``format("flamestream").option("channel", "loop")``, created by
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
from collections.abc import Mapping

import pyarrow as pa

from flamestream.model import GlobalTime
from flamestream.spark.durable import (
    QueryCheckpoint,
    filesystem,
    listing,
    numbered,
    numbered_paths,
    remove,
    stale_temporaries,
    write_atomically,
)
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
)

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
    """The ack table of a graph's loop channels (see the module docstring)."""

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
                for path in sorted(listing(fs, folder)):
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

        The newest cached table before ``before`` is kept (computed first if need be): later
        tables start from it. Temporaries of older tables a crash left go too. Collecting
        behind an earlier collection (the sink's retention trails the loop channel's) finds
        nothing to delete, and computes nothing: the contributions a table before the kept
        one would need are gone.
        """
        if before <= 0:
            return
        fs, root = filesystem(self.url)
        tables = posixpath.join(root, "table")
        entries = listing(fs, tables)
        sent = [path for b, path in numbered_paths(fs, root) if b < before]
        old = sorted((b, path) for b, path in numbered_paths(fs, tables, ".json", entries))
        old = [(b, path) for b, path in old if b < before]
        stale = stale_temporaries(entries, before - 1)
        if sent or len(old) > 1:
            self.after(before - 1)  # cached first: later tables start from it
            remove(fs, sent, recursive=True)
            stale += [path for b, path in old if b != before - 1]
        remove(fs, stale)


def _parse(data: bytes) -> Xors:
    return {(int(ts), int(front)): int(value) for ts, front, value in json.loads(data)}


class LoopStore:
    """Items sent into a graph's loop channel, by the batch that sent them."""

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
                paths = sorted(p for p in listing(fs, folder) if p.endswith(".arrow"))
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
        remove(fs, [path for b, path in numbered_paths(fs, root) if b < before], recursive=True)


#: The reader option (set by ``apply``, not by users) naming the checkpoint whose loop a
#: front waits for: it admits new records only while that loop holds nothing in flight.
LOOP_GATE = "flamestream.loopGate"


def loop_busy(checkpoint: str) -> bool:
    """Whether the query's loop holds items in flight after its newest committed batch.

    Read when the next batch is planned (Spark plans it after the newest one committed, so
    that batch's sends are in the ack table); those items come back in the next batch.
    """
    last = QueryCheckpoint(checkpoint).last_committed_batch()
    if last < 0:
        return False
    return AckTable(QueryCheckpoint(checkpoint).graph_url).least(last) is not None


_LOOPS: dict[str, bool] = {}


def loops_enabled(checkpoint: str) -> bool:
    """Whether the query's graph may send items into a loop channel (its layout says so)."""
    known = _LOOPS.get(checkpoint)
    if known is None:
        fs, root = filesystem(QueryCheckpoint(checkpoint).graph_url)
        layout = posixpath.join(root, "layout.json")
        known = fs.exists(layout) and bool(json.loads(fs.cat_file(layout)).get("loops"))
        _LOOPS[checkpoint] = known
    return known
