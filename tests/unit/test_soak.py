"""The soak benchmark's own logic: its exactly-once check, its slopes, its process roles.

The soak itself runs by hand (``make soak``); what it concludes rests on these functions.
"""

from __future__ import annotations

import os

from benchmarks.lib.processes import roles
from benchmarks.soak import check, line_key, render_pair, slopes, text

KEYS = 4


def released_values(written: int) -> list[str]:
    """What the pairs graph releases for lines ``0 .. written - 1`` (``KEYS`` keys)."""
    lines = [text(seq, KEYS) for seq in range(written)]
    last: dict[str, str] = {}
    values = []
    for line in lines:
        key = line_key(line)
        values.append(render_pair((last[key], line) if key in last else (line,)))
        last[key] = line
    return values


def test_every_line_released_once_passes() -> None:
    found = check(released_values(20), 20, KEYS, rate=10)
    assert found["exactly_once"]
    assert (found["released"], found["held"], found["wrong_pair"]) == (20, 0, 0)


def test_a_line_released_twice_or_in_a_wrong_pair_fails() -> None:
    values = released_values(20)
    assert check([*values, values[7]], 20, KEYS, rate=10)["released_twice"] == 1
    wrong = [*values[:9], "3 9", *values[10:]]  # line 9's pair is (5, 9)
    found = check(wrong, 20, KEYS, rate=10)
    assert (found["wrong_pair"], found["exactly_once"]) == (1, False)


def test_the_held_tail_is_counted_not_failed() -> None:
    found = check(released_values(16), 20, KEYS, rate=10)
    assert found["exactly_once"]
    assert (found["held"], found["held_tail_seconds"]) == (4, 0.4)


def test_slopes_per_minute_after_settling() -> None:
    samples = [
        {
            "minute": float(minute),
            "rss_mb": {"driver_python": 100.0 + 2 * minute, "driver_jvm": 500.0},
            "checkpoint_files": {"offsets": min(minute * 60, 100)},
            "output_files": minute * 60,
            "output_mb": 1.0,
            "trigger_ms_median": 700,
        }
        for minute in range(10)
    ]
    found = slopes(samples, settle=3.0)["slopes"]
    assert found["rss_mb.driver_python"]["per_minute"] == 2.0
    assert found["rss_mb.python_total"]["per_minute"] == 2.0  # the JVM left out
    assert found["checkpoint_files.offsets"]["per_minute"] == 0.0
    assert found["output_files"]["per_minute"] == 60.0


def test_roles_name_this_process_the_driver() -> None:
    found = roles(os.getpid())
    count, rss = found["driver_python"]
    assert count == 1
    assert rss > 0
