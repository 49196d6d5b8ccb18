"""The one duration grammar (conf.durations) and every place that reads a duration."""

from __future__ import annotations

import argparse

import pytest

from conf import ConfigError, load, parse_duration_ms
from jobs.cli import duration
from pipeline.errors import InvalidSourceOption
from pipeline.options import parse_duration_ms as source_duration_ms


@pytest.mark.parametrize("text, ms", [
    ("500", 500), ("100ms", 100), ("5s", 5_000), ("15m", 900_000), ("15min", 900_000),
    ("1h", 3_600_000), ("2d", 172_800_000), (" 10 S ", 10_000), ("0", 0)])
def test_units_and_a_bare_number_is_milliseconds(text, ms):
    assert parse_duration_ms(text, key="k") == ms


@pytest.mark.parametrize("text", ["", "s", "5x", "1.5s", "+5", "1_0", "١", "5 5s", "0x10",
                                  "1" * 20, "9223372036854775807d"])
def test_anything_else_is_refused_naming_the_key_and_the_value(text):
    with pytest.raises(ConfigError) as e:
        parse_duration_ms(text, key="some.key.ms")
    assert e.value.key == "some.key.ms" and e.value.value == text
    assert "some.key.ms" in str(e.value) and repr(text) in str(e.value)


def test_minimum_and_negative():
    with pytest.raises(ConfigError, match="must not be negative"):
        parse_duration_ms("-1", key="k")
    with pytest.raises(ConfigError, match="at least 1 ms"):
        parse_duration_ms("0", key="k", minimum=1)
    assert parse_duration_ms(7, key="k") == 7  # an int is already milliseconds


def test_every_reader_uses_the_grammar():
    # settings' *.ms keys
    assert load({"maintenance.interval.ms": "5m"}).maintenance.interval_ms == 300_000
    assert load({"gateway.linger.ms": "5"}).gateway.linger_ms == 5
    with pytest.raises(ConfigError, match="gateway.linger.ms"):
        load({"gateway.linger.ms": "soon"})
    # CLI flags (--every, --trigger)
    assert duration(1)("5") == 5 and duration(1)("2s") == 2_000
    with pytest.raises(argparse.ArgumentTypeError, match="'soon'"):
        duration(1)("soon")
    # the source option maxTriggerDelay
    assert source_duration_ms("maxTriggerDelay", "5") == 5
    with pytest.raises(InvalidSourceOption, match="maxTriggerDelay"):
        source_duration_ms("maxTriggerDelay", "5 minutes")
