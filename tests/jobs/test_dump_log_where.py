"""``dump-log``'s TOPIC/PARTITION[/SEGMENT] argument, including segments carried by their
manifest version's file (S3 and HDFS stores)."""

from __future__ import annotations

import pytest

from conf.errors import ConfigError
from jobs.commands.dump_log import _where

CARRIED = f"_log/{7:020d}-tioX4TFVRlW5h0G_ZuO-0g.json"


@pytest.mark.parametrize("text, expected", [
    ("t/0", ("t", 0, None)),
    (f"t/3/{0:020d}-ab.arrow", ("t", 3, f"{0:020d}-ab.arrow")),
    (f"s3://bucket/log/t/3/{0:020d}-ab.arrow", ("t", 3, f"{0:020d}-ab.arrow")),
    (f"t/2/{CARRIED}", ("t", 2, CARRIED)),
    (f"hdfs://nn:8020/log/t/2/{CARRIED}", ("t", 2, CARRIED)),
])
def test_where_names_a_partition_or_one_of_its_segments(text, expected):
    assert _where(text) == expected


@pytest.mark.parametrize("text", ["t", "t/x", f"t/x/{CARRIED}", "t/0/_log", "t/0/x.json",
                                  f"_log/{CARRIED[5:]}", "t/-1"])
def test_where_refuses_anything_else_naming_it(text):
    with pytest.raises(ConfigError):
        _where(text)
