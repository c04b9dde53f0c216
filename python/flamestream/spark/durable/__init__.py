"""Everything flamestream keeps under a query's checkpoint, and how it is written.

One owner for the checkpoint's layout (:class:`QueryCheckpoint`: Spark's offset and commit
logs, where the graph's and the sinks' stores live) and for the file operations every store
shares (:mod:`.files`: atomic writes, numbered folders). Stores keep their own formats; they
get their locations and their writes from here.
"""

from flamestream.spark.durable.checkpoint import (
    GRAPH_DIR,
    SINK_DIR,
    QueryCheckpoint,
    batch_id_of_task,
)
from flamestream.spark.durable.files import filesystem, numbered, write_atomically

__all__ = [
    "GRAPH_DIR",
    "SINK_DIR",
    "QueryCheckpoint",
    "batch_id_of_task",
    "filesystem",
    "numbered",
    "write_atomically",
]
