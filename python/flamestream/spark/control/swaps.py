"""Function swaps on Spark: decided at planning, recorded in the offset log, applied per item.

1. ``QueryControl.swap(step, fn)`` checks the swap against the graph the query started with
   (``steps.json``), stores the pickled function by digest
   (:class:`~flamestream.spark.durable.functions.FunctionStore`) and submits a ``swap``
   request.
2. The control channel's reader consumes it at its next planning (:func:`consume_swap`): it
   picks the swap's global time ``T`` and appends ``{step, at: [ts, front], fn: digest}`` to
   the list of swaps in force, which it writes into its end offset. Spark writes that offset
   into the offset log before the batch runs: the batch, and every replay of it, sees the same
   swaps, however many requests came since.
3. The stage runners (stateless stages, fronts' first stages, keyed stages and their tails)
   read the swaps of their batch from the offset log (:class:`SwapReader`, cached per batch),
   load the functions by digest (once per process) and run each item through the version its
   global time picks (:class:`~flamestream.runtime.swaps.Versions`). A stage with swapped
   steps runs its batch on the general path: the fast paths compiled the steps as the graph
   declared them.
4. A swapped function that raises withdraws its swap (:class:`Guarded`): the task records
   the batch (:class:`~flamestream.spark.durable.functions.Withdrawals`) and fails it with
   the step, the item's time and determinant. Every later run of that batch (the query
   restarted) and every batch after it run the step's function from before the swap; the
   control channel drops the swap from the list in force at its next planning and records
   the withdrawal (:func:`withdraw_failed`). Batches committed before keep what they
   released: the old function stays in force, the swap's time does not move back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flamestream.graph.steps import Step
from flamestream.model import GlobalTime
from flamestream.runtime.swaps import Versions, with_function
from flamestream.spark.connector.barrier import front_offsets
from flamestream.spark.connector.offsets import FrontOffset
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.functions import FunctionStore, Withdrawals, read_steps
from flamestream.spark.durable.requests import Request

#: The control offset's key for the swaps in force (a list, oldest first).
SWAPS = "swaps"


def effective_time(checkpoint: str, swaps: list[dict[str, Any]]) -> GlobalTime:
    """The global time a swap decided now takes effect at: ``(largest next ts, 0)``.

    The largest next ts of any front recorded in the newest offset-log entry (each front's
    report, and each source's horizon for fronts not seen yet), never below an earlier swap's
    time. Why it is at or above every global time the step has processed: the batch being
    planned is the one after the newest logged batch (a logged batch that did not commit is
    replayed with its own offsets, never planned again), so everything processed so far was
    admitted by a logged batch, below its front's next ts there. Items that go round a loop
    into later batches keep their global time, so they are below ``T`` too and keep the old
    function, as in the reference runtime. With no logged batch yet, ``T = (0, 0)``: the
    whole run uses the new function.
    """
    highest = GlobalTime(0, 0)
    logged = QueryCheckpoint(checkpoint).logged_batches()
    if logged:
        for offset in front_offsets(checkpoint, logged[-1]):
            for report in FrontOffset.from_json(offset).reports():
                highest = max(highest, GlobalTime(report.ts, 0))
    for swap in swaps:
        highest = max(highest, GlobalTime(*swap["at"]))
    return highest


def consume_swap(checkpoint: str, request: Request, swaps: list[dict[str, Any]]) -> str:
    """Append ``request``'s swap to ``swaps`` (the list in force); return the decision in words.

    A request the query cannot honour (its step is no longer swappable in the graph that runs
    now, or its function is missing) is refused (recorded in the offset and logged by the
    reader): ``QueryControl.swap`` refused such requests already, so this is a graph changed
    between submission and planning.
    """
    state_url = QueryCheckpoint(checkpoint).graph_url
    step, digest = str(request.body.get("step")), str(request.body.get("fn"))
    record = read_steps(state_url) or {}
    known = record.get("steps", {}).get(step)
    if known is None or known.get("refused") or not FunctionStore(state_url).has(digest):
        return f"refused: step {step!r} is not swappable in the graph now running"
    at = effective_time(checkpoint, swaps)
    swaps.append({"step": step, "at": [at.ts, at.front], "fn": digest})
    return f"step {step!r} gets function {digest[:12]} from global time {tuple(at)}"


def withdraw_failed(checkpoint: str, swaps: list[dict[str, Any]]) -> list[str]:
    """Drop the swaps whose function raised from ``swaps`` (the list in force); say which.

    Called at planning (step 2 of the control channel's protocol): the batch being planned
    comes after the one that withdrew them, so it and every later one run without them.
    """
    if not swaps:
        return []
    withdrawn = Withdrawals(QueryCheckpoint(checkpoint).graph_url).read()
    said = []
    for swap in list(swaps):
        found = withdrawn.get(Withdrawals.key(swap))
        if found is not None:
            swaps.remove(swap)
            said.append(
                f"swap of step {swap['step']!r} to {swap['fn'][:12]} withdrawn: its function "
                f"raised in batch {found['batch']} ({found['error']}); the step runs its "
                "function from before the swap"
            )
    return said


class SwapRaised(Exception):
    """A swapped-in function raised: its swap is withdrawn (raised on, as the cause's report)."""

    def __init__(self, cause: Exception, batch_id: int) -> None:
        self.cause = cause
        super().__init__(
            f"{type(cause).__name__}: {cause} (a swapped-in function: the swap is withdrawn "
            f"from batch {batch_id} on; restarted, the query runs that batch again with the "
            "step's function from before the swap)"
        )


class Guarded:
    """A swapped-in function that withdraws its swap when it raises (then raises on).

    Named like the function it wraps, so errors name the user's function.
    """

    def __init__(
        self, fn: Callable[..., Any], withdraw: Callable[[Exception], None], batch_id: int
    ) -> None:
        self.fn = fn
        self.withdraw = withdraw
        self.batch_id = batch_id
        self.__qualname__ = getattr(fn, "__qualname__", None) or repr(fn)

    def __call__(self, *args: Any) -> Any:
        """The function's result; if it raises, withdraw the swap and raise :class:`SwapRaised`."""
        try:
            return self.fn(*args)
        except Exception as exc:
            self.withdraw(exc)
            raise SwapRaised(exc, self.batch_id) from exc


#: The swaps of recent batches read in this process, by (checkpoint, batch) (as layouts are).
_READ: dict[tuple[str, int], tuple[dict[str, Any], ...]] = {}


def _swaps_of(checkpoint: str, batch_id: int) -> tuple[dict[str, Any], ...]:
    """The swaps in force for ``batch_id``, from the control channel's line of its offsets.

    Read once per process and batch: every task of the batch on this worker reuses it.
    """
    cached = _READ.get((checkpoint, batch_id))
    if cached is not None:
        return cached
    offsets = QueryCheckpoint(checkpoint).source_offsets(batch_id)
    swaps: tuple[dict[str, Any], ...] = ()
    for offset in offsets or []:
        if isinstance(offset, dict) and offset.get("flamestreamLayout") == 1:
            swaps = tuple(offset.get(SWAPS, ()))
    if offsets is not None:  # a batch not logged yet is never cached
        if len(_READ) > 64:
            _READ.clear()
        _READ[(checkpoint, batch_id)] = swaps
    return swaps


def _retried() -> bool:
    """Whether the running Spark task is a retry (attempt 1 or later) of a task of this run."""
    from pyspark import TaskContext  # executors only

    context = TaskContext.get()
    return context is not None and context.attemptNumber() > 0


class SwapReader:
    """A runner's view of the swaps: per batch, the versions of the steps it runs."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self.store = FunctionStore(QueryCheckpoint(checkpoint).graph_url)
        self.withdrawals = Withdrawals(QueryCheckpoint(checkpoint).graph_url)
        self._batch = -1  # the batch whose versions are cached (per runner, per process)
        self._versions: dict[str, Versions] = {}

    def versions(self, batch_id: int, steps: Iterable[Step]) -> dict[str, Versions]:
        """Per step of ``steps`` swapped in batch ``batch_id``, its versions (none: {})."""
        if batch_id < 0:
            return {}
        if batch_id != self._batch:
            self._versions = self._read(batch_id, steps)
            self._batch = batch_id
        return self._versions

    def _read(self, batch_id: int, steps: Iterable[Step]) -> dict[str, Versions]:
        """The versions of ``steps`` in ``batch_id``: its swaps less those withdrawn by then.

        Withdrawals are read afresh for each runner (each task): one may have been written
        since this process last ran the batch (by the run that failed).
        """
        mine = {step.step_id: step for step in steps}
        versions: dict[str, Versions] = {}
        swaps = [s for s in _swaps_of(self.checkpoint, batch_id) if s["step"] in mine]
        withdrawn = self.withdrawals.read() if swaps else {}
        for swap in swaps:
            gone = withdrawn.get(Withdrawals.key(swap))
            if gone is not None and gone["batch"] == batch_id and _retried():
                # a retry in the run that saw the function raise: the batch's other tasks may
                # have run the swap; fail the run, so that the restarted query runs the whole
                # batch without it rather than commit a mix
                raise SwapRaised(RuntimeError(gone["error"]), batch_id)
            if gone is not None and gone["batch"] <= batch_id:
                continue
            step = mine[swap["step"]]
            fn = Guarded(self.store.load(swap["fn"]), self._withdraw(swap, batch_id), batch_id)
            new = with_function(step, fn)
            base = versions.get(step.step_id) or Versions(step)
            versions[step.step_id] = base.then(GlobalTime(*swap["at"]), new)
        return versions

    def _withdraw(self, swap: dict[str, Any], batch_id: int) -> Callable[[Exception], None]:
        def withdraw(exc: Exception) -> None:
            self.withdrawals.record(swap, batch_id, f"{type(exc).__name__}: {exc}")
            self._batch = -1  # this runner's next batch reads the withdrawal too

        return withdraw

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_batch"], state["_versions"] = -1, {}
        return state


__all__ = [
    "SWAPS",
    "Guarded",
    "SwapRaised",
    "SwapReader",
    "consume_swap",
    "effective_time",
    "withdraw_failed",
]
