"""Random valid graphs, from a seed: the shapes no hand-written test thought of.

A graph is grown from its source by drawing operations on a pool of open streams: maps,
flat_maps that may output nothing, filters (some on a grouping's tuples, so that a replayed
version can be dropped where the old one passed: tombstones), groupings with windows 1-4 and
value-dependent keys, map_reduce, broadcasts, merges of any two open streams (diamonds when
both come from one broadcast). Whatever is open at the end goes to 1-3 sinks, declared in a
random order. ``declared=True`` also draws the steps runtimes recognize by their declared
type (``str.split``, ``count``, ``operator.add`` as map_reduce's reducer, ``Template``
renders): the shapes the plan gives a fast path (``flamestream.spark.plan.paths``).
Payloads are strings throughout (a grouping's tuple is joined with ``+``), so
every graph runs on text fronts and renders the same everywhere.

User functions are closures made here, so Spark's workers get them by value (cloudpickle),
and each has a readable ``__name__`` for ``describe`` and errors.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flamestream import Dataflow, Template, count, map_reduce
from flamestream.graph.dataflow import Stream

ALPHABET = ("a", "b", "ab", "ba", "c", "bca")


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _weight(text: str) -> int:
    """A deterministic number of a string (Python's ``hash`` of str is salted per process)."""
    return sum(map(ord, text))


def suffix(tag: str) -> Callable[[str], str]:
    return _named(lambda s: s + tag, f"suffix_{tag}")


def split_on(sep: str) -> Callable[[str], list[str]]:
    """Splits on ``sep``; an empty string gives nothing, so a flat_map may drop an item."""
    return _named(lambda s: [p for p in s.split(sep) if p], f"split_on_{ord(sep)}")


def weight_filter(modulus: int, dropped: int) -> Callable[[str], bool]:
    return _named(lambda s: _weight(s) % modulus != dropped, f"weight_mod{modulus}_not{dropped}")


def arity_filter(parity: int) -> Callable[[str], bool]:
    """On a grouping's joined tuple: replays change a tuple's arity, so versions disagree."""
    return _named(lambda s: s.count("+") % 2 == parity, f"arity_{parity}")


def weight_key(modulus: int) -> Callable[[str], int]:
    return _named(lambda s: _weight(s) % modulus, f"key_weight_mod{modulus}")


def first_char_key() -> Callable[[str], str]:
    return _named(lambda s: s[:1], "key_first_char")


def join_tuple() -> Callable[[tuple[str, ...]], str]:
    return _named(lambda t: "(" + "+".join(t) + ")", "join")


def show_reduced() -> Callable[[Any], str]:
    return _named(lambda r: f"{r.key}={r.value}", "show")


def first_char_count() -> Callable[[str], tuple[str, int]]:
    return _named(lambda s: (s[:1], 1), "first_char_one")


def add() -> Callable[[int, int], int]:
    return _named(lambda a, b: a + b, "add")


@dataclass
class Grown:
    """A generated graph and what it is made of (for messages and coverage checks)."""

    flow: Dataflow
    seed: int
    ops: list[str] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)

    @property
    def groupings(self) -> int:
        return sum(op.startswith(("grouping", "map_reduce")) for op in self.ops)

    def __str__(self) -> str:
        return f"seed {self.seed}: {' '.join(self.ops)}; sinks {', '.join(self.sinks)}"


def random_graph(seed: int, *, max_groupings: int = 3, declared: bool = False) -> Grown:
    """A valid graph with 1 to ``max_groupings`` groupings and 1-3 sinks, from ``seed``.

    ``declared``: also declared steps (module docstring); without, the same graphs as ever.
    """
    rng = random.Random(seed)
    flow = Dataflow(f"random{seed}")
    grown = Grown(flow, seed)
    pool: list[Stream] = [flow.source("lines")]
    target = rng.randint(1, max_groupings)
    count = 0

    def step_id(kind: str) -> str:
        nonlocal count
        count += 1
        grown.ops.append(kind)
        return f"{kind}{count}"

    def take() -> Stream:
        return pool.pop(rng.randrange(len(pool)))

    grouped_streams: set[int] = set()  # ids of streams carrying joined tuples
    while grown.groupings < target or rng.random() < 0.35:
        kind = rng.choice(
            ["map", "flat_map", "filter", "grouping", "grouping", "broadcast", "merge"]
            + (["map_reduce"] if grown.groupings < max_groupings else [])
        )
        if kind in ("grouping", "map_reduce") and grown.groupings >= max_groupings:
            kind = "map"
        if kind == "merge" and len(pool) < 2:
            kind = "broadcast"
        if kind == "map":
            up = take()
            pool.append(flow.map(step_id("map"), up, suffix(rng.choice("xyz"))))
        elif kind == "flat_map":
            up = take()
            splitter: Callable[[str], list[str]] = split_on(rng.choice(" +a"))
            if declared and rng.random() < 0.5:
                splitter = str.split
            pool.append(flow.flat_map(step_id("flat_map"), up, splitter))
        elif kind == "filter":
            up = take()
            on_tuples = id(up) in grouped_streams and rng.random() < 0.7
            fn = arity_filter(rng.randint(0, 1)) if on_tuples else None
            fn = fn or weight_filter(rng.randint(2, 4), rng.randint(0, 1))
            pool.append(flow.filter(step_id("filter"), up, fn))
        elif kind == "grouping":
            up = take()
            window = rng.randint(1, 4)
            key = first_char_key() if rng.random() < 0.5 else weight_key(rng.randint(1, 3))
            tuples = flow.grouping(step_id(f"grouping_w{window}_"), up, window=window, key=key)
            joined = flow.map(step_id("join"), tuples, join_tuple())
            grouped_streams.add(id(joined))
            pool.append(joined)
        elif kind == "map_reduce" and declared:
            pool.append(_declared_reduce(flow, take(), step_id, rng))
        elif kind == "map_reduce":
            up = take()
            counts = map_reduce(
                flow, step_id("map_reduce"), up, mapper=first_char_count(), reducer=add()
            )
            pool.append(flow.map(step_id("show"), counts, show_reduced()))
        elif kind == "broadcast":
            up = take()
            pool.extend(flow.broadcast(step_id("broadcast"), up, rng.randint(2, 3)))
        else:
            a, b = take(), take()
            pool.append(flow.merge(step_id("merge"), a, b))
        if len(pool) > 4:  # keep the graph small: fold two open streams together
            a, b = take(), take()
            pool.append(flow.merge(step_id("merge"), a, b))
    sinks = rng.randint(1, min(3, len(pool)))
    while len(pool) > sinks:
        a, b = take(), take()
        pool.append(flow.merge(step_id("merge"), a, b))
    rng.shuffle(pool)
    for number, stream in enumerate(pool):
        name = f"sink{number}"
        flow.sink(name, stream)
        grown.sinks.append(name)
    return grown


def _declared_reduce(
    flow: Dataflow, up: Stream, step_id: Callable[[str], str], rng: random.Random
) -> Stream:
    """A count (of split text or not), a summing or a lambda map_reduce, and a render."""
    how = rng.choice(["count", "split_count", "sum", "lambda"])
    if how == "split_count":
        up = flow.flat_map(step_id("flat_map"), up, str.split)
    if how in ("count", "split_count"):
        counts = count(flow, step_id("map_reduce"), up)
    else:
        reducer = operator.add if how == "sum" else add()
        counts = map_reduce(
            flow, step_id("map_reduce"), up, mapper=first_char_count(), reducer=reducer
        )
    render = rng.choice([Template("{key}={value}"), Template("{key}"), show_reduced()])
    return flow.map(step_id("show"), counts, render)
