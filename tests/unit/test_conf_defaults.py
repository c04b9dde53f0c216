"""``spark.flamestream.*`` confs as option defaults (what the planner gets from the shim)."""

from __future__ import annotations

import pytest

from flamestream.errors import ConfigError
from flamestream.jvm import Shim, conf_defaults
from flamestream.spark.connector.options import OptionReader


def test_an_option_wins_over_its_conf_and_the_conf_over_the_default() -> None:
    conf = {"maxRecordsPerTrigger": "20", "clock": "logical"}
    options = OptionReader("front files", {"maxRecordsPerTrigger": "30"}, conf)
    assert options.integer("maxRecordsPerTrigger", minimum=1) == 30
    assert options.choice("clock", ["wall", "logical"], "wall") == "logical"
    assert options.integer("frontIdBase", 0) == 0
    options.finish()


def test_confs_of_options_a_step_does_not_have_are_ignored() -> None:
    options = OptionReader("sink files", {}, {"maxRecordsPerTrigger": "20", "nonsense": "1"})
    options.finish()  # a conf meant for fronts is no unknown option of a sink


def test_a_bad_conf_value_names_the_conf() -> None:
    options = OptionReader("front files", {}, {"maxRecordsPerTrigger": "0"})
    with pytest.raises(ConfigError, match=r"'spark\.flamestream\.maxRecordsPerTrigger' = '0'"):
        options.optional_integer("maxRecordsPerTrigger", minimum=1)


def test_without_a_shim_there_are_no_conf_defaults(tmp_path, monkeypatch) -> None:
    assert Shim.find(str(tmp_path)) is None
    assert Shim.find("") is None
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))  # a driver without the plugin
    assert conf_defaults() == {}


def test_a_stale_rendezvous_gives_no_defaults(tmp_path, monkeypatch) -> None:
    """A rendezvous file whose endpoint is gone (a dead driver): options alone, no error."""
    (tmp_path / "flamestream-shim.json").write_text('{"port": 1, "secret": "x"}')
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    assert Shim.find() is not None
    assert conf_defaults() == {}
