"""Determinism under any arrival order: the released output equals the in-order output.

Inputs are random per-front streams (>= 3 fronts, strictly increasing ts per front). The
out-of-order run admits them in a random interleaving across fronts, delivers in-flight
items in a random order (so any item can be overtaken, i.e. delayed, arbitrarily), and lets
fronts report idle time at random. The in-order run is :func:`run_in_order`.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from itertools import accumulate

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from flamestream import Dataflow, GlobalTime, Meta, Reduced, invalidates, map_reduce
from flamestream.runtime import RandomScheduler, ReferenceRuntime
from flamestream.testing import Script, run_in_order, run_script

from ..examples import examples
from ..random_graphs import random_graph

PROPERTY = settings(
    max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

lines = st.lists(st.sampled_from("abcde"), max_size=4).map(" ".join)
small_ints = st.integers(0, 9)


@st.composite
def front_inputs(draw, payloads, min_fronts=3, max_fronts=5, max_per_front=7):
    n = draw(st.integers(min_fronts, max_fronts))
    inputs = {}
    for front in range(n):
        stamps = list(accumulate(draw(st.lists(st.integers(1, 4), max_size=max_per_front))))
        inputs[front] = [(ts, draw(payloads)) for ts in stamps]
    return inputs


@st.composite
def shuffled_scripts(draw, inputs):
    """A random interleaving of the fronts, with random deliveries, reports and closes."""
    queues = {front: deque(items) for front, items in inputs.items()}
    script = Script()
    while any(queues.values()):
        front = draw(st.sampled_from([f for f, q in queues.items() if q]))
        ts, payload = queues[front].popleft()
        script.admit(front, payload, ts)
        if draw(st.booleans()):
            script.deliver(draw(st.integers(0, 8)))
        if queues[front] and draw(st.integers(0, 3)) == 0:
            script.report(front, queues[front][0][0])  # idle until its next item
        if not queues[front] and draw(st.booleans()):
            script.close(front)
    return script


# --- the graphs under test ------------------------------------------------------------------


def word_count() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=_add))
    return flow


def _add(a: int, b: int) -> int:
    return a + b


def single_grouping(window: int, keys: int) -> Dataflow:
    flow = Dataflow("grouping")
    grouped = flow.grouping("g", flow.source("in"), window=window, key=lambda n: n % keys)
    flow.sink("out", grouped)
    return flow


def chained_groupings() -> Dataflow:
    """A user filter and an empty-able flat_map between two groupings: tombstones at work."""
    flow = Dataflow("chained")
    first = flow.grouping("g1", flow.source("in"), window=2, key=lambda n: n % 2)
    kept = flow.filter("not_div3", first, lambda t: sum(t) % 3 != 0)
    copies = flow.flat_map("copies", kept, lambda t: [sum(t)] * (len(t) - 1))
    second = flow.grouping("g2", copies, window=3, key=lambda v: v % 2)
    flow.sink("out", flow.map("total", second, sum))
    return flow


def diamond_two_sinks() -> Dataflow:
    flow = Dataflow("diamond")
    left, right = flow.broadcast("fan_out", flow.source("in"), 2)
    tens = flow.map("times10", left, lambda n: n * 10)
    evens = flow.filter("evens", right, lambda n: n % 2 == 0)
    grouped = flow.grouping("g", flow.merge("fan_in", tens, evens), window=2, key=lambda n: n % 3)
    raw, summed = flow.broadcast("fan_out_again", grouped, 2)
    flow.sink("tuples", raw)
    flow.sink("sums", flow.map("sum", summed, sum))
    return flow


def cross_key_cycle() -> Dataflow:
    """Each value hops to the next key twice; every hop is grouped with that key's last item."""
    flow = Dataflow("hops")
    start = flow.map("tag", flow.source("in"), lambda n: (n % 3, 0, n))
    merged = flow.merge("loop", start)
    grouped = flow.grouping("g", merged, window=2, key=lambda p: p[0])
    fresh = flow.filter("bounded", grouped, lambda t: t[-1][1] < 2)
    hopped = flow.map(
        "hop", fresh, lambda t: ((t[-1][0] + 1) % 3, t[-1][1] + 1, sum(p[2] for p in t))
    )
    out, back = flow.broadcast("emit", hopped, 2)
    flow.add_merge_input(merged, back)
    flow.sink("out", out)
    return flow


# --- checks -----------------------------------------------------------------------------------


