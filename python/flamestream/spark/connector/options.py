"""Typed, validated options: Spark's string options are parsed once, at query start.

Every error names the step (``front files``, ``sink kafka`` …), the option, the bad value and
what is allowed, and is raised on the driver before any batch runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TypeVar

from flamestream.errors import ConfigError
from flamestream.jvm import CONF_PREFIX

T = TypeVar("T")


class OptionReader:
    """Reads options case-insensitively (Spark lower-cases them) and tracks which were used.

    >>> reader = OptionReader("front generator", {"rowsPerSecond": "10"})
    >>> reader.integer("rowsPerSecond", default=1, minimum=1)
    10
    >>> reader.finish()
    """

    #: Options Spark itself sets or reads; never reported as unknown.
    SPARK_OWNED = frozenset({"path", "checkpointlocation", "queryname"})

    def __init__(
        self, step: str, options: Mapping[str, str], defaults: Mapping[str, str] | None = None
    ) -> None:
        self.step = step
        self._options = {key.lower(): value for key, value in options.items()}
        self._names = {key.lower(): key for key in options}
        #: ``spark.flamestream.<option>`` confs (session SET over spark-defaults), by option
        self._defaults = {key.lower(): value for key, value in (defaults or {}).items()}
        self._used: set[str] = set()
        self._known: list[str] = []

    def raw(self, name: str) -> str | None:
        """The option's string value (``.option`` first, then the conf default), or None."""
        self._known.append(name)
        self._used.add(name.lower())
        value = self._options.get(name.lower())
        return value if value is not None else self._defaults.get(name.lower())

    def label(self, name: str) -> str:
        """How errors name an option: the conf's full name when the value came from a conf."""
        lowered = name.lower()
        if lowered not in self._options and lowered in self._defaults:
            return CONF_PREFIX + name
        return name

    def string(
        self,
        name: str,
        default: str | None = None,
        *,
        required: bool = False,
        what: str = "string",
        allow_empty: bool = False,
    ) -> str:
        """A string option; ``default`` when absent.

        Set but empty is an error, not the default (``what`` says what is expected: ``a
        non-empty <what>``), unless ``allow_empty`` says an empty value means something.

        >>> try:
        ...     OptionReader("sink files", {"path": ""}).string("path", what="directory URL")
        ... except ConfigError as exc:
        ...     print(exc)
        sink files: option 'path' = '' is invalid; allowed: a non-empty directory URL
        """
        value = self.raw(name)
        if value is None:
            if required or default is None:
                raise ConfigError(
                    self.step, self.label(name), None, f"a non-empty {what} (required)"
                )
            return default
        if value == "" and not allow_empty:
            raise ConfigError(self.step, self.label(name), value, f"a non-empty {what}")
        return value

    def optional_string(self, name: str, *, what: str = "string") -> str | None:
        """A string option that may be absent, but not set to an empty string."""
        value = self.raw(name)
        if value == "":
            raise ConfigError(self.step, self.label(name), value, f"a non-empty {what}")
        return value

    def integer(self, name: str, default: int | None = None, *, minimum: int | None = None) -> int:
        """An integer option, at least ``minimum``."""
        value = self.raw(name)
        allowed = "an integer" + (f" >= {minimum}" if minimum is not None else "")
        if value is None:
            if default is None:
                raise ConfigError(self.step, self.label(name), None, allowed + " (required)")
            return default
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(self.step, self.label(name), value, allowed) from None
        if minimum is not None and number < minimum:
            raise ConfigError(self.step, self.label(name), value, allowed)
        return number

    def optional_integer(self, name: str, *, minimum: int | None = None) -> int | None:
        """An integer option that may be absent."""
        if self.raw(name) is None:
            return None
        return self.integer(name, minimum=minimum)

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        """A float option, at least ``minimum``."""
        value = self.raw(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(
                self.step, self.label(name), value, f"a number >= {minimum}"
            ) from None
        if number < minimum or number != number:  # NaN
            raise ConfigError(self.step, self.label(name), value, f"a number >= {minimum}")
        return number

    def optional_number(self, name: str, *, minimum: float = 0.0) -> float | None:
        """A float option that may be absent."""
        if self.raw(name) is None:
            return None
        return self.number(name, 0.0, minimum=minimum)

    def boolean(self, name: str, default: bool) -> bool:
        """A true/false option."""
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise ConfigError(self.step, self.label(name), value, "true or false")
        return lowered == "true"

    def choice(self, name: str, allowed: Iterable[T], default: T) -> T:
        """One of ``allowed`` (compared case-insensitively as strings)."""
        options = list(allowed)
        value = self.raw(name)
        if value is None:
            return default
        for option in options:
            if str(option).lower() == value.strip().lower():
                return option
        raise ConfigError(
            self.step, self.label(name), value, "one of " + ", ".join(map(str, options))
        )

    def name_list(self, name: str, allowed: Iterable[str], default: str) -> str:
        """One of ``allowed``, each a comma-separated list of names, compared as a set.

        Spaces, case and the order of the names do not matter; the ``allowed`` spelling is
        returned.

        >>> OptionReader("sink files", {"columns": "Time, value"}).name_list(
        ...     "columns", ["all", "value", "value,time"], "all"
        ... )
        'value,time'
        >>> try:
        ...     OptionReader("sink files", {"columns": "trace"}).name_list(
        ...         "columns", ["all", "value"], "all"
        ...     )
        ... except ConfigError as exc:
        ...     print(exc)
        sink files: option 'columns' = 'trace' is invalid; allowed: one of all, value
        """
        options = list(allowed)
        value = self.raw(name)
        if value is None:
            return default
        for option in options:
            if _names(option) == _names(value):
                return option
        raise ConfigError(self.step, self.label(name), value, "one of " + ", ".join(options))

    def finish(self, *, also_allowed: Iterable[str] = ()) -> None:
        """Reject every option that was never read (a typo, or an option of another step)."""
        extra = {name.lower() for name in also_allowed}
        for key in self._options:
            if key not in self._used and key not in self.SPARK_OWNED and key not in extra:
                known = sorted({*self._known, *also_allowed})
                by_lower = {name.lower(): name for name in known}
                close = difflib.get_close_matches(key, list(by_lower), n=1)
                guess = f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
                raise ConfigError(
                    self.step,
                    self._names[key],
                    self._options[key],
                    f"no such option{guess}; known options: " + ", ".join(known),
                )


def _names(listed: str) -> frozenset[str]:
    """The names of a comma-separated list, lower-cased, without spaces or empty names."""
    return frozenset(part.strip().lower() for part in listed.split(",") if part.strip())
