"""Run a flamestream graph on a Spark DataFrame of front rows: ``apply_graph(graph, df)``.

The graph is compiled once into an execution plan (:mod:`flamestream.spark.plan`); applying
it turns the front rows into item rows in Spark SQL (no Python), runs each stage as one
``mapInArrow`` pass, and returns the rows that reach the graph's sinks, ready for
``writeStream.format("flamestream")`` (whose barrier releases them in global-time order) or,
on a bounded ``spark.read.format("flamestream")`` input, for any batch writer. The same graph
gives the same items on both.

>>> from flamestream import Dataflow
>>> flow = Dataflow("clean")
>>> words = flow.flat_map("split", flow.source("lines"), str.split)
>>> long_words = flow.filter("long", words, lambda w: len(w) > 3)
>>> flow.sink("out", flow.map("upper", long_words, str.upper))
>>> print(SparkGraph(flow).describe())
graph clean: 1 stage, fusion on
  source lines -> stage 1
  fronts given as readers: stage 1 runs in their reads
  crossings JVM/Python per item, at most: 4 (apply on loaded fronts), 2 (write_stream)
  stage 1 [fused: split -> long -> upper] (one mapInArrow pass; path general) -> sink out
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from flamestream.errors import ConfigError, GraphError
from flamestream.graph.dataflow import Dataflow
from flamestream.graph.logical import LogicalGraph
from flamestream.python_env import RECOMMENDED_CONF
from flamestream.spark import key_partitions
from flamestream.spark.control.budgeted import INITIAL_LIMIT, LIMIT_FROM, BudgetPolicy
from flamestream.spark.control.handle import QueryControl
from flamestream.spark.control.key_layout import ElasticPolicy
from flamestream.spark.control.swaps import SwapReader
from flamestream.spark.durable import QueryCheckpoint, filesystem, write_atomically
from flamestream.spark.durable.functions import record_steps
from flamestream.spark.durable.loop import LOOP_GATE
from flamestream.spark.exec.general.front_stage import RECORDS, FrontStage
from flamestream.spark.exec.general.items import (
    BYTES_TAG,
    ITEM_DDL,
    LOCAL_BYTES,
    MAY_INVALIDATE,
    RELEASED_COLUMNS,
    TEXT_TAG,
    TOMBSTONE,
)
from flamestream.spark.exec.general.keyed import KeyedRunner
from flamestream.spark.exec.general.partitioning import KEY_PARTITION, SALT_PREFIX, salts
from flamestream.spark.exec.general.passthrough import OpenedBlocks, PassthroughFront, RenderPass
from flamestream.spark.exec.general.routing import LoopSpec, LoopWriter, Router
from flamestream.spark.exec.general.shipping import OPTION as STAGE_OPTION
from flamestream.spark.exec.general.shipping import ship
from flamestream.spark.exec.general.stateless import StageRunner, render_default
from flamestream.spark.exec.general.tails import WithTails
from flamestream.spark.plan.execution import plan_execution
from flamestream.spark.plan.stages import Stage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from flamestream.spark.key_partitions import KeyPartitions

_log = logging.getLogger(__name__)

#: The columns of what ``apply`` returns: the meta, the determinant, the sink, the payload.
OUTPUT_COLUMNS = RELEASED_COLUMNS


class SparkGraph:
    """A graph compiled for Spark; ``apply`` it to as many DataFrames as you like.

    ``fusion=False`` runs every stateless step as its own pass (for comparison).
    ``partitions`` is the number of key partitions of keyed stages, ``P``: the most keyed
    tasks a batch runs at once and the most a rescale can make active (default
    ``spark.sql.shuffle.partitions``, which ``flamestream.configure`` sets to the
    application's cores unless the user set it; fixed for a checkpoint, see
    :mod:`flamestream.spark.key_partitions`; ``describe()`` says which).
    ``release="latest"`` (graphs whose groupings are map_reduce's) releases per batch only the
    latest value of each key instead of every update, and pre-combines mapped values on the
    map side where the reducer is declared ``commutative``; the default ``"every"`` releases
    what the model releases.
    ``elastic=True`` (streaming, with a checkpoint) lets key ranges move between the keyed
    partitions between micro-batches, when one partition gets much more than its share of the
    items (:mod:`flamestream.spark.control.key_layout`; an ``ElasticPolicy`` sets when), and
    when ``control(checkpoint).rescale(n)`` asks for ``n`` active partitions of the
    ``partitions`` (``ElasticPolicy(active=n)``: the count a new checkpoint starts with); the
    released output does not change. ``budgets=BudgetPolicy(...)`` (streaming, fronts given
    as readers) declares a latency and a per-partition state budget instead: one policy
    decides the read limit, the active key partitions and the key ranges' moves together
    (:mod:`flamestream.spark.control.budgeted`).
    ``swappable=True`` (streaming, with a checkpoint) lets
    ``SparkGraph.control(checkpoint).swap(step, fn)`` give a running query's map, flat_map or
    filter a new function, from a global time the query records (docs/swaps.md). Elastic
    layouts, budgets and swaps add the control channel to the query, so each is fixed for a
    checkpoint.
    """

    def __init__(
        self,
        flow: Dataflow | LogicalGraph,
        *,
        fusion: bool = True,
        render: Callable[[Any], str] = render_default,
        partitions: int | None = None,
        release: str = "every",
        elastic: bool | ElasticPolicy = False,
        budgets: BudgetPolicy | None = None,
        swappable: bool = False,
    ) -> None:
        graph = flow.build() if isinstance(flow, Dataflow) else flow
        # declared budgets need the control channel: the budget policy moves the key ranges
        elastic = elastic or budgets is not None
        self.swappable = swappable
        self.elastic = ElasticPolicy() if elastic is True else (elastic or None)
        self.budgets = _with_sketch_bytes(budgets, graph)
        self.plan = plan_execution(
            graph,
            fusion=fusion,
            release=release,
            elastic=self.elastic is not None,
            swappable=swappable,
            default_render=render is render_default,
        )
        self.graph = graph
        self.fusion = fusion
        self.render = render
        self.partitions = partitions
        self.release = release
        #: the key partitions the last application chose (None: not applied yet)
        self.chosen: KeyPartitions | None = None

    # what the plan decided, under the names the wiring below uses
    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages, producers first."""
        return self.plan.stages

    @property
    def cut(self) -> frozenset[tuple[str, str]]:
        """Edges whose items go through the loop channel."""
        return self.plan.cut

    @property
    def keys(self) -> Mapping[str, Callable[[Any], Any]]:
        """Per keyed entry, the key its items are shuffled by."""
        return self.plan.keys

    @property
    def source(self) -> str:
        """The graph's source step."""
        return self.plan.source

    def describe(self) -> str:
        """What runs where: the stages, the steps fused into each, and where items go.

        A graph with groupings also says its key partitions ``P`` and where they came from:
        the last ``apply``'s choice, else what ``partitions=`` or the running session gives
        (a checkpoint may still keep another), else, before any session, how ``P`` will be
        chosen. It never starts a session.
        """
        text = self.plan.describe()
        if not self.keyed:
            return text
        head, _, rest = text.partition("\n")
        lines = [head, f"  {self._partitions_line()}"]
        if self._loop_stages()[1]:
            lines.append(
                "  loop channel: fronts given as readers admit no record while it holds items"
            )
        return "\n".join([*lines, rest]).rstrip("\n")

    def _partitions_line(self) -> str:
        """``describe()``'s line on ``P``."""
        if self.chosen is not None:
            return self.chosen.describe()
        if self.partitions:
            return key_partitions.given(self.partitions).describe()
        if self._cross_key_cycle():
            found = key_partitions.for_cross_key_cycle()
            return f"{found.describe()} (unless a checkpoint recorded another)"
        session = key_partitions.active_session()
        if session is None:
            return key_partitions.UNDECIDED
        found = key_partitions.of_session(session)
        return f"{found.describe()} (unless a checkpoint recorded another)"

    @property
    def keyed(self) -> bool:
        """Whether the graph has groupings (keyed stages with state)."""
        return self.plan.keyed

    def apply(
        self,
        df: DataFrame | Any,
        *,
        payload: str = "value",
        checkpoint_location: str | None = None,
    ) -> DataFrame:
        """The rows reaching the sinks when the graph runs on ``df``'s rows.

        ``df`` needs ``ts`` and ``front`` (the global time, as flamestream fronts give it)
        and the ``payload`` column (string: the payload is the text; binary: the bytes);
        ``source`` and ``position`` (the determinant) are carried when present.

        ``df`` may also be a ``format("flamestream")`` front's reader, not loaded yet
        (``spark.readStream.format("flamestream").option(...)``), or a list of them (one per
        source, unioned): then ``apply`` loads them itself and the fronts run the graph's
        first stage in their read tasks (or key the rows for the first grouping), so the
        records leave Python once, as items (:mod:`flamestream.spark.exec.general.front_stage`). The
        released rows are the same. Returns
        ``ts, front, trace, flags, source, position, sink, value``: ``value`` is the payload
        as text (``render``), ``(ts, front, trace)`` its meta, ordered as the model orders
        them, ``flags`` whether it may invalidate (a replayed version) or is a tombstone: the
        barrier sink uses both to drop invalidated versions before it releases. These are the
        items as they reach the sinks, not yet released: a trace's logical times count a
        grouping's replays. The flamestream sink releases each valid row with its trace's
        lineage and no flag (``flamestream.model.lineage``), as the reference runtime does.

        A streaming ``df`` through a graph with groupings needs ``checkpoint_location``, the
        query's checkpoint: the groupings' state is kept under it (``flamestream-graph/``)
        and their garbage collection follows the min-time in its offset log.
        """
        rows, _ = self._wire(df, payload, checkpoint_location, sink_runs=False)
        return rows if rows.isStreaming else _released(rows)

    def write_stream(
        self, df: DataFrame | Any, *, checkpoint_location: str, payload: str = "value"
    ) -> DataStreamWriter:
        """``apply``, then ``writeStream.format("flamestream")`` with the checkpoint set.

        Add the sink's options (``sink``, ``path``, ...) and ``start()``. When everything the
        graph's last keyed stage (and the stateless steps after it) sends goes to sinks
        (:attr:`ExecutionPlan.in_sink`), the sink's write tasks run that stage on the
        shuffled rows themselves, in the same task the stage's own pass would have run in:
        the rows enter Python once after the shuffle. With readers as ``df`` (see
        :meth:`apply`), word count's words cross the Python/JVM boundary twice: out of the
        front, into the sink. The released rows are the same as ``apply``'s.
        """
        rows, task = self._wire(df, payload, checkpoint_location, sink_runs=True)
        if not rows.isStreaming:
            raise GraphError(
                self.graph.name,
                "a streaming input for write_stream",
                "a bounded one",
                "use apply(df) and any batch writer, or read with spark.readStream",
            )
        writer = rows.writeStream.format("flamestream")
        writer = writer.option("checkpointLocation", checkpoint_location)
        return writer.option(STAGE_OPTION, ship(task)) if task is not None else writer

    @staticmethod
    def control(checkpoint_location: str) -> QueryControl:
        """The handle on the query running (or to run) with this checkpoint: rescale, swap."""
        return QueryControl(checkpoint_location)

    def _wire(
        self, df: DataFrame | Any, payload: str, checkpoint_location: str | None, *, sink_runs: bool
    ) -> tuple[DataFrame, Any]:
        """Plan and wire one application: the result rows, and the sink's task if it runs one."""
        budget_from = checkpoint_location if self.budgets is not None else None
        swaps = SwapReader(checkpoint_location) if self.swappable and checkpoint_location else None
        partitions = self._key_partitions(_session_of(df), checkpoint_location)
        # fronts wait for a loop that crosses key partitions to drain (FrontReader._tick_limit)
        gate = checkpoint_location if self._loop_stages()[1] else None
        rows, in_front = self._front_rows(
            df, payload, budget_from, swaps, to_sink=sink_runs, partitions=partitions, gate=gate
        )
        plan = self._query_plan(rows, checkpoint_location, partitions)
        if self.plan.passthrough:
            return self._passthrough(rows, payload, in_front=in_front)
        in_sink = self.plan.in_sink if sink_runs and plan.state_url is not None else None
        if in_front:  # the fronts ran the first stage (or the keying): their rows are items
            wiring = _Wiring(self, plan, rows, in_front=self.plan.in_front, in_sink=in_sink)
        else:
            wiring = _Wiring(self, plan, self._source_items(rows, payload), in_sink=in_sink)
        wiring.channels(*self._channel_rows(rows, plan))
        for stage in self.stages:
            wiring.add(stage)
        return wiring.result(), wiring.sink_task

    def _query_plan(
        self, df: DataFrame, checkpoint_location: str | None, partitions: int
    ) -> _QueryPlan:
        """What this application of the graph decides once: loops, state, layout.

        ``partitions``: the key partitions chosen for it (:meth:`_key_partitions`).
        """
        if df.isStreaming:
            _no_adaptive_streaming(df.sparkSession)
            _check_recommended_conf(df.sparkSession)
        if self.keyed and df.isStreaming and not checkpoint_location:
            raise GraphError(
                self.graph.name,
                "checkpoint_location (the query's checkpointLocation) for a graph with groupings",
                "none",
                "apply(df, checkpoint_location=ck), then "
                "writeStream.option('checkpointLocation', ck)",
            )
        if self.cut and not df.isStreaming:
            cycle = ", ".join(f"{a} -> {b}" for a, b in sorted(self.cut))
            raise GraphError(
                self.graph.name,
                "a streaming DataFrame for a cycle through several groupings",
                f"a bounded one (the cycle's edges {cycle} go on in the next micro-batch)",
                "read with spark.readStream (Trigger.AvailableNow runs until the loop is empty)",
            )
        looping, fed = self._loop_stages()
        streaming = bool(checkpoint_location) and df.isStreaming
        elastic = self.elastic is not None and streaming and self.keyed
        if elastic and self.elastic is not None:  # active <= P, before the query starts
            self.elastic.check(partitions, f"graph {self.graph.name}: elastic")
        state_url = None
        if checkpoint_location and df.isStreaming:
            state_url = QueryCheckpoint(checkpoint_location).graph_url
            check_layout(
                state_url, partitions, loops=bool(fed), elastic=elastic, graph=self.graph.name
            )
            record_steps(state_url, self.graph, swappable=self.swappable)
        swaps = None
        if self.swappable and state_url is not None:
            assert checkpoint_location is not None  # noqa: S101
            swaps = SwapReader(checkpoint_location)
        return _QueryPlan(partitions, checkpoint_location, state_url, looping, fed, elastic, swaps)

    def _channel_rows(
        self, df: DataFrame, plan: _QueryPlan
    ) -> tuple[DataFrame | None, DataFrame | None]:
        """The control channel's rows (elastic layouts, swaps) and the loop channel's."""
        control_rows = loop_rows = None
        if plan.elastic or plan.swaps is not None:
            # the control channel: no rows, its offset is each batch's key layout and swaps
            assert plan.checkpoint is not None  # noqa: S101
            control_rows = (
                df.sparkSession.readStream.format("flamestream")
                .option("channel", "control")
                .option("path", plan.checkpoint)
                .option("partitions", plan.partitions)
                .options(**(self.elastic or ElasticPolicy()).options())
                .options(**(self.budgets.options(_cores(df)) if self.budgets else {}))
                .load()
            )
        if plan.fed and plan.state_url is not None:  # items sent into the loop come back
            loop_rows = (
                df.sparkSession.readStream.format("flamestream")
                .option("channel", "loop")
                .option("path", plan.checkpoint)
                .load()
            )
        return control_rows, loop_rows

    def _cross_key_cycle(self) -> bool:
        """Whether a grouping's cycle hands items to other keys, in one stage (not a cut).

        Such a cycle goes round inside one task when all keys are in one partition; a cycle
        through several groupings (a cut) goes through the loop channel whatever ``P`` is.
        """
        looping, _ = self._loop_stages()
        return bool(looping) and not self.cut

    def _loop_stages(self) -> tuple[tuple[Stage, ...], tuple[Stage, ...]]:
        """The stages that send into the loop channel, and those it feeds (them and more)."""
        looping = tuple(s for s in self.stages if s.grouping and not self.plan.key_local(s))
        targets = {merge for _, merge in self.cut}
        fed = looping + tuple(s for s in self.stages if targets & set(s.steps) and s not in looping)
        return looping, fed

    def _front_rows(
        self,
        df: DataFrame | Any,
        payload: str,
        budget_from: str | None = None,
        swaps: SwapReader | None = None,
        *,
        to_sink: bool = False,
        partitions: int | None = None,
        gate: str | None = None,
    ) -> tuple[DataFrame, bool]:
        """The input as a DataFrame; True when fronts' readers ran :attr:`plan.in_front`.

        (Or, for the empty graph, the render: :attr:`plan.passthrough`.) ``partitions``: the
        keyed stages' key partitions, for front rows that leave in blocks (None: the
        session's, :meth:`_key_partitions` without a checkpoint). ``budget_from``:
        the checkpoint whose budget policy sets the fronts' read limit; ``swaps``: the query's
        function swaps, which the fronts' first stage obeys; ``to_sink``: the rows go to the
        flamestream sink (``write_stream``), which can open blocks. ``gate``: the checkpoint
        whose loop the fronts wait for, admitting nothing while it is busy.
        """
        readers: list[Any] = list(df) if isinstance(df, list | tuple) else [df]
        if not readers or any(not _is_reader(r) for r in readers):
            if len(readers) == 1 and hasattr(readers[0], "isStreaming") and not budget_from:
                return readers[0], False
            raise GraphError(
                self.graph.name,
                "a DataFrame of front rows, or format('flamestream') readers not loaded yet",
                f"{', '.join(type(r).__name__ for r in readers) or 'nothing'}",
                "pass spark.readStream.format('flamestream').option(...) (or .load() it)",
            )
        option = ""
        if self.plan.passthrough:
            session = self._session(getattr(readers[0], "_spark", None))
            option = self._passthrough_front(payload, to_sink and arrow_batches_bounded(session))
        elif self.plan.in_front is not None:
            session = self._session(getattr(readers[0], "_spark", None))
            # blocks need the key partitions, and Arrow batches Spark keeps small (else rows)
            bounded = arrow_batches_bounded(session)
            if not bounded:
                partitions = 0
            elif partitions is None:
                partitions = self._key_partitions(session, None)
            option = self._front_stage(payload, partitions, swaps).encode()
        loaded = []
        initial = self.budgets.initial_limit() if self.budgets else 0
        for reader in readers:
            if budget_from:
                reader.option(LIMIT_FROM, budget_from).option(INITIAL_LIMIT, initial)
            loaded.append(reader.option(STAGE_OPTION, option).option(LOOP_GATE, gate or "").load())
            # the caller's reader loads plain fronts again
            reader.option(STAGE_OPTION, "").option(LOOP_GATE, "")
            if budget_from:
                reader.option(LIMIT_FROM, "").option(INITIAL_LIMIT, "")
        return _observed_records(_union(loaded), fused=bool(option)), bool(option)

    def _front_stage(
        self, payload: str, partitions: int = 0, swaps: SwapReader | None = None
    ) -> FrontStage:
        """What the fronts run in their reads: the first stage, or the keying for a grouping.

        ``partitions``: the keyed stages' key partitions, for rows that leave in blocks (0:
        they leave as rows).
        """
        index = self.plan.in_front
        stage = next((s for s in self.stages if s.index == index), self._keying())
        runner = self._runner(stage, named=False, swaps=swaps)
        packs = self.plan.packed_into() is not None
        blocks = partitions if self.plan.blocked_into() is not None else 0
        return FrontStage(runner, self.graph.consumer(self.source), payload, packs, blocks)

    def _passthrough_front(self, payload: str, blocks: bool) -> str:
        """The empty graph's fronts' work, as their option: render, and send ``blocks``."""
        render = None if self.render is render_default else self.render
        sink = self.graph.consumer(self.source)
        return PassthroughFront(sink, payload, render, in_blocks=blocks).encode()

    def _passthrough(
        self, rows: DataFrame, payload: str, *, in_front: bool
    ) -> tuple[DataFrame, Any]:
        """The empty graph's released rows (or blocks of them, and the sink's task to open them).

        ``in_front``: the fronts rendered the rows (:meth:`_passthrough_front`); else one
        ``mapInArrow`` pass renders the loaded DataFrame's.
        """
        if in_front and "block" in rows.columns:
            return rows, OpenedBlocks()
        items = rows
        if not in_front:
            render = None if self.render is render_default else self.render
            runner = _named(RenderPass(render), "flamestream_render")
            items = self._items(rows, payload).mapInArrow(runner, ITEM_DDL)
        return items.withColumnRenamed("to", "sink").select(*OUTPUT_COLUMNS), None

    def _key_partitions(self, session: Any, checkpoint_location: str | None) -> int:
        """The keyed stages' key partitions ``P`` for this application (kept in :attr:`chosen`).

        ``partitions=``, else the session's (:mod:`flamestream.spark.key_partitions`); a
        checkpoint that recorded another count keeps it, unless the user set this one
        (then a :class:`ConfigError` before the query starts).
        """
        if self.partitions:
            found = key_partitions.given(self.partitions)
        elif self._cross_key_cycle():
            found = key_partitions.for_cross_key_cycle()
        else:
            found = key_partitions.of_session(self._session(session))
        recorded = key_partitions.recorded(checkpoint_location)
        self.chosen = found.for_checkpoint(recorded, f"graph {self.graph.name}")
        return self.chosen.count

    @staticmethod
    def _session(session: Any) -> Any:
        """``session``, or the active one if None."""
        if session is None:
            from pyspark.sql import SparkSession

            session = SparkSession.active()
        return session

    def _keying(self) -> Stage:
        """A stage without steps whose pass keys the source's rows for the first grouping."""
        return Stage(0, (), (self.graph.consumer(self.source),))

    def _source_items(self, df: DataFrame, payload: str) -> DataFrame:
        """The source's item rows, keyed before the shuffle when a grouping reads them."""
        items = self._items(df, payload)
        if self.graph.consumer(self.source) in self.keys:
            items = items.mapInArrow(self._runner(self._keying()), ITEM_DDL)
        return items

    def _items(self, df: DataFrame, payload: str) -> DataFrame:
        """Front rows as item rows, in Spark SQL: empty trace, tagged payload."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BinaryType, StringType

        missing = [c for c in ("ts", "front", payload) if c not in df.columns]
        if missing:
            raise GraphError(
                self.source,
                f"a DataFrame with ts, front and the payload column {payload!r}",
                f"columns {', '.join(df.columns)}",
                "read it with spark.readStream.format('flamestream') (or .read), or pass "
                "payload='<column>'",
            )
        kind = df.schema[payload].dataType
        encoded: Column
        if isinstance(kind, StringType):
            encoded = F.concat(F.lit(bytearray(TEXT_TAG)), F.encode(F.col(payload), "UTF-8"))
        elif isinstance(kind, BinaryType):
            encoded = F.concat(F.lit(bytearray(BYTES_TAG)), F.col(payload))
        else:
            raise GraphError(
                self.source,
                f"a string or binary payload column {payload!r}",
                f"{kind.simpleString()}",
                "cast it (F.col(...).cast('string')) or serialize it (F.to_json) first",
            )

        def optional(name: str, ddl: str) -> Column:
            return F.col(name) if name in df.columns else F.lit(None).cast(ddl)

        return df.select(
            F.col("ts").cast("long").alias("ts"),
            F.col("front").cast("int").alias("front"),
            F.lit(bytearray()).alias("trace"),
            F.lit(0).cast("tinyint").alias("flags"),
            optional("source", "string").alias("source"),
            optional("position", "long").alias("position"),
            F.lit(self.graph.consumer(self.source)).alias("to"),
            encoded.alias("payload"),
            F.lit(None).cast("string").alias("value"),
        )

    def _runner(self, stage: Stage, *, named: bool = True, swaps: SwapReader | None = None) -> Any:
        name = stage.name if stage.steps else "flamestream_key"
        runner = StageRunner(
            self.graph,
            stage,
            self.keys,
            self.render,
            self.plan.precombine,
            swaps=swaps,
            path=self.plan.path(stage),
        )
        return _named(runner, name) if named else runner


@dataclass(frozen=True)
class _QueryPlan:
    """What one ``apply`` decided before wiring: the same for every stage."""

    partitions: int  #: key partitions of keyed stages
    checkpoint: str | None
    state_url: str | None  #: where the groupings keep state (streaming with a checkpoint)
    looping: tuple[Stage, ...]  #: keyed stages whose cycle may change key: they send to the loop
    fed: tuple[Stage, ...]  #: stages the loop channel feeds
    elastic: bool  #: key ranges move between partitions (routes from the control channel)
    swaps: SwapReader | None = None  #: where runners read their batch's swaps (swappable)


class _Wiring:
    """One ``apply``: the DataFrames made so far, stage by stage, and the query's result."""

    def __init__(
        self,
        graph: SparkGraph,
        plan: _QueryPlan,
        source_items: DataFrame,
        *,
        in_front: int | None = None,
        in_sink: int | None = None,
    ) -> None:
        self.graph = graph
        self.plan = plan
        self.items: dict[str, DataFrame] = {graph.source: source_items}
        #: the stage the fronts ran (its output: ``source_items``), if any but the keying
        self.in_front = in_front or None
        #: the keyed stage the sink's write tasks run, and (once wired) its task function
        self.in_sink = in_sink
        self.sink_task: Any = None
        self.outputs: dict[int, DataFrame] = {}
        self.flagged: dict[int, bool] = {}  # whether a stage's output may carry replays
        self.control_rows: DataFrame | None = None
        self.loop_rows: DataFrame | None = None

    def channels(self, control_rows: DataFrame | None, loop_rows: DataFrame | None) -> None:
        """The internal channels' rows, unioned into the stages that read them."""
        self.control_rows, self.loop_rows = control_rows, loop_rows

    def rows_for(self, step_id: str) -> DataFrame:
        """Rows on their way to ``step_id`` from producers outside its own stage."""
        from pyspark.sql import functions as F

        graph = self.graph
        parts = []
        own = graph.plan.stage_of.get(step_id)
        for producer in graph.graph.producers(step_id):
            stage = graph.plan.stage_of.get(producer)
            if stage is not None and stage is own:
                continue  # a cycle inside a keyed stage: it never leaves the task
            if (producer, step_id) in graph.cut:
                continue  # through the loop channel: see the loop writers in result()
            parts.append(self.items[producer] if stage is None else self.outputs[stage.index])
        unique = list({id(part): part for part in parts}.values())
        return _union(unique).where(F.col("to") == step_id)

    def add(self, stage: Stage) -> None:
        """Wire ``stage``: its input, then one ``mapInArrow`` (after a shuffle when keyed)."""
        from pyspark.sql import functions as F

        host = self.graph.plan.hosts.get(stage.index)
        if stage.index == self.in_front:  # the fronts ran it in their reads
            self.outputs[stage.index] = self._with_control(self.items[self.graph.source])
            self.flagged[stage.index] = False
            return
        if host is not None:  # runs in its keyed stage's tasks (see _keyed)
            self.outputs[stage.index] = self.outputs[host]
            self.flagged[stage.index] = True
            return
        stage_input = _union([self.rows_for(entry) for entry in stage.entries])
        of = self.graph.plan.stage_of
        upstream = {
            of[p].index
            for entry in stage.entries
            for p in self.graph.graph.producers(entry)
            if p in of and of[p] is not stage
        }
        stage_input = self._with_control(stage_input)  # once: its offset is in every batch's
        looped = stage in self.plan.fed and self.loop_rows is not None
        if looped:
            assert self.loop_rows is not None  # noqa: S101
            here = self.loop_rows.where(F.col("to").isin(list(stage.steps)))
            stage_input = stage_input.unionByName(here.select(*stage_input.columns))
        flagged = looped or any(self.flagged[u] for u in upstream)
        self.flagged[stage.index] = stage.grouping is not None or flagged
        if stage.grouping is None:
            runner = self.graph._runner(stage, swaps=self.plan.swaps)
            self.outputs[stage.index] = stage_input.mapInArrow(runner, ITEM_DDL)
        else:
            self.outputs[stage.index] = self._keyed(stage, stage_input, flagged)

    def _with_control(self, rows: DataFrame) -> DataFrame:
        """``rows`` and, once per query, the control channel's (no rows, only its offset)."""
        if self.control_rows is None:
            return rows
        control, self.control_rows = self.control_rows, None
        return rows.unionByName(control.select(*rows.columns))

    def _keyed(self, stage: Stage, stage_input: DataFrame, flagged: bool) -> DataFrame:
        """A keyed stage: routed, invalidators copied, shuffled by key partition, run."""
        from pyspark.sql import functions as F

        plan, graph = self.plan, self.graph
        loop = None
        key_partitions = plan.partitions
        if stage in plan.looping:
            if plan.state_url is not None:
                reentry = graph.plan.reentry(stage)
                loop = LoopSpec(stage.index, reentry, plan.partitions, plan.state_url)
            else:  # a bounded input has no next batch: every key in one task
                key_partitions = 1
        route = "key"
        if plan.elastic and key_partitions > 1:  # route by the batch's layout, not the key hash
            assert plan.checkpoint is not None  # noqa: S101
            router = Router(plan.checkpoint, key_partitions)
            schema = ITEM_DDL + ", route binary"
            stage_input = stage_input.mapInArrow(
                _named(router, f"flamestream_route_{stage.index}"), schema
            )
            route = "route"
        if key_partitions > 1 and flagged:
            stage_input = _invalidators_everywhere(stage_input, key_partitions, route)
        keyed = KeyedRunner(
            graph.graph,
            stage,
            graph.keys,
            graph.render,
            state_url=plan.state_url,
            checkpoint=plan.checkpoint if plan.state_url else None,
            latest=graph.release == "latest",
            loop=loop,
            elastic_partitions=key_partitions if route == "route" else None,
            swaps=plan.swaps,
            path=graph.plan.path(stage),
        )
        tails = [
            graph._runner(tail, named=False, swaps=plan.swaps) for tail in graph.plan.tails(stage)
        ]
        task = WithTails(keyed, tails) if tails else keyed
        # the key partition rides with every row, computed as the shuffle computes it:
        # the task keeps that partition's state whatever position Spark's plan gives it
        part = F.pmod(F.hash(F.col(route)), F.lit(key_partitions))
        stage_input = stage_input.withColumn(KEY_PARTITION, part)
        shuffled = stage_input.repartition(key_partitions, F.col(route))
        if stage.index == self.in_sink:  # the sink's write tasks run it (see write_stream)
            self.sink_task = task
            return shuffled
        return shuffled.mapInArrow(_named(task, stage.name), ITEM_DDL)

    def result(self) -> DataFrame:
        """The rows reaching the sinks, and the loop writers of cut edges (no rows)."""
        from pyspark.sql import functions as F

        graph = self.graph
        if self.sink_task is not None:  # the shuffled rows the sink's tasks run the stage on
            assert self.in_sink is not None  # noqa: S101
            return self.outputs[self.in_sink]
        released = [self.rows_for(sink) for sink in graph.plan.sinks]
        for number, (producer, merge) in enumerate(sorted(graph.cut)):
            # the loop writers run in the query (their rows are part of its result) and
            # return no rows: what they write comes back through the loop channel
            assert self.plan.state_url is not None  # noqa: S101  (a cut graph needs a stream)
            stage = graph.plan.stage_of[producer]
            sent = self.outputs[stage.index].where(F.col("to") == merge)
            writer = LoopWriter(self.plan.state_url, f"cut{number}")
            released.append(sent.mapInArrow(_named(writer, f"flamestream_loop_{merge}"), ITEM_DDL))
        return _union(released).withColumnRenamed("to", "sink").select(*OUTPUT_COLUMNS)


#: Spark 4.x runs stateless streaming queries (as Spark sees a graph's) adaptively by default.
ADAPTIVE_STREAMING = "spark.sql.adaptive.streaming.stateless.enabled"

#: Where Spark cuts the Arrow batches that carry a task's rows to Python, and the most it may
#: be for the fronts to send rows in blocks (``exec.shuffle.blocks``): a batch ends after the
#: row that takes it past the limit, so with blocks of at most 64 MiB it stays below Arrow's 2 GiB.
ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
MAX_ARROW_BATCH_BYTES = 2**30

_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def arrow_batches_bounded(session: Any) -> bool:
    """Whether the session's Arrow batches to Python stay small enough to carry blocks.

    Not so (a limit above :data:`MAX_ARROW_BATCH_BYTES`; Spark allows up to 2 GiB), the
    fronts send rows, as without blocks, and the choice is logged.
    """
    setting = (session.conf.get(ARROW_BATCH_BYTES, None) or "64m").strip().lower()
    digits = setting.rstrip("kmgtb")
    unit = setting[len(digits) :].rstrip("b")
    try:
        limit = int(digits) * _SIZE_UNITS[unit]
    except (KeyError, ValueError):
        limit = -1
    if 0 < limit <= MAX_ARROW_BATCH_BYTES:
        return True
    _log.info(
        "flamestream: %s=%s: the fronts send a keyed stage's rows as rows, not in blocks",
        ARROW_BATCH_BYTES,
        setting,
    )
    return False


def _cores(df: DataFrame) -> int:
    """The cores keyed tasks run on: Spark's default parallelism (else this machine's)."""
    try:
        return max(1, int(df.sparkSession.sparkContext.defaultParallelism))
    except Exception:
        return max(1, os.cpu_count() or 1)


def _no_adaptive_streaming(session: Any) -> None:
    """Turn adaptive execution of stateless streaming queries off for the session.

    Under it, Spark materializes the shuffles of a micro-batch concurrently; when a graph's
    front rows feed two shuffles (a broadcast into two groupings, a stage with two keyed
    consumers), two threads then plan the same Python source at once, and Spark's runner of a
    Python streaming source is not safe for that: the query hangs. Spark reads the setting
    when a query starts, so this must happen before ``start()``; batch queries keep adaptive
    execution. Logged, since it changes the session.
    """
    if (session.conf.get(ADAPTIVE_STREAMING, "true") or "").lower() != "false":
        session.conf.set(ADAPTIVE_STREAMING, "false")
        _log.info(
            "flamestream: set %s=false (graph stages on streaming DataFrames)", ADAPTIVE_STREAMING
        )


def _check_recommended_conf(session: Any) -> None:
    """Warn, once per setting, where the session lacks one of ``RECOMMENDED_CONF``.

    Spark reads them when its context starts, so they cannot be set here: without the Unix
    socket each Python task of a micro-batch waits ~40 ms on TCP for nothing.
    """
    try:
        conf = session.sparkContext.getConf()
    except Exception:  # no SparkContext to ask (Spark Connect): nothing to say
        return
    for name, wanted in RECOMMENDED_CONF.items():
        if name not in _warned and (conf.get(name, "") or "").lower() != wanted:
            _warned.add(name)
            _log.warning(
                "flamestream: %s is not %s: set it in the session's config or "
                "spark-defaults.conf (flamestream.python_env.RECOMMENDED_CONF)",
                name,
                wanted,
            )


#: The recommended settings already warned about in this driver process.
_warned: set[str] = set()


#: The name of the query's observed metrics (``progress.observedMetrics``) ``apply`` adds.
OBSERVED_METRICS = "flamestream"


def _observed_records(rows: DataFrame, *, fused: bool) -> DataFrame:
    """``rows`` with the records the fronts read counted in the query's observed metrics.

    Spark counts the rows a source sends as ``numInputRows`` (and from it the input and
    processing rates of every progress event, the UI, the listeners); a front that runs the
    first stage sends items, packed rows or blocks, not records (400k lines were 16 rows).
    A Python data source cannot tell Spark otherwise, so its rows carry the count
    (``front_stage.RECORDS``), summed here into the observed metric ``flamestream.records``
    of every batch's progress; the column is dropped again. Plain front rows are records:
    there it is their count, so the metric is there whenever ``apply`` loads the fronts.
    """
    from pyspark.sql import functions as F

    if not fused:
        return rows.observe(OBSERVED_METRICS, F.count(F.lit(1)).alias(RECORDS))
    total = F.coalesce(F.sum(RECORDS), F.lit(0)).alias(RECORDS)
    return rows.observe(OBSERVED_METRICS, total).drop(RECORDS)


def _released(rows: DataFrame) -> DataFrame:
    """A bounded input's rows as a barrier sink releases them, any batch writer's output.

    A bounded input runs whole, in meta order: nothing is replayed, so no row is flagged
    and none is invalidated; what is left is the trace's lineage, made in the JVM.
    """
    from pyspark.sql import functions as F

    flags = F.col("flags").bitwiseAND(F.lit(~MAY_INVALIDATE)).cast("tinyint")
    return rows.withColumns({"trace": lineage_of(F.col("trace")), "flags": flags})


def lineage_of(trace: Column) -> Column:
    """Spark SQL: the encoded ``trace``'s lineage (``flamestream.model.lineage``).

    Each 12-byte local time's 8-byte logical time replaced by zeros, its 4-byte child index
    kept; an empty trace (a front's row) stays empty.
    """
    from pyspark.sql import functions as F

    width = LOCAL_BYTES
    locals_ = F.sequence(F.lit(0), (F.length(trace) / width).cast("int") - 1)

    def child_of(done: Column, nth: Column) -> Column:
        return F.concat(done, F.lit(bytes(8)), F.substring(trace, nth * width + 9, F.lit(4)))

    lineage = F.aggregate(locals_, F.lit(b""), child_of)
    return F.when(F.length(trace) == 0, trace).otherwise(lineage)


def _union(frames: list[DataFrame]) -> DataFrame:
    """The rows of every DataFrame in ``frames`` (at least one), matched by column name."""
    rows = frames[0]
    for more in frames[1:]:
        rows = rows.unionByName(more)
    return rows


def _is_reader(candidate: Any) -> bool:
    """Whether ``candidate`` is a DataFrame reader not loaded yet (batch or stream)."""
    return hasattr(candidate, "load") and hasattr(candidate, "option")


def _named(runner: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    """``runner`` as a function called ``name``, which is what ``explain()`` shows."""

    def run(batches: Any) -> Any:
        return runner(batches)

    run.__name__ = run.__qualname__ = name
    return run


def _invalidators_everywhere(rows: DataFrame, partitions: int, column: str = "key") -> DataFrame:
    """Rows entering a keyed stage, plus a copy of every invalidator for each other partition.

    A replayed item (may-invalidate) goes to its key's partition, but the versions it
    invalidates may have had other keys, hence live in other partitions; a tombstone has no
    key at all. So every such row is also sent, as a tombstone of its meta, to each partition
    that did not get it, with a salt key that lands there
    (:mod:`flamestream.spark.exec.general.partitioning`); the grouping there drops what it
    invalidates and remembers it against late arrivals. A tombstone's own row is replaced by its
    copies; one whose key is a salt was handled already in that salt's partition (it came
    through the loop) and goes to the others only.

    ``column`` is what the shuffle routes by: ``key``, or ``route`` under an elastic layout
    (where a copy's route and key are both the salt).
    """
    from pyspark.sql import functions as F

    width = F.lit(partitions)
    target = F.col(column)
    own = F.when(target.isNull(), F.lit(-1)).otherwise(F.pmod(F.hash(target), width))
    everywhere = F.array(*[F.lit(bytearray(salt)) for salt in salts(partitions)])
    copies = F.filter(everywhere, lambda salt: F.pmod(F.hash(salt), width) != own)
    flags = F.col("flags")
    keys = (
        F.when(flags.bitwiseAND(F.lit(MAY_INVALIDATE | TOMBSTONE)) == 0, F.array(target))
        .when(flags.bitwiseAND(F.lit(TOMBSTONE)) != 0, copies)
        .otherwise(F.concat(F.array(target), copies))
    )
    copy = F.substring(F.col(column), 1, 1) == F.lit(bytearray(SALT_PREFIX))
    columns = [c for c in rows.columns if c != column]
    spread = rows.select(*columns, F.explode(keys).alias(column))
    return spread.select(
        *[
            F.when(copy, F.lit(None).cast("binary")).otherwise(F.col(c)).alias(c)
            if c == "payload"
            else F.when(copy, F.col(column)).otherwise(F.col(c)).alias(c)
            if c == "key" and column != "key"
            else F.when(copy, flags.bitwiseOR(F.lit(MAY_INVALIDATE | TOMBSTONE)).cast("tinyint"))
            .otherwise(flags)
            .alias(c)
            if c == "flags"
            else F.col(c)
            for c in rows.columns
        ]
    )


def _session_of(df: DataFrame | Any) -> Any:
    """The session of ``df``: a DataFrame, a front's reader or a list of readers (or None)."""
    first = df[0] if isinstance(df, list | tuple) and df else df
    session = getattr(first, "sparkSession", None) if hasattr(first, "isStreaming") else None
    return session or getattr(first, "_spark", None)


def check_layout(
    state_url: str, partitions: int, *, loops: bool = False, elastic: bool = False, graph: str = ""
) -> None:
    """The partition count and the kind of layout must never change for a checkpoint.

    The groupings' state is per key partition, or per slot when elastic: a checkpoint written
    with one layout cannot be read with another. The first call records the layout
    (``layout.json``); later ones compare, and a change is an option error naming the option,
    the value given and the one recorded.
    """
    fs, root = filesystem(state_url)
    layout = posixpath.join(root, "layout.json")
    if not fs.exists(layout):
        first = {"partitions": partitions, "loops": loops, "elastic": elastic}
        write_atomically(fs, layout, json.dumps(first).encode())
        return
    written = json.loads(fs.cat_file(layout))
    step = f"graph {graph}" if graph else "graph"
    was_elastic = bool(written.get("elastic", False))
    if was_elastic != elastic:
        raise ConfigError(
            step,
            "elastic",
            elastic,
            f"{was_elastic}, as when this checkpoint's state was written (an elastic graph "
            "keeps its state per slot): keep elastic= fixed for a checkpoint",
        )
    recorded = int(written["partitions"])
    if recorded != partitions:
        raise ConfigError(
            step,
            "partitions",
            partitions,
            f"{recorded} key partitions, as when this checkpoint's state was written: keep "
            "partitions= (or spark.sql.shuffle.partitions) fixed for a checkpoint, or start "
            "from a new checkpointLocation",
        )


def apply_graph(
    flow: Dataflow | LogicalGraph,
    df: DataFrame,
    *,
    payload: str = "value",
    fusion: bool = True,
    render: Callable[[Any], str] = render_default,
    partitions: int | None = None,
    checkpoint_location: str | None = None,
    release: str = "every",
    elastic: bool | ElasticPolicy = False,
    budgets: BudgetPolicy | None = None,
    swappable: bool = False,
) -> DataFrame:
    """Compile ``flow`` and apply it to ``df``: see :meth:`SparkGraph.apply`."""
    graph = SparkGraph(
        flow,
        fusion=fusion,
        render=render,
        partitions=partitions,
        release=release,
        elastic=elastic,
        budgets=budgets,
        swappable=swappable,
    )
    return graph.apply(df, payload=payload, checkpoint_location=checkpoint_location)


def _with_sketch_bytes(budgets: BudgetPolicy | None, graph: LogicalGraph) -> BudgetPolicy | None:
    """``budgets`` weighing a sketched key as the graph's ``exact_or_approximate`` steps do.

    Their largest sketch (and floor): what the policy counts a sketched slot's keys at. A
    graph without such steps, or a policy that says, keeps ``budgets`` as it is.
    """
    from flamestream.graph.approximate import budget_fold

    if budgets is None or budgets.sketch_bytes_per_key is not None:
        return budgets
    folds = [f for f in map(budget_fold, graph.steps.values()) if f is not None]
    if not folds:
        return budgets
    return replace(budgets, sketch_bytes_per_key=max(f.sketch_bytes() for f in folds))
