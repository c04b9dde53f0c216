"""The exceptions flamestream raises; every one derives from :class:`FlameStreamError`.

House style: name the step (or front), say what was expected and what was found, add a hint.
"""

from __future__ import annotations

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
            f"step {step_id!r}: function {name} raised {type(cause).__name__}: {cause} "
            f"(item at global time {global_time}{origin}). Hint: the failing input is replayable "
            "from the determinant; fix the function or filter the record upstream"
        )

    def with_determinant(self, determinant: Any) -> StepError:
        """Return the same error with the item's replay determinant filled in."""
        return StepError(self.step_id, self.function, self.global_time, determinant, self.cause)


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


class RecordError(FlameStreamError):
    """A record could not be decoded; names the step and the record's replay determinant."""

    def __init__(self, step: str, determinant: Any, reason: str) -> None:
        self.step = step
        self.determinant = determinant
        self.reason = reason
        super().__init__(
            f"step {step!r}: cannot decode the record at {determinant}: {reason}. Hint: fix or "
            "remove the record, or set option deadLetterPath to route undecodable records there"
        )
