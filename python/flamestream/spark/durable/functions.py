"""Swapped-in functions, stored by content, and the record of a query's swappable steps.

Layout under the graph's state (``<checkpoint>/flamestream-graph/``):

* ``functions/<sha256>.pkl``: a function as cloudpickle pickled it, named by the SHA-256 of
  those bytes and written once (the same function submitted twice is one file). The offset
  log names a swap's function by this digest, so a replay of any batch loads the very bytes
  that batch ran with, after any restart. Functions are never removed: a batch still in the
  offset log may need any of them, and they are small.
* ``withdrawn/<key>.json``: a swap whose function raised, and the batch it raised in
  (:class:`Withdrawals`): from that batch on the step runs its function from before the swap.
  Written once, by the task that saw the function raise, before the batch fails.
* ``steps.json``: what the query's graph is, written at each query start: whether it runs
  with ``swappable=True``, each step's kind, and why a step's function cannot be swapped.
  :class:`~flamestream.spark.control.handle.QueryControl` checks a swap against it before
  submitting, from any process, without the graph.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import posixpath
from collections.abc import Callable
from typing import Any

from flamestream.errors import ConfigError, InvariantError, SwapError
from flamestream.graph.logical import LogicalGraph
from flamestream.runtime.swaps import check_swappable
from flamestream.spark.durable.files import filesystem, write_atomically

#: Functions loaded in this process, by (store, digest): each is unpickled once per worker.
_LOADED: dict[tuple[str, str], Callable[..., Any]] = {}


class FunctionStore:
    """The stored functions of one graph application (``<state>/functions/``)."""

    def __init__(self, state_url: str) -> None:
        self.url = state_url.rstrip("/") + "/functions"

    def put(self, data: bytes) -> str:
        """Store pickled function bytes (once); return their digest, the function's name."""
        digest = hashlib.sha256(data).hexdigest()
        fs, root = filesystem(self.url)
        path = posixpath.join(root, digest + ".pkl")
        if not fs.exists(path):
            write_atomically(fs, path, data, racing=True)
        return digest

    def has(self, digest: str) -> bool:
        """Whether the function ``digest`` is stored."""
        fs, root = filesystem(self.url)
        return bool(fs.exists(posixpath.join(root, digest + ".pkl")))

    def load(self, digest: str) -> Callable[..., Any]:
        """The function stored as ``digest`` (unpickled once per process)."""
        cached = _LOADED.get((self.url, digest))
        if cached is not None:
            return cached
        fs, root = filesystem(self.url)
        data = fs.cat_file(posixpath.join(root, digest + ".pkl"))
        if hashlib.sha256(data).hexdigest() != digest:
            msg = f"stored function {digest} does not hash to its name: the store is damaged"
            raise InvariantError(msg)
        fn: Callable[..., Any] = pickle.loads(data)  # noqa: S301 - the query's own store
        _LOADED[(self.url, digest)] = fn
        return fn


class Withdrawals:
    """Swaps withdrawn because their function raised (``<state>/withdrawn/``), by swap.

    A swap is named by its entry in the offset log (``{step, at, fn}``); its record holds the
    batch whose run saw the function raise and the error. The record is what makes the
    failed batch's replay different from its failed run, so it is written before the task
    fails and never changed: every later run of that batch reads it and runs without the swap.
    """

    def __init__(self, state_url: str) -> None:
        self.url = state_url.rstrip("/") + "/withdrawn"

    @staticmethod
    def key(swap: dict[str, Any]) -> str:
        """The file name part naming ``swap`` (its step, time and function)."""
        named = {"step": swap["step"], "at": list(swap["at"]), "fn": swap["fn"]}
        return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:32]

    def record(self, swap: dict[str, Any], batch_id: int, error: str) -> None:
        """Withdraw ``swap`` from batch ``batch_id`` on (a first record stays: same batch)."""
        fs, root = filesystem(self.url)
        path = posixpath.join(root, self.key(swap) + ".json")
        if fs.exists(path):
            return
        body = {**swap, "at": list(swap["at"]), "batch": batch_id, "error": error}
        write_atomically(fs, path, json.dumps(body, sort_keys=True).encode(), racing=True)

    def read(self) -> dict[str, dict[str, Any]]:
        """Every withdrawal, by :meth:`key` (one listing; none: {})."""
        fs, root = filesystem(self.url)
        try:
            names = fs.ls(root, detail=False)
        except FileNotFoundError:
            return {}
        found = {}
        for name in names:
            base = posixpath.basename(name)
            if base.endswith(".json") and not base.startswith("."):
                found[base[: -len(".json")]] = dict(json.loads(fs.cat_file(name)))
        return found


