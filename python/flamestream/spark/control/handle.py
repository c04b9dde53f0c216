"""The user's handle on a running graph query: requests that the controller turns into ticks.

``SparkGraph.control(checkpoint_location)`` (or ``QueryControl(checkpoint_location)`` from any
process that can reach the checkpoint) writes requests into the query's request store
(:mod:`flamestream.spark.durable.requests`). Nothing happens in the calling process: the
control channel's reader consumes the requests at its next planning and records in the offset
log what they decide for which batch, so that every replay of a batch does the same. A
request submitted while the query is stopped takes effect when it runs again.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from flamestream.errors import ConfigError
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.files import filesystem
from flamestream.spark.durable.requests import Request, RequestStore


class QueryControl:
    """Requests to the graph query whose checkpoint is ``checkpoint_location``."""

    def __init__(self, checkpoint_location: str) -> None:
        self.checkpoint = checkpoint_location
        self.state_url = QueryCheckpoint(checkpoint_location).graph_url
        self.store = RequestStore(self.state_url)

    def submit(self, kind: str, body: dict[str, Any]) -> Request:
        """Write one request for the controller (the typed methods call this)."""
        return self.store.submit(kind, body)

    def requests(self, after: str = "") -> list[Request]:
        """The requests submitted after the one named ``after`` ("" for all kept)."""
        return self.store.after(after)

    def rescale(self, active: int, *, not_before_batch: int | None = None) -> Request:
        """Lay the keyed stages' slots out over ``active`` of the ``P`` key partitions.

        The migration starts at the next planned batch (or the first with id at least
        ``not_before_batch``: schedules and tests) and moves a bounded number of slots per
        batch (``ElasticPolicy.max_move_slots`` / ``max_move_bytes``); the released output
        is the same as without it. ``active`` is checked here against ``P`` when the
        checkpoint already knows it (its ``layout.json``), else when the request is consumed
        (a refused request is recorded in the control channel's offset and logged).
        """
        partitions, elastic = self._layout()
        where = f"rescale of the query at {self.checkpoint}"
        if elastic is False:
            raise ConfigError(where, "elastic", False, "a graph applied with elastic=")
        upper = f"to {partitions} (the key partitions, P)" if partitions else "to P"
        allowed = f"an int from 1 {upper}"
        if not isinstance(active, int) or isinstance(active, bool) or active < 1:
            raise ConfigError(where, "active", active, allowed)
        if partitions is not None and active > partitions:
            raise ConfigError(where, "active", active, allowed)
        body: dict[str, Any] = {"active": active}
        if not_before_batch is not None:
            if not isinstance(not_before_batch, int) or not_before_batch < 0:
                raise ConfigError(where, "not_before_batch", not_before_batch, "an int >= 0")
            body["notBeforeBatch"] = not_before_batch
        return self.submit("rescale", body)

    def _layout(self) -> tuple[int | None, bool | None]:
        """``P`` and whether the graph is elastic, from ``layout.json`` (None: not known yet)."""
        fs, root = filesystem(self.state_url)
        path = posixpath.join(root, "layout.json")
        if not fs.exists(path):
            return None, None
        written = json.loads(fs.cat_file(path))
        return int(written["partitions"]), bool(written.get("elastic", False))
