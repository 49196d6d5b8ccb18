"""Option parsing of the ``sparklog`` source (no Spark needed): Kafka names, Kafka rules."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import InvalidSourceOption
from pipeline.options import parse, parse_duration_ms

STORE = {"store": "/tmp/sparklog-options-test"}


def test_kafka_options_parse_and_kafka_dot_options_are_ignored():
    o = parse({**STORE, "subscribe": "a, b", "startingOffsets": '{"a": {"0": 5, "1": -2}}',
               "maxOffsetsPerTrigger": "100", "minPartitions": "4", "failOnDataLoss": "False",
               "includeHeaders": "true", "kafka.bootstrap.servers": "host:9092",
               "groupIdPrefix": "x"})
    assert o.subscribe == ("a", "b")
    assert o.starting_offsets == {"a": {0: 5, 1: -2}}
    assert (o.max_offsets_per_trigger, o.min_partitions) == (100, 4)
    assert o.fail_on_data_loss is False and o.include_headers is True
    assert o.ending_offsets == "latest" and o.max_trigger_delay_ms == 15 * 60_000


@pytest.mark.parametrize("options, match", [
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "exactly one of subscribe"),
    ({}, "exactly one of subscribe"),
    ({"subscribe": " , "}, "names no topic"),
    ({"subscribePattern": "("}, "not a valid regular expression"),
    ({"assign": '{"a": []}'}, "non-empty list of partition numbers"),
    ({"assign": "[1]"}, "must be a JSON object"),
    ({"subscribe": "a", "startingOffsets": "{bad"}, "is not valid JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "must be an integer >= -2"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"x": 1}}'}, "is not a number"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "must be at least 1"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
     "larger than maxOffsetsPerTrigger"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, "must be true or false"),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, "expected a duration"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "none"}, "must be error or latest"),
    ({"subscribe": "a", "fetch.max.bytes": "1"}, "is not an option of the sparklog source"),
    ({"subscribe": "a", "storageOptions": "[]"}, "must be a JSON object"),
])
def test_bad_options_name_the_option(options, match):
    with pytest.raises(InvalidSourceOption, match=match):
        parse({**STORE, **options})


def test_batch_and_stream_rules():
    with pytest.raises(InvalidSourceOption, match="cannot start at latest"):
        parse({**STORE, "subscribe": "a", "startingOffsets": "latest"}).check_batch()
    with pytest.raises(InvalidSourceOption, match="-1 \\(latest\\) is not allowed"):
        parse({**STORE, "subscribe": "a", "startingOffsets": '{"a": {"0": -1}}'}).check_batch()
    with pytest.raises(InvalidSourceOption, match="cannot end at earliest"):
        parse({**STORE, "subscribe": "a", "endingOffsets": "earliest"}).check_batch()
    with pytest.raises(InvalidSourceOption, match="-2 \\(earliest\\) is not allowed"):
        parse({**STORE, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}).check_batch()
    with pytest.raises(InvalidSourceOption, match="only valid for streaming"):
        parse({**STORE, "subscribe": "a", "maxTriggerDelay": "1s"}).check_batch()
    with pytest.raises(InvalidSourceOption, match="not valid for streaming"):
        parse({**STORE, "subscribe": "a", "endingTimestamp": "5"}).check_stream()


def test_s3_storage_options():
    o = parse({"store": "s3://bucket/log", "subscribe": "a",
               "store.s3.endpoint.url": "http://127.0.0.1:8333", "store.s3.key": "k",
               "store.s3.secret": "s", "storageOptions": json.dumps({"anon": False})})
    assert o.storage_options == {"anon": False, "key": "k", "secret": "s",
                                 "client_kwargs": {"endpoint_url": "http://127.0.0.1:8333"}}
    assert o.store_description == {"url": "s3://bucket/log", "storage_options": o.storage_options}


@pytest.mark.parametrize("text, ms", [("500ms", 500), ("10s", 10_000), ("15m", 900_000),
                                      ("1h", 3_600_000), ("2d", 172_800_000), ("250", 250)])
def test_durations(text, ms):
    assert parse_duration_ms("maxTriggerDelay", text) == ms