def pickled(step_id: str, fn: Any) -> bytes:
    """``fn`` as cloudpickle pickles it (as pyspark ships functions), checked to load back."""
    from pyspark import cloudpickle

    try:
        data: bytes = cloudpickle.dumps(fn)  # type: ignore[no-untyped-call]
        back = pickle.loads(data)  # noqa: S301 - what we just pickled
    except Exception as exc:  # anything cloudpickle cannot take: name it, keep the old one
        raise SwapError(
            step_id,
            "a function cloudpickle can pickle and load back",
            f"{type(fn).__name__} {fn!r} ({type(exc).__name__}: {exc})",
            "define the function at module level or as a closure over picklable values",
        ) from exc
    if not callable(back):
        raise SwapError(step_id, "a callable", f"{type(back).__name__} after pickling", "")
    return data


def _steps_path(state_url: str) -> tuple[Any, str]:
    fs, root = filesystem(state_url)
    return fs, posixpath.join(root, "steps.json")


def record_steps(state_url: str, graph: LogicalGraph, *, swappable: bool) -> None:
    """Write ``steps.json`` for a query start; ``swappable`` must not change for a checkpoint.

    A swappable query reads its swaps from the control channel's offsets, and that channel is
    one of the query's sources: Spark refuses a restart whose sources changed, and a replay
    without the swaps would run the old functions. So the flag is fixed like ``elastic``.
    """
    written = read_steps(state_url)
    if written is not None and bool(written.get("swappable")) != swappable:
        where = f"graph {graph.name}"
        raise ConfigError(
            where,
            "swappable",
            swappable,
            f"{bool(written.get('swappable'))}, as when this checkpoint's query first ran "
            "(the control channel is one of its sources): keep swappable= fixed for a "
            "checkpoint",
        )
    steps: dict[str, Any] = {}
    for sid, step in graph.steps.items():
        refused: dict[str, str] | None = None
        try:
            check_swappable(graph, sid)
        except SwapError as exc:
            refused = {"expected": exc.expected, "found": exc.found, "hint": exc.hint}
        steps[sid] = {"kind": step.kind, "refused": refused}
    record = {"graph": graph.name, "swappable": swappable, "steps": steps}
    data = json.dumps(record, sort_keys=True).encode()
    fs, path = _steps_path(state_url)
    if written != record:
        write_atomically(fs, path, data)


def read_steps(state_url: str) -> dict[str, Any] | None:
    """What ``record_steps`` wrote last (None if no query started with this state yet)."""
    fs, path = _steps_path(state_url)
    try:
        return dict(json.loads(fs.cat_file(path)))
    except FileNotFoundError:
        return None


def check_recorded(state_url: str, step_id: str) -> None:
    """Raise :class:`SwapError` unless the recorded query can swap step ``step_id``."""
    record = read_steps(state_url)
    if record is None:
        raise SwapError(
            step_id,
            "the checkpoint of a graph query that has started once",
            "no record of its graph",
            "start the query (SparkGraph(..., swappable=True)) before swapping its steps",
        )
    if not record.get("swappable"):
        raise SwapError(
            step_id,
            "a query started with SparkGraph(..., swappable=True)",
            f"graph {record.get('graph')!r} started without it",
            "swaps travel on the control channel, which swappable=True adds; it is fixed per "
            "checkpoint, so start from a new checkpoint with it",
        )
    steps = record["steps"]
    if step_id not in steps:
        raise SwapError(
            step_id,
            f"a step of graph {record.get('graph')!r}",
            "no such step",
            f"its steps are {', '.join(steps)}",
        )
    refused = steps[step_id]["refused"]
    if refused:
        raise SwapError(step_id, refused["expected"], refused["found"], refused["hint"])


__all__ = [
    "FunctionStore",
    "Withdrawals",
    "check_recorded",
    "pickled",
    "read_steps",
    "record_steps",
]