def assert_released_exactly_once_and_valid(result) -> None:
    """No duplicates, nothing invalidated by anything that reached the same sink."""
    runtime = result.runtime
    for sink in runtime.graph.sinks:
        released = runtime.released(sink)
        metas = [r.meta for r in released]
        assert len(set(metas)) == len(metas), "an item was released twice"
        assert metas == sorted(metas), "release order is not meta order"
        # the released traces (lineages) keep that order and tell the items apart
        lineages = [Meta(r.global_time, r.trace) for r in released]
        assert lineages == sorted(lineages) and len(set(lineages)) == len(lineages)
        arrived = [d.item.meta for d in runtime.log if d.step == sink]
        for released_meta in metas:
            assert not any(invalidates(other, released_meta) for other in arrived)


def assert_same_output(flow: Dataflow, inputs, script: Script, seed: int):
    expected = run_in_order(flow, inputs)
    actual = run_script(flow, script, scheduler=RandomScheduler(seed), record=True)
    for sink in actual.runtime.graph.sinks:
        assert actual.rows(sink) == expected.rows(sink)
    assert_released_exactly_once_and_valid(actual)
    assert actual.runtime.in_flight == ()
    return actual


seeds = st.integers(0, 2**32 - 1)


# --- properties ---------------------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_word_count_is_independent_of_arrival_order(data, seed):
    inputs = data.draw(front_inputs(lines))
    actual = assert_same_output(word_count(), inputs, data.draw(shuffled_scripts(inputs)), seed)
    words = [w for items in inputs.values() for _, line in items for w in line.split()]
    final: dict[str, int] = {}
    for reduced in actual.payloads():
        final[reduced.key] = reduced.value
    assert final == Counter(words)
    assert len(actual.payloads()) == len(words)  # every input word yields one update


@PROPERTY
@given(data=st.data(), seed=seeds, window=st.integers(1, 4), keys=st.integers(1, 3))
def test_grouping_equals_the_definition_under_any_arrival_order(data, seed, window, keys):
    inputs = data.draw(front_inputs(small_ints))
    flow = single_grouping(window, keys)
    actual = assert_same_output(flow, inputs, data.draw(shuffled_scripts(inputs)), seed)
    # independent oracle: the definition, applied in global-time order
    buckets: dict[int, list[int]] = defaultdict(list)
    expected = []
    for gt, n in sorted((GlobalTime(ts, f), n) for f, items in inputs.items() for ts, n in items):
        buckets[n % keys].append(n)
        expected.append((gt, tuple(buckets[n % keys][-window:])))
    assert actual.timed() == expected


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_chained_groupings_with_filters_are_independent_of_arrival_order(data, seed):
    inputs = data.draw(front_inputs(small_ints))
    assert_same_output(chained_groupings(), inputs, data.draw(shuffled_scripts(inputs)), seed)


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_broadcast_merge_and_two_sinks_are_independent_of_arrival_order(data, seed):
    inputs = data.draw(front_inputs(small_ints))
    assert_same_output(diamond_two_sinks(), inputs, data.draw(shuffled_scripts(inputs)), seed)


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_cross_key_cycle_is_independent_of_arrival_order(data, seed):
    inputs = data.draw(front_inputs(small_ints, max_per_front=5))
    actual = assert_same_output(
        cross_key_cycle(), inputs, data.draw(shuffled_scripts(inputs)), seed
    )
    admitted = sum(len(items) for items in inputs.values())
    assert len(actual.payloads()) == 2 * admitted  # two hops per input


# --- the barrier against what is really in flight, and bounded state -----------------------------


