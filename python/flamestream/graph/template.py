"""``Template``: a declared map function that renders an item's fields as text.

``flow.map("render", counts, Template("{key}={value}"))`` does what
``flow.map("render", counts, lambda r: f"{r.key}={r.value}")`` does, on every runtime. Declared
this way, a runtime may render without calling Python per item: the Spark runtime renders a
sum's ``Reduced(text, int)`` items in Arrow when every field of the template is a plain
``{key}`` or ``{value}`` (see ``flamestream.spark.exec.declared.rendered``).
"""

from __future__ import annotations

import string
from typing import Any

from flamestream.errors import GraphError

#: A template's fields the Arrow renderers know: the item's ``key`` and ``value``.
PLAIN_FIELDS = frozenset({"key", "value"})


class Template:
    """Renders an item as ``text.format_map`` over its attributes.

    A field ``{name}`` is the item's attribute ``name`` (``Reduced`` and ``Mapped`` have
    ``key`` and ``value``); format specs, conversions, attribute and index access work as in
    :meth:`str.format`. A field naming no attribute fails the step like any raising function.

    >>> from flamestream import Reduced
    >>> Template("{key}={value}")(Reduced("dog", 2))
    'dog=2'
    >>> Template("{key!r}: {value:>3}")(Reduced("dog", 2))
    "'dog':   2"
    """

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            found = f"{type(text).__name__} {text!r}"
            raise GraphError(None, "a Template's format string", found, "Template('{key}={value}')")
        self.text = text
        #: the text split as (literal, field, format spec, conversion), as str.format splits it
        self.parts = _parsed(text)

    def __call__(self, item: Any) -> str:
        """``item`` rendered."""
        return self.text.format_map(_Fields(item))

    def plain_parts(self) -> list[tuple[str, str | None]] | None:
        """``(literal, field)`` pairs if every field is a plain ``{key}`` or ``{value}``.

        Field None: a literal with no field after it (the end). None when a field has a
        format spec, a conversion, or names anything else: only Python renders those.
        """
        out: list[tuple[str, str | None]] = []
        for literal, field, spec, conversion in self.parts:
            if field is not None and (field not in PLAIN_FIELDS or spec or conversion):
                return None
            out.append((literal, field))
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash((Template, self.text))

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    def __reduce__(self) -> tuple[type[Template], tuple[str]]:
        return Template, (self.text,)


class _Fields:
    """An item's attributes as the mapping ``str.format_map`` reads fields from."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def __getitem__(self, name: str) -> Any:
        return getattr(self.item, name)


def _parsed(text: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """``text`` split into fields; every field must be named (items are not positional)."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise GraphError(None, "a Template's format string", repr(text), str(exc)) from None
    for _, field, _, _ in parts:
        if field is not None and (not field or field[0].isdigit()):
            shown = "{" + field + "}"
            raise GraphError(
                None,
                "a Template with named fields ({key}, {value}, any attribute of the item)",
                repr(text),
                f"{shown} is positional; name the item's attribute instead",
            )
    return parts
