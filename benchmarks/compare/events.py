"""The gaps workload's corpus: timed events of many keys in JSON lines, generated once.

File ``f`` of ``F`` holds ``events // F`` lines ``{"key":"k00042","time":1234567}``. Within a
file times strictly increase (steps of ``F`` to ``F * MAX_STEP``, drawn with
``random.Random(seed)``), and every time is ``f`` modulo ``F``, so no two events anywhere share
a time; every file covers the same span of time, and each line's key is drawn uniformly from
``keys`` keys, so a key's events are spread over every file and interleave across them: a key's
order is its events' time order, which no single file gives. The files are written under
``work/events-<events>x<files>-k<keys>-s<seed>/`` (``part-NNN.jsonl``) with a manifest next to
it; a later run with the same parameters reuses them.

:func:`reference_gaps` is what every gaps variant must release: per key, for each event but
its first (in time order), ``(key, time, time - the key's previous time)``.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from random import Random

SEED = 29
#: A file's consecutive times differ by ``files`` times 1 to this.
MAX_STEP = 8

#: One released gap: the key, the later event's time, the time since the key's previous event.
Gap = tuple[str, int, int]


@dataclass(frozen=True)
class Events:
    """The generated event files and what they hold."""

    folder: str  #: the directory of ``part-NNN.jsonl`` files
    events: int
    files: int
    keys: int  #: keys drawn from (``k00000`` ..)
    seed: int
    distinct: int  #: keys that occur
    bytes: int

    @property
    def path(self) -> Path:
        """``folder`` as a path."""
        return Path(self.folder)

    @property
    def gaps(self) -> int:
        """The gaps released: every event but each key's first."""
        return self.events - self.distinct

    def report(self) -> dict[str, object]:
        """The ``events_input`` section of the report."""
        return asdict(self) | {"gaps": self.gaps, "max_step": MAX_STEP}


def key_name(index: int) -> str:
    """Key ``index``'s name: ``k`` and five digits (more if ``index`` needs them)."""
    return f"k{index:05d}"


def line(key: str, time: int) -> str:
    """One event's line (without its newline), as the generator writes it."""
    return json.dumps({"key": key, "time": time}, separators=(",", ":"))


def parse(text: str) -> tuple[str, int]:
    """An event line's ``(key, time)``."""
    found = json.loads(text)
    return str(found["key"]), int(found["time"])


def read(folder: Path) -> list[tuple[str, int]]:
    """Every event of the ``*.jsonl`` files in ``folder``, file by file."""
    found: list[tuple[str, int]] = []
    for part in sorted(folder.glob("*.jsonl")):
        with part.open(encoding="utf-8") as lines:
            found += [parse(text) for text in lines]
    return found


def reference_gaps(events: list[tuple[str, int]]) -> list[Gap]:
    """Per key in time order, each event but the first with the time since the one before."""
    times: dict[str, list[int]] = defaultdict(list)
    for key, time in events:
        times[key].append(time)
    found: list[Gap] = []
    for key in sorted(times):
        ordered = sorted(times[key])
        found += [(key, t, t - before) for before, t in pairwise(ordered)]
    return found


def _write(folder: Path, events: int, files: int, keys: int, seed: int) -> tuple[int, int]:
    """Write the files into ``folder``: their bytes and the keys that occur."""
    rng, total, seen = Random(seed), 0, set()
    for f in range(files):
        first, stop = events * f // files, events * (f + 1) // files
        time, lines = f, []
        for _ in range(stop - first):
            time += files * rng.randint(1, MAX_STEP)
            key = rng.randrange(keys)
            seen.add(key)
            lines.append(line(key_name(key), time) + "\n")
        total += (folder / f"part-{f:03d}.jsonl").write_bytes("".join(lines).encode())
    return total, len(seen)


def corpus(work: Path, events: int, files: int, keys: int, seed: int = SEED) -> Events:
    """The event corpus under ``work``: read from its manifest, else generated first."""
    name = f"events-{events}x{files}-k{keys}-s{seed}"
    folder, manifest = work / name, work / f"{name}.json"
    if manifest.exists() and folder.is_dir():
        return Events(**json.loads(manifest.read_text()))
    staging = work / f"{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    total, distinct = _write(staging, events, files, keys, seed)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    made = Events(str(folder), events, files, keys, seed, distinct, total)
    manifest.write_text(json.dumps(asdict(made)))
    return made


def mismatch(expected: list[Gap], found: list[Gap]) -> str | None:
    """Why ``found`` is not ``expected`` as a multiset (counts and examples), or None."""
    if len(found) == len(expected) and sorted(found) == sorted(expected):
        return None
    want, got = set(expected), set(found)
    missing, extra = sorted(want - got), sorted(got - want)
    repeated = len(found) - len(got)
    return (
        f"{len(found)} gaps released, {len(expected)} expected: {len(missing)} missing "
        f"(e.g. {missing[:3]}), {len(extra)} not expected (e.g. {extra[:3]}), "
        f"{repeated} released more than once"
    )
