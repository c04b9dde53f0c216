"""Everything flamestream keeps under a query's checkpoint, and how it is written.

One owner for the checkpoint's layout (:class:`QueryCheckpoint`: Spark's offset and commit
logs, where the graph's and the sinks' stores live) and for the file operations every store
shares (:mod:`.files`: atomic writes on POSIX file systems and object stores alike,
numbered folders, sweeping what crashes left). Stores keep their own formats; they
get their locations and their writes from here.
"""

from flamestream.spark.durable.checkpoint import (
    GRAPH_DIR,
    SINK_DIR,
    QueryCheckpoint,
    attempt_of_task,
    batch_id_of_task,
)
from flamestream.spark.durable.files import (
    filesystem,
    listing,
    listing_details,
    numbered,
    numbered_paths,
    open_atomically,
    publish_file,
    remove,
    renames_atomically,
    stale_temporaries,
    write_atomically,
)

__all__ = [
    "GRAPH_DIR",
    "SINK_DIR",
    "QueryCheckpoint",
    "attempt_of_task",
    "batch_id_of_task",
    "filesystem",
    "listing",
    "listing_details",
    "numbered",
    "numbered_paths",
    "open_atomically",
    "publish_file",
    "remove",
    "renames_atomically",
    "stale_temporaries",
    "write_atomically",
]
