"""The comparison's exceptions: one base class, so the harness catches only its own."""

from __future__ import annotations


class CompareError(Exception):
    """A variant could not be run or got a wrong result; the harness reports it per variant."""


class SetupError(CompareError):
    """A peer's virtualenv could not be created, or its package not installed."""


class PeerError(CompareError):
    """A peer's script failed, timed out or wrote no result."""


class MismatchError(CompareError):
    """A variant's word counts differ from the ``collections.Counter`` of the corpus."""
