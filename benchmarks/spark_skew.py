"""Skew benchmark: a hot-key-range skew step, elastic key layouts against a fixed partitioning.

One SparkSession (``local[2]``, 2 shuffle partitions, the JVM shim on when its jar is
installed: per-task metrics of the keyed stage). Prints one JSON object::

    python -m benchmarks.spark_skew [--rate R] [--exponent S] [--keys K] [--before S]
        [--after S] [--drain S] [--settle S] [--target-ms T] [--variants ...]
        [--probe-rows N N] [--probe-batches B] [--load X] [--stress X] [--timeout S]
        [--work DIR]

Pipeline: generator front (2 partitions, ``keys`` keys, constant ``rowsPerSecond`` R,
``skewSteps`` ``0:0,N:S`` with N = R/2 x ``before``: uniform keys until the step, Zipf S from
it) -> ``apply_graph(word count, payload="key", partitions=2, elastic=...)`` -> flamestream
files sink (``release=tasks``), ``Trigger.ProcessingTime(0)``: batches back to back.

Variants, one after another in the same session, each into a fresh checkpoint:

* ``fixed``: ``elastic=False``: the keyed stage is hash partitioned by key, as always;
* ``elastic``: ``elastic=True`` (the default ``ElasticPolicy``): the control channel moves key
  ranges (slots) between the two keyed partitions from the last batch's loads;
* ``elastic+controller``: as ``elastic``, plus the front's controller (``controller=on``,
  ``targetLatencyMs`` = ``--target-ms``).

First a short probe (after untimed warm-up queries of both graphs): the pipeline fed from a
backlog (``rowsPerSecond`` 0) gives ``seconds = a + b * rows`` (fixed, uniform keys, two batch
sizes) and the per-row cost ``b`` of the other states at the larger size: elastic with uniform
keys, fixed and elastic with the skew. Without ``--rate``, R is the lower of ``--stress`` x the
highest rate the *skewed fixed* pipeline keeps up with in batches of ``target / 2`` and
``--load`` x the lowest such rate of the *balanced* states (uniform keys; elastic after its
split), so that every variant keeps up before the step and the fixed one is pushed past the
budget after it, as far as the skew makes it costlier at all.

Everything is measured from the checkpoint and the output alone: see ``NOTES``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import local_spark
from benchmarks.spark_barrier import linear_fit, summary_ms
from benchmarks.spark_controller import SINK_STATE, Batch, clock_start, git_state, run_lengths
from benchmarks.spark_graphs import word_count_graph
from flamestream.spark.connector.barrier import front_offsets
from flamestream.spark.durable import QueryCheckpoint

#: Generator front partitions, and key partitions of the word count's keyed stage.
GENERATOR_PARTITIONS = 2
KEY_PARTITIONS = 2

#: Batches shown around the step in each variant's trace (before, after).
AROUND = (2, 10)


@dataclass
class Watched:
    """A query run until it processed every row or its deadline."""

    started: float
    stopped: float = 0.0
    finished: bool = True
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: batch -> the keyed stage's tasks ``[partition, ms, rows in, rows out]`` (shim only)
    keyed_tasks: dict[int, list[list[int]]] = field(default_factory=dict)


@dataclass
class Checkpoint:
    """What a query's checkpoint tells: batches, their layouts, and offsets/0's mtime."""

    batches: list[Batch]
    #: batch -> the control channel's offset (elastic only)
    layouts: dict[int, dict[str, Any]]
    first_mtime: float | None


@dataclass(frozen=True)
class Input:
    """The generated input: its schedule and every record's key, known before the run."""

    rate: float
    step_record: int  #: per-partition index of the first skewed record
    total: int
    shares: dict[str, int]  #: records per generator partition
    keys: dict[str, list[int]]  #: generator partition -> key index (``k<i>``) per record
    key_count: int

    def made_at(self, start: float, i: int) -> float:
        """When record ``i`` of a partition became available (int(made / P) per partition)."""
        return start + (i + 1) * GENERATOR_PARTITIONS / self.rate


def read_checkpoint(ck: Path) -> Checkpoint:
    """The batches from the offset log (generator and control lines) and the sink's markers."""
    log = QueryCheckpoint(str(ck))
    offsets: dict[int, dict[str, Any]] = {}
    layouts: dict[int, dict[str, Any]] = {}
    for b in log.logged_batches():
        # the generator's offset and (elastic only) the control channel's layout
        offsets[b] = front_offsets(str(ck), b)[0]
        layout = log.offsets_where(b, lambda offset: offset.get("flamestreamLayout") == 1)
        if layout:
            layouts[b] = layout[0]
    first = Path(log.offset_path(0))
    first_mtime = first.stat().st_mtime if first.exists() else None
    markers: dict[int, tuple[float, dict[str, Any]]] = {}
    commits = ck / SINK_STATE / "commits"
    if commits.is_dir():
        for path in commits.iterdir():
            if path.name.endswith(".json") and not path.name.startswith("."):
                number = int(path.name.split(".")[0])
                markers[number] = (path.stat().st_mtime, json.loads(path.read_text()))
    batches = []
    previous: dict[str, int] = {}
    for b in sorted(offsets):
        offset = offsets[b]
        ends = {key: int(position) for key, _front, position, *_ in offset["fronts"]}
        starts = {key: previous.get(key, 0) for key in ends}
        previous = ends
        batch = Batch(b, offset["base"] / 1e6, starts, ends, offset.get("controller"))
        if b in markers:
            batch.released = markers[b][0]
            batch.pending = int(markers[b][1].get("pending", 0))
        batches.append(batch)
    return Checkpoint(batches, layouts, first_mtime)


