"""Requests to a running query (rescale, swap), written by the user, read by the controller.

Layout: ``<graph>/requests/<name>.json`` (:class:`RequestStore`), one file per request, written
once. A request is input, not a decision: the control channel's reader (in the driver's source
process) reads the requests it has not consumed yet at each planning, decides what they mean
for the coming batch, and records that decision in its end offset, with the name of the last
request it consumed. Spark writes that offset into its offset log before the batch runs, so a
replayed batch sees the same decision however many requests arrived since; requests are never
read on executors.

Names sort in submission order: ``<wall ns, 20 digits>-<kind>-<random>``. Two processes
submitting in the same nanosecond get an arbitrary but fixed order, which is all a request
needs: its effect is fixed when the controller records it, not when it is written.
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid
from dataclasses import dataclass
from typing import Any

from flamestream.spark.durable.files import filesystem, listing, remove, write_atomically

#: Consumed requests older than this many are removed when the controller reads.
KEEP_CONSUMED = 64


@dataclass(frozen=True)
class Request:
    """One request: its name (its place in the order), what it asks, and its arguments."""

    name: str
    kind: str
    body: dict[str, Any]


class RequestStore:
    """The requests of one graph application (``<state>/requests/``, any fsspec URL)."""

    def __init__(self, state_url: str) -> None:
        self.url = state_url.rstrip("/") + "/requests"

    def submit(self, kind: str, body: dict[str, Any]) -> Request:
        """Write a request once, under a new name; returns it."""
        name = f"{time.time_ns():020d}-{kind}-{uuid.uuid4().hex[:8]}"
        fs, root = filesystem(self.url)
        data = json.dumps({"kind": kind, "body": body}, sort_keys=True).encode()
        write_atomically(fs, posixpath.join(root, name + ".json"), data)
        return Request(name, kind, body)

    def _paths(self) -> tuple[Any, list[str]]:
        """The file system and the request files, in submission order (one listing)."""
        fs, root = filesystem(self.url)
        return fs, sorted(p for p in listing(fs, root) if p.endswith(".json"))

    def after(self, consumed: str, *, forget: bool = False) -> list[Request]:
        """The requests after ``consumed`` (a name; "" for all), in submission order.

        ``forget``: also remove all but the newest :data:`KEEP_CONSUMED` requests at or before
        ``consumed``, from the same listing (the control channel, whose offset with
        ``consumed`` Spark has logged).
        """
        fs, paths = self._paths()
        done = [p for p in paths if _name(p) <= consumed]
        if forget:
            remove(fs, done[:-KEEP_CONSUMED])
        out = []
        for path in paths[len(done) :]:
            stored = json.loads(fs.cat_file(path))
            out.append(Request(_name(path), str(stored["kind"]), dict(stored["body"])))
        return out

    def forget_through(self, consumed: str) -> None:
        """Remove all but the newest :data:`KEEP_CONSUMED` requests at or before ``consumed``."""
        fs, paths = self._paths()
        remove(fs, [p for p in paths if _name(p) <= consumed][:-KEEP_CONSUMED])


def _name(path: str) -> str:
    """A request's name: its file's name without ``.json``."""
    return posixpath.basename(path)[: -len(".json")]
