"""Skew benchmark: a hot-key-range skew step, elastic key layouts against a fixed partitioning.

The generator pipeline (:mod:`benchmarks.lib.pipeline`) at a constant rate, its keys uniform
until a step and Zipf-distributed from it, into a word count of 2 keyed partitions. Variants,
one after another, each into a fresh checkpoint: ``fixed`` (hash partitioned), ``elastic``
(layouts move key ranges between partitions) and ``elastic+controller`` (plus the front's
controller). Without ``--rate`` the rate comes from backlog probes (:func:`choose_rate`).
Measured from the checkpoint and the output alone; see docs/benchmarks.md. Prints one JSON
object::

    python -m benchmarks.spark_skew [--rate R] [--exponent S] [--keys K] [--before S]
        [--after S] [--drain S] [--settle S] [--target-ms T] [--variants ...]
        [--probe-rows N N] [--probe-batches B] [--load X] [--stress X] [--timeout S]
        [--work DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, cli, latency, pipeline
from benchmarks.lib.pipeline import GENERATOR_PARTITIONS, Watched
from benchmarks.lib.stats import cost_fit

#: Key partitions of the word count's keyed stage.
KEY_PARTITIONS = 2

VARIANTS = ["fixed", "elastic", "elastic+controller"]


@dataclass(frozen=True)
class Input:
    """The generated input: its schedule and every record's key, known before the run."""

    rate: float
    step_record: int  #: per-partition index of the first skewed record
    total: int
    shares: dict[str, int]  #: records per generator partition
    keys: dict[str, list[int]]  #: generator partition -> key index (``k<i>``) per record
    key_count: int


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The input, the skew step, the budget, the variants and the probes."""
    parser = cli.step_parser(__doc__, "rows/s over both partitions", VARIANTS, [10000, 40000])
    cli.flag(parser, "--exponent", 1.7, "Zipf exponent after the step")
    cli.flag(parser, "--keys", 64, "distinct keys")
    cli.flag(parser, "--load", 0.85, "the rate, x the lowest budget rate of the balanced states")
    cli.flag(parser, "--stress", 1.1, "the rate, x the skewed fixed budget rate (if lower)")
    return parser.parse_args(argv)


def generated_keys(options: Mapping[str, str], shares: Mapping[str, int]) -> dict[str, list[int]]:
    """Every record's key index, as the generator front makes them (a pure function)."""
    from flamestream.spark.connector.offsets import FrontRange
    from flamestream.spark.connector.options import OptionReader
    from pyspark_flamestream.fronts.generator import GeneratorSource

    source = GeneratorSource(OptionReader("front generator", dict(options)))
    out: dict[str, list[int]] = {}
    for p, (key, share) in enumerate(shares.items()):
        batches = source.read_range(FrontRange(key, p, 0, share, 0))
        out[key] = [int(k[1:]) for batch in batches for k in batch.column("key").to_pylist()]
    return out


def key_partitions(key_count: int, assignment: Sequence[int] | None) -> list[int]:
    """The keyed partition of each key index: hash partitioning, or a layout's slots."""
    from flamestream.spark.control.key_layout import Layout
    from flamestream.spark.exec.general.items import encode_key
    from flamestream.spark.exec.general.partitioning import partition_of

    encoded = [encode_key(f"k{i}") for i in range(key_count)]
    if assignment is None:
        return [partition_of(e, KEY_PARTITIONS) for e in encoded]
    layout = Layout(KEY_PARTITIONS, tuple(assignment))
    return [layout.partition_of(e) for e in encoded]