def generated_keys(options: Mapping[str, str], shares: Mapping[str, int]) -> dict[str, list[int]]:
    """Every record's key index, as the generator front makes them (a pure function)."""
    from flamestream.spark.connector.offsets import FrontRange
    from flamestream.spark.connector.options import OptionReader
    from pyspark_flamestream.fronts.generator import GeneratorSource

    source = GeneratorSource(OptionReader("front generator", dict(options)))
    out: dict[str, list[int]] = {}
    for p, (key, share) in enumerate(shares.items()):
        drawn: list[int] = []
        for batch in source.read_range(FrontRange(key, p, 0, share, 0)):
            drawn.extend(int(k[1:]) for k in batch.column("key").to_pylist())
        out[key] = drawn
    return out


def key_partitions(key_count: int, assignment: Sequence[int] | None) -> list[int]:
    """The keyed partition of each key index: hash partitioning, or a layout's slots."""
    from flamestream.spark.control.key_layout import Layout
    from flamestream.spark.exec.items import encode_key
    from flamestream.spark.exec.partitioning import partition_of

    encoded = [encode_key(f"k{i}") for i in range(key_count)]
    if assignment is None:
        return [partition_of(e, KEY_PARTITIONS) for e in encoded]
    layout = Layout(KEY_PARTITIONS, tuple(assignment))
    return [layout.partition_of(e) for e in encoded]


def predicted_shares(key_count: int, exponent: float) -> dict[str, float]:
    """The hot keyed partition's share of the items, from the Zipf shares of the keys alone."""
    from flamestream.spark.control.key_layout import Layout, plan_layout, slot_of
    from flamestream.spark.exec.items import encode_key
    from pyspark_flamestream.fronts.generator import zipf_cdf

    cdf = zipf_cdf(key_count, exponent)
    weight = [cdf[0]] + [cdf[i] - cdf[i - 1] for i in range(1, key_count)]
    scale = 1_000_000  # plan_layout takes item counts
    default = Layout.default(KEY_PARTITIONS)
    slot_loads: Counter[int] = Counter()
    for i in range(key_count):
        slot_loads[slot_of(encode_key(f"k{i}"), default.slots)] += round(weight[i] * scale)
    fixed = [0.0] * KEY_PARTITIONS
    for i, p in enumerate(key_partitions(key_count, None)):
        fixed[p] += weight[i]
    split, _reason = plan_layout(default, slot_loads)
    total = sum(slot_loads.values())
    return {
        "hottest_key": round(weight[0], 3),
        "fixed": round(max(fixed), 3),
        "elastic_default_layout": round(max(default.loads(slot_loads)) / total, 3),
        "elastic_after_split": round(max((split or default).loads(slot_loads)) / total, 3),
    }


def check_output(out: Path, data: Input) -> dict[str, Any]:
    """Every record released exactly once, and every key's counts 1..n with n its records."""
    import pyarrow as pa
    from pyarrow import json as pa_json

    schema = pa.schema(
        [
            ("source", pa.string()),
            ("position", pa.int64()),
            ("value", pa.string()),
            ("flags", pa.int64()),
        ]
    )
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    rows = flagged = 0
    seen: dict[str, set[int]] = {key: set() for key in data.shares}
    counts: dict[str, list[int]] = {}
    for path in sorted(out.glob("part-*")):
        if path.stat().st_size == 0:
            continue
        table = pa_json.read_json(path, parse_options=parse)
        rows += table.num_rows
        flagged += sum(1 for f in table.column("flags").to_pylist() if f)
        for source, position in zip(
            table.column("source").to_pylist(), table.column("position").to_pylist(), strict=True
        ):
            seen.setdefault(source, set()).add(position)
        for value in table.column("value").to_pylist():
            key, _, count = value.rpartition("=")
            counts.setdefault(key, []).append(int(count))
    distinct = sum(len(positions) for positions in seen.values())
    expected = sum(
        sum(1 for i in seen.get(key, ()) if 0 <= i < share) for key, share in data.shares.items()
    )
    occurrences = Counter(k for drawn in data.keys.values() for k in drawn)
    wrong = [
        key
        for key, values in counts.items()
        if sorted(values) != list(range(1, len(values) + 1))
        or len(values) != occurrences[int(key[1:])]
    ]
    return {
        "rows": rows,
        "distinct_records": distinct,
        "duplicates": rows - distinct,
        "missing": data.total - expected,
        "out_of_range": distinct - expected,
        "flagged_rows": flagged,
        "keys_with_wrong_counts": sorted(wrong)[:8],
        "exactly_once": rows == distinct == expected == data.total and not wrong,
    }


