"""Word count: lines -> words -> a running count per word, admitted out of order.

The graph is ``lines`` (source) -> ``split`` (flat_map) -> ``count`` (map_reduce) ->
``counts`` (sink). Every word occurrence releases the word's updated count, so the last
released value of a word is its total.

The job deals the lines of a text round-robin over several fronts, admits them in a seeded
random interleaving of the fronts, and between two admissions lets a seeded
:class:`RandomScheduler` deliver only part of what is in flight: a random few envelopes (up
to ``--lag``) stay behind and are overtaken by later ones. Groupings replay, and the barrier
sink still releases exactly what an in-order run would; the job checks its final counts
against :class:`collections.Counter`::

    python -m flamestream.examples.wordcount [--input PATH] [--fronts N] [--seed S] [--lag L]
"""

from __future__ import annotations

import argparse
import random
import string
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from operator import add
from pathlib import Path

from flamestream import Dataflow, Reduced, ReferenceRuntime, Released, map_reduce
from flamestream.runtime import RandomScheduler

#: The bundled sample text, under ``flamestream/examples/data``.
SAMPLE = "sample.txt"
#: Between two admissions, deliveries stop once at most a random 0..lag envelopes are left.
DEFAULT_LAG = 40
#: A progress line is printed every this many admitted lines.
PROGRESS_EVERY = 20


def split_words(line: str) -> list[str]:
    """The lowercase words of ``line``, with surrounding punctuation stripped."""
    words = (token.strip(string.punctuation) for token in line.lower().split())
    return [word for word in words if word]


def word_one(word: str) -> tuple[str, int]:
    """The mapper: every occurrence of a word counts once."""
    return word, 1


def build_flow() -> Dataflow:
    """The word count graph: lines -> split -> count (map_reduce) -> counts."""
    flow = Dataflow("wordcount")
    lines = flow.source("lines")
    words = flow.flat_map("split", lines, split_words)
    counts = map_reduce(flow, "count", words, mapper=word_one, reducer=add)
    flow.sink("counts", counts)
    return flow


def load_sample() -> str:
    """The text of the bundled sample."""
    sample = resources.files("flamestream.examples") / "data" / SAMPLE
    return sample.read_text(encoding="utf-8")


def count_words(lines: Iterable[str]) -> Counter[str]:
    """The expected result, computed directly: every word of ``lines`` counted."""
    return Counter(word for line in lines for word in split_words(line))


def final_counts(released: Iterable[Released]) -> dict[str, int]:
    """The last released count of every word."""
    counts: dict[str, int] = {}
    for item in released:
        reduced: Reduced[str, int] = item.payload
        counts[reduced.key] = reduced.value
    return counts


def deal(lines: Sequence[str], fronts: int) -> list[list[str]]:
    """Deal ``lines`` round-robin: front ``f`` gets lines ``f``, ``f + fronts``, ..."""
    return [list(lines[front::fronts]) for front in range(fronts)]


def progress_line(runtime: ReferenceRuntime, admitted: int, total: int) -> str:
    """One line on how far a run has got."""
    return (
        f"  admitted {admitted:>4}/{total} lines | min-time {runtime.min_time} | "
        f"released {runtime.stats.released:>5} | in flight {runtime.in_flight_count:>5} | "
        f"sink pending {runtime.barrier().pending():>4}"
    )


