"""The ``generator`` front: deterministic synthetic records for demos and benchmarks.

Record ``i`` of partition ``p`` is a pure function of ``(seed, p, i)``: a key drawn from
``keys`` keys with Zipf skew ``keySkew`` (0 = uniform) and a payload of ``payloadBytes``
characters. Each partition is a front; ``rowsPerSecond`` (over all partitions) says how many
records become available per second since the query first started, up to ``totalRows``
(0: all of ``totalRows`` at once).

``rateSteps`` replaces ``rowsPerSecond`` with a rate that changes over time: comma-separated
``seconds:rowsPerSecond`` steps, e.g. ``"0:2000,20:20000"`` (2000/s for 20 s, then 20000/s),
seconds increasing from 0 since the clock started, a rate of 0 pausing. The records
available after ``t`` seconds are the integral of that piecewise-constant rate up to ``t``.

``skewSteps`` replaces ``keySkew`` with a skew that changes along the records: comma-separated
``record:exponent`` steps, e.g. ``"0:0.0,3000:1.6"`` (uniform keys for records 0 .. 2999 of
each partition, Zipf 1.6 from record 3000 on), records increasing from 0. The step is by
record index, not by time, so a record's key stays a function of ``(seed, p, i)`` and a
replay reads the same keys.

Options: ``rowsPerSecond`` (1000) or ``rateSteps``, ``totalRows`` (unbounded), ``partitions``
(2), ``keys`` (100), ``keySkew`` (0.0) or ``skewSteps``, ``payloadBytes`` (16), ``seed`` (0),
plus the common front options.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate

import pyarrow as pa

from flamestream.errors import ConfigError
from flamestream.spark.connector.front import FrontSource
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader

#: Records per Arrow batch produced by ``read``.
CHUNK = 8192

#: What ``rateSteps`` accepts, for its errors.
RATE_STEPS_ALLOWED = (
    "comma-separated seconds:rowsPerSecond steps, seconds increasing from 0, rates >= 0 and "
    "not all 0 (e.g. '0:2000,20:20000')"
)

#: What ``skewSteps`` accepts, for its errors.
SKEW_STEPS_ALLOWED = (
    "comma-separated record:exponent steps, per-partition record indexes increasing from 0, "
    "Zipf exponents >= 0 (e.g. '0:0.0,3000:1.6')"
)


def zipf_cdf(keys: int, exponent: float) -> list[float]:
    """The cumulative shares of keys ``k0 .. k<keys-1>`` under Zipf ``exponent`` (0: uniform).

    The last share is exactly 1.0 (``sum`` and ``accumulate`` add in the same order), so a
    draw in [0, 1) always finds a key.

    >>> zipf_cdf(2, 1.0)
    [0.6666666666666666, 1.0]
    """
    weights = [1.0 / (rank**exponent) for rank in range(1, keys + 1)]
    total = sum(weights)
    return [w / total for w in accumulate(weights)]


def parse_skew_steps(options: OptionReader, name: str, text: str) -> list[tuple[int, float]]:
    """``text`` as ``record:exponent,...``; a ConfigError naming ``name`` if malformed.

    >>> parse_skew_steps(OptionReader("front generator", {}), "skewSteps", "0:0,3000:1.6")
    [(0, 0.0), (3000, 1.6)]
    """
    steps, problem = _skew_steps(text)
    if problem:
        raise ConfigError(
            options.step, options.label(name), text, f"{SKEW_STEPS_ALLOWED}; {problem}"
        )
    return steps


def _skew_steps(text: str) -> tuple[list[tuple[int, float]], str]:
    """The steps of ``text`` and what is wrong with them ("" if nothing)."""
    steps: list[tuple[int, float]] = []
    for number, entry in enumerate(text.split(","), 1):
        shown = repr(entry.strip())
        try:
            record_text, exponent_text = entry.split(":")  # not two: ValueError
            record, exponent = int(record_text), float(exponent_text)
        except ValueError:
            return steps, f"step {number} {shown} is not record:exponent (an integer record)"
        if record < 0 or not math.isfinite(exponent) or exponent < 0:
            return steps, f"step {number} {shown} has a negative record or exponent (or inf)"
        if not steps and record != 0:
            return steps, f"the first step starts at record {record}, not at 0"
        if steps and record <= steps[-1][0]:
            return steps, f"step {number} starts at record {record}, not after {steps[-1][0]}"
        steps.append((record, exponent))
    return steps, ""


@dataclass(frozen=True)
class RateSchedule:
    """A piecewise-constant rate over all partitions: ``(second, rows per second)`` steps.

    Each step's rate holds from its second until the next step's (the last one forever); the
    first step is at second 0 and the seconds increase.

    >>> schedule = RateSchedule(((0.0, 100.0), (10.0, 1000.0)))
    >>> schedule.records(12.0), schedule.elapsed_for(3000.0)
    (3000.0, 12.0)
    """

    steps: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, options: OptionReader, name: str, text: str) -> RateSchedule:
        """``text`` as ``seconds:rate,...``; a ConfigError naming ``name`` if malformed."""
        steps, problem = cls._steps(text)
        if problem:
            raise ConfigError(
                options.step, options.label(name), text, f"{RATE_STEPS_ALLOWED}; {problem}"
            )
        return cls(tuple(steps))

    @staticmethod
    def _steps(text: str) -> tuple[list[tuple[float, float]], str]:
        """The steps of ``text`` and what is wrong with them ("" if nothing)."""
        steps: list[tuple[float, float]] = []
        for number, entry in enumerate(text.split(","), 1):
            shown = repr(entry.strip())
            try:
                second, rate = (float(part) for part in entry.split(":"))  # not two: ValueError
            except ValueError:
                return steps, f"step {number} {shown} is not seconds:rowsPerSecond"
            if not (math.isfinite(second) and math.isfinite(rate)) or second < 0 or rate < 0:
                return steps, f"step {number} {shown} has a negative or infinite number"
            if not steps and second != 0:
                return steps, f"the first step starts at {second:g} s, not at 0"
            if steps and second <= steps[-1][0]:
                return steps, f"step {number} starts at {second:g} s, not after {steps[-1][0]:g} s"
            steps.append((second, rate))
        if not any(rate for _, rate in steps):
            return steps, "every rate is 0: no record would ever be made"
        return steps, ""

    def _spans(self) -> Iterator[tuple[float, float, float]]:
        """Each step as (start, end, rate); the last one ends at infinity."""
        ends = [second for second, _ in self.steps[1:]] + [math.inf]
        for (start, rate), end in zip(self.steps, ends, strict=True):
            yield start, end, rate

    def records(self, elapsed: float) -> float:
        """Records made in the first ``elapsed`` seconds: the integral of the rate."""
        made = 0.0
        for start, end, rate in self._spans():
            if elapsed <= start:
                break
            made += rate * (min(elapsed, end) - start)
        return made

    def elapsed_for(self, records: float) -> float:
        """The first time by which ``records`` were made (inverts :meth:`records`).

        If the rate drops to 0 for good before that many, the start of that last pause.
        """
        made = 0.0
        for start, end, rate in self._spans():
            if records <= made:
                return start
            if rate > 0 and made + rate * (end - start) >= records:
                return start + (records - made) / rate
            if end == math.inf:  # a final pause: never that many
                return start
            made += rate * (end - start)
        return self.steps[-1][0]  # not reached: the last span ends at infinity


def _steps_option(options: OptionReader, steps_name: str, single_name: str) -> str | None:
    """The ``steps_name`` option's value, unless ``single_name`` (which it replaces) wins.

    Both given the same way (both ``.option()`` or both confs) is an error; an explicit
    ``.option()`` beats a ``spark.flamestream.*`` conf default of the other.
    """
    steps, single = options.raw(steps_name), options.raw(single_name)
    if steps is None or single is None:
        return steps
    steps_set = options.label(steps_name) == steps_name
    single_set = options.label(single_name) == single_name
    if steps_set == single_set:
        raise ConfigError(
            options.step,
            options.label(steps_name),
            steps,
            f"either {steps_name} or {single_name}, not both ({steps_name} replaces it)",
        )
    return None if single_set else steps


class GeneratorSource(FrontSource):
    """Synthetic, replayable records."""

    kind = "generator"

    def __init__(self, options: OptionReader) -> None:
        #: None: everything available at once (``rowsPerSecond`` 0)
        self.schedule = self._schedule(options)
        self.total_rows = options.optional_integer("totalRows", minimum=0)
        self.partitions = options.integer("partitions", 2, minimum=1)
        self.keys = options.integer("keys", 100, minimum=1)
        #: (first record, Zipf exponent) per step; one step (record 0) without ``skewSteps``
        self.skew_steps = self._skew_steps(options)
        self.skew = self.skew_steps[0][1]  #: the first step's exponent (keySkew's value)
        self.payload_bytes = options.integer("payloadBytes", 16, minimum=0)
        self.seed = options.integer("seed", 0)
        # one CDF per step, computed once: read_range only bisects
        self._starts = [record for record, _ in self.skew_steps]
        self._cdfs = [zipf_cdf(self.keys, exponent) for _, exponent in self.skew_steps]
        if options.choice("clock", ["wall", "logical", "record"], "wall") == "record":
            raise ConfigError(
                options.step,
                options.label("clock"),
                "record",
                "wall or logical: generated records have no time of their own",
            )
        self._started_ns: int | None = None  # driver side: when the rate's clock started
        self._resumed = False  # driver side: whether the clock was set back for a restart

    @staticmethod
    def _schedule(options: OptionReader) -> RateSchedule | None:
        """``rateSteps``, or ``rowsPerSecond`` as a schedule of one step."""
        steps = _steps_option(options, "rateSteps", "rowsPerSecond")
        if steps is not None:
            return RateSchedule.parse(options, "rateSteps", steps)
        rate = options.number("rowsPerSecond", 1000.0, minimum=0.0)
        return RateSchedule(((0.0, rate),)) if rate else None

    @staticmethod
    def _skew_steps(options: OptionReader) -> list[tuple[int, float]]:
        """``skewSteps``, or ``keySkew`` as one step from record 0."""
        steps = _steps_option(options, "skewSteps", "keySkew")
        if steps is not None:
            return parse_skew_steps(options, "skewSteps", steps)
        return [(0, options.number("keySkew", 0.0, minimum=0.0))]

    def payload_fields(self) -> list[pa.Field]:
        """A key and a value, both strings."""
        return [pa.field("key", pa.string()), pa.field("value", pa.string())]

    def _key(self, partition: int) -> str:
        return f"generator-{partition}"

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Every partition, with how many of its records exist by now."""
        now = time.time_ns()
        if self._started_ns is None:
            self._started_ns = now
        schedule = self.schedule
        if known and not self._resumed and schedule is not None:
            # A restart from a checkpoint resumes the rate where the offsets left off, instead
            # of producing nothing new for as long as the earlier run had been running: the
            # clock is set back by the time the schedule takes to make that many records.
            self._resumed = True
            behind = schedule.elapsed_for(max(known.values()) * self.partitions)
            self._started_ns = min(self._started_ns, now - int(behind * 1e9))
        elapsed = (now - self._started_ns) / 1e9
        made = schedule.records(elapsed) if schedule is not None else 0.0
        per_partition = int(made / self.partitions)
        out = {}
        for p in range(self.partitions):
            reached = max(per_partition, known.get(self._key(p), 0))
            share = self._share(p)
            if share is not None:
                reached = min(reached, share) if schedule is not None else share
            out[self._key(p)] = reached
        return out

    def _share(self, partition: int) -> int | None:
        """How many records the partition has in all (None: unbounded)."""
        if self.total_rows is None:
            return None
        return self.total_rows // self.partitions + (partition < self.total_rows % self.partitions)

    def finished(self, key: str, position: int) -> bool:
        """With ``totalRows``: the partition's share is read, no record can follow."""
        share = self._share(int(key.rsplit("-", 1)[1]))
        return share is not None and position >= share

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """Records ``start .. end - 1`` of the partition."""
        partition = int(part.key.rsplit("-", 1)[1])
        starts, cdfs = self._starts, self._cdfs
        for first in range(part.start, part.end, CHUNK):
            indexes = range(first, min(part.end, first + CHUNK))
            keys, values = [], []
            # the step of the chunk's first record; later records move on at each next start
            step = bisect.bisect_right(starts, first) - 1
            following = starts[step + 1] if step + 1 < len(starts) else math.inf
            cdf = cdfs[step]
            for i in indexes:
                if i >= following:
                    step = bisect.bisect_right(starts, i) - 1
                    following = starts[step + 1] if step + 1 < len(starts) else math.inf
                    cdf = cdfs[step]
                digest = hashlib.blake2b(f"{self.seed}/{partition}/{i}".encode(), digest_size=8)
                draw = int.from_bytes(digest.digest(), "little") / 2**64
                keys.append(f"k{bisect.bisect_left(cdf, draw)}")
                repeated = digest.hexdigest() * (self.payload_bytes // 16 + 1)
                values.append(repeated[: self.payload_bytes])
            yield pa.RecordBatch.from_pydict(
                {"position": pa.array(indexes, pa.int64()), "key": keys, "value": values}
            )

    def __getstate__(self) -> dict[str, object]:
        return dict(self.__dict__)
