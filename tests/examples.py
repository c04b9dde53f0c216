"""How many examples a property test draws: every one in CI, a fifth in the fast unit tier.

Property tests name their full count with :func:`examples` (``@settings(max_examples=
examples(150))``); tests without a count take the active Hypothesis profile's. ``make unit``,
the tier meant to run after every edit, sets ``FLAMESTREAM_EXAMPLES=fast``: every property
still runs, on fewer draws, the same ones every run. ``make test`` (and CI) leaves it
unset: the full counts.
"""

from __future__ import annotations

import os

from hypothesis import settings

#: The environment variable choosing the tier: ``full`` (default) or ``fast``.
ENV = "FLAMESTREAM_EXAMPLES"

#: The share of the full count each tier draws.
SHARES = {"full": 1.0, "fast": 0.2}

#: Fewer than this many draws tells little about a property: the fast tier's floor.
FLOOR = 5


def tier() -> str:
    """The tier the environment asks for; an unknown name fails at once, naming the allowed."""
    name = os.environ.get(ENV, "full")
    if name not in SHARES:
        msg = f"{ENV}={name!r}: allowed {', '.join(sorted(SHARES))}"
        raise ValueError(msg)
    return name


def examples(full: int) -> int:
    """The draws for a property whose full count is ``full``, in this tier."""
    if tier() == "full":
        return full
    return min(full, max(FLOOR, round(full * SHARES[tier()])))


def scaled(full_count: float) -> float:
    """A count over all of a property's draws (a guard's threshold), in this tier."""
    return full_count * SHARES[tier()]


def load_profile() -> None:
    """Make the tier's profile Hypothesis's default (tests without their own count)."""
    # no deadline: a property asserts what is computed, not how fast (speed is measured in
    # benchmarks); a 200 ms deadline failed draws on a machine loaded by parallel test modules
    settings.register_profile("full", settings.get_profile("default"), deadline=None)
    # derandomized: the guards counting what the draws exercised ("the fast path ran often")
    # hold or fail the same way every run, not now and then on a small sample
    settings.register_profile("fast", max_examples=examples(100), derandomize=True, deadline=None)
    settings.load_profile(tier())