def run_job(
    lines: Sequence[str],
    *,
    fronts: int = 3,
    seed: int = 7,
    lag: int = DEFAULT_LAG,
    progress: Callable[[str], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
) -> ReferenceRuntime:
    """Run the word count over ``lines`` out of order and return the finished runtime.

    The lines are dealt round-robin over ``fronts``. A generator seeded with ``seed`` picks
    which front admits its next line and how many envelopes (0 to ``lag``) to leave in flight
    after it; the runtime's :class:`RandomScheduler`, seeded the same, picks which ones are
    delivered, so the ones left behind are random and later items overtake them. Bounding
    what is left (rather than what is delivered) keeps the backlog, and the min-time's lag,
    small even though replays multiply the work. Then every front closes and the runtime runs
    until idle. ``progress`` gets a line every ``progress_every`` admissions.
    """
    runtime = ReferenceRuntime(build_flow(), fronts=fronts, scheduler=RandomScheduler(seed))
    rng = random.Random(seed)
    queues = {front: deque(dealt) for front, dealt in enumerate(deal(lines, fronts))}
    admitted = 0
    while True:
        waiting = [front for front, queue in queues.items() if queue]
        if not waiting:
            break
        front = rng.choice(waiting)
        runtime.admit(front, queues[front].popleft())
        admitted += 1
        keep = rng.randint(0, lag)
        while runtime.in_flight_count > keep and runtime.step():
            pass
        if progress is not None and admitted % progress_every == 0:
            progress(progress_line(runtime, admitted, len(lines)))
    runtime.close()
    runtime.run_until_idle()
    return runtime


def verify(runtime: ReferenceRuntime, expected: Counter[str]) -> list[str]:
    """What is wrong with a finished run's output; empty if it matches ``expected``.

    Each word must end at its expected count, and its released counts must be exactly
    1, 2, ..., n in release order: one release per occurrence, none lost, none twice.
    """
    released: dict[str, list[int]] = {}
    for item in runtime.released():
        reduced: Reduced[str, int] = item.payload
        released.setdefault(reduced.key, []).append(reduced.value)
    problems: list[str] = []
    for word in sorted(set(expected) | set(released)):
        values = released.get(word, [])
        total = values[-1] if values else 0
        if total != expected[word]:
            problems.append(f"{word!r}: counted {total}, Counter says {expected[word]}")
        elif values != list(range(1, total + 1)):
            problems.append(f"{word!r}: released counts {values} are not 1..{total}")
    return problems


def _count_option(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            msg = f"expected an integer >= {minimum}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flamestream.examples.wordcount",
        description="Count the words of a text admitted out of order over several fronts.",
    )
    parser.add_argument(
        "--input", type=Path, help=f"text file to count (default: the bundled {SAMPLE})"
    )
    parser.add_argument(
        "--fronts", type=_count_option(1), default=3, help="fronts to deal lines to (default 3)"
    )
    parser.add_argument(
        "--seed", type=int, default=7, help="seed of the admission order and scheduler (7)"
    )
    parser.add_argument(
        "--lag",
        type=_count_option(0),
        default=DEFAULT_LAG,
        help=f"most envelopes left in flight between two admissions (default {DEFAULT_LAG})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the word count job; return 0 if its counts match Counter, 1 if not."""
    parser = _parser()
    args = parser.parse_args(argv)
    fronts: int = args.fronts
    seed: int = args.seed
    lag: int = args.lag
    source: Path | None = args.input
    if source is None:
        text, name = load_sample(), SAMPLE
    else:
        try:
            text, name = source.read_text(encoding="utf-8"), str(source)
        except (OSError, UnicodeDecodeError) as exc:
            parser.error(f"cannot read {source}: {exc}")
    lines = text.splitlines()
    expected = count_words(lines)

    print(f"wordcount: {len(lines)} lines of {name} over {fronts} fronts, seed {seed}")
    runtime = run_job(lines, fronts=fronts, seed=seed, lag=lag, progress=print)
    stats = runtime.stats
    counts = final_counts(runtime.released())

    print(
        f"done: {len(lines)} lines, {expected.total()} words ({len(expected)} distinct), "
        f"{stats.released} counts released"
    )
    print(
        f"runtime: {stats.delivered} deliveries, {stats.replayed} replays, "
        f"{stats.invalidated} invalidations, {stats.stale} stale, {stats.tombstones} tombstones"
    )
    top = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))[:10]
    print("top words:" if top else "top words: (none)")
    for rank, (word, count) in enumerate(top, start=1):
        print(f"  {rank:>2}. {word:<12} {count:>5}")

    problems = verify(runtime, expected)
    if problems:
        print(f"verification: FAILED, {len(problems)} words differ from collections.Counter:")
        for problem in problems[:20]:
            print(f"  {problem}")
        return 1
    print(
        f"verification: OK, the counts of all {len(expected)} distinct words match "
        "collections.Counter"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
