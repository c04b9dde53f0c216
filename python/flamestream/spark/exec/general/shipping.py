"""Graph work shipped to a data source in an option: how a stage reaches fronts and sinks.

Data sources run in Python processes of their own (planners on the driver host, tasks on
executors) that share nothing with the process that called ``apply``: an option is how work
reaches them. ``apply`` sets ``graphStage`` on a front's reader (the graph's first stage,
:mod:`.front_stage`) and ``write_stream`` on the flamestream sink's writer (the last keyed
stage); users never set it.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Collection, Iterator
from typing import Any, Protocol

import pyarrow as pa

#: The internal option that carries a stage's work to a front or the sink.
OPTION = "graphStage"


class SinkTask(Protocol):
    """The work ``write_stream`` ships to the sink's write tasks (run on executors).

    A keyed stage with its tails (``WithTails``, ``KeyedRunner``) or, for the empty graph,
    the opening of the fronts' blocks (``passthrough.OpenedBlocks``). Called with the task's
    input batches, it yields item rows bound for the sink, in meta order within each run.
    """

    def keep_only(self, columns: Collection[str]) -> None:
        """Only ``columns`` of the released rows are kept by the sink (called before any rows)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The item rows the task's input batches make."""


def ship(work: Any) -> str:
    """Graph work (a stage's runner) as an :data:`OPTION` value: cloudpickle, zlib, base64."""
    from pyspark import cloudpickle

    pickled = cloudpickle.dumps(work)  # type: ignore[no-untyped-call]
    return base64.b64encode(zlib.compress(pickled)).decode("ascii")


def unship(value: str) -> Any:
    """The work an option value made by :func:`ship` carries."""
    from pyspark import cloudpickle

    return cloudpickle.loads(zlib.decompress(base64.b64decode(value)))
