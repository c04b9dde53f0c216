"""``map_batches``: a map over batches of payloads, the contract written once.

A stateless step is per item in the model: each output's trace is its input's trace plus a
local time. A batch function is therefore a map in meaning, only called on many payloads at
once: it returns exactly one result per payload, in order, and each result must be a pure
function of its own payload. Then the output cannot depend on how the runtime cut the items
into batches (the reference runtime calls the function on one payload at a time, the Spark
stage runner on all the payloads a step gets in a task); a wrong number of results fails the
step (:class:`~flamestream.errors.BatchStepError`).

What the function gets, by the step's ``format``:

* ``"arrow"`` (the default): a ``pyarrow.Array``. With ``input_type`` every payload is
  converted to that type. Without it, each payload's own Python type picks the Arrow type
  (``str`` -> ``string``, ``bytes`` -> ``binary``, ``bool`` -> ``bool``, ``int`` -> ``int64``,
  ``float`` -> ``double``, ``None`` -> ``null``), never its neighbours: a batch mixing types is
  called once per type, so ``1`` is an ``int64`` whether a ``2.5`` shares its batch or not
  (Arrow's own inference would make it a ``double`` there). Other payloads (tuples,
  dicts …) need ``input_type`` or ``format="list"``.
* ``"pandas"``: the same Arrow array as a ``pandas.Series`` (``Array.to_pandas()``).
* ``"list"``: the payloads as they are, in a list.

What it returns: a ``pyarrow.Array`` or ``ChunkedArray`` (results are its ``to_pylist()``), a
list or tuple, or anything with ``tolist()`` (a pandas Series, a numpy array). Nothing is
dropped, a null result is a ``None`` payload as a map's would be: to drop items, follow the step
with a ``filter`` (it fuses into the same stage). Tombstones never reach the function: they
pass as a map passes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flamestream.errors import BatchStepError, StepError
from flamestream.graph.steps import MapBatches

#: Per payload type, the name of the ``pyarrow`` type factory it converts to without
#: ``input_type`` (exact types: a subclass of ``str`` is not a ``str`` here).
_ARROW_TYPES: dict[type, str] = {
    str: "string",
    bytes: "binary",
    bool: "bool_",
    int: "int64",
    float: "float64",
    type(None): "null",
}


class WrongLength(ValueError):
    """A batch function returned ``returned`` results for ``size`` payloads.

    The cause inside a ``BatchStepError``; the runtimes never let it out alone.
    """

    def __init__(self, returned: int, size: int) -> None:
        self.returned = returned
        self.size = size
        super().__init__(f"{returned} results for {size} payloads")


def call_batch(
    step: MapBatches, payloads: Sequence[Any], fn: Callable[[Any], Any] | None = None
) -> list[Any]:
    """One result per payload of ``payloads``: ``fn`` (default: the step's) called by batch.

    Raises what ``fn`` raises, :class:`WrongLength`, or ``TypeError`` for a result or payload
    the contract does not take; callers turn those into a ``BatchStepError``.
    """
    fn = step.fn if fn is None else fn
    if not payloads:
        return []
    if step.format == "list":
        return _results(fn(list(payloads)), len(payloads))
    if step.input_type is not None:
        return _results(fn(_as_format(step, _array(payloads, step.input_type))), len(payloads))
    kinds = set(map(type, payloads))  # at C speed: a loop per payload costs more than lower()
    if len(kinds) == 1:  # the usual batch: payloads of one type, one call
        arrow_type = _arrow_type(payloads[0])
        return _results(fn(_as_format(step, _array(payloads, arrow_type))), len(payloads))
    groups = _by_arrow_type(payloads)
    results: list[Any] = [None] * len(payloads)
    for arrow_type, positions in groups.items():
        part = _array([payloads[i] for i in positions], arrow_type)
        for position, result in zip(
            positions, _results(fn(_as_format(step, part)), len(positions)), strict=True
        ):
            results[position] = result
    return results


def _by_arrow_type(payloads: Sequence[Any]) -> dict[Any, list[int]]:
    """The payloads' positions per Arrow type, in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for position, payload in enumerate(payloads):
        groups.setdefault(_arrow_type(payload), []).append(position)
    return groups


def _arrow_type(payload: Any) -> Any:
    """The Arrow type ``payload``'s own Python type converts to; ``TypeError`` if none."""
    import pyarrow as pa

    name = _ARROW_TYPES.get(type(payload))
    if name is None:
        msg = (
            f"payload {payload!r:.80} of type {type(payload).__name__} has no Arrow type of its "
            "own; give the step input_type=<a pyarrow type> or format='list'"
        )
        raise TypeError(msg)
    return getattr(pa, name)()


def _array(payloads: Sequence[Any], arrow_type: Any) -> Any:
    import pyarrow as pa

    return pa.array(payloads, arrow_type)


def _as_format(step: MapBatches, array: Any) -> Any:
    """The Arrow array as the step's format gives it to the function."""
    return array.to_pandas() if step.format == "pandas" else array


def _results(returned: Any, size: int) -> list[Any]:
    """What the function returned as a list of ``size`` results."""
    import pyarrow as pa

    results: list[Any]
    if isinstance(returned, pa.Array | pa.ChunkedArray):
        results = returned.to_pylist()
    elif isinstance(returned, list):
        results = returned
    elif isinstance(returned, tuple):
        results = list(returned)
    elif callable(getattr(returned, "tolist", None)):
        results = list(returned.tolist())
    else:
        msg = (
            f"a map_batches function returns a pyarrow Array, a list or a pandas Series, not "
            f"{type(returned).__name__}"
        )
        raise TypeError(msg)
    if len(results) != size:
        raise WrongLength(len(results), size)
    return results


def batch_error(
    step: MapBatches, time: Any, determinant: Any, cause: BaseException, size: int
) -> BatchStepError:
    """The error for a batch of ``size`` whose first item has ``time`` and ``determinant``."""
    returned = cause.returned if isinstance(cause, WrongLength) else None
    return BatchStepError(
        step.step_id, step.fn, time, determinant, cause, size=size, returned=returned
    )


def as_batch_error(step: MapBatches, error: StepError) -> BatchStepError:
    """A ``StepError`` raised calling :func:`one`'s function, as the batch's error (of one)."""
    return batch_error(step, error.global_time, error.determinant, error.cause, 1)


def one(step: MapBatches, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` as a map's function: a batch of one payload, its one result."""

    def single(payload: Any) -> Any:
        return call_batch(step, (payload,), fn)[0]

    single.__qualname__ = getattr(fn, "__qualname__", None) or repr(fn)
    return single


__all__ = ["WrongLength", "as_batch_error", "batch_error", "call_batch", "one"]