class BarrierCheck:
    """After every event: what was just released has nothing at or below its time in flight."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, runtime: ReferenceRuntime) -> None:
        in_flight = [e.item.global_time for e in runtime.in_flight]
        for sink in runtime.graph.sinks:
            released = runtime.released(sink)
            for r in released[self.seen.get(sink, 0) :]:
                assert all(gt > r.global_time for gt in in_flight)
            self.seen[sink] = len(released)


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_nothing_is_released_while_its_time_is_in_flight(data, seed):
    inputs = data.draw(front_inputs(small_ints))
    for flow in (chained_groupings(), cross_key_cycle()):
        script = data.draw(shuffled_scripts(inputs))
        check = BarrierCheck()
        result = run_script(flow, script, scheduler=RandomScheduler(seed), on_event=check)
        assert check.seen  # the check ran
        assert result.rows() == run_in_order(flow, inputs).rows()


def fair_long_script(rng, fronts: int, per_front: int, max_lag: int) -> Script:
    """Fronts admit at comparable ts rates (none runs more than ``max_lag`` ts ahead) and
    in-flight items catch up now and then, as in a healthy long-running query."""
    queues = {}
    for front in range(fronts):
        stamps = accumulate(rng.randint(1, 3) for _ in range(per_front))
        queues[front] = deque((ts, rng.randint(0, 99)) for ts in stamps)
    script = Script()
    while any(queues.values()):
        lowest = min(q[0][0] for q in queues.values() if q)
        front = rng.choice([f for f, q in queues.items() if q and q[0][0] <= lowest + max_lag])
        ts, n = queues[front].popleft()
        script.admit(front, n, ts).deliver(rng.randint(0, 4))
        if rng.random() < 0.1:  # now and then everything in flight catches up
            script.deliver()
    return script


@settings(max_examples=examples(10), deadline=None)
@given(seed=seeds, window=st.integers(1, 4))
def test_grouping_state_stays_bounded_on_a_long_stream(seed, window):
    import random

    keys, fronts, per_front = 5, 3, 400
    flow = Dataflow("long")
    grouped = flow.grouping("g", flow.source("in"), window=window, key=lambda n: n % keys)
    flow.sink("out", grouped)
    script = fair_long_script(random.Random(seed), fronts, per_front, max_lag=10)
    peak = 0

    def check(runtime: ReferenceRuntime) -> None:
        nonlocal peak
        state = runtime.grouping("g")
        below = state.entries_below(runtime.min_time)
        assert max(below.values(), default=0) <= window - 1
        peak = max(peak, state.entries())

    runtime = run_script(flow, script, scheduler=RandomScheduler(seed), on_event=check).runtime
    state = runtime.grouping("g")
    assert len(runtime.released()) == fronts * per_front
    # the state follows what is above the min-time, not the length of the stream
    assert peak < fronts * per_front // 6
    assert state.entries() <= keys * (window - 1)
    assert state.indexed_times() == 0
    assert runtime.barrier().pending() == 0


@PROPERTY
@given(data=st.data(), seed=seeds)
def test_word_count_state_is_one_reduced_item_per_word_at_the_end(data, seed):
    inputs = data.draw(front_inputs(lines))
    result = run_script(
        word_count(), data.draw(shuffled_scripts(inputs)), scheduler=RandomScheduler(seed)
    )
    state = result.runtime.grouping("count.grouping")
    for key in state.bucket_keys():
        (last,) = state.bucket(key)
        assert isinstance(last.payload, Reduced)


def random_script(rng, inputs) -> Script:
    queues = {front: deque(items) for front, items in inputs.items()}
    script = Script()
    while any(queues.values()):
        front = rng.choice([f for f, q in queues.items() if q])
        ts, payload = queues[front].popleft()
        script.admit(front, payload, ts).deliver(rng.randint(0, 6))
    return script


def test_the_random_schedules_really_exercise_replay_invalidation_and_tombstones():
    """Guards the properties above against passing vacuously on in-order-like runs."""
    import random

    totals: Counter[str] = Counter()
    for seed in range(30):
        rng = random.Random(seed)
        inputs = {
            f: list(
                zip(
                    accumulate(rng.randint(1, 4) for _ in range(8)),
                    rng.choices(range(10), k=8),
                    strict=True,
                )
            )
            for f in range(3)
        }
        for flow in (chained_groupings(), cross_key_cycle(), single_grouping(3, 2)):
            stats = assert_same_output(flow, inputs, random_script(rng, inputs), seed).stats
            totals.update(
                replayed=stats.replayed,
                invalidated=stats.invalidated,
                stale=stats.stale,
                tombstones=stats.tombstones,
            )
    assert min(totals.values()) > 0, totals
    assert set(totals) == {"replayed", "invalidated", "stale", "tombstones"}


def test_map_reduce_needs_no_tombstones_but_a_plain_filter_does():
    import random

    rng = random.Random(5)
    lines_in = {
        f: [(ts, " ".join(rng.choices("abc", k=3))) for ts in range(1, 30, 3)] for f in range(3)
    }
    words = run_script(word_count(), random_script(rng, lines_in), scheduler=RandomScheduler(5))
    assert words.stats.replayed > 0
    assert words.stats.tombstones == 0  # its filter is version-stable

    ints = {f: [(ts, rng.randint(0, 9)) for ts in range(1, 30, 3)] for f in range(3)}
    chained = assert_same_output(chained_groupings(), ints, random_script(rng, ints), 5)
    assert chained.stats.tombstones > 0


@PROPERTY
@given(data=st.data(), seed=seeds, graph_seed=st.integers(0, 10_000))
def test_random_graphs_are_independent_of_arrival_order(data, seed, graph_seed):
    """Random shapes (tests/random_graphs.py): the shapes the hand-written graphs miss."""
    grown = random_graph(graph_seed)
    inputs = data.draw(front_inputs(lines, min_fronts=2, max_fronts=3, max_per_front=5))
    note(str(grown))
    assert_same_output(grown.flow, inputs, data.draw(shuffled_scripts(inputs)), seed)
