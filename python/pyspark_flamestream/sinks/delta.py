"""The ``delta`` sink: each batch's released rows become one commit of a Delta Lake table.

Written with delta-rs (the ``deltalake`` package, ``pip install 'flamestream[delta]'``):
Spark's own Delta jar has no build for this Spark. A batch's release appends its rows, sorted
by global time, in **one** Delta commit that also records an *application transaction*
``(appId, batch id)`` (Delta's ``txn`` action, the one Spark's own Delta sink uses). Before
appending, the sink reads the table's transaction version of ``appId``: if it is the batch id
or later, the batch is in the table already and nothing is written. So a batch whose commit
is replayed (the query killed after the Delta commit, before the sink's marker or Spark's
commit log) appends nothing twice: every released row is in the table exactly once, and a
reader sees a batch's rows all at once or not at all.

``appId`` defaults to ``flamestream-<query id>``: the id Spark keeps in the checkpoint's
``metadata`` file, the same across restarts from that checkpoint and new for a new checkpoint
(a new query into an existing table starts its own transaction versions at batch 0; a
default derived from the checkpoint's location would make a query started again at a
reused location skip every batch the old one committed).

The table's columns are the released rows' columns, as the ``files`` sink writes them: for a
graph ``ts``, ``front``, ``trace``, ``flags``, ``source``, ``position``, ``sink`` and
``value``; for a front written directly, its meta columns and payload. The common sink option
``columns`` (``value``, ``value,time``) narrows them; a table keeps the columns of its first
commit, so the option stays the same for a table.

Only ``release=commit``: delta-rs writes a commit's data files and the commit in one call, so
tasks releasing their own parts would have to write Parquet files beside it with a second
storage client and build the commit's file actions by hand (see ``docs/connectors.md``).

Options: ``path`` (required: the table's URL, a local path or ``s3://…``), ``appId``,
``storageOptions`` (a JSON object of delta-rs storage options, such as
``{"AWS_ENDPOINT_URL": "…"}``), plus the common sink options (``checkpointLocation``,
``stateLocation``, ``release``, ``columns``).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from flamestream.errors import ConfigError, FlameStreamError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import SinkOutput
from flamestream.spark.durable.files import filesystem

#: The pip command that installs delta-rs with a version this sink is tested with.
PIP_HINT = "pip install 'flamestream[delta]'"


def deltalake(step: str = "sink delta") -> Any:
    """The ``deltalake`` module, imported on first use (an optional dependency)."""
    try:
        import deltalake as module
    except ImportError as exc:
        raise ConfigError(
            step, "sink", "delta", f"the deltalake package installed ({PIP_HINT}): {exc}"
        ) from None
    return module


def query_id(checkpoint: str) -> str:
    """The query id Spark keeps in the checkpoint's ``metadata`` file (one per checkpoint)."""
    fs, root = filesystem(checkpoint)
    path = posixpath.join(root, "metadata")
    try:
        text = fs.cat_file(path).decode()
        found = json.loads(text.splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        msg = (
            f"sink delta: cannot read the query id from {path} ({type(exc).__name__}: {exc}); "
            "is checkpointLocation the query's checkpoint? Hint: set the option appId"
        )
        raise FlameStreamError(msg) from exc
    return str(found)


class DeltaOutput(SinkOutput):
    """A Delta table, one commit per released batch, idempotent by Delta's ``txn`` action."""

    kind = "delta"

    def __init__(self, options: OptionReader) -> None:
        self.step = options.step
        deltalake(self.step)  # fail at query start, not in the first commit
        self.path = options.string("path", required=True, what="Delta table URL").rstrip("/")
        self.app_id_option = options.optional_string("appId", what="application id")
        self.checkpoint = options.string("checkpointLocation", required=True)
        self.storage_options = _storage_options(options)
        self._app_id: str | None = self.app_id_option

    @property
    def app_id(self) -> str:
        """The application id of this query's Delta transactions (read once per process)."""
        if self._app_id is None:
            self._app_id = f"flamestream-{query_id(self.checkpoint)}"
        return self._app_id

    def check(self) -> None:
        """Fail at query start if ``path`` is neither a Delta table nor a place for a new one."""
        if _local(self.path) is not None:
            _check_local(self.step, self.path)
            return
        module = deltalake(self.step)
        try:
            module.DeltaTable.is_deltatable(self.path, self.storage_options)
        except (OSError, module.exceptions.DeltaError) as exc:  # unreachable, refused, bad
            reason = _ANSI.sub("", " ".join(str(exc).split()))
            raise ConfigError(
                self.step,
                "path",
                self.path,
                f"a Delta table URL reachable with storageOptions ({type(exc).__name__}: {reason})",
            ) from None

    def table(self) -> Any:
        """The table as it is now (a ``DeltaTable``), or None if there is none yet."""
        module = deltalake(self.step)
        try:
            return module.DeltaTable(self.path, storage_options=self.storage_options)
        except module.exceptions.TableNotFoundError:
            return None

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Append the batch's rows in one Delta commit, unless a commit of it is there."""
        table = self.table()
        committed = table.transaction_version(self.app_id) if table is not None else None
        if committed is not None and committed >= batch_id:
            return  # a replayed commit: the batch is in the table already
        module = deltalake(self.step)
        transaction = module.Transaction(app_id=self.app_id, version=batch_id)
        module.write_deltalake(
            self.path if table is None else table,  # the snapshot read above: no second read
            rows,
            mode="append",
            storage_options=self.storage_options,
            commit_properties=module.CommitProperties(
                app_transactions=[transaction],
                custom_metadata={"flamestream.batch": str(batch_id)},
            ),
        )


def _storage_options(options: OptionReader) -> dict[str, str] | None:
    """``storageOptions``: a JSON object of strings (delta-rs's storage options), or None."""
    text = options.optional_string("storageOptions", what="JSON object")
    if text is None:
        return None
    allowed = 'a JSON object of strings, e.g. {"AWS_ENDPOINT_URL": "http://localhost:8333"}'
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ConfigError(options.step, "storageOptions", text, f"{allowed} ({exc})") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
    ):
        raise ConfigError(options.step, "storageOptions", text, allowed)
    return parsed


def _local(path: str) -> str | None:
    """The local file system path of ``path`` (a plain path or ``file://``), else None."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return parsed.path
    return path if parsed.scheme == "" else None


def _check_local(step: str, path: str) -> None:
    """A local ``path`` must be a Delta table, or free: missing, or an empty directory."""
    local = _local(path)
    assert local is not None  # noqa: S101 - the caller checked
    allowed = "a Delta table, an empty directory or a path to create"
    if os.path.isfile(local):
        raise ConfigError(step, "path", path, f"{allowed}; it is a file")
    in_use = os.path.isdir(local) and os.listdir(local)
    if in_use and not os.path.isdir(os.path.join(local, "_delta_log")):
        found = "a directory of other files (no _delta_log)"
        raise ConfigError(step, "path", path, f"{allowed}; it is {found}")


#: The colours delta-rs puts into its error messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
