"""A graph's key partitions ``P``: which count its keyed stages run with, and where it came from.

``P`` is the keyed shuffle's partition count: the most keyed tasks a micro-batch runs at once,
and the most partitions a rescale can ever make active (docs/rescale.md). The graph's state
is kept per key partition (or per slot of one), so ``P`` is fixed for a checkpoint: the first
run records it in the graph state's ``layout.json`` (:func:`flamestream.spark.apply.
check_layout`). A query takes, first match:

1. ``SparkGraph(partitions=n)``: the user's;
1a. one, for a graph whose grouping's cycle hands items to other keys
   (:func:`for_cross_key_cycle`): a default;
2. ``spark.sql.shuffle.partitions`` set for the session by the user (builder,
   ``spark-defaults.conf``, ``spark.conf.set``): the user's;
3. a default: ``flamestream.configure``'s (the application's cores,
   :func:`flamestream.session.default_shuffle_partitions`), else the running application's
   default parallelism (``SparkContext.defaultParallelism``), else Spark's 200 (no
   SparkContext to ask: Spark Connect).

A checkpoint that recorded another ``P`` keeps it: a default gives way to it (so a
checkpoint first run under another default, Spark's 200 before ``configure`` chose one, runs
on unchanged), and a user's value that differs is refused before the query starts, naming
the setting, both counts and the way out. Nothing here starts a session.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any

from flamestream.errors import ConfigError
from flamestream.session import CHOSEN_PARTITIONS, SHUFFLE_PARTITIONS
from flamestream.spark.durable import QueryCheckpoint, filesystem

#: Spark's own default of ``spark.sql.shuffle.partitions``.
SPARK_DEFAULT = 200

#: What ``describe()`` says before a session or a checkpoint decides.
UNDECIDED = (
    "key partitions P: chosen when applied: partitions=, else spark.sql.shuffle.partitions "
    "if set (flamestream.configure sets it to the application's cores), else the "
    "application's default parallelism; a checkpoint keeps the P it first ran with"
)


@dataclass(frozen=True)
class KeyPartitions:
    """``count`` key partitions, from ``source`` (words); ``option``: the user's setting, if any.

    ``option`` is None for a default, which gives way to a checkpoint's recorded count.
    """

    count: int
    source: str
    option: str | None = None

    def describe(self) -> str:
        """The line of ``SparkGraph.describe()``."""
        head = f"key partitions P = {self.count} (max parallelism, fixed per checkpoint)"
        return f"{head}: {self.source}"

    def for_checkpoint(self, recorded: int | None, step: str) -> KeyPartitions:
        """The count for a checkpoint that recorded ``recorded`` (None: none yet).

        A default gives way to the recorded count; the user's setting, if it differs, is a
        :class:`ConfigError` naming it.
        """
        if recorded is None or recorded == self.count:
            return self
        if self.option is None:
            return KeyPartitions(
                recorded,
                f"recorded by the checkpoint when it first ran (else {self.count}: {self.source})",
            )
        raise ConfigError(
            step,
            self.option,
            self.count,
            f"{recorded} key partitions, as when this checkpoint's state was written: keep "
            f"{self.option} at {recorded} for this checkpoint (or unset it), or start from a "
            "new checkpointLocation",
        )


def given(count: int) -> KeyPartitions:
    """``SparkGraph(partitions=count)``."""
    return KeyPartitions(count, f"SparkGraph(partitions={count})", "partitions")


#: Why a graph whose cycle hands items to other keys runs in one key partition by default.
ONE_FOR_LOOPS = (
    "a cycle hands items to other keys: one key partition by default, so each wave goes round "
    "inside one task in meta order (partitions=n spreads the keys over n, the waves then "
    "cross between batches through the loop channel)"
)


def for_cross_key_cycle() -> KeyPartitions:
    """A graph whose grouping's cycle hands items to other keys, without ``partitions=``.

    Spread over key partitions, such a cycle's items reach other partitions a micro-batch
    later (the loop channel), behind newer items of their keys: each replays its key's bucket
    from there on, and a stateful chain (connected components' node states) sends every
    replayed version round again. Measured: 54 edges over 16 nodes over 2 partitions put
    1.7 M rows in one batch's loop and did not finish in 400 s; in one partition they finish
    in 20 s, and 10,000 edges in 44 s. A default, so a checkpoint's recorded count wins.
    """
    return KeyPartitions(1, ONE_FOR_LOOPS)


def of_session(session: Any) -> KeyPartitions:
    """What ``session`` gives a graph without ``partitions=`` (steps 2 and 3 of the module doc)."""
    value = session.conf.get(SHUFFLE_PARTITIONS, None)  # None: not set, Spark's default
    if value is not None:
        count = int(value)
        chosen = str(session.conf.get(CHOSEN_PARTITIONS, None) or "")
        told, _, why = chosen.partition(" ")
        if told == str(count):
            return KeyPartitions(count, f"flamestream.configure's {SHUFFLE_PARTITIONS}, {why}")
        return KeyPartitions(
            count, f"{SHUFFLE_PARTITIONS}, set for the session", SHUFFLE_PARTITIONS
        )
    try:
        parallelism = int(session.sparkContext.defaultParallelism)
    except Exception:  # no SparkContext to ask (Spark Connect)
        return KeyPartitions(SPARK_DEFAULT, f"Spark's default {SHUFFLE_PARTITIONS}")
    return KeyPartitions(
        parallelism, f"the application's default parallelism ({SHUFFLE_PARTITIONS} not set)"
    )


def recorded(checkpoint_location: str | None) -> int | None:
    """The ``P`` the checkpoint's graph state recorded (None: no checkpoint, or not run yet)."""
    if not checkpoint_location:
        return None
    fs, root = filesystem(QueryCheckpoint(checkpoint_location).graph_url)
    try:
        written = json.loads(fs.cat_file(posixpath.join(root, "layout.json")))
    except FileNotFoundError:
        return None
    return int(written["partitions"])


def active_session() -> Any:
    """The session running in this process, or None; never starts one (nor a JVM)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() or SparkSession._instantiatedSession
