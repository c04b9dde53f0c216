"""Keyed events with Zipf-like users and skewed values, in files of one batch each, and their truth.

Event ``i`` is a JSON line ``{"key":K,"user":U,"ms":M}``: ``K`` uniform over ``keys`` keys;
``U`` the key's user of rank ``r`` (``r = floor(users ** u)``, ``u`` uniform: a log-uniform
rank, Zipf with exponent 1, rank 1 the most frequent), scattered over the user ids by a
bijection per key; ``M`` log-normal milliseconds (median 20, to two decimals). Drawn with
``random.Random(seed)``: a pure function of the parameters. :func:`write` puts ``batch``
events per file (``part-NNNNN.jsonl``), so a front reading ``batch`` records a trigger and a
file source reading one file a trigger see the same batches; a manifest next to the folder
lets a later run reuse them.
"""

from __future__ import annotations

import bisect
import json
import math
import shutil
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from random import Random

SEED = 41
#: User ids are below this; each key's ranks map to ids by ``rank * SCATTER + key`` modulo it.
USER_IDS = 10_000_000
SCATTER = 2_654_435_761  #: odd and not a multiple of 5: a bijection modulo ``USER_IDS``


@dataclass(frozen=True)
class KeyedEvents:
    """The written files and their parameters."""

    folder: str
    events: int
    keys: int
    users: int  #: ranks drawn per key, 1 .. users - 1
    batch: int  #: events per file
    seed: int
    bytes: int

    @property
    def path(self) -> Path:
        """``folder`` as a path."""
        return Path(self.folder)

    @property
    def files(self) -> int:
        """How many files (the last may hold fewer than ``batch`` events)."""
        return -(-self.events // self.batch)


def generate(
    events: int, keys: int, users: int, seed: int = SEED
) -> Iterator[tuple[int, int, float]]:
    """Every event's ``(key, user, ms)``, in order."""
    rng = Random(seed)
    for _ in range(events):
        key = rng.randrange(keys)
        rank = int(users ** rng.random())
        yield key, (rank * SCATTER + key) % USER_IDS, round(rng.lognormvariate(3.0, 1.0), 2)


def line(key: int, user: int, ms: float) -> str:
    """An event's JSON line, without its newline."""
    return f'{{"key":{key},"user":{user},"ms":{ms}}}'


def write(
    work: Path, events: int, keys: int, users: int, batch: int, seed: int = SEED
) -> KeyedEvents:
    """The files under ``work`` (reused when their manifest says they are there)."""
    name = f"keyed-{events}-k{keys}-u{users}-b{batch}-s{seed}"
    folder, manifest = work / name, work / f"{name}.json"
    if manifest.exists() and folder.is_dir():
        return KeyedEvents(**json.loads(manifest.read_text()))
    staging = work / f"{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    total, lines = 0, []
    for index, event in enumerate(generate(events, keys, users, seed)):
        lines.append(line(*event) + "\n")
        if len(lines) == batch or index == events - 1:
            part = staging / f"part-{index // batch:05d}.jsonl"
            total += part.write_bytes("".join(lines).encode())
            lines = []
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    made = KeyedEvents(str(folder), events, keys, users, batch, seed, total)
    manifest.write_text(json.dumps(asdict(made)))
    return made


@dataclass
class Truth:
    """Per key its distinct users, per quantile group its values in order."""

    distinct: dict[int, int]
    values: dict[int, array[float]]


def truth(made: KeyedEvents, groups: int) -> Truth:
    """The exact answers: distinct users per key, sorted ``ms`` per ``key % groups``."""
    pairs: set[int] = set()  # key * USER_IDS + user: one set, not one per key
    values: dict[int, array[float]] = {}
    for key, user, ms in generate(made.events, made.keys, made.users, made.seed):
        pairs.add(key * USER_IDS + user)
        values.setdefault(key % groups, array("d")).append(ms)
    distinct = Counter(pair // USER_IDS for pair in pairs)
    ordered = {group: array("d", sorted(found)) for group, found in values.items()}
    return Truth(dict(distinct), ordered)


def quantile(ordered: array[float] | tuple[float, ...], rank: float) -> float:
    """The inclusive quantile of sorted values: the first whose share at or below is ``rank``."""
    return ordered[max(0, math.ceil(rank * len(ordered)) - 1)]


def rank_error(ordered: array[float], value: float, rank: float) -> float:
    """How far ``value``'s rank in sorted values is from ``rank`` (0 if any of its ties is)."""
    below, through = bisect.bisect_left(ordered, value), bisect.bisect_right(ordered, value)
    low, high = below / len(ordered), through / len(ordered)
    return 0.0 if low <= rank <= high else min(abs(rank - low), abs(rank - high))