def analyse(
    ck: Checkpoint,
    watched: Watched,
    data: Input,
    elastic: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Per record: availability and release; latency, backlog, recovery, layouts, loads."""
    batches = ck.batches
    rates = _ConstantRate(data.rate)
    start, before_planning = clock_start(batches, rates)
    settle_at = start + args.settle
    budget_ms = args.target_ms
    hashed = key_partitions(data.key_count, None)
    by_assignment: dict[tuple[int, ...], list[int]] = {}

    def partition_map(batch_id: int) -> list[int]:
        if not elastic:
            return hashed
        offset = ck.layouts.get(batch_id)
        if offset is None:  # no control line: the default layout (never expected)
            from flamestream.spark.control.key_layout import Layout

            assignment = Layout.default(KEY_PARTITIONS).assignment
        else:
            assignment = tuple(offset["assignment"])
        if assignment not in by_assignment:
            by_assignment[assignment] = key_partitions(data.key_count, assignment)
        return by_assignment[assignment]

    measured: list[float] = []
    after_step: list[float] = []

    def count(release: float, first: int, end: int) -> None:
        for i in range(first, end):
            made = data.made_at(start, i)
            if made >= settle_at:
                measured.append(release - made)
            if i >= data.step_record:
                after_step.append(release - made)

    censored = released_rows = 0
    per_batch: list[dict[str, Any]] = []
    for batch in batches:
        if not batch.rows:
            continue
        release = batch.released if batch.released is not None else watched.stopped
        if batch.released is None:
            censored += batch.rows
        else:
            released_rows += batch.rows
        loads = [0] * KEY_PARTITIONS
        parts = partition_map(batch.id)
        for key, end in batch.ends.items():
            count(release, batch.starts[key], end)
            for k, n in Counter(data.keys[key][batch.starts[key] : end]).items():
                loads[parts[k]] += n
        oldest = min(
            data.made_at(start, batch.starts[k])
            for k in batch.ends
            if batch.ends[k] > batch.starts[k]
        )
        t = batch.planned - start
        reach = int(rates.records(t) / GENERATOR_PARTITIONS)
        per_batch.append(
            {
                "batch": batch.id,
                "planned": t,
                "rows": batch.rows,
                "seconds": release - batch.planned,
                "oldest_ms": (release - oldest) * 1000,
                "backlog": sum(
                    max(0, min(reach, data.shares[k]) - batch.ends[k]) for k in batch.ends
                ),
                "skewed": any(batch.ends[k] > data.step_record for k in batch.ends),
                "loads": loads,
                "limit": (batch.controller or {}).get("limit"),
                "decisions": int((ck.layouts.get(batch.id) or {}).get("decisions", 0)),
            }
        )
    # records available by the stop but never read: censored at the stop too
    reach = int(rates.records(watched.stopped - start) / GENERATOR_PARTITIONS)
    unread = 0
    last = batches[-1].ends if batches else {}
    for key, share in data.shares.items():
        first, end = last.get(key, 0), min(reach, share)
        if end > first:
            unread += end - first
            count(watched.stopped, first, end)
    # "after the step": batches that read skewed records (the first one straddles the step)
    after = [b for b in per_batch if b["skewed"]]
    before = [b for b in per_batch if not b["skewed"]]
    over = [i for i, b in enumerate(after) if b["oldest_ms"] > budget_ms]
    recovered = None if (after and over and over[-1] == len(after) - 1) or unread else 0
    if recovered is not None and over:
        recovered = over[-1] + 1
    seconds = None
    if recovered is not None and after:
        seconds = 0.0 if recovered == 0 else after[recovered]["planned"] - args.before

    def hot_share(rows: list[dict[str, Any]]) -> dict[str, Any]:
        shares = [max(b["loads"]) / sum(b["loads"]) for b in rows if sum(b["loads"])]
        if not shares:
            return {"batches": 0}
        return {
            "batches": len(shares),
            "median": round(statistics.median(shares), 3),
            "max": round(max(shares), 3),
            "items_hot_partition_median": round(statistics.median(max(b["loads"]) for b in rows)),
        }

    step_index = next((i for i, b in enumerate(per_batch) if b["skewed"]), len(per_batch))
    shown = per_batch[max(0, step_index - AROUND[0]) : step_index + AROUND[1]]

    def describe(b: dict[str, Any]) -> str:
        tasks = watched.keyed_tasks.get(b["batch"])
        measured_tasks = (
            " [" + ", ".join(f"p{t[0]} {t[2]} in {t[1]} ms" for t in sorted(tasks)) + "]"
            if tasks
            else ""
        )
        return (
            f"{b['batch']} @{b['planned']:.2f}s{' skewed' if b['skewed'] else ''}: "
            f"{b['rows']} rows, {b['seconds']:.2f} s, oldest {b['oldest_ms']:.0f} ms, "
            f"backlog {b['backlog']}, keyed items {'/'.join(map(str, b['loads']))}"
            + measured_tasks
            + (f", decisions {b['decisions']}" if elastic else "")
            + (f", limit {b['limit']}" if b["limit"] is not None else "")
        )

    result: dict[str, Any] = {
        "released_rows": released_rows,
        "censored_rows": censored + unread,
        "finished": watched.finished,
        "latency_ms": summary_ms(measured) if measured else None,
        "latency_after_step_ms": summary_ms(after_step) if after_step else None,
        "peak_backlog": max((b["backlog"] for b in per_batch), default=0),
        "peak_backlog_after_step": max((b["backlog"] for b in after), default=0),
        "unread_at_stop": unread,
        "batches_without_rows": len(batches) - len(per_batch),
        "batches_before_step": len(before),
        "batches_after_step": len(after),
        "batch_seconds_median_before_after": [
            round(statistics.median(b["seconds"] for b in rows), 3) if rows else None
            for rows in (before, after)
        ],
        "batch_rows_median_before_after": [
            round(statistics.median(b["rows"] for b in rows)) if rows else None
            for rows in (before, after)
        ],
        "batches_over_budget_after_step": len(over),
        "ticks_to_recover_after_step": recovered,
        "seconds_to_recover_after_step": round(seconds, 3) if seconds is not None else None,
        "hot_partition_share_before_step": hot_share(before),
        "hot_partition_share_after_step": hot_share(after),
        "keyed_tasks_after_step": _task_summary(watched.keyed_tasks, after),
        "around_step": [describe(b) for b in shown],
        "pending_rows_in_markers": sum(b.pending for b in batches),
        "clock_start_before_batch0_planning_ms": round(before_planning * 1000, 3),
    }
    # layout decisions after the step: 0 for the fixed partitioning, which has none
    result["layout_decisions_after_step"] = 0
    if elastic:
        result["layout"] = _layout_summary(ck, after)
        result["layout_decisions_after_step"] = result["layout"]["decisions_after_step"]
    records = [b.controller for b in batches if b.controller]
    if records:
        result["controller"] = {
            "decisions": int(records[-1]["decisions"]),
            "limit_last": records[-1]["limit"],
            "reason_last": records[-1]["reason"],
            "limits": run_lengths([r["limit"] for r in records]),
        }
    return result


class _ConstantRate:
    """``clock_start``'s schedule for a constant rate (records and their inverse)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def records(self, elapsed: float) -> float:
        return max(0.0, elapsed) * self.rate

    def elapsed_for(self, records: float) -> float:
        return records / self.rate


def _task_summary(
    tasks: Mapping[int, list[list[int]]], after: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The keyed stage's slowest and fastest task per batch after the step (shim metrics)."""
    rows = [tasks[b["batch"]] for b in after if len(tasks.get(b["batch"], ())) == KEY_PARTITIONS]
    if not rows:
        return None
    return {
        "batches": len(rows),
        "slowest_task_ms_median": round(statistics.median(max(t[1] for t in r) for r in rows)),
        "fastest_task_ms_median": round(statistics.median(min(t[1] for t in r) for r in rows)),
        "rows_in_hot_task_median": round(statistics.median(max(t[2] for t in r) for r in rows)),
    }


def _layout_summary(ck: Checkpoint, after: list[dict[str, Any]]) -> dict[str, Any]:
    """Layout decisions from the control channel's offset lines."""
    ordered = [ck.layouts[b] for b in sorted(ck.layouts)]
    last = int(ordered[-1]["decisions"]) if ordered else 0
    # decisions counted at the last batch before the step's first skewed batch
    first_after = after[0]["batch"] if after else math.inf
    earlier = [ck.layouts[b] for b in sorted(ck.layouts) if b < first_after]
    base = int(earlier[-1]["decisions"]) if earlier else 0
    changes: list[str] = []
    previous: dict[str, Any] | None = None
    for b in sorted(ck.layouts):
        offset = ck.layouts[b]
        if previous is None or offset["decisions"] != previous["decisions"]:
            changes.append(
                f"batch {b}: {offset['decisions']} {offset['assignment']} {offset['reason']}"
            )
        previous = offset
    # the first batch run under a layout decided after the step
    first_decided = next((b for b in after if b["decisions"] > base), None)
    return {
        "decisions": last,
        "decisions_after_step": last - base,
        "first_batch_under_a_new_layout_after_step": (
            first_decided["batch"] if first_decided else None
        ),
        "batches_after_step_before_that": (
            after.index(first_decided) if first_decided else len(after)
        ),
        "changes": changes[:12],
    }


def choose_rate(
    fits: list[dict[str, Any]],
    others: Mapping[str, dict[str, Any]],
    per_tick: float,
    args: argparse.Namespace,
) -> tuple[float, dict[str, Any]]:
    """The input rate from the probes (see the module doc), and how it was chosen."""
    xs = [p["batch_rows"] for p in fits]
    ys = [p["batch_seconds_median"] for p in fits]
    per_row, fixed_cost = linear_fit(xs, ys)
    if per_row <= 0:  # noise: all of the time per row, from the larger probe
        per_row, fixed_cost = ys[-1] / xs[-1], 0.0
    costs = {"fixed_uniform": per_row}
    for name, p in others.items():  # the same fixed cost a: b from the one size
        costs[name] = max(1e-9, (p["batch_seconds_median"] - fixed_cost) / p["batch_rows"])
    # batches of per_tick keep up at rate r iff a + b * r * per_tick <= per_tick
    headroom = max(0.0, 1 - fixed_cost / per_tick)
    feasible = headroom > 0
    if not feasible:  # the budget is below the fixed cost: run at half the asymptote
        headroom = 0.5
    budget = {name: headroom / b for name, b in costs.items()}
    balanced = min(budget["fixed_uniform"], budget["elastic_uniform"], budget["elastic_skewed"])
    stress_rate = args.stress * budget["fixed_skewed"]
    rate = float(f"{min(args.load * balanced, stress_rate):.2g}")  # two significant digits
    return rate, {
        "probes": [*fits, *others.values()],
        "fit_fixed_uniform": {
            "fixed_seconds_per_batch": round(fixed_cost, 3),
            "microseconds_per_row": round(per_row * 1e6, 2),
        },
        "microseconds_per_row": {name: round(b * 1e6, 2) for name, b in costs.items()},
        "budget_rows_per_second": {name: round(r) for name, r in budget.items()},
        "budget_feasible": feasible,
        "rate_chosen_by": "stress" if stress_rate < args.load * balanced else "load",
        "utilization_at_rate": {name: round(rate * b, 3) for name, b in costs.items()},
        "fixed_over_budget_after_step_predicted": rate > budget["fixed_skewed"],
    }


def main(argv: list[str] | None = None) -> int:
    """Probe, run the variants, analyse each checkpoint and output, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, help="rows/s over both partitions (default: probed)")
    parser.add_argument("--exponent", type=float, default=1.7, help="Zipf exponent after step")
    parser.add_argument("--keys", type=int, default=64, help="distinct keys")
    parser.add_argument("--before", type=float, default=15.0, help="seconds before the step")
    parser.add_argument("--after", type=float, default=25.0, help="seconds of input after it")
    parser.add_argument(
        "--drain", type=float, default=15.0, help="seconds after the input ends until a stop"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="records available in the first seconds (query start) are not measured",
    )
    parser.add_argument("--target-ms", type=float, default=4000.0, help="latency budget")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=["fixed", "elastic", "elastic+controller"],
        default=["fixed", "elastic", "elastic+controller"],
    )
    parser.add_argument(
        "--probe-rows", type=int, nargs=2, default=[10000, 40000], help="probe batch sizes"
    )
    parser.add_argument("--probe-batches", type=int, default=3, help="timed batches per probe")
    parser.add_argument(
        "--load",
        type=float,
        default=0.85,
        help="the rate as a share of the lowest budget rate of the balanced states",
    )
    parser.add_argument(
        "--stress",
        type=float,
        default=1.1,
        help="the rate as a multiple of the skewed fixed pipeline's budget rate (if lower)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per probe query")
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from flamestream.jvm import (
        PLUGIN_CLASS,
        PROGRESS_LISTENER_CLASS,
        TASK_LISTENER_CLASS,
        Shim,
        ShimError,
        spark_jars_dir,
    )
    from flamestream.spark import apply_graph

    work = args.work or Path(tempfile.mkdtemp(prefix="flamestream-skew-"))
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    load_before = os.getloadavg()
    library = git_state()  # before the run: what the run used, as far as git tells
    shim_conf: dict[str, str] = {}
    if any(spark_jars_dir().glob("flamestream-shim-*.jar")):
        # per-task metrics of the keyed stage, and the controller's progress input
        shim_conf = {
            "spark.plugins": PLUGIN_CLASS,
            "spark.extraListeners": TASK_LISTENER_CLASS,
            "spark.sql.streaming.streamingQueryListeners": PROGRESS_LISTENER_CLASS,
        }
    spark = local_spark("flamestream-spark-skew", shim_conf)
    shim = Shim.of_session(spark)
    counter = 0

    def fresh(kind: str) -> tuple[Path, Path]:
        nonlocal counter
        counter += 1
        paths = work / f"{kind}-out-{counter}", work / f"{kind}-ck-{counter}"
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        return paths

    def start(front: Mapping[str, Any], elastic: bool, out: Path, ck: Path) -> Any:
        reader = spark.readStream.format("flamestream").option("front", "generator")
        for name, value in front.items():
            reader = reader.option(name, value)
        rows = apply_graph(
            word_count_graph(),
            reader.load(),
            payload="key",
            checkpoint_location=str(ck),
            partitions=KEY_PARTITIONS,
            elastic=elastic,
        )
        return (
            rows.writeStream.format("flamestream")
            .option("sink", "files")
            .option("format", "json")
            .option("release", "tasks")
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def poll_tasks(query: Any, watched: Watched) -> None:
        """Keep the keyed stage's tasks per batch: the shim only holds recent batches."""
        if shim is None:
            return
        try:
            recent = shim.tasks().get(str(query.id), [])
        except ShimError:
            return
        for entry in recent:
            stages = entry.get("stages") or []
            if stages:  # the last stage of a batch's job: the keyed tasks, writing the sink
                keyed = max(stages, key=lambda s: int(s["stage"]))
                watched.keyed_tasks[int(entry["batch"])] = keyed["tasks"]

    def watch(query: Any, ck: Path, total: int, limit: float, from_clock: bool) -> Watched:
        """Poll until ``total`` rows were processed or ``limit`` s passed (from offsets/0)."""
        watched = Watched(time.time())
        deadline = watched.started + limit + (args.timeout if from_clock else 0)
        clocked = False
        try:
            while True:
                time.sleep(0.25)
                first = ck / "offsets" / "0"
                if from_clock and not clocked and first.exists():
                    clocked, deadline = True, first.stat().st_mtime + limit
                for p in query.recentProgress:
                    if int(p["numInputRows"]):
                        watched.progress[int(p["batchId"])] = p
                if from_clock:
                    poll_tasks(query, watched)
                done = sum(int(p["numInputRows"]) for p in watched.progress.values())
                if done >= total:
                    break
                if not query.isActive or time.time() > deadline:
                    watched.finished = False
                    break
        finally:
            query.stop()
            watched.stopped = time.time()
            if from_clock:
                poll_tasks(query, watched)
        if query.exception() is not None:
            raise query.exception()
        return watched

    common = {"partitions": GENERATOR_PARTITIONS, "keys": args.keys}

    def probe(batch_rows: int, batches: int, elastic: bool, exponent: float) -> dict[str, Any]:
        """Median batch seconds at ``batch_rows`` rows per batch, fed from a backlog."""
        out, ck = fresh("probe")
        total = batch_rows * (batches + 1)
        front = {
            **common,
            "keySkew": exponent,
            "rowsPerSecond": 0,
            "totalRows": total,
            "maxRecordsPerTrigger": batch_rows,
        }
        watched = watch(start(front, elastic, out, ck), ck, total, args.timeout, False)
        if not watched.finished:
            msg = f"probe of {batch_rows} rows per batch did not finish in {args.timeout} s"
            raise TimeoutError(msg)
        # the first batch: warm-up, and for elastic the one still under the default layout
        timed = [watched.progress[b] for b in sorted(watched.progress)[1:]]
        seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in timed]
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ck, ignore_errors=True)
        return {
            "state": f"{'elastic' if elastic else 'fixed'}, exponent {exponent:g}",
            "batch_rows": batch_rows,
            "batch_seconds": [round(s, 3) for s in seconds],
            "batch_seconds_median": round(statistics.median(seconds), 3),
        }

    report: dict[str, Any] = {}
    try:
        per_tick = args.target_ms / 2000  # a record waits one tick to be read, one to run
        small, large = args.probe_rows
        # the session's first queries pay the JVM's (JIT) and Python workers' warm-up, which
        # takes a few queries: batches of both graphs at the larger size, not timed
        warmup = [probe(large, 1, elastic, 0.0) for elastic in (False, True)]
        report["probe"] = {"warmup_batch_seconds": [w["batch_seconds"][0] for w in warmup]}
        if args.rate:
            rate = args.rate
            report["probe"]["skipped"] = "--rate given"
        else:
            fits = [probe(n, args.probe_batches, False, 0.0) for n in (small, large)]
            others = {
                "elastic_uniform": probe(large, args.probe_batches, True, 0.0),
                "fixed_skewed": probe(large, args.probe_batches, False, args.exponent),
                "elastic_skewed": probe(large, args.probe_batches, True, args.exponent),
            }
            rate, chosen = choose_rate(fits, others, per_tick, args)
            report["probe"].update(chosen)
        step_record = round(rate / GENERATOR_PARTITIONS * args.before)
        total = round(rate * (args.before + args.after))
        skew_steps = f"0:0,{step_record}:{args.exponent:g}"
        shares = {
            f"generator-{p}": total // GENERATOR_PARTITIONS + (p < total % GENERATOR_PARTITIONS)
            for p in range(GENERATOR_PARTITIONS)
        }
        front = {
            **common,
            "rowsPerSecond": rate,
            "skewSteps": skew_steps,
            "totalRows": total,
        }
        data = Input(
            rate,
            step_record,
            total,
            shares,
            generated_keys({k: str(v) for k, v in front.items()}, shares),
            args.keys,
        )
        variants: dict[str, tuple[bool, dict[str, Any]]] = {}
        if "fixed" in args.variants:
            variants["fixed"] = (False, {})
        if "elastic" in args.variants:
            variants["elastic"] = (True, {})
        if "elastic+controller" in args.variants:
            variants["elastic+controller"] = (
                True,
                {
                    "controller": "on",
                    "targetLatencyMs": args.target_ms,
                    # what keeps up in a tick of half the budget, / 4; a bound of 16 x that
                    "minRecordsPerTrigger": max(100, round(rate * per_tick / 4)),
                    "maxRecordsPerTrigger": max(1000, round(16 * rate * per_tick)),
                },
            )
        limit = args.before + args.after + args.drain
        results: dict[str, Any] = {}
        for name, (elastic, options) in variants.items():
            out, ck = fresh(name.replace("+", "-"))
            run_began = time.perf_counter()
            entry: dict[str, Any] = {
                "elastic": elastic,
                "options": {k: str(v) for k, v in options.items()},
            }
            analysed: dict[str, Any] = {}
            try:
                query = start({**front, **options}, elastic, out, ck)
                watched = watch(query, ck, total, limit, True)
                entry["wall_seconds"] = round(time.perf_counter() - run_began, 1)
                analysed = analyse(read_checkpoint(ck), watched, data, elastic, args)
                analysed["output"] = check_output(out, data)
            except Exception as exc:  # one failed variant (a shared, changing tree) is reported
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            results[name] = {
                **entry,
                "load_average_1m_after": round(os.getloadavg()[0], 2),
                **analysed,
            }
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ck, ignore_errors=True)
        report.update(_summary(results, args, front, data))
    finally:
        spark.stop()
    load_after = os.getloadavg()
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "spark": spark.version,
            "master": "local[2]",
            "shuffle_partitions": 2,
            "shim": shim is not None,
            "load_average_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
            "library": library,
        },
        "seconds_total": round(time.perf_counter() - began, 1),
        **report,
        "notes": NOTES,
    }
    print(json.dumps(result, indent=2))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _summary(
    results: dict[str, Any],
    args: argparse.Namespace,
    front: Mapping[str, Any],
    data: Input,
) -> dict[str, Any]:
    """The pipeline, the input, p99s and ratios, around the variants' results."""
    p99: dict[str, dict[str, float]] = {}
    for name, r in results.items():
        if r.get("latency_ms"):
            p99[name] = {"all": r["latency_ms"]["p99"]}
            if r.get("latency_after_step_ms"):
                p99[name]["after_step"] = r["latency_after_step_ms"]["p99"]
    ratios: dict[str, float] = {}
    fixed = p99.get("fixed", {})
    for name in ("elastic", "elastic+controller"):
        for phase, value in p99.get(name, {}).items():
            if fixed.get(phase):
                ratios[f"p99_{phase}_{name}_vs_fixed"] = round(value / fixed[phase], 3)
    return {
        "pipeline": {
            "front": "generator",
            "partitions": GENERATOR_PARTITIONS,
            "key_partitions": KEY_PARTITIONS,
            "payload_column": "key",
            "graph": "wordcount",
            "sink": "files",
            "release": "tasks",
            "trigger": "ProcessingTime(0)",
        },
        "input": {
            "rows_per_second": data.rate,
            "keys": data.key_count,
            "skew_steps": front["skewSteps"],
            "exponent_after_step": args.exponent,
            "step_at_seconds": args.before,
            "step_record_per_partition": data.step_record,
            "input_seconds": args.before + args.after,
            "total_rows": data.total,
            "drain_seconds": args.drain,
            "settle_seconds": args.settle,
            "hot_partition_share_predicted": {
                "uniform": predicted_shares(data.key_count, 0.0),
                "after_step": predicted_shares(data.key_count, args.exponent),
            },
        },
        "target_latency_ms": args.target_ms,
        "p99_ms": p99,
        "ratios": ratios,
        "variants": results,
    }


