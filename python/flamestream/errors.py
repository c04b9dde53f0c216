"""The exceptions flamestream raises; every one derives from :class:`FlameStreamError`.

House style: name the step (or front), say what was expected and what was found, add a hint.
"""

from __future__ import annotations

import reprlib
from typing import Any


class FlameStreamError(Exception):
    """Base class of every error flamestream raises on purpose."""


class GraphError(FlameStreamError):
    """A logical graph is malformed; raised while building it, before anything runs."""

    def __init__(self, step_id: str | None, expected: str, found: str, hint: str = "") -> None:
        self.step_id = step_id
        self.expected = expected
        self.found = found
        self.hint = hint
        where = f"step {step_id!r}" if step_id is not None else "graph"
        message = f"{where}: expected {expected}, found {found}"
        if hint:
            message += f". Hint: {hint}"
        super().__init__(message)


class StepError(FlameStreamError):
    """A user function raised while a step processed an item.

    Carries the step id, the function, the item's global time and its replay determinant
    (where the item came from, e.g. a front position or a Kafka offset), so the failing record
    can be found and replayed.
    """

    #: What the message says to do, after ``Hint:``.
    hint = (
        "the failing input is replayable from the determinant; fix the function or filter the "
        "record upstream"
    )

    def __init__(
        self,
        step_id: str,
        function: Any,
        global_time: Any,
        determinant: Any,
        cause: BaseException,
    ) -> None:
        self.step_id = step_id
        self.function = function
        self.global_time = global_time
        self.determinant = determinant
        self.cause = cause
        name = getattr(function, "__qualname__", None) or repr(function)
        origin = f", determinant {determinant}" if determinant is not None else ""
        super().__init__(
            f"step {step_id!r}: function {name} {self._problem()} "
            f"(item at global time {global_time}{origin}). Hint: {self.hint}"
        )

    def _problem(self) -> str:
        """What went wrong with the function, after its name."""
        return f"raised {type(self.cause).__name__}: {self.cause}"

    def with_determinant(self, determinant: Any) -> StepError:
        """Return the same error with the item's replay determinant filled in."""
        return StepError(self.step_id, self.function, self.global_time, determinant, self.cause)


class UnhashableKeyError(StepError):
    """A grouping's key function returned a value that cannot key a bucket (a list, a dict …).

    Names the grouping's step id, the key function, the key, the item's global time and (where
    the runtime knows it) its replay determinant.
    """

    hint = (
        "a grouping key must be hashable: return a tuple instead of a list (tuple(...)), a "
        "frozenset instead of a set, or a str or number"
    )

    def __init__(
        self,
        step_id: str,
        function: Any,
        global_time: Any,
        determinant: Any,
        key: Any,
        cause: BaseException,
    ) -> None:
        self.key = key
        super().__init__(step_id, function, global_time, determinant, cause)

    def _problem(self) -> str:
        return (
            f"returned the unhashable grouping key {reprlib.repr(self.key)} "
            f"({type(self.cause).__name__}: {self.cause})"
        )

    def with_determinant(self, determinant: Any) -> UnhashableKeyError:
        """Return the same error with the item's replay determinant filled in."""
        return UnhashableKeyError(
            self.step_id, self.function, self.global_time, determinant, self.key, self.cause
        )


class BatchStepError(StepError):
    """A ``map_batches`` function failed on a batch, or did not return one result per payload.

    Names the step, the function, how many payloads the batch had and the global time and
    (where the runtime knows it) replay determinant of the batch's first item. ``returned`` is
    the number of results when that was the problem (None when the function raised).
    """

    def __init__(
        self,
        step_id: str,
        function: Any,
        global_time: Any,
        determinant: Any,
        cause: BaseException,
        *,
        size: int,
        returned: int | None = None,
    ) -> None:
        self.size = size
        self.returned = returned
        if returned is not None:
            self.hint = (
                "a map_batches function returns exactly one result per payload, in order (an "
                "Arrow array, a list or a pandas Series as long as its input); to drop items, "
                "put a filter after the step"
            )
        super().__init__(step_id, function, global_time, determinant, cause)

    def _problem(self) -> str:
        batch = f"a batch of {self.size} payload{'s' * (self.size != 1)}"
        if self.returned is not None:
            return f"(a map_batches step) returned {self.returned} results for {batch}"
        return (
            f"(a map_batches step, called once on {batch}) raised "
            f"{type(self.cause).__name__}: {self.cause}; the item named is the batch's first"
        )

    def with_determinant(self, determinant: Any) -> BatchStepError:
        """Return the same error with the first item's replay determinant filled in."""
        return BatchStepError(
            self.step_id,
            self.function,
            self.global_time,
            determinant,
            self.cause,
            size=self.size,
            returned=self.returned,
        )


class ScheduleError(FlameStreamError):
    """A front or a scripted schedule was used against its contract (e.g. ts going backwards)."""


class InvariantError(FlameStreamError):
    """An internal invariant of the runtime broke; always a flamestream bug, please report it."""


class ConfigError(FlameStreamError):
    """An option is unknown, missing or has a bad value; raised before the query starts."""

    def __init__(self, step: str, option: str, value: Any, allowed: str) -> None:
        self.step = step
        self.option = option
        self.value = value
        self.allowed = allowed
        shown = "(missing)" if value is None else repr(value)
        super().__init__(f"{step}: option {option!r} = {shown} is invalid; allowed: {allowed}")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled by its fields (sources holding one travel to Spark's Python processes)."""
        return type(self), (self.step, self.option, self.value, self.allowed)


class OversizedBatchError(FlameStreamError):
    """A stage's rows of one micro-batch hold more than an Arrow binary column can: 2 GiB.

    Spark exchanges a stage's rows as Arrow record batches whose string and binary columns
    have 32-bit offsets. Names the column, the rows and where they were going.
    """

    def __init__(self, column: str, rows: int, destinations: list[str]) -> None:
        self.column = column
        self.rows = rows
        self.destinations = destinations
        super().__init__(
            f"the {rows} rows leaving a stage for {', '.join(destinations) or 'no step'} hold "
            f"more than 2 GiB in their {column!r} column, more than one Arrow record batch "
            "holds. Hint: admit fewer records a batch (maxRecordsPerTrigger); in a cycle, "
            "every round adds to an item's trace, so many rounds in one batch grow it"
        )


class RecordError(FlameStreamError):
    """A record could not be decoded or was refused; names the step and its replay determinant."""

    def __init__(
        self,
        step: str,
        determinant: Any,
        reason: str,
        *,
        problem: str = "cannot decode the record",
        hint: str = "fix or remove the record",
    ) -> None:
        self.step = step
        self.determinant = determinant
        self.reason = reason
        super().__init__(
            f"step {step!r}: {problem} at {determinant}: {reason}. Hint: {hint}, or set options "
            "onBadRecord=deadLetter and deadLetterPath to route bad records there"
        )


class SwapError(FlameStreamError):
    """A step's function cannot be swapped; raised where the swap is asked for.

    No such step, a step whose function is not swappable (a grouping's key, a source), or a
    new function that is not one (not callable, not picklable). The old function stays in force.
    """

    def __init__(self, step_id: str, expected: str, found: str, hint: str = "") -> None:
        self.step_id = step_id
        self.expected = expected
        self.found = found
        self.hint = hint
        message = f"swap of step {step_id!r}: expected {expected}, found {found}"
        if hint:
            message += f". Hint: {hint}"
        super().__init__(message)
