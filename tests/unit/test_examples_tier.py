"""The fast unit tier draws fewer examples, never none, and CI's tier draws them all."""

from __future__ import annotations

import pytest

from ..examples import ENV, FLOOR, examples


def test_the_full_tier_draws_every_example(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(ENV, raising=False)
    assert [examples(n) for n in (1, 10, 150, 400)] == [1, 10, 150, 400]


def test_the_fast_tier_draws_a_fifth_at_least_the_floor_never_more(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv(ENV, "fast")
    assert [examples(n) for n in (1, 10, 150, 400)] == [1, FLOOR, 30, 80]


def test_an_unknown_tier_names_the_allowed_ones(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(ENV, "quick")
    with pytest.raises(ValueError, match="FLAMESTREAM_EXAMPLES='quick': allowed fast, full"):
        examples(10)