def predicted_shares(key_count: int, exponent: float) -> dict[str, float]:
    """The hot keyed partition's share of the items, from the Zipf shares of the keys alone."""
    from flamestream.spark.control.key_layout import Layout, plan_layout, slot_of
    from flamestream.spark.exec.general.items import encode_key
    from pyspark_flamestream.fronts.generator import zipf_cdf

    cdf = zipf_cdf(key_count, exponent)
    weight = [cdf[0]] + [cdf[i] - cdf[i - 1] for i in range(1, key_count)]
    default = Layout.default(KEY_PARTITIONS)
    slot_loads: Counter[int] = Counter()
    for i in range(key_count):  # plan_layout takes item counts: scaled to a million
        slot_loads[slot_of(encode_key(f"k{i}"), default.slots)] += round(weight[i] * 1_000_000)
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

    fields = [
        ("source", pa.string()),
        ("position", pa.int64()),
        ("value", pa.string()),
        ("flags", pa.int64()),
    ]
    parse = pa_json.ParseOptions(
        explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"
    )
    rows = flagged = 0
    seen: dict[str, set[int]] = {key: set() for key in data.shares}
    counts: dict[str, list[int]] = {}
    for path in sorted(out.glob("part-*")):
        if path.stat().st_size == 0:
            continue
        table = pa_json.read_json(path, parse_options=parse).to_pydict()
        rows += len(table["value"])
        flagged += sum(1 for f in table["flags"] if f)
        for source, position in zip(table["source"], table["position"], strict=True):
            seen.setdefault(source, set()).add(position)
        for value in table["value"]:
            key, _, count = value.rpartition("=")
            counts.setdefault(key, []).append(int(count))
    distinct = sum(len(positions) for positions in seen.values())
    expected = sum(
        sum(1 for i in seen.get(k, ()) if 0 <= i < share) for k, share in data.shares.items()
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


def keyed_loads(
    found: latency.Timeline, ck: checkpoint.Checkpoint, data: Input, elastic: bool
) -> None:
    """Per batch the keyed items per partition (its records' keys, its layout), decisions."""
    from flamestream.spark.control.key_layout import Layout

    batches = {b.id: b for b in ck.batches}
    by_assignment: dict[tuple[int, ...], list[int]] = {(): key_partitions(data.key_count, None)}
    for b in found.per_batch:
        batch, layout = batches[b["batch"]], ck.layouts.get(b["batch"])
        assignment: tuple[int, ...] = ()
        if elastic:  # no control line: the default layout (never expected)
            default = Layout.default(KEY_PARTITIONS).assignment
            assignment = tuple(layout["assignment"] if layout else default)
        if assignment not in by_assignment:
            by_assignment[assignment] = key_partitions(data.key_count, assignment)
        b["loads"] = [0] * KEY_PARTITIONS
        for key, end in batch.ends.items():
            for k, n in Counter(data.keys[key][batch.starts[key] : end]).items():
                b["loads"][by_assignment[assignment][k]] += n
        b["decisions"] = int((layout or {}).get("decisions", 0))


def hot_share(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The hot keyed partition's share of the batches' items."""
    shares = [max(b["loads"]) / sum(b["loads"]) for b in rows if sum(b["loads"])]
    if not shares:
        return {"batches": 0}
    return {
        "batches": len(shares),
        "median": round(statistics.median(shares), 3),
        "max": round(max(shares), 3),
        "items_hot_partition_median": round(statistics.median(max(b["loads"]) for b in rows)),
    }


def describe(b: dict[str, Any], tasks: list[list[int]] | None, elastic: bool) -> str:
    """A batch in one line, with its keyed items, its measured tasks and decisions."""
    measured = ""
    if tasks:
        measured = " [" + ", ".join(f"p{t[0]} {t[2]} in {t[1]} ms" for t in sorted(tasks)) + "]"
    extra = [f"keyed items {'/'.join(map(str, b['loads']))}{measured}"]
    extra += [f"decisions {b['decisions']}"] if elastic else []
    return latency.describe(b, *extra, mark=" skewed" if b["skewed"] else "")


def medians(field: str, digits: int | None, *phases: list[dict[str, Any]]) -> list[float | None]:
    """The median ``field`` of each phase's batches (None: no batch)."""
    return [
        round(statistics.median(b[field] for b in rows), digits) if rows else None
        for rows in phases
    ]


def analyse(
    ck: checkpoint.Checkpoint,
    watched: Watched,
    data: Input,
    elastic: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Per record: availability and release; latency, backlog, recovery, layouts, loads."""
    found = latency.timeline(
        ck.batches,
        latency.ConstantRate(data.rate),
        data.shares,
        watched,
        args.settle,
        lambda i, _: i >= data.step_record,
    )
    keyed_loads(found, ck, data, elastic)
    # "after the step": batches that read skewed records (the first one straddles the step)
    after = [b for b in found.per_batch if b["skewed"]]
    before = [b for b in found.per_batch if not b["skewed"]]
    result: dict[str, Any] = {
        **latency.recovery(found, after, args.target_ms, args.before),
        "finished": watched.finished,
        "batches_without_rows": len(ck.batches) - len(found.per_batch),
        "batches_before_step": len(before),
        "batches_after_step": len(after),
        "batch_seconds_median_before_after": medians("seconds", 3, before, after),
        "batch_rows_median_before_after": medians("rows", None, before, after),
        "hot_partition_share_before_step": hot_share(before),
        "hot_partition_share_after_step": hot_share(after),
        "keyed_tasks_after_step": task_summary(watched.tasks, after),
        "around_step": latency.around(
            found.per_batch, after, lambda b: describe(b, watched.tasks.get(b["batch"]), elastic)
        ),
        "pending_rows_in_markers": sum(b.pending for b in ck.batches),
        "clock_start_before_batch0_planning_ms": round(found.before_planning * 1000, 3),
        # layout decisions after the step: 0 for the fixed partitioning, which has none
        "layout_decisions_after_step": 0,
    }
    if elastic:
        result["layout"] = layout_summary(ck, after)
        result["layout_decisions_after_step"] = result["layout"]["decisions_after_step"]
    controller = latency.controller_summary(ck.batches)
    if controller is not None:
        result["controller"] = controller
    return result


def task_summary(
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


def layout_summary(ck: checkpoint.Checkpoint, after: list[dict[str, Any]]) -> dict[str, Any]:
    """Layout decisions from the control channel's offset lines."""
    ordered = sorted(ck.layouts)
    last = int(ck.layouts[ordered[-1]]["decisions"]) if ordered else 0
    # decisions counted at the last batch before the step's first skewed batch
    first_after = after[0]["batch"] if after else math.inf
    earlier = [b for b in ordered if b < first_after]
    base = int(ck.layouts[earlier[-1]]["decisions"]) if earlier else 0
    changes: list[str] = []
    for previous, b in zip([None, *ordered], ordered, strict=False):
        offset = ck.layouts[b]
        if previous is None or offset["decisions"] != ck.layouts[previous]["decisions"]:
            changes.append(
                f"batch {b}: {offset['decisions']} {offset['assignment']} {offset['reason']}"
            )
    # the first batch run under a layout decided after the step
    first_decided = next((b for b in after if b["decisions"] > base), None)
    return {
        "decisions": last,
        "decisions_after_step": last - base,
        "first_batch_under_a_new_layout_after_step": first_decided["batch"]
        if first_decided
        else None,
        "batches_after_step_before_that": after.index(first_decided)
        if first_decided
        else len(after),
        "changes": changes[:12],
    }


def choose_rate(
    fits: list[dict[str, Any]],
    others: Mapping[str, dict[str, Any]],
    per_tick: float,
    args: argparse.Namespace,
) -> tuple[float, dict[str, Any]]:
    """The input rate from the probes (see the module doc), and how it was chosen."""
    per_row, fixed_cost = cost_fit(fits)
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


class Skew:
    """The session's pipeline: its probes, the input, and the variants' runs."""

    def __init__(self, spark: Any, shim: Any, work: cli.Workdir, args: argparse.Namespace):
        self.spark, self.shim, self.work, self.args = spark, shim, work, args
        self.per_tick = args.target_ms / 2000  # a record waits one tick to be read, one to run

    def start(self, front: Mapping[str, Any], out: Path, ck: Path, *, elastic: bool) -> Any:
        """Start the pipeline (``keys`` keys) with ``front``'s options."""
        front = {"keys": self.args.keys, **front}
        return pipeline.start(
            self.spark, front, out, ck, partitions=KEY_PARTITIONS, elastic=elastic
        )

    def poll_tasks(self, query: Any, watched: Watched) -> None:
        """Keep the keyed stage's tasks per batch: the shim only holds recent batches."""
        from flamestream.jvm import ShimError

        try:
            recent = self.shim.tasks().get(str(query.id), []) if self.shim is not None else []
        except ShimError:
            return
        for entry in recent:
            if entry.get("stages"):  # the last stage of a batch's job: the keyed tasks
                keyed = max(entry["stages"], key=lambda s: int(s["stage"]))
                watched.tasks[int(entry["batch"])] = keyed["tasks"]

    def probe(self, batch_rows: int, batches: int, elastic: bool, exponent: float) -> Any:
        """Median batch seconds at ``batch_rows`` rows per batch, fed from a backlog."""

        def start(front: Mapping[str, Any], out: Path, ck: Path) -> Any:
            return self.start({"keySkew": exponent, **front}, out, ck, elastic=elastic)

        found = pipeline.probe(start, self.work, batch_rows, batches, self.args.timeout)
        return {"state": f"{'elastic' if elastic else 'fixed'}, exponent {exponent:g}", **found}

    def rate(self) -> tuple[float, dict[str, Any]]:
        """Warm-up queries, then (without ``--rate``) the probes and the rate they give."""
        args, small, large = self.args, *self.args.probe_rows
        # the session's first queries pay the JVM's (JIT) and Python workers' warm-up, which
        # takes a few queries: batches of both graphs at the larger size, not timed
        warmup = [self.probe(large, 1, elastic, 0.0) for elastic in (False, True)]
        report: dict[str, Any] = {"warmup_batch_seconds": [w["batch_seconds"][0] for w in warmup]}
        if args.rate:
            return args.rate, report | {"skipped": "--rate given"}
        fits = [self.probe(n, args.probe_batches, False, 0.0) for n in (small, large)]
        others = {
            "elastic_uniform": self.probe(large, args.probe_batches, True, 0.0),
            "fixed_skewed": self.probe(large, args.probe_batches, False, args.exponent),
            "elastic_skewed": self.probe(large, args.probe_batches, True, args.exponent),
        }
        rate, chosen = choose_rate(fits, others, self.per_tick, args)
        return rate, report | chosen

    def input(self, rate: float) -> tuple[dict[str, Any], Input]:
        """The front's options at ``rate`` and the input they make."""
        args = self.args
        step_record = round(rate / GENERATOR_PARTITIONS * args.before)
        total = round(rate * (args.before + args.after))
        skew = f"0:0,{step_record}:{args.exponent:g}"
        front = {"rowsPerSecond": rate, "skewSteps": skew, "totalRows": total}
        options = {"partitions": GENERATOR_PARTITIONS, "keys": args.keys, **front}
        shares = pipeline.shares(total)
        keys = generated_keys({k: str(v) for k, v in options.items()}, shares)
        return front, Input(rate, step_record, total, shares, keys, args.keys)

    def variants(self, rate: float) -> dict[str, tuple[bool, dict[str, Any]]]:
        """The variants asked for: elastic or not, and their extra front options."""
        controller = {
            "controller": "on",
            "targetLatencyMs": self.args.target_ms,
            # what keeps up in a tick of half the budget, / 4; a bound of 16 x that
            "minRecordsPerTrigger": max(100, round(rate * self.per_tick / 4)),
            "maxRecordsPerTrigger": max(1000, round(16 * rate * self.per_tick)),
        }
        every = {
            "fixed": (False, {}),
            "elastic": (True, {}),
            "elastic+controller": (True, controller),
        }
        return {name: every[name] for name in every if name in self.args.variants}

    def run(self, name: str, elastic: bool, extra: dict[str, Any], front: Any, data: Input) -> Any:
        """One variant: run it, analyse its checkpoint, check its output."""
        args, limit = self.args, self.args.before + self.args.after + self.args.drain

        def run(out: Path, ck: Path) -> dict[str, Any]:
            start = partial(self.start, elastic=elastic)
            watched = pipeline.run(
                start, {**front, **extra}, out, ck, limit, args.timeout, self.poll_tasks
            )
            analysed = analyse(checkpoint.read(ck), watched, data, elastic, args)
            return {**analysed, "output": check_output(out, data)}

        entry = {"elastic": elastic, "options": {k: str(v) for k, v in extra.items()}}
        return pipeline.run_variant(self.work, name, entry, run)


def main(argv: list[str] | None = None) -> int:
    """Probe, run the variants, analyse each checkpoint and output, print JSON."""
    args = arguments(argv)
    work, record, spark, shim = pipeline.setup("skew", args.work)
    try:
        spark_version, skew = spark.version, Skew(spark, shim, work, args)
        rate, probe = skew.rate()
        front, data = skew.input(rate)
        variants = skew.variants(rate).items()
        results = {name: skew.run(name, *variant, front, data) for name, variant in variants}
        report = {"probe": probe, **summary(results, args, front, data)}
    finally:
        spark.stop()
    return pipeline.finish(record, spark_version, shim, report, NOTES, work)


def summary(
    results: dict[str, Any], args: argparse.Namespace, front: Mapping[str, Any], data: Input
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
        "pipeline": pipeline.report("tasks", key_partitions=KEY_PARTITIONS),
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
    "input: the generator front at a constant rowsPerSecond R over both partitions, keys "
    "k0..k<keys-1>, skewSteps '0:0,N:S': records with per-partition index >= N = R/2 * before "
    "draw Zipf S keys, earlier ones uniform keys; totalRows = R * (before + after). Every "
    "record's key is computed again from the front's own code for the loads and the check.",
    "rate: without --rate, R = min(load x the lowest budget rate of fixed and elastic with "
    "uniform keys and elastic with the skew, stress x the skewed fixed budget rate), two "
    "significant digits. Budget rate: (1 - a / (target/2)) / b, a from the uniform fixed "
    "pipeline's fit seconds = a + b * rows (backlog probes at two sizes), every other b from "
    "its probe at the larger size; budget_feasible false (a >= target/2): 0.5 / b.",
    "hot_partition_share_predicted: the larger keyed partition's share of the items from the "
    "Zipf shares alone: fixed (hash partitioning), elastic_default_layout, "
    "elastic_after_split (plan_layout's packing); hottest_key: the share no layout splits.",
    "variants: fixed (elastic=False), elastic, elastic+controller (controller=on, "
    "targetLatencyMs, minRecordsPerTrigger = R * target/2 / 4, maxRecordsPerTrigger = 16 x "
    "R * target/2), one after another in one session, each into a fresh checkpoint.",
    *latency.NOTES,
    "after the step: the batches that read a skewed record (index >= N).",
    "keyed items per batch (around_step, hot_partition_share_*): the records' words per keyed "
    "partition under the batch's partitioning (hash, or its layout); [pN rows in ms]: the "
    "keyed tasks as the shim measured them (keyed_tasks_after_step summarises them).",
    "layout (elastic): decisions at the last batch; decisions_after_step: minus those at the "
    "last batch before the first skewed one; changes: each new layout's first batch, count, "
    "assignment and reason; batches_after_step_before_that: skewed batches on the old layout.",
    "output: every (source, position) released exactly once, and each key's counts exactly "
    "1..n with n its records; exactly_once is all of that.",
    "ratios: p99 of an elastic variant / p99 of fixed, over all measured records and over "
    "the skewed ones. wall_seconds: start() to the analysis' end.",
]


if __name__ == "__main__":
    raise SystemExit(main())
