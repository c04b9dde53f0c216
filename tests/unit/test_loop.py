"""The loop channel's parts without Spark: the ack table, the router, and the salts."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.examples.components import components, labels
from flamestream.model import DataItem, GlobalTime, LocalTime, Meta
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.loop import AckTable, LoopStore, loop_busy, loop_item_xors
from flamestream.spark.exec.general.items import ITEM_SCHEMA, encode_payload
from flamestream.spark.exec.general.partitioning import is_salt, partition_of, salts
from flamestream.spark.exec.general.routing import LoopRouter
from flamestream.testing import RandomScheduler, Script, run_in_order, run_script

from ..examples import examples


def rows(*items: tuple[int, int, bytes, str]) -> pa.Table:
    n = len(items)
    return pa.table(
        {
            "ts": [i[0] for i in items],
            "front": [i[1] for i in items],
            "trace": [i[2] for i in items],
            "flags": [0] * n,
            "source": [None] * n,
            "position": [None] * n,
            "to": [i[3] for i in items],
            "key": [None] * n,
            "payload": [b"s" + bytes([65 + k]) for k in range(n)],
            "value": [None] * n,
        },
        schema=ITEM_SCHEMA,
    )


def test_a_sent_item_is_in_flight_until_received_and_a_retry_does_not_cancel_it(tmp_path):
    state = f"file://{tmp_path}/graph"
    store, table = LoopStore(state), AckTable(state)
    sent = rows((5, 0, b"\x01", "inbox"), (9, 1, b"", "inbox"))
    store.send(0, "2-00000", sent)
    store.send(0, "2-00000", sent)  # a retried task: overwrites, does not XOR again
    assert set(table.after(0)) == {(5, 0), (9, 1)}
    assert table.least(0) == GlobalTime(5, 0)
    [(batch, path)] = store.files(-1, 0)
    assert batch == 0
    received = store.receive(1, path)
    assert received.equals(sent)
    assert table.after(1) == {} and table.least(1) is None
    store.send(2, "2-00001", rows((12, 0, b"", "inbox")))
    assert table.least(2) == GlobalTime(12, 0)  # from the cached table after batch 1


def test_the_loop_is_busy_while_the_newest_committed_batch_left_items_in_it(tmp_path):
    """What a gated front asks when it plans a batch (``FrontReader._tick_limit``)."""
    checkpoint = str(tmp_path / "ck")
    state = QueryCheckpoint(checkpoint).graph_url
    store = LoopStore(state)
    assert not loop_busy(checkpoint)  # nothing committed yet
    store.send(0, "2-00000", rows((5, 0, b"", "inbox")))
    commit(tmp_path, 0)
    assert loop_busy(checkpoint)  # batch 0 sent an item; batch 1 receives it
    [(_, path)] = store.files(-1, 0)
    store.receive(1, path)
    commit(tmp_path, 1)
    assert not loop_busy(checkpoint)


def commit(tmp_path, batch: int) -> None:
    """Spark's commit log entry of ``batch``."""
    (tmp_path / "ck" / "commits").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ck" / "commits" / str(batch)).write_text("v1\n{}\n")


def test_ack_table_is_a_pure_function_of_the_contributions(tmp_path):
    """Recomputed from scratch (no cache) it gives what the cached chain gives."""
    state = f"file://{tmp_path}/graph"
    rng = random.Random(4)
    store = LoopStore(state)
    for batch in range(5):
        for task in range(3):
            items = [(rng.randrange(20), 0, bytes([rng.randrange(3)]), "g") for _ in range(2)]
            store.send(batch, f"1-{task:05d}", rows(*items))
    chained = [AckTable(state).after(b) for b in range(5)]
    for cached in (tmp_path / "graph" / "ack" / "table").iterdir():
        cached.unlink()
    assert AckTable(state).after(4) == chained[4]
    AckTable(state).collect(3)  # old contributions go; the tables needed later stay
    assert AckTable(state).after(4) == chained[4]
    assert not (tmp_path / "graph" / "ack" / "0").exists()


def test_item_ids_depend_on_meta_flags_and_destination():
    base = loop_item_xors(rows((1, 0, b"\x00", "a")))
    assert base == loop_item_xors(rows((1, 0, b"\x00", "a")))
    assert base[(1, 0)] != loop_item_xors(rows((1, 0, b"\x01", "a")))[(1, 0)]
    assert base[(1, 0)] != loop_item_xors(rows((1, 0, b"\x00", "b")))[(1, 0)]
    two = loop_item_xors(rows((1, 0, b"\x00", "a"), (1, 0, b"\x00", "a")))
    assert two == {(1, 0): 0}  # the same item twice cancels: why retries must not re-apply


