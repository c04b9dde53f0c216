"""The shim follows the application's executors: on ``local[2]`` and on a standalone cluster,
with Workers added and killed, and with dynamic allocation adding and removing executors.

Each case runs :mod:`tests.cluster.executors_job` as a child driver with flamestream's plugin;
the child records every change of ``cluster_executors()`` (the endpoint client the driver
host's source processes use) while the test changes the cluster under it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order
from flamestream.testing.standalone import StandaloneCluster

from ..crash import spawn
from ..spark.conftest import released, write_lines
from .wordcount_job import word_count

JOB = "tests.cluster.executors_job"
DEADLINE_S = 240.0

Seen = list[dict[str, Any]]


@pytest.fixture(scope="module")
def one_worker() -> Iterator[StandaloneCluster]:
    """A Master and one 1-core Worker; the tests add (and kill) more."""
    with StandaloneCluster(workers=1, worker_cores=1, worker_memory="1g") as started:
        yield started


def seen(work: Path) -> Seen:
    """What the child recorded so far, oldest first."""
    path = work / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(work: Path, child: Future[Any], what: str, check: Callable[[Seen], bool]) -> Seen:
    """Poll the child's records until ``check`` holds (failing on a child's exit or deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while not check(found := seen(work)):
        if child.done():
            done = child.result()
            raise AssertionError(f"the driver ended before {what}:\n{done.stderr.decode()[-3000:]}")
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}; seen {found}"
        time.sleep(0.05)
    return found


def last_is(executors: int, cores: int) -> Callable[[Seen], bool]:
    """The newest record shows ``executors`` executors with ``cores`` cores in total."""
    return lambda found: (
        bool(found)
        and (found[-1].get("executors"), found[-1].get("cores"))
        == (
            executors,
            cores,
        )
    )


@contextmanager
def driver(master: str, work: Path, mode: str = "static") -> Iterator[Future[Any]]:
    """The child driver, running; told to stop at the end, and checked to exit cleanly."""
    with ThreadPoolExecutor(1) as pool:
        child = pool.submit(spawn, JOB, [master, str(work), mode], {}, DEADLINE_S * 2)
        try:
            yield child
        finally:
            (work / "stop").write_text("")
        done = child.result()
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def test_on_local_the_driver_is_the_one_executor_with_every_core(tmp_path: Path):
    with driver("local[2]", tmp_path) as child:
        found = wait_for(tmp_path, child, "the driver's executor", last_is(1, 2))
    assert found[-1]["hosts"][0][0] == "driver"


def test_a_worker_added_mid_run_shows_up_and_a_killed_one_disappears(
    one_worker: StandaloneCluster, tmp_path: Path
):
    with driver(one_worker.master_url, tmp_path) as child:
        wait_for(tmp_path, child, "the first Worker's executor", last_is(1, 1))
        added = one_worker.add_worker()
        assert one_worker.worker_state(added) == "ALIVE"
        wait_for(tmp_path, child, "the added Worker's executor", last_is(2, 2))
        one_worker.kill_worker(added)
        found = wait_for(tmp_path, child, "the killed Worker's executor gone", last_is(1, 1))
    assert [(r["executors"], r["cores"]) for r in found if "executors" in r][-3:] == [
        (1, 1),
        (2, 2),
        (1, 1),
    ]


def test_dynamic_allocation_adds_executors_for_waiting_tasks_and_removes_idle_ones(
    one_worker: StandaloneCluster, tmp_path: Path
):
    one_worker.add_worker()  # two live Workers (one was killed above, or this is the second)
    with driver(one_worker.master_url, tmp_path, "dynamic") as child:
        wait_for(tmp_path, child, "the driver's start", lambda found: bool(found))
        assert seen(tmp_path)[0]["executors"] == 0  # none before there is work
        (tmp_path / "job").write_text("")  # four tasks wait: dynamic allocation asks for two
        wait_for(tmp_path, child, "two executors for the waiting tasks", last_is(2, 2))
        (tmp_path / "release").write_text("")
        found = wait_for(tmp_path, child, "the idle executors removed", last_is(0, 0))
    counts = [r["executors"] for r in found]
    assert counts[0] == 0 and max(counts) == 2 and counts[-1] == 0
    assert (tmp_path / "job-done").exists()


def test_the_active_partitions_follow_the_cores_and_release_the_reference_rows(tmp_path: Path):
    lines = ["the cat", "a dog", "the bird and the cat", "dog dog", "end", "cat bird"]
    write_lines(tmp_path / "in" / "a.txt", lines)  # 12 records, 4 a batch: 3 batches
    write_lines(tmp_path / "in" / "b.txt", list(reversed(lines)))
    done = spawn("tests.cluster.follow_job", ["local[2]", str(tmp_path)], {}, DEADLINE_S * 2)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    follow = json.loads((tmp_path / "layouts.json").read_text())
    assert follow[0]["active"] == 1 and follow[-1]["active"] == 2  # local[2]: two cores
    decided = {o["decisions"]: o for o in follow if "cluster" in o}
    assert list(decided) == [1] and decided[1]["cluster"] == {"executors": 1, "cores": 2}
    assert "cluster: 1 executors, 2 cores after batch 0: 1 -> 2" in decided[1]["reason"]
    assert sorted(set(follow[-1]["assignment"])) == [0, 1]  # the slots spread over both
    assert follow[-1]["batch"] == 2  # a batch ran on the new layout
    rows = released(tmp_path / "out")
    per_front: dict[int, list[tuple[int, str]]] = {}
    for row in sorted(
        (r for r in rows if r["sink"] == "lines"), key=lambda r: (r["front"], r["ts"])
    ):
        per_front.setdefault(row["front"], []).append((row["ts"], row["value"]))
    expected = run_in_order(word_count(), per_front)
    want = [(t.ts, t.front, render_default(p)) for t, p in expected.timed("out")]
    assert [(r["ts"], r["front"], r["value"]) for r in rows if r["sink"] == "out"] == want
