"""conf.topic: Kafka's topic name rule matched over the whole name; integer configs in ASCII digits."""

from __future__ import annotations

import pytest

from conf.errors import ConfigError
from conf.topic import TOPIC_NAME_RE, InvalidTopicName, TopicConfig, validate_topic_name


@pytest.mark.parametrize("name", ["t\n", "t\r\n", "\nt", "t\n\n", "t\u0661", "t\x00"])
def test_a_name_is_matched_whole(name):
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)
    # the pattern itself anchors both ends, for callers that use .match (group ids)
    assert TOPIC_NAME_RE.match(name) is None


@pytest.mark.parametrize("name", ["t", "a.b_c-1", "__consumer_offsets", "x" * 249])
def test_legal_names_pass(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("raw", ["1_0", "\u0661", "+1", "1e3", "0x10", "\uff11"])
def test_an_integer_config_is_ascii_digits_only(raw):
    with pytest.raises(ConfigError, match="expected an integer"):
        TopicConfig.from_kafka({"retention.ms": raw})


def test_an_integer_config_may_have_whitespace_around_it_as_in_kafka():
    assert TopicConfig.from_kafka({"partitions": " 5 "}).partitions == 5
