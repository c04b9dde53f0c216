"""The own work per item around a user's functions, flamestream's, in one process (no Spark).

The general path's stages run the user's functions and, around them, flamestream's own work:
items, traces, keys and payloads for the shuffle, the fold's bookkeeping, the rows leaving.
This measures that own work per word on the word count written with lambdas, the way the
Spark tasks run it (``FrontStage.read`` for the front's reads; ``KeyedRunner._runs`` with its
sink's part for the keyed write task, as :mod:`benchmarks.keyed_task` drives them):

* ``stage_us``: CPU microseconds per word of the stage, the user's functions included;
* ``user_us``: the same user functions called alone on the same inputs (``str.split`` per
  line and the mapper per word in the front; the reducer per row in the keyed stage);
* ``own_us``: the difference, flamestream's own work per word (target: at most 0.3 µs).

The user's functions cannot be swapped for builtins to measure this instead: the planner
would recognize the builtins (``count``'s mapper, ``operator.add``) and take a declared
path, not the general one. Medians of ``repeat`` runs; the cyclic collector paused as in the
tasks.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.lib.workloads import readme_word_count_graph, word_count_graph


def _cpu(run: Callable[[], Any], repeat: int) -> float:
    """The median CPU seconds of ``repeat`` calls of ``run``, the collector paused."""
    from flamestream.spark.exec.worker.gc_pause import gc_paused

    found = []
    for _ in range(repeat):
        with gc_paused():
            began = time.process_time()
            run()
            found.append(time.process_time() - began)
    return statistics.median(found)


def _front(flow: Any, release: str, files: list[Path], repeat: int) -> dict[str, float]:
    """The front stage's CPU per word, and the user's split and mapper alone."""
    from benchmarks.keyed_task import front_blocks
    from flamestream.graph.mapreduce import MapStep
    from flamestream.spark import SparkGraph

    graph = SparkGraph(flow, release=release)
    stage = graph._front_stage("value", 2)
    blocks = [list(front_blocks(path, front)) for front, path in enumerate(files)]
    lines = [line for path in files for line in path.read_text().splitlines()]
    words = [w for line in lines for w in line.split()]
    (mapper,) = [
        s.fn.mapper
        for s in flow.build().steps.values()
        if isinstance(getattr(s, "fn", None), MapStep)
    ]

    def front() -> None:
        for made in blocks:
            for _ in stage.read(iter(made)):
                pass

    def user() -> None:
        for line in lines:
            line.split()
        list(map(mapper, words))

    return _per_word(_cpu(front, repeat), _cpu(user, repeat), len(words))


def _keyed(files: list[Path], repeat: int, out: Path) -> dict[str, float]:
    """The README graph's keyed write task (partition 0 of 2) per row, and its reducer alone."""
    from benchmarks import keyed_task
    from flamestream.graph.mapreduce import ReduceStep
    from flamestream.spark import SparkGraph

    flow = readme_word_count_graph()
    graph = SparkGraph(flow, release="every")
    rows = keyed_task.shuffled(graph, files, 2)
    (reduce,) = [
        s.fn for s in flow.build().steps.values() if isinstance(getattr(s, "fn", None), ReduceStep)
    ]
    found: dict[str, Any] = {}

    def task() -> None:
        found.update(keyed_task.once(graph, rows, out))

    stage = _cpu(task, repeat)
    count, reducer = int(found["rows_in"]), reduce.reducer

    def user() -> None:
        acc = 1
        for _ in range(count):
            acc = reducer(acc, 1)

    return _per_word(stage, _cpu(user, repeat), count)


def _per_word(stage: float, user: float, words: int) -> dict[str, float]:
    return {
        "items": words,
        "stage_us": round(stage / words * 1e6, 3),
        "user_us": round(user / words * 1e6, 3),
        "own_us": round((stage - user) / words * 1e6, 3),
    }


def measure(folder: Path, lines: int, out: Path, repeat: int = 3) -> dict[str, Any]:
    """Own work per word over the first ``lines`` lines of the corpus in ``folder``."""
    files = sorted(folder.glob("*.txt"))
    cut, left = [], lines
    for path in files:
        if left <= 0:
            break
        text = path.read_text().splitlines()[:left]
        left -= len(text)
        part = out / path.name
        part.write_text("\n".join(text) + "\n")
        cut.append(part)
    latest = word_count_graph(commutative=True, declared=False)
    return {
        "lines": lines - max(left, 0),
        "front_lambdas_latest": _front(latest, "latest", cut, repeat),
        "front_readme_every": _front(readme_word_count_graph(), "every", cut, repeat),
        "keyed_readme_every": _keyed(cut, repeat, out),
        "target_own_us": 0.3,
    }
