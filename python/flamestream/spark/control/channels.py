"""The internal channel readers: the loop channel and the control channel.

Neither is a user's source: ``apply`` adds them to a graph's query. The loop channel reads back
what keyed tasks sent into the loop (:mod:`flamestream.spark.durable.loop`); the control channel
carries each tick's key layout (:mod:`flamestream.spark.control.key_layout`) in its offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from flamestream.spark.connector.faults import crash_point
from flamestream.spark.control.approx import record as record_sketch
from flamestream.spark.control.approx import sketched_slots
from flamestream.spark.control.budgeted import BudgetController, BudgetPolicy, CpuMeter
from flamestream.spark.control.cluster import ClusterFollower
from flamestream.spark.control.key_layout import (
    ElasticPolicy,
    Layout,
    decide_rescale,
    migration_step,
    plan_layout,
)
from flamestream.spark.control.swaps import SWAPS, consume_swap, withdraw_failed
from flamestream.spark.durable import (
    QueryCheckpoint,
    batch_id_of_task,
)
from flamestream.spark.durable.loop import KEEP_BATCHES, AckTable, LoopStore
from flamestream.spark.durable.requests import Request, RequestStore
from flamestream.spark.durable.slots import SlotLoads, slot_bytes
from flamestream.spark.exec.worker.worker_setup import setup_worker

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


#: A request kind's handler: (the next offset so far, the request, the last committed batch)
#: -> (the next offset, the decision in words). Handlers return new dicts, never mutate.
RequestHandler = Callable[[dict[str, Any], Request, int], tuple[dict[str, Any], str]]

#: The offset's fields that explain one planning; every other field holds for the batch (a
#: handler may add its own), and only a change of those makes a batch. ``decisions`` (how
#: many plannings decided something) is carried over; the others are written only into the
#: offset of the batch whose planning decided (:func:`_quiet`).
_EXPLAINING = frozenset({"decisions", "reason", "requests", "moved", "movedBytes", "cluster"})


class ControlReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The control channel: no rows; its offset is the layout of the batch (see module doc).

    The offset also holds the active partition count ``active``, the layout a migration is
    on its way to (``target``, None when none is), the layout a merge goes back to (``home``:
    the last rescale's target; None: the default over the active partitions) and the name of
    the last request consumed (``consumed``); in the batch whose planning decided something,
    ``reason``, ``requests``, ``moved``, ``movedBytes`` and ``cluster`` say why (a batch that
    decided nothing has none of them; ``decisions`` counts the plannings that decided).
    """

    def __init__(
        self,
        checkpoint: str,
        partitions: int,
        policy: ElasticPolicy | None = None,
        budget: BudgetPolicy | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.key_partitions = partitions
        self.policy = policy or ElasticPolicy()
        self.state_url = QueryCheckpoint(checkpoint).graph_url
        #: with declared budgets, the budget policy decides layout and read limit together
        self.budget = BudgetController(budget, partitions) if budget is not None else None
        self._judged = -1  # the newest batch whose loads were judged (driver side)
        self.handlers = self._handlers()
        self.follower = self._follower()

    def _follower(self) -> ClusterFollower | None:
        """What reads the cluster's cores (``follow_cluster``), with no reading made yet."""
        if not self.policy.follow_cluster or self.budget is not None:
            return None  # with budgets the policy follows the live cores itself (one owner)
        return ClusterFollower(
            self.key_partitions, self.policy.settle, self.policy.target_latency_ms
        )

    def _handlers(self) -> dict[str, RequestHandler]:
        """Per request kind, what consumes it (each kind's owner adds its handler here)."""
        return {"rescale": self._rescale, "swap": self._swap}

    def initialOffset(self) -> dict[str, Any]:
        """The default layout over the policy's initial active partitions."""
        active = self.policy.active or self.key_partitions
        layout = Layout.default(self.key_partitions, active)
        start: dict[str, Any] = {
            "active": active,
            "target": None,
            "home": None,
            "consumed": "",
            SWAPS: [],
        }
        return {**_offset(layout, 0), **start}

    def prepareForTriggerAvailableNow(self) -> None:
        """Nothing to fix: a layout decision is the only thing that moves this offset."""

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        """The next batch's layout: ``start`` itself unless something was decided.

        The migration protocol, at each planning of batch ``b`` (driver, source process):

        1. Read ``start``, batch ``b - 1``'s offset: its layout, active count, migration
           target and last consumed request (offsets written before active counts: all
           ``P`` partitions active, no target, nothing consumed).
        2. Drop the swaps withdrawn because their function raised (:meth:`_withdraw`), then
           consume the requests submitted after that one, in order, each through its kind's
           handler (:meth:`_consume`); ``rescale(n)`` sets ``active = n`` and a target laid
           out over partitions ``0 … n-1``, replacing any target still in progress (the
           migration goes on from where it is); ``n`` equal to the active count changes
           nothing (:func:`~.key_layout.decide_rescale`). With
           ``follow_cluster``, the application's cores may then set a new active count and
           target the same way (:meth:`_follow`), recorded with the cores (``cluster``).
        3. With a target in progress, move the next slots towards it, at most the policy's
           slots and bytes (:func:`migration_step`); the target reached, it is cleared.
           Without one, judge the loads of the last committed batch (once per batch): a
           better layout over the active partitions (:func:`plan_layout`) becomes the
           target, and its first step is taken at once.
        4. If anything was decided, return the new offset: Spark writes it into the offset
           log before batch ``b`` runs, so ``b`` and any replay of it use this layout. If
           nothing was, ``start`` without the explaining fields (:func:`_quiet`; ``start``
           itself when it has none): they belong to the batch that decided. Spark runs a
           batch when an offset changes, so on a query without new rows a decision is
           followed by one batch without rows, the one that drops them.
        5. In batch ``b``, each keyed task restores the newest snapshots (written by batches
           before ``b``, wherever they ran) of the slots the layout gives it, runs, and saves
           one snapshot per slot it holds; a moved slot's state thus moves with the batch
           that moves it, and a partition holding no slot gets no keyed rows.
        """
        last = QueryCheckpoint(self.checkpoint).last_committed_batch()
        before = {k: v for k, v in start.items() if k not in _EXPLAINING}
        before.update(
            active=int(start.get("active", start["partitions"])),
            target=start.get("target"),
            home=start.get("home"),
            consumed=str(start.get("consumed", "")),
        )
        notes: list[dict[str, str]] = []
        state, withdrawn = self._withdraw(before)
        state = self._consume(state, last, notes)
        state, followed = self._follow(state, last)
        state, reason, moved = self._move(state, last)
        if state == before:
            return _quiet(start)
        reasons = [*withdrawn]
        reasons += [f"{n['kind']} {n['request']}: {n['decision']}" for n in notes]
        reasons += [why for why in (followed, reason) if why]
        offset = {**state, "decisions": int(start["decisions"]) + 1, "reason": "; ".join(reasons)}
        if notes:
            offset["requests"] = notes
        if moved is not None:
            offset["moved"], offset["movedBytes"] = moved
        if followed and self.follower is not None and self.follower.seen is not None:
            offset["cluster"] = self.follower.seen.as_dict()
        crash_point("control.plan", last + 1)  # decided (requests consumed), not logged yet
        return offset

    def _follow(self, state: dict[str, Any], last: int) -> tuple[dict[str, Any], str]:
        """Rescale to the cores the application has (``follow_cluster``, :mod:`.cluster`).

        Once per committed batch, before the migration step (step 3 of :meth:`latestOffset`):
        a new active count is handled exactly as a ``rescale(n)`` request would be.
        """
        if self.follower is None or last <= self.follower.judged:
            return state, ""
        loads = SlotLoads(self.state_url).read(last)
        active, why = self.follower.decide(self.checkpoint, last, int(state["active"]), loads)
        if active is None:
            return state, ""
        asked = Request(name="", kind="rescale", body={"active": active})
        state, decision = self._rescale(state, asked, last)
        return state, f"{why}: {decision}"

    def _withdraw(self, state: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The swaps in force less those whose function raised (:mod:`.swaps`), and why."""
        swaps = list(state.get(SWAPS, ()))
        said = withdraw_failed(self.checkpoint, swaps)
        for why in said:
            _log.warning("%s", why)
        return ({**state, SWAPS: swaps} if said else state), said

    def _consume(
        self, state: dict[str, Any], last: int, notes: list[dict[str, str]]
    ) -> dict[str, Any]:
        """Hand each request not consumed yet, in order, to its kind's handler.

        A request whose body says ``notBeforeBatch`` above the batch being planned waits,
        and the ones after it with it (requests take effect in submission order). A kind
        without a handler is refused and recorded like any refusal: a request is never
        dropped silently; its decision goes into the offset (``requests``) and the log.
        """
        # the consumed ones are in an offset Spark has logged: forgotten in the same listing
        for request in RequestStore(self.state_url).after(state["consumed"], forget=True):
            if _not_before(request) > last + 1:
                break
            handler = self.handlers.get(request.kind)
            if handler is None:
                known = ", ".join(sorted(self.handlers))
                decision = f"refused: no handler for this kind (known: {known})"
            else:
                state, decision = handler(state, request, last)
            state = {**state, "consumed": request.name}
            notes.append({"request": request.name, "kind": request.kind, "decision": decision})
            level = logging.WARNING if decision.startswith("refused") else logging.INFO
            _log.log(level, "request %s (%s): %s", request.name, request.kind, decision)
        return state

    def _rescale(
        self, state: dict[str, Any], request: Request, last: int
    ) -> tuple[dict[str, Any], str]:
        """``rescale``: lay the slots out over ``active`` partitions, a few per batch."""
        active = request.body.get("active")
        partitions = self.key_partitions
        if not isinstance(active, int) or isinstance(active, bool) or not 1 <= active <= partitions:
            return state, f"refused: active={active!r}, allowed 1..{partitions} (P)"

        def layout(field: str) -> Layout | None:
            found = state.get(field)
            return None if found is None else Layout(partitions, tuple(found))

        current = Layout(partitions, tuple(state["assignment"]))
        loads = SlotLoads(self.state_url).read(last) if active != state["active"] else None
        decided = decide_rescale(
            current, int(state["active"]), active, layout("target"), layout("home"), loads
        )
        new = {
            **state,
            "active": decided.active,
            "target": None if decided.target is None else list(decided.target.assignment),
            # where a merge after a split goes back to
            "home": None if decided.home is None else list(decided.home.assignment),
        }
        return new, decided.text

    def _swap(
        self, state: dict[str, Any], request: Request, last: int
    ) -> tuple[dict[str, Any], str]:
        """``swap``: the swap joins the swaps in force, from its global time (see :mod:`.swaps`)."""
        swaps = list(state.get(SWAPS, ()))
        decision = consume_swap(self.checkpoint, request, swaps)
        return {**state, SWAPS: swaps}, decision

    def _move(
        self, state: dict[str, Any], last: int
    ) -> tuple[dict[str, Any], str, tuple[list[int], int] | None]:
        """Step 3 of :meth:`latestOffset`: (state, reason, (moved slots, their bytes))."""
        if self.budget is not None and state["target"] is None:
            return self._budgeted(state, last)
        partitions = self.key_partitions
        current = Layout(partitions, tuple(state["assignment"]))
        reason = ""
        if state["target"] is None and last > self._judged:
            self._judged = last
            store = SlotLoads(self.state_url)
            loads = store.read(last)
            store.forget_before(last)
            if loads:
                home = (
                    None if state.get("home") is None else Layout(partitions, tuple(state["home"]))
                )
                better, why = plan_layout(current, loads, self.policy, state["active"], home)
                if better is not None and better != current:
                    state = {**state, "target": list(better.assignment)}
                    reason = f"after batch {last}: {why}"
        if state["target"] is None:
            return state, reason, None
        target = Layout(partitions, tuple(state["target"]))
        sizes = slot_bytes(self.state_url)
        bound = self.policy.move_slots(current.slots)
        step, moved = migration_step(current, target, bound, self.policy.max_move_bytes, sizes)
        left = len(step.moves_to(target))
        state = {
            **state,
            "assignment": list(step.assignment),
            "target": None if left == 0 else list(target.assignment),
        }
        moved_bytes = sum(sizes.get(s, 0) for s in moved)
        note = f"moved {len(moved)} slots ({moved_bytes} bytes), {left} to go"
        return state, f"{reason}; {note}" if reason else note, (moved, moved_bytes)

    def _budgeted(
        self, state: dict[str, Any], last: int
    ) -> tuple[dict[str, Any], str, tuple[list[int], int] | None]:
        """With budgets: the budget policy's active count and moves after batch ``last``.

        Its read limit is published for the fronts (:mod:`flamestream.spark.control.
        budgeted`); its moves are bounded by its ``max_moves`` and taken at once. A rescale
        request's target, while in progress, is migrated first (see :meth:`_move`).
        """
        assert self.budget is not None  # noqa: S101
        if last <= self._judged:
            return state, "", None
        self._judged = last
        decided = self.budget.decide(
            QueryCheckpoint(self.checkpoint),
            last,
            state["assignment"],
            int(state["active"]),
            sketched_slots(state),
        )
        SlotLoads(self.state_url).forget_before(last)
        if decided is None:
            return state, "", None
        # sketch decisions are recorded even without moves, from a global time (issue 41)
        sketched = record_sketch(self.checkpoint, state, decided.setting.sketched)
        if not decided.moves:
            if sketched is state:
                return state, "", None
            return sketched, f"after batch {last}: " + "; ".join(decided.reasons), None
        new = {
            **sketched,
            "assignment": list(decided.setting.assignment),
            "active": decided.setting.active,
        }
        moved = [m.slot for m in decided.moves]
        reason = f"after batch {last}: " + "; ".join(decided.reasons)
        return new, reason, (moved, sum(m.bytes for m in decided.moves))

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
        state["handlers"] = {}
        state["budget"] = (
            None
            if self.budget is None
            else replace(self.budget, setting=None, meter=CpuMeter(), _shim=False)
        )
        state["follower"] = self._follower()  # a fresh reading in the unpickled copy
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.handlers = self._handlers()


def _not_before(request: Request) -> int:
    """The first batch a request may take effect in (``notBeforeBatch``; 0: any)."""
    value = request.body.get("notBeforeBatch", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _offset(layout: Layout, decisions: int) -> dict[str, Any]:
    return {
        "flamestreamLayout": 1,
        "partitions": layout.partitions,
        "assignment": list(layout.assignment),
        "decisions": decisions,
    }


def _quiet(start: dict[str, Any]) -> dict[str, Any]:
    """The offset of a batch that decided nothing after ``start``.

    ``start`` less the fields that explain a decision (all but ``decisions``), or ``start``
    itself if it has none. Without this, a batch that decided nothing would repeat the last
    decision's ``moved``, ``reason`` and ``requests``, and a reader adding up ``moved`` over
    the offset log would count one decision's moves once per batch after it.
    """
    if not (_EXPLAINING - {"decisions"}) & start.keys():
        return start
    return {k: v for k, v in start.items() if k == "decisions" or k not in _EXPLAINING}
