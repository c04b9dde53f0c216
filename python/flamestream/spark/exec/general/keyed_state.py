"""Where a keyed task's grouping state comes from and goes to: one strategy per stage.

``KeyedRunner`` picks the strategy once, when the stage is planned (:func:`state_io`), rather
than asking at every batch which mode it is in. Every strategy runs on executors, in the
keyed task, and keeps two promises:

* ``restore(partition, batch)`` is a pure function of what batches before ``batch`` saved:
  a replayed batch restores the same state, so it emits the same items;
* ``save(partition, batch, ...)`` writes only files named by ``batch`` (and its partition or
  slots): a retried or replayed task overwrites them with the same bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa

from flamestream.errors import InvariantError
from flamestream.graph.steps import Grouping
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.control.key_layout import Layout, read_layout, slot_of
from flamestream.spark.durable.slots import SlotLoads
from flamestream.spark.durable.state import StateStore
from flamestream.spark.exec.general.items import encode_key
from flamestream.spark.exec.general.partitioning import is_salt


class StateIO(ABC):
    """How a keyed task's grouping state is restored before its batch and saved after it."""

    #: whether the state outlives the task (then the batch's min-time, garbage collection and
    #: loop sends apply)
    durable = True
    #: whether ``save`` needs the batch's keys (else it is given none)
    counts_keys = False

    def __init__(self, grouping: Grouping) -> None:
        self.grouping = grouping

    def fresh(self) -> GroupingState:
        """An empty state of the stage's grouping."""
        g = self.grouping
        return GroupingState(g.step_id, g.window, g.key)

    def layout(self, batch_id: int) -> Layout | None:
        """The batch's key layout, when key ranges move between partitions."""
        return None

    @abstractmethod
    def restore(self, partition: int, batch_id: int) -> GroupingState:
        """The partition's state as the batches before ``batch_id`` left it."""

    @abstractmethod
    def save(
        self, partition: int, batch_id: int, state: GroupingState, keys: list[pa.Array]
    ) -> None:
        """Keep ``state`` as the partition's state after ``batch_id`` (``keys``: its rows')."""


class TaskLocal(StateIO):
    """A bounded input (no micro-batch, no checkpoint): the state lives for the task only."""

    durable = False

    def restore(self, partition: int, batch_id: int) -> GroupingState:
        """A new state: nothing came before."""
        return self.fresh()

    def save(
        self, partition: int, batch_id: int, state: GroupingState, keys: list[pa.Array]
    ) -> None:
        """Nothing to keep."""


class PartitionSnapshots(StateIO):
    """One snapshot per key partition and batch (``<graph>/<grouping>/part-<p>/<batch>``)."""

    def __init__(self, grouping: Grouping, state_url: str) -> None:
        super().__init__(grouping)
        self.store = StateStore(state_url, grouping.step_id)

    def restore(self, partition: int, batch_id: int) -> GroupingState:
        """The partition's newest snapshot before the batch (or a new state)."""
        state = self.fresh()
        snapshot = self.store.load(partition, batch_id)
        if snapshot is not None:
            state.restore(snapshot)
        return state

    def save(
        self, partition: int, batch_id: int, state: GroupingState, keys: list[pa.Array]
    ) -> None:
        """The partition's snapshot of the batch."""
        self.store.save(partition, batch_id, state.snapshot())


class SlotSnapshots(StateIO):
    """Elastic layouts: one snapshot per key slot.

    A partition holds the slots its batch's layout gives it, and counts the items each slot
    got (the layout policy's input).
    """

    counts_keys = True

    def __init__(
        self, grouping: Grouping, state_url: str, checkpoint: str, partitions: int
    ) -> None:
        super().__init__(grouping)
        self.slot_store = StateStore(state_url, grouping.step_id + ".slots")
        self.loads = SlotLoads(state_url)
        self.checkpoint = checkpoint
        self.partitions = partitions
        #: (partition, batch) -> slot -> bytes of the snapshot restored (the budget policy's
        #: growth per item is the saved size minus this)
        self.restored: dict[tuple[int, int], dict[int, int]] = {}

    def layout(self, batch_id: int) -> Layout:
        """The batch's layout, from the control channel's line of the offset log."""
        return read_layout(self.checkpoint, batch_id, self.partitions)

    def restore(self, partition: int, batch_id: int) -> GroupingState:
        """The merged state of the slots the batch's layout gives this partition."""
        g = self.grouping
        states = []
        for task in [t for t in self.restored if t[1] < batch_id]:  # a failed task's
            del self.restored[task]
        sizes = self.restored[(partition, batch_id)] = {}
        for slot in self.layout(batch_id).slots_of(partition):
            state = self.fresh()
            snapshot = self.slot_store.load(slot, batch_id)
            if snapshot is not None:
                state.restore(snapshot)
            sizes[slot] = len(snapshot or b"")
            states.append(state)
        return GroupingState.merge(g.step_id, g.window, g.key, states)

    def save(
        self, partition: int, batch_id: int, state: GroupingState, keys: list[pa.Array]
    ) -> None:
        """One snapshot per slot of this partition; each slot's items and state bytes."""
        g = self.grouping
        layout = self.layout(batch_id)
        mine = layout.slots_of(partition)
        parts = state.split(lambda key: slot_of(encode_key(key), layout.slots), into=mine)
        strays = sorted(set(parts) - set(mine))
        if strays:  # a key this partition does not hold under the layout: a routing bug
            msg = f"grouping {g.step_id!r}: partition {partition} holds keys of slots {strays}"
            raise InvariantError(msg)
        before = self.restored.pop((partition, batch_id), {})
        sizes: dict[int, tuple[int, int, int]] = {}
        for slot in mine:
            snapshot = parts[slot].snapshot()
            self.slot_store.save(slot, batch_id, snapshot)
            held = len(parts[slot].bucket_keys())  # what a sketch per key would weigh
            sizes[slot] = (before.get(slot, 0), len(snapshot), held)
        loads: dict[int, int] = {}
        for column in keys:
            for key in column.to_pylist():
                if key is not None and not is_salt(key):
                    slot = slot_of(key, layout.slots)
                    loads[slot] = loads.get(slot, 0) + 1
        self.loads.write(batch_id, f"{g.step_id}-{partition:05d}", loads, sizes)


def state_io(
    grouping: Grouping,
    state_url: str | None,
    checkpoint: str | None,
    elastic_partitions: int | None,
) -> StateIO:
    """The strategy for a keyed stage: task-local, per partition, or per slot.

    ``elastic_partitions``: the key partition count when the stage's keys move between
    partitions (an elastic key layout); None otherwise.
    """
    if not state_url:
        return TaskLocal(grouping)
    if elastic_partitions is not None and checkpoint is not None:
        return SlotSnapshots(grouping, state_url, checkpoint, elastic_partitions)
    return PartitionSnapshots(grouping, state_url)
