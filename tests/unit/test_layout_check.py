"""A checkpoint's key layout (partition count, elastic or not) cannot change: option errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from flamestream.errors import ConfigError
from flamestream.spark.apply import check_layout


def test_the_first_layout_is_recorded_and_the_same_one_accepted(tmp_path: Path):
    check_layout(str(tmp_path), 3, graph="wc")
    check_layout(str(tmp_path), 3, graph="wc")
    assert (tmp_path / "layout.json").exists()


def test_a_changed_partition_count_is_an_option_error_naming_both_counts(tmp_path: Path):
    check_layout(str(tmp_path), 3, graph="wc")
    with pytest.raises(ConfigError) as error:
        check_layout(str(tmp_path), 4, graph="wc")
    message = str(error.value)
    assert message.startswith("graph wc: option 'partitions' = 4 is invalid")
    assert "3 key partitions" in message
    assert "step" not in message


def test_turning_elastic_on_for_an_existing_checkpoint_is_an_option_error(tmp_path: Path):
    check_layout(str(tmp_path), 2, graph="wc")
    with pytest.raises(ConfigError, match=r"graph wc: option 'elastic' = True is invalid"):
        check_layout(str(tmp_path), 2, elastic=True, graph="wc")
