"""The budget policy wired into a running query: one owner decides, the fronts follow.

With ``SparkGraph(budgets=BudgetPolicy(...))`` the control channel's reader (the driver's
source process, :class:`~flamestream.spark.control.channels.ControlReader`) runs
:func:`flamestream.spark.control.policy.plan` at every planning after a committed batch:

1. it measures that batch: the rows the fronts read (each front records them in its own end
   offset), its duration (the offset log's and commit log's times), the items and state
   bytes per slot (written by the keyed tasks, :class:`~flamestream.spark.durable.slots.
   SlotLoads`), and the cores;
2. the policy decides the read limit, the active partitions and the slot moves together;
3. the layout (active partitions and moves) goes into the control channel's end offset, as
   the elastic layout's does; the read limit is *published* (:class:`LimitBoard`, one file
   per decision under ``<graph>/control/``);
4. every front reader (its own process) reads the newest published limit when it plans a
   batch, and records the limit it used and the rows it took in its end offset.

So a replayed batch reads the offsets it was planned with (same rows, same layout) whatever
the policy decides later, and the policy never depends on which process planned first: a
front that plans before the decision uses the previous one (a tick late, never wrong).
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from flamestream.jvm import Shim, ShimError, cluster_executors
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.control.policy import Budgets, Measurement, Plan, Setting, plan
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.files import (
    filesystem,
    numbered_paths,
    remove,
    write_atomically,
)
from flamestream.spark.durable.slots import SlotLoads

log = logging.getLogger("flamestream.controller")

#: The front option naming the checkpoint whose published limits the front reads.
LIMIT_FROM = "flamestream.budgetFrom"

#: The front option: the limit before any is published (the policy's first).
INITIAL_LIMIT = "flamestream.budgetInitialRows"

#: The key of the front's end offset that records the published limit it used.
RECORD = "budget"

#: Decisions kept on the board (the newest is read; the rest are for looking back).
KEEP = 64

#: Ticks of measurements the policy sees.
HISTORY = 8


@dataclass(frozen=True)
class BudgetPolicy:
    """What a user declares (``SparkGraph(budgets=BudgetPolicy(...))``).

    ``target_latency_ms``: a record's time from available to released;
    ``max_state_bytes_per_partition``: a keyed partition's state never passes it (None: no
    memory budget); ``min_rows`` / ``max_rows``: read bounds per tick; ``max_moves``: slots
    moved per tick at most; ``cores``: the cores keyed tasks run on (None: Spark's default
    parallelism when the query starts); ``burst_share``: the declared burst bound, a keyed
    partition receives at most this times its observed share of a tick's rows (the memory
    budget is guaranteed while the input keeps to it; ``math.inf``: any share); ``sketch``:
    with ``exact_or_approximate`` steps in the graph, the policy may sketch their keys' slots
    rather than stop reading when the state budget would be passed (False: never sketch);
    ``sketch_bytes_per_key``: what such a key weighs sketched (set by the runtime from the
    graph's steps); ``max_cpu_us_per_record``: CPU time per record the application's
    processes may use, over the last ``cpu_window_ms`` of batches (None: no CPU budget; it
    needs the JVM shim, which measures the CPU, see :mod:`flamestream.spark.control.cpu`).
    Without ``cores``, the keyed tasks' cores are the application's live executor cores (the
    JVM shim's count, read at every decision: the policy follows the cluster), else Spark's
    default parallelism when the query started.
    """

    target_latency_ms: float = 5000.0
    max_state_bytes_per_partition: int | None = None
    min_rows: int = 100
    max_rows: int | None = None
    max_moves: int = 4
    cores: int | None = None
    burst_share: float = 2.0
    sketch: bool = True
    sketch_bytes_per_key: int | None = None
    max_cpu_us_per_record: float | None = None
    cpu_window_ms: float = 60_000.0
    #: set by the runtime: Spark's default parallelism when the query started (the cores
    #: without ``cores`` and without the JVM shim's live count)
    start_cores: int | None = None

    def options(self, cores: int) -> dict[str, str]:
        """As control channel options."""
        found = {
            "budget": "on",
            "targetLatencyMs": str(self.target_latency_ms),
            "minRecordsPerTrigger": str(self.min_rows),
            "maxMoves": str(self.max_moves),
            "burstShare": str(self.burst_share),
            "cores": str(self.cores or cores),
            "followCores": "false" if self.cores else "true",
            "cpuWindowMs": str(self.cpu_window_ms),
        }
        if self.max_cpu_us_per_record is not None:
            found["maxCpuMicrosPerRecord"] = str(self.max_cpu_us_per_record)
        if self.max_state_bytes_per_partition is not None:
            found["maxStateBytesPerPartition"] = str(self.max_state_bytes_per_partition)
        if self.max_rows is not None:
            found["maxRecordsPerTrigger"] = str(self.max_rows)
        if self.sketch and self.sketch_bytes_per_key is not None:
            found["sketchBytesPerKey"] = str(self.sketch_bytes_per_key)
        return found

    def initial_limit(self) -> int:
        """The read limit before the first decision (the policy's first)."""
        return Setting.initial(self.budgets(1), 1).limit

    def budgets(self, partitions: int) -> Budgets:
        """The policy's budgets for a stage of ``partitions`` (its maximum parallelism)."""
        return Budgets(
            target_latency_ms=self.target_latency_ms,
            partitions=partitions,
            max_state_bytes_per_partition=self.max_state_bytes_per_partition,
            min_rows=self.min_rows,
            max_rows=self.max_rows,
            max_moves=self.max_moves,
            burst_share=self.burst_share,
            sketch_bytes_per_key=self.sketch_bytes_per_key if self.sketch else None,
            max_cpu_us_per_record=self.max_cpu_us_per_record,
            cpu_window_ms=self.cpu_window_ms,
        )

    @classmethod
    def parse(cls, options: OptionReader) -> BudgetPolicy | None:
        """The control channel's budget options (None without ``budget=on``)."""
        if options.choice("budget", ["off", "on"], "off") != "on":
            return None
        follow = options.boolean("followCores", False)
        return cls(
            target_latency_ms=options.number("targetLatencyMs", 5000.0, minimum=1.0),
            max_state_bytes_per_partition=options.optional_integer(
                "maxStateBytesPerPartition", minimum=1
            ),
            min_rows=options.integer("minRecordsPerTrigger", 100, minimum=1),
            max_rows=options.optional_integer("maxRecordsPerTrigger", minimum=1),
            max_moves=options.integer("maxMoves", 4, minimum=1),
            cores=None if follow else options.integer("cores", 1, minimum=1),
            start_cores=options.integer("cores", 1, minimum=1),
            burst_share=options.number("burstShare", 2.0, minimum=1.0),
            sketch_bytes_per_key=options.optional_integer("sketchBytesPerKey", minimum=1),
            max_cpu_us_per_record=options.optional_number("maxCpuMicrosPerRecord", minimum=0.001),
            cpu_window_ms=options.number("cpuWindowMs", 60_000.0, minimum=1.0),
        )


class LimitBoard:
    """Published read limits (``<graph>/control/<batch>.json``: decided after that batch)."""

    def __init__(self, graph_url: str) -> None:
        self.url = graph_url.rstrip("/") + "/control"

    def publish(self, after: int, entry: Mapping[str, Any]) -> None:
        """The decision made after batch ``after`` (a re-decision overwrites it)."""
        fs, root = filesystem(self.url)
        path = posixpath.join(root, f"{after + 1:012d}.json")
        write_atomically(fs, path, json.dumps(dict(entry)).encode(), racing=True)
        old = sorted(numbered_paths(fs, root, ".json"))[:-KEEP]
        remove(fs, [p for _, p in old])

    def entries(self) -> list[dict[str, Any]]:
        """Every kept decision, oldest first."""
        fs, root = filesystem(self.url)
        try:
            found = sorted(numbered_paths(fs, root, ".json"))
        except FileNotFoundError:
            return []
        return [json.loads(fs.cat_file(path)) for _, path in found]

    def latest(self) -> dict[str, Any] | None:
        """The newest decision, if any."""
        fs, root = filesystem(self.url)
        try:
            found = sorted(numbered_paths(fs, root, ".json"))
        except FileNotFoundError:
            return None
        if not found:
            return None
        entry: dict[str, Any] = json.loads(fs.cat_file(found[-1][1]))
        return entry


def front_record(limit: int, rows: int, published: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a front's end offset keeps: the limit it read with, its rows, whose decision."""
    return {
        "limit": limit,
        "rows": rows,
        "after": int(published["after"]) if published else -1,
    }


def measure(
    checkpoint: QueryCheckpoint,
    batch: int,
    cores: int,
    slots: int,
    cpu_ms: float | None = None,
    active: int = 0,
) -> Measurement | None:
    """Batch ``batch`` as the policy sees it (None if no keyed task wrote its loads)."""
    store = SlotLoads(checkpoint.graph_url)
    loads = store.read(batch)
    if loads is None:
        return None
    sizes = store.read_slots(batch)
    rows = sum(
        int(offset[RECORD]["rows"])
        for offset in checkpoint.offsets_where(batch, lambda o: RECORD in o)
    )
    return Measurement(
        rows=rows,
        duration_ms=batch_duration_ms(checkpoint, batch),
        slot_items=tuple(loads.get(s, 0) for s in range(slots)),
        slot_bytes=tuple(sizes.get(s, (0, 0, 0))[1] for s in range(slots)),
        slot_growth=tuple(
            sizes.get(s, (0, 0, 0))[1] - sizes.get(s, (0, 0, 0))[0] for s in range(slots)
        ),
        cores=cores,
        slot_keys=tuple(sizes.get(s, (0, 0, 0))[2] for s in range(slots)),
        cpu_ms=cpu_ms,
        active=active,
    )


def batch_duration_ms(checkpoint: QueryCheckpoint, batch: int) -> float:
    """From the batch's offset log entry written (planned) to its commit log entry (done)."""
    fs, root = filesystem(checkpoint.url)
    try:
        planned = fs.modified(posixpath.join(root, "offsets", str(batch)))
        done = fs.modified(posixpath.join(root, "commits", str(batch)))
    except (FileNotFoundError, NotImplementedError):
        return 0.0
    return max(0.0, float((done - planned).total_seconds()) * 1000)


@dataclass
class CpuMeter:
    """The application's CPU between two decisions, read from the JVM shim (``cpu``).

    The first reading after a start measures nothing (no reading before it); a reading that
    skips a batch (two committed since the last) is not attributed to one, nor one lower than
    the last (a process that left the tree took its CPU along).
    """

    last: tuple[int, float] | None = None  #: (batch, the application's CPU ms then)

    def batch_ms(self, batch: int, shim: Shim | None) -> float | None:
        """CPU ms used since the reading after ``batch - 1`` (None: not known)."""
        total = application_cpu_ms(shim)
        if total is None:
            self.last = None
            return None
        before, self.last = self.last, (batch, total)
        if before is None or before[0] != batch - 1 or total < before[1]:
            return None  # a process left the tree with its CPU (orphaned): not a measurement
        return total - before[1]


def application_cpu_ms(shim: Shim | None) -> float | None:
    """CPU ms the application's processes used so far (None: no shim, or no ``/proc``)."""
    if shim is None:
        return None
    try:
        reply = shim.request("cpu")
    except ShimError:
        return None
    if not reply.get("measured"):
        return None
    return float(reply["totalMs"])


@dataclass
class BudgetController:
    """The policy's state in the control channel's process (resumed from the board)."""

    policy: BudgetPolicy
    partitions: int
    setting: Setting | None = None
    history: tuple[Measurement, ...] = ()
    meter: CpuMeter = field(default_factory=CpuMeter)
    _shim: Shim | bool | None = False  # False: not looked for yet

    def shim(self) -> Shim | None:
        """The JVM shim's endpoint, looked for once."""
        if self._shim is False:
            self._shim = Shim.find()
        return None if isinstance(self._shim, bool) else self._shim

    def cores(self) -> int:
        """The keyed tasks' cores: declared, else the live executors', else at start."""
        if self.policy.cores:
            return self.policy.cores
        live = cluster_executors(self.shim()) if self.shim() is not None else None
        if live is not None and live.cores > 0:
            return live.cores
        return self.policy.start_cores or 1

    def decide(
        self,
        checkpoint: QueryCheckpoint,
        batch: int,
        assignment: Sequence[int],
        active: int | None = None,
        sketched: Sequence[int] = (),
    ) -> Plan | None:
        """After committed ``batch``: the next setting (None if the batch says nothing).

        ``sketched``: the slots sketched so far, as the control offset records them.
        """
        began = time.perf_counter()
        cpu = None
        if self.policy.max_cpu_us_per_record is not None:
            cpu = self.meter.batch_ms(batch, self.shim())
        budgets = self.policy.budgets(self.partitions)
        setting = self._resume(checkpoint, budgets, assignment, active)
        measured = measure(
            checkpoint, batch, self.cores(), len(assignment), cpu, active or setting.active
        )
        if measured is None:
            return None
        setting = replace(setting, sketched=tuple(sketched))
        self.history = (*self.history, measured)[-HISTORY:]
        # the front may plan the next batch before this decision, with the previous limit:
        # those rows are in flight (the layout, in this channel's offset, applies at once)
        decided = plan(budgets, setting, self.history, in_flight=setting.limit)
        if decided.setting.limit == 0:
            log.warning(
                "budget policy after batch %d: read limit 0, the state fills the budget "
                "(%s); reading waits until it shrinks",
                batch,
                "; ".join(decided.reasons),
            )
        unheld = [r for r in decided.reasons if r.startswith("cpu: not held")]
        if unheld:
            log.warning(
                "budget policy after batch %d: the CPU budget (%g us a record) is not held: %s",
                batch,
                self.policy.max_cpu_us_per_record,
                "; ".join(unheld),
            )
        beyond = [r for r in decided.reasons if r.startswith("surprise")]
        if beyond:
            log.warning(
                "budget policy after batch %d: the batch went beyond the declared bounds, "
                "the memory budget was not guaranteed for it (%s); a partition over its "
                "burst bound again and again: raise burstShare; growth over the estimate: "
                "the batch created keys faster than the last ones (the next cap uses it)",
                batch,
                "; ".join(beyond),
            )
        self.setting = decided.setting
        LimitBoard(checkpoint.graph_url).publish(
            batch,
            {
                "after": batch,
                "limit": decided.setting.limit,
                "active": decided.setting.active,
                "growthPerItem": decided.setting.growth_per_item,
                "moves": len(decided.moves),
                "rows": measured.rows,
                "durationMs": round(measured.duration_ms, 1),
                "peakPartitionBytes": peak_partition_bytes(measured, assignment),
                "sketched": list(decided.setting.sketched),
                "cores": measured.cores,
                "cpuMs": measured.cpu_ms,
                "waitRows": decided.setting.wait_rows,
                "maxWaitMs": decided.setting.max_wait_ms,
                "cpuCeiling": decided.setting.cpu_ceiling,
                # the policy's own cost: measuring and deciding, before this write
                "decideMs": round(1000 * (time.perf_counter() - began), 1),
                "reasons": list(decided.reasons),
            },
        )
        return decided

    def _resume(
        self,
        checkpoint: QueryCheckpoint,
        budgets: Budgets,
        assignment: Sequence[int],
        active: int | None,
    ) -> Setting:
        """The current setting: in memory, else from the board (a restarted process)."""
        current = self.setting or Setting.initial(budgets, self.cores())
        if self.setting is None:
            last = LimitBoard(checkpoint.graph_url).latest()
            if last is not None:
                growth = last.get("growthPerItem")
                ceiling = last.get("cpuCeiling")
                current = replace(
                    current,
                    limit=int(last["limit"]),
                    growth_per_item=None if growth is None else float(growth),
                    cpu_ceiling=None if ceiling is None else int(ceiling),
                    wait_rows=int(last.get("waitRows", 0)),
                    max_wait_ms=float(last.get("maxWaitMs", 0.0)),
                )
        used = max(assignment) + 1  # a layout never uses a partition beyond the active ones
        return replace(current, assignment=tuple(assignment), active=max(active or used, used))


def peak_partition_bytes(measured: Measurement, assignment: Sequence[int]) -> int:
    """The fullest partition's state after the batch, under the layout it ran with."""
    out: dict[int, int] = {}
    for slot, size in enumerate(measured.slot_bytes):
        out[assignment[slot]] = out.get(assignment[slot], 0) + size
    return max(out.values(), default=0)
