"""A new user's first graph query: ``flamestream.configure`` picks the key partitions ``P``
from the application's cores, the query runs with them, and ``describe()`` names them and
where they came from (before a session, with one, and after ``apply``).

One child driver (``first_query_job.py``), since ``configure`` acts before a JVM starts and
the tests' shared session has started without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flamestream.spark.key_partitions import UNDECIDED

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.first_query_job", str(tmp_path_factory.mktemp("fq"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def p_line(described: str) -> str:
    """``describe()``'s line on the key partitions."""
    (line,) = [x.strip() for x in described.splitlines() if "key partitions P" in x]
    return line


def test_configure_picks_the_cores_and_the_query_runs_with_them(result: dict[str, Any]) -> None:
    assert result["shufflePartitions"] == "2"  # local[2], not Spark's 200
    configured = result["configured"]
    assert configured["layout"]["partitions"] == 2  # P recorded for the checkpoint
    assert configured["widths"] and max(configured["widths"]) == 2  # no stage of 200 tasks
    assert configured["rows"] == 7  # every word's running count, released
    # partitions=3 on a checkpoint: its keyed stage runs 3 tasks (the widths follow P)
    assert 3 in result["given"]["widths"]


def test_describe_names_p_and_where_it_came_from(result: dict[str, Any]) -> None:
    assert p_line(result["beforeSession"]) == UNDECIDED  # no session: how P will be chosen
    with_session = p_line(result["sessionOnly"])
    assert with_session.startswith("key partitions P = 2 ")
    assert "flamestream.configure's spark.sql.shuffle.partitions, the cores of local[2]" in (
        with_session
    )
    assert "unless a checkpoint recorded another" in with_session
    applied = p_line(result["configured"]["describe"])
    assert applied.startswith("key partitions P = 2 ") and "the cores of local[2]" in applied
    assert "unless" not in applied
    assert (
        "P = 3 " in p_line(result["given"]["describe"])
        and "partitions=3" in (result["given"]["describe"])
    )


def test_a_checkpoint_keeps_its_p_under_a_default_and_refuses_the_users_other_one(
    result: dict[str, Any],
) -> None:
    recorded = p_line(result["recorded"]["describe"])
    assert recorded.startswith("key partitions P = 3 ")
    assert "recorded by the checkpoint when it first ran (else 2: flamestream.configure's" in (
        recorded
    )
    assert 3 in result["recorded"]["widths"]
    user = result["user"]
    assert "P = 4 " in p_line(user["sessionOnly"]) and "set for the session" in user["sessionOnly"]
    refused = user["refused"]
    assert "option 'spark.sql.shuffle.partitions' = 4 is invalid" in refused
    assert "3 key partitions, as when this checkpoint's state was written" in refused
    assert "P = 4 " in p_line(user["describe"]) and max(user["widths"]) == 4
