"""conf.topic: Kafka's topic name rule, matched over the whole name."""

from __future__ import annotations

import pytest

from conf.topic import TOPIC_NAME_RE, InvalidTopicName, validate_topic_name


@pytest.mark.parametrize("name", ["t\n", "t\r\n", "\nt", "t\n\n", "t\u0661", "t\x00"])
def test_a_name_is_matched_whole(name):
    with pytest.raises(InvalidTopicName):
        validate_topic_name(name)
    # the pattern itself anchors both ends, for callers that use .match (group ids)
    assert TOPIC_NAME_RE.match(name) is None


@pytest.mark.parametrize("name", ["t", "a.b_c-1", "__consumer_offsets", "x" * 249])
def test_legal_names_pass(name):
    assert validate_topic_name(name) == name