def item(payload, ts: int, *, may_invalidate=False, tombstone=False) -> DataItem:
    meta = Meta(GlobalTime(ts, 0), (LocalTime(0, 0),))
    return DataItem(payload, meta, may_invalidate=may_invalidate, tombstone=tombstone)


def test_router_keeps_local_keys_and_sends_the_rest_with_invalidators():
    n = 3
    mine = 1
    local = next(k for k in range(100) if partition_of(encode_payload(k), n) == mine)
    foreign = next(k for k in range(100) if partition_of(encode_payload(k), n) != mine)
    router = LoopRouter("g", lambda p: p, frozenset({"inbox", "g"}), n, mine, lambda t: ("f", 7))
    outputs = [
        ("inbox", item(local, 1)),
        ("inbox", item(foreign, 2)),
        ("inbox", item(local, 3, may_invalidate=True)),
        ("inbox", item(None, 4, may_invalidate=True, tombstone=True)),
        ("after", item(foreign, 5)),  # not on its way into the grouping: stays
    ]
    kept = router.route(outputs)
    assert [i.global_time.ts for _, i in kept] == [1, 3, 4, 5]
    sent = router.table().to_pylist()
    assert [(r["ts"], r["flags"]) for r in sent] == [(2, 0), (3, 3), (4, 3)]
    assert sent[0]["key"] == encode_payload(foreign) and sent[0]["payload"] is not None
    assert all(is_salt(r["key"]) and r["payload"] is None for r in sent[1:])
    assert partition_of(sent[1]["key"], n) == mine  # invalidators say where they were handled
    assert sent[0]["source"] == "f" and sent[0]["position"] == 7


def test_one_partition_keeps_everything():
    router = LoopRouter("g", lambda p: p, frozenset({"g"}), 1, 0, lambda t: None)
    outputs = [("g", item(5, 1, may_invalidate=True))]
    assert router.route(outputs) == outputs and router.sent == []


@given(st.integers(1, 9))
def test_salts_land_in_their_partitions(n):
    assert [partition_of(salt, n) for salt in salts(n)] == list(range(n))
    assert all(is_salt(s) for s in salts(n)) and not is_salt(encode_payload("x"))


def union_find(edges: list[tuple[int, int]]) -> dict[int, int]:
    parent: dict[int, int] = {}

    def root(n: int) -> int:
        while parent.setdefault(n, n) != n:
            n = parent[n]
        return n

    for u, v in edges:
        a, b = root(u), root(v)
        parent[max(a, b)] = min(a, b)
    return {n: root(n) for n in sorted(parent)}


edge_lists = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=12)


@settings(max_examples=examples(40), deadline=None)
@given(edge_lists, st.integers(1, 3), st.integers(0, 10**6))
def test_components_are_right_in_order_and_out_of_order(edges, fronts, seed):
    """The example's labels are union-find's, and arrival order changes nothing released."""
    rng = random.Random(seed)
    inputs: dict[int, list[tuple[int, str]]] = {}
    for ts, (u, v) in enumerate(edges, start=1):
        inputs.setdefault(rng.randrange(fronts), []).append((ts, f"{u} {v}"))
    flow = components()
    in_order = run_in_order(flow, inputs)
    assert labels(in_order.payloads()) == union_find(edges)
    script = Script()
    pending = {front: list(items) for front, items in inputs.items()}
    while any(pending.values()):
        front = rng.choice([f for f, items in pending.items() if items])
        ts, line = pending[front].pop(0)
        script = script.admit(front, line, ts=ts).deliver(rng.randrange(4))
    shuffled = run_script(flow, script, scheduler=RandomScheduler(seed))
    assert shuffled.rows() == in_order.rows()


@settings(max_examples=examples(25), deadline=None)
@given(
    st.integers(2, 30).flatmap(
        lambda nodes: st.lists(
            st.tuples(st.integers(0, nodes - 1), st.integers(0, nodes - 1)),
            min_size=1,
            max_size=90,
        )
    ),
    st.integers(1, 3),
    st.integers(0, 10**6),
)
def test_components_of_bigger_random_graphs_are_union_finds(edges, fronts, seed):
    """Label waves over up to 90 edges (one global time's items in the hundreds, all round
    the loop): the last label released per node is its union-find component, edges spread
    over several fronts."""
    rng = random.Random(seed)
    inputs: dict[int, list[tuple[int, str]]] = {}
    for ts, (u, v) in enumerate(edges, start=1):
        inputs.setdefault(rng.randrange(fronts), []).append((ts, f"{u} {v}"))
    result = run_in_order(components(), inputs)
    assert labels(result.payloads()) == union_find(edges)
