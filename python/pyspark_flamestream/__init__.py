"""flamestream's Spark connectors: ``format("flamestream")`` fronts and barrier sinks.

PySpark finds this module by itself (installed top-level modules named ``pyspark_*`` that
expose ``DefaultSource`` are registered in every session), so no ``register()`` call is
needed; ``spark.dataSource.register(FlameStreamDataSource)`` works too.

Reading picks a front with ``.option("front", "files" | "generator" | "kafka" | "delta")``; writing
picks a sink with ``.option("sink", "files" | "kafka" | "delta")``. Options are validated when
the query is defined or started, before any batch runs. With the JVM shim's plugin enabled,
``spark.flamestream.<option>`` confs (``SET`` in the session over ``spark-defaults.conf``) are
defaults for every option but ``front`` and ``sink``; ``.option(...)`` wins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from flamestream.errors import ConfigError
from flamestream.jvm import conf_defaults
from flamestream.session import warn_if_slow_runner
from flamestream.spark.connector.front import (
    META_FIELDS,
    FrontBatchReader,
    FrontReader,
    FrontSource,
    ReaderConfig,
)
from flamestream.spark.connector.history import HistoryThenLive, HistoryThenLiveReader
from flamestream.spark.connector.history_options import (
    BACKFILL_LIMIT,
    HISTORY_KINDS,
    Boundary,
    MissingHistory,
    check_history,
    history_format,
    split_options,
)
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import BarrierWriter, SinkOutput
from flamestream.spark.control.budgeted import BudgetPolicy
from flamestream.spark.control.channels import ControlReader, LoopReader
from flamestream.spark.control.key_layout import (
    EVEN,
    FOLLOW_SETTLE,
    GAIN,
    MIN_ITEMS,
    SKEW,
    ElasticPolicy,
)
from flamestream.spark.exec.general.items import ITEM_SCHEMA

#: The fronts and sinks by kind: (module, class). Only the chosen one is imported: every query
#: start imports this module in several fresh Python processes, and the Kafka client alone
#: takes 65 ms to import, for queries that read files.
_FRONTS = {
    "delta": ("pyspark_flamestream.fronts.delta", "DeltaSource"),
    "files": ("pyspark_flamestream.fronts.files", "FilesSource"),
    "generator": ("pyspark_flamestream.fronts.generator", "GeneratorSource"),
    "kafka": ("pyspark_flamestream.fronts.kafka", "KafkaSource"),
}
_SINKS = {
    "files": ("pyspark_flamestream.sinks.files", "FilesOutput"),
    "kafka": ("pyspark_flamestream.sinks.kafka", "KafkaOutput"),
    "delta": ("pyspark_flamestream.sinks.delta", "DeltaOutput"),
}


def connector_modules() -> list[str]:
    """Every front's and sink's module (what a warm server imports ahead of queries)."""
    return [module for module, _ in (*_FRONTS.values(), *_SINKS.values())]


def _kind(kinds: Mapping[str, tuple[str, str]], kind: str) -> Callable[[OptionReader], Any]:
    """The class of ``kind`` (a front or a sink), its module imported now."""
    module, name = kinds[kind]
    made: Callable[[OptionReader], Any] = getattr(importlib.import_module(module), name)
    return made


class FlameStreamDataSource(DataSource):
    """``format("flamestream")``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "flamestream"

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self._front: tuple[FrontSource, ReaderConfig] | None = None
        self._backfill_limit = BACKFILL_LIMIT
        # `SET spark.flamestream.<option>` / spark-defaults confs, read through the JVM shim
        # (this runs in a planner process on the driver host, which has no Spark session)
        self._conf_defaults = conf_defaults()

    def _front_source(self) -> tuple[FrontSource, ReaderConfig]:
        if self._front is None and self._history_kind() is not None:
            self._front = self._history_then_live()
        if self._front is None:
            options, kind = self._step_options("front", _FRONTS)
            source: FrontSource = _kind(_FRONTS, kind)(options)
            config = ReaderConfig.parse(options, source.limit_alias)
            options.finish()
            self._front = (source, config)
        return self._front

    def _history_kind(self) -> str | None:
        """The ``history`` option's kind (delta, files), or None: no history."""
        if not any(name.lower() == "history" for name in self.options):
            return None
        probe = OptionReader("front", self.options)
        kind: str = probe.choice("history", list(HISTORY_KINDS), "")
        if not kind:
            probe.string("history", required=True, what="history kind: delta or files")
        return kind

    def _history_then_live(self) -> tuple[FrontSource, ReaderConfig]:
        """A history front, then the live one: ``history`` and ``history.*`` options."""
        history_kind = self._history_kind()
        assert history_kind is not None  # noqa: S101 - only called when it is set
        live_options, past_options, own_options = split_options(self.options)
        probe = OptionReader("front", live_options)
        kind = probe.choice("front", sorted(_FRONTS), "")
        if not kind:
            probe.string("front", required=True)
        options = OptionReader(f"front {kind}", live_options, self._conf_defaults)
        options.raw("front")
        options.raw("history")
        live: FrontSource = _kind(_FRONTS, kind)(options)
        config = ReaderConfig.parse(options, live.limit_alias)
        options.finish()
        own = OptionReader(f"front {kind}", own_options)
        boundary = Boundary.parse(own, live)
        limit = own.integer("history.maxRecordsPerTrigger", BACKFILL_LIMIT, minimum=1)
        json_lines = history_format(own, history_kind, live)
        own.finish()
        clock = "record" if boundary.kind == "time" else config.clock
        past = OptionReader(f"history {history_kind}", {**past_options, "clock": clock})
        history: FrontSource
        try:
            history = _kind(_FRONTS, history_kind)(past)
        except ConfigError as exc:
            if exc.option != "path" or exc.value is None:  # a missing option stays an error
                raise
            history = MissingHistory(history_kind, exc)  # fine for a query past its switch
        else:
            past.finish()
        check_history(history, live, boundary, config.clock, f"front {kind}")
        self._backfill_limit = limit
        return HistoryThenLive(history, live, boundary, json_lines=json_lines), config

    def _step_options(self, role: str, kinds: Mapping[str, object]) -> tuple[OptionReader, str]:
        """Which kind of front or sink the ``role`` option names, and a reader for the rest."""
        probe = OptionReader(role, self.options)
        kind = probe.choice(role, sorted(kinds), "")
        if not kind:
            probe.string(role, required=True)  # raises: the option is missing
        options = OptionReader(f"{role} {kind}", self.options, self._conf_defaults)
        options.raw(role)  # consumed here, so finish() does not call it unknown
        return options, kind

    def _loop_checkpoint(self) -> str | None:
        """The checkpoint of a graph's loop channel (``channel=loop``, made by ``apply``)."""
        if self.options.get("channel") != "loop":
            return None
        options = OptionReader("channel loop", self.options)
        options.raw("channel")
        checkpoint = options.string("path", required=True)
        options.finish()
        return checkpoint

    def _control(self) -> tuple[str, int, ElasticPolicy, BudgetPolicy | None] | None:
        """A graph's control channel (``channel=control``, made by ``apply`` with elastic=)."""
        if self.options.get("channel") != "control":
            return None
        options = OptionReader("channel control", self.options)
        options.raw("channel")
        checkpoint = options.string("path", required=True)
        partitions = options.integer("partitions", minimum=1)
        policy = ElasticPolicy(
            active=options.optional_integer("active", minimum=1),
            max_move_slots=options.optional_integer("maxMoveSlots", minimum=1),
            max_move_bytes=options.optional_integer("maxMoveBytes", minimum=1),
            follow_cluster=options.boolean("followCluster", False),
            settle=options.integer("settle", FOLLOW_SETTLE, minimum=1),
            target_latency_ms=_milliseconds(options, "targetLatencyMs"),
            skew=options.number("skew", SKEW, minimum=1.0),
            even=options.number("even", EVEN, minimum=1.0),
            min_items=options.integer("minItems", MIN_ITEMS, minimum=1),
            gain=options.number("gain", GAIN, minimum=0.0),
        )
        budget = BudgetPolicy.parse(options)
        options.finish()
        policy.check(partitions, "channel control")
        return checkpoint, partitions, policy, budget

    def schema(self) -> StructType:
        """Meta columns (ts, front, source, position), then the front's payload columns.

        A graph's internal channels (``channel=loop`` or ``control``), and a front running a
        graph's first stage (``apply`` given readers), give item rows instead (packed when
        the stage says so, or in blocks of them, see ``flamestream.spark.exec.shuffle.blocks``), and
        then the count of records they stand for (``records``, see ``exec.general.front_stage``).
        """
        from pyspark.sql.pandas.types import from_arrow_schema

        if self._loop_checkpoint() is not None or self._control() is not None:
            return from_arrow_schema(ITEM_SCHEMA)
        source, config = self._front_source()
        if config.stage is not None:  # a graph's first stage runs in the read: item rows
            return from_arrow_schema(config.stage.sent_schema())
        import pyarrow as pa

        return from_arrow_schema(pa.schema(META_FIELDS + source.payload_fields()))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The front's reader (called once per query start, in the query's source runner)."""
        checkpoint = self._loop_checkpoint()
        if checkpoint is not None:
            return LoopReader(checkpoint)
        control = self._control()
        if control is not None:
            return ControlReader(*control)
        source, config = self._front_source()
        # once per query: a graph's loop and control channels (above) run beside a front
        warn_if_slow_runner()
        if isinstance(source, HistoryThenLive):
            return HistoryThenLiveReader(source, config, self._backfill_limit)
        return FrontReader(source, config)

    def reader(self, schema: StructType) -> DataSourceReader:
        """``spark.read``: everything available now, one bounded batch."""
        source, config = self._front_source()
        if isinstance(source, HistoryThenLive):
            step = f"front {source.live.kind}"
            raise ConfigError(
                step,
                "history",
                source.history.kind,
                "only with readStream: spark.read of the history alone is its own front "
                f"(.option('front', '{source.history.kind}'))",
            )
        return FrontBatchReader(source, config)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A barrier sink writing to the chosen destination."""
        options, kind = self._step_options("sink", _SINKS)
        output: SinkOutput = _kind(_SINKS, kind)(options)
        writer = BarrierWriter(output, options, schema)
        options.finish()
        output.check()  # connectivity last: a typo in an option is reported without a probe
        output.check_rows(writer.released)  # then what is there: a table's schema
        writer.start()  # and the output readied for this query's batches (the files' log)
        return writer


#: What PySpark's automatic lookup registers.
DefaultSource = FlameStreamDataSource

__all__ = ["DefaultSource", "FlameStreamDataSource"]


def _milliseconds(options: OptionReader, name: str) -> int | None:
    """A duration in whole milliseconds that may be absent, given as any number >= 1.

    ``targetLatencyMs`` is a number wherever else it is read (fronts, budgets): the control
    channel takes the same spellings (``"8000.0"`` from a ``BudgetPolicy``'s options).
    """
    if options.raw(name) is None:
        return None
    return round(options.number(name, 1.0, minimum=1.0))
