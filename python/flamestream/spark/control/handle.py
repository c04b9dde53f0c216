"""The user's handle on a running graph query: requests that the controller turns into ticks.

``SparkGraph.control(checkpoint_location)`` (or ``QueryControl(checkpoint_location)`` from any
process that can reach the checkpoint) writes requests into the query's request store
(:mod:`flamestream.spark.durable.requests`). Nothing happens in the calling process: the
control channel's reader consumes the requests at its next planning and records in the offset
log what they decide for which batch, so that every replay of a batch does the same. A
request submitted while the query is stopped takes effect when it runs again.
"""

from __future__ import annotations

from typing import Any

from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.requests import Request, RequestStore


class QueryControl:
    """Requests to the graph query whose checkpoint is ``checkpoint_location``."""

    def __init__(self, checkpoint_location: str) -> None:
        self.checkpoint = checkpoint_location
        self.store = RequestStore(QueryCheckpoint(checkpoint_location).graph_url)

    def submit(self, kind: str, body: dict[str, Any]) -> Request:
        """Write one request for the controller (the typed methods call this)."""
        return self.store.submit(kind, body)

    def requests(self, after: str = "") -> list[Request]:
        """The requests submitted after the one named ``after`` ("" for all kept)."""
        return self.store.after(after)