NOTES = [
    "input: the generator front at a constant rowsPerSecond R over both partitions (record i "
    "of a partition available once R * t reaches (i + 1) * 2), keys k0..k<keys-1>, skewSteps "
    "'0:0,N:S': records with per-partition index >= N = R/2 * before draw Zipf S keys, the "
    "ones before uniform ones; totalRows = R * (before + after). Every record's key is "
    "computed again here from the front's own code (a pure function of seed, partition, "
    "index): the keyed loads and the output check use them.",
    "rate: without --rate, R = min(load x the lowest budget rate of the balanced states "
    "(fixed and elastic with uniform keys, elastic with the skew after its split), stress x "
    "the budget rate of the skewed fixed pipeline), two significant digits. A state's budget "
    "rate: the highest rate at which batches of target/2 keep up, (1 - a / (target/2)) / b, "
    "with a from the fit seconds = a + b * rows of the fixed pipeline with uniform keys "
    "(backlog probes at two batch sizes after two warm-up queries, median triggerExecution "
    "after a first untimed batch) and each other state's b from its median at the larger "
    "size with the same a. "
    "probe.utilization_at_rate: R * b per state; fixed_over_budget_after_step_predicted: "
    "whether R exceeds the skewed fixed pipeline's budget rate. budget_feasible false: a >= "
    "target/2, no batch fits half the budget; the budget rates are then 0.5 / b (half of "
    "each asymptote) instead.",
    "hot_partition_share_predicted: the larger keyed partition's share of the items from the "
    "Zipf shares alone: fixed (Spark's hash partitioning of the encoded keys), "
    "elastic_default_layout (slot = crc32 mod 8, slot s in partition s mod 2) and "
    "elastic_after_split (plan_layout's packing of those slot loads); hottest_key: the share "
    "no layout can split.",
    "variants: fixed (elastic=False), elastic (elastic=True, the default ElasticPolicy), "
    "elastic+controller (elastic, and the front's controller=on with targetLatencyMs = "
    "--target-ms, minRecordsPerTrigger = R * target/2 / 4, maxRecordsPerTrigger = 16 x R * "
    "target/2), one after another in one session, each into a fresh checkpoint.",
    "everything per batch from the checkpoint: offsets/<batch> has one line per source: the "
    "generator's (per-front end positions, base = the planning's wall clock in "
    "microseconds, the controller's record) and, elastic only, the control channel's "
    "(flamestreamLayout: the slot assignment of the batch, the decision count, the reason). "
    "The sink's commit markers (flamestream-sink/commits/<batch>.json, written at the end "
    "of each commit) give every row of the batch its release time (mtime). The generator's "
    "clock start: batch 0's base, moved earlier if a batch's ends would not have been "
    "available at its planning otherwise (clock_start_before_batch0_planning_ms).",
    "latency of a record: release - availability; latency_ms over the records available "
    "after --settle seconds (query start left out), latency_after_step_ms over the skewed "
    "records (index >= N). A run is stopped --drain s after its input ends; records not "
    "released by then count with the stop time as release (censored_rows: lower bounds).",
    "backlog at a planning: records available minus the batch's end positions over both "
    "fronts; peak over the batches (after_step: batches that read skewed records).",
    "after the step: the batches that read at least one skewed record (the first straddles "
    "the step). ticks_to_recover_after_step: such batches until every later batch's oldest "
    "record is released within the budget (0: never over; null: still over at the end); "
    "seconds_to_recover_after_step from the step to that batch's planning.",
    "keyed items per batch (around_step 'keyed items p0/p1', hot_partition_share_*): each "
    "record is one word, one item entering the word count's keyed stage; counted per keyed "
    "partition from the records' keys and the batch's partitioning (fixed: the hash; "
    "elastic: the batch's layout from its offsets). The items the cycle feeds back stay in "
    "their task and are not counted. With the shim, [pN rows in ms] are the keyed stage's "
    "tasks as Spark measured them (shuffle records read, including invalidator copies; task "
    "duration), polled while the query runs; keyed_tasks_after_step summarises them.",
    "layout (elastic): decisions = the control channel's decision count at the last batch; "
    "decisions_after_step = that minus the count at the last batch before the first skewed "
    "one; changes: each new layout's first batch, count, assignment (slot -> partition) and "
    "reason; batches_after_step_before_that: skewed batches run under the old layout (a "
    "layout is decided at a planning from the last committed batch's slot loads).",
    "output: the sink's files read back: every (source, position) exactly once over "
    "[0, share) per front (duplicates, missing), and for each key its released counts are "
    "exactly 1..n with n its records in the input (word count: one updated count per "
    "word); exactly_once is all of that. released_rows: rows of batches whose commit marker "
    "exists.",
    "ratios: p99 of an elastic variant / p99 of fixed, over all measured records and over "
    "the skewed ones.",
    "other per-variant figures: wall_seconds from start() to the stop; load_average_1m_after "
    "(the machine is shared: other work shows there); batches_without_rows (batches that "
    "read nothing, e.g. batch 0 at the clock's start); batches_before_step / _after_step "
    "and the medians of their seconds (planning to release) and rows; unread_at_stop; "
    "pending_rows_in_markers (0 expected: one source); controller (elastic+controller): the "
    "decision count, last limit and reason, and the limits per batch as run lengths.",
]


if __name__ == "__main__":
    raise SystemExit(main())
