"""Benchmark harness: the reference runtime's word count against a plain ``collections.Counter``.

Every case in one process, on the same input: the cost of the model (items, traces, acker,
barrier) over a Counter, and the extra cost of out-of-order arrival (replay, invalidation).
Prints one JSON object (median seconds over ``--repeat`` runs, ratios); see
docs/benchmarks.md::

    python -m benchmarks.bench [--lines N] [--repeat R] [--fronts F]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import emit, machine
from benchmarks.lib.stats import median
from flamestream.examples.wordcount import build_flow, load_sample, split_words
from flamestream.runtime import RandomScheduler, ReferenceRuntime
from flamestream.testing import run_in_order


def corpus(lines: int) -> list[str]:
    """``lines`` lines cycled from the bundled sample text."""
    sample = [line for line in load_sample().splitlines() if line.strip()]
    return [sample[i % len(sample)] for i in range(lines)]


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``fn`` over ``repeat`` runs, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return median(times, None), result


def plain_counter(text: list[str]) -> dict[str, int]:
    """The baseline: one pass with collections.Counter, no streaming semantics at all."""
    return dict(Counter(word for line in text for word in split_words(line)))


def reference_in_order(text: list[str]) -> dict[str, int]:
    """Word count on the reference runtime, one front, everything in order."""
    result = run_in_order(build_flow(), text)
    return {r.payload.key: r.payload.value for r in result.released()}


def reference_out_of_order(text: list[str], fronts: int, seed: int = 1) -> dict[str, int]:
    """Word count over ``fronts`` fronts, random interleaving and random delivery order."""
    rng = random.Random(seed)
    runtime = ReferenceRuntime(build_flow(), fronts=fronts, scheduler=RandomScheduler(seed))
    for index, line in enumerate(text):
        runtime.admit(index % fronts, line)
        keep = rng.randint(0, 40)
        while runtime.in_flight_count > keep and runtime.step():
            pass
    runtime.close()
    runtime.run_until_idle()
    return {r.payload.key: r.payload.value for r in runtime.released()}


def main(argv: list[str] | None = None) -> int:
    """Run every case, check they agree, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.flag(parser, "--lines", 2000, "lines of the bundled sample, cycled")
    cli.flag(parser, "--repeat", 3, "timed runs of each case")
    cli.flag(parser, "--fronts", 3, "fronts of the out-of-order case")
    args = parser.parse_args(argv)
    text = corpus(args.lines)
    words = sum(len(split_words(line)) for line in text)

    base_s, expected = timed(lambda: plain_counter(text), args.repeat)
    ordered_s, ordered = timed(lambda: reference_in_order(text), args.repeat)
    shuffled_s, shuffled = timed(lambda: reference_out_of_order(text, args.fronts), args.repeat)
    if not expected == ordered == shuffled:
        return emit({"error": "the cases disagree on the word counts"})
    report = {
        "machine": machine(),
        "input": {"lines": len(text), "words": words, "fronts": args.fronts},
        "seconds": {
            "plain_counter": round(base_s, 4),
            "reference_in_order": round(ordered_s, 4),
            "reference_out_of_order": round(shuffled_s, 4),
        },
        "words_per_second": {
            "reference_in_order": round(words / ordered_s),
            "reference_out_of_order": round(words / shuffled_s),
        },
        "ratios": {
            "reference_in_order_vs_plain_counter": round(ordered_s / base_s, 1),
            "out_of_order_vs_in_order": round(shuffled_s / ordered_s, 2),
        },
    }
    return emit(report)


if __name__ == "__main__":
    raise SystemExit(main())
