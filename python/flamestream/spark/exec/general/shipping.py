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
from typing import Any

#: The internal option that carries a stage's work to a front or the sink.
OPTION = "graphStage"


def ship(work: Any) -> str:
    """Graph work (a stage's runner) as an :data:`OPTION` value: cloudpickle, zlib, base64."""
    from pyspark import cloudpickle

    pickled = cloudpickle.dumps(work)  # type: ignore[no-untyped-call]
    return base64.b64encode(zlib.compress(pickled)).decode("ascii")


def unship(value: str) -> Any:
    """The work an option value made by :func:`ship` carries."""
    from pyspark import cloudpickle

    return cloudpickle.loads(zlib.decompress(base64.b64decode(value)))
