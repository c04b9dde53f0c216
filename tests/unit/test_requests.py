"""The request store: requests come back in submission order, after a consumed name."""

from __future__ import annotations

from pathlib import Path

from flamestream.spark.control.handle import QueryControl


def test_requests_come_back_in_order_after_the_consumed_one(tmp_path: Path) -> None:
    control = QueryControl(str(tmp_path / "ck"))
    first = control.submit("rescale", {"active": 2})
    second = control.submit("rescale", {"active": 3})
    assert [r.body["active"] for r in control.requests()] == [2, 3]
    assert [r.name for r in control.requests(after=first.name)] == [second.name]
    assert control.requests(after=second.name) == []


def test_forgetting_keeps_the_newest_consumed(tmp_path: Path) -> None:
    control = QueryControl(str(tmp_path / "ck"))
    made = [control.submit("rescale", {"active": i}) for i in range(70)]
    control.store.forget_through(made[-2].name)
    kept = control.requests()
    assert len(kept) == 64 + 1  # the newest 64 consumed and the one not consumed yet
    assert kept[-1].name == made[-1].name
