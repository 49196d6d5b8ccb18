"""DescribeClientQuotas and AlterClientQuotas over raw sockets against a gateway
process: entities of users, client ids and both (names and defaults), Kafka's filter
matching (exact, default, any, strict), per-entry refusals (unknown types and keys,
rates that are not whole numbers, ip entities), validate_only, and what is written
is the store's quotas the throttles read."""

from __future__ import annotations

import pytest
from kio.schema.alter_client_quotas.v1 import request as alter_req
from kio.schema.describe_client_quotas.v1 import request as describe_req

from log_layout import quotas
from tests.ingest_gateway.kafka.kafka_gateway import call, connect


# the quotas written here (a default consumer_byte_rate among them) would throttle every
# other test of the session's shared gateway: a gateway and store of the module's own
@pytest.fixture(scope="module")
def kafka_gateway(own_kafka_gateway):
    return own_kafka_gateway


@pytest.fixture(scope="module")
def kafka_log(own_kafka_log):
    return own_kafka_log


def alter(s, entries, validate_only=False):
    req = alter_req.AlterClientQuotasRequest(validate_only=validate_only, entries=tuple(
        alter_req.EntryData(
            entity=tuple(alter_req.EntityData(entity_type=t, entity_name=n) for t, n in ent),
            ops=tuple(alter_req.OpData(key=k, value=float(v if v is not None else 0),
                                       remove=v is None) for k, v in ops))
        for ent, ops in entries))
    answer = call(s, req, 1)[1]
    return [(int(e.error_code), e.error_message) for e in answer.entries]


def describe(s, components, strict=False):
    req = describe_req.DescribeClientQuotasRequest(strict=strict, components=tuple(
        describe_req.ComponentData(entity_type=t, match_type=m, match=n)
        for t, m, n in components))
    answer = call(s, req, 1)[1]
    if int(answer.error_code):
        return int(answer.error_code)
    return sorted((tuple((e.entity_type, e.entity_name) for e in entry.entity),
                   {v.key: v.value for v in entry.values}) for entry in answer.entries)


def test_alter_and_describe_client_quotas(kafka_gateway, kafka_log):
    with connect(kafka_gateway) as s:
        assert alter(s, [
            ([("user", "alice")], [("producer_byte_rate", 1024)]),
            ([("client-id", "etl")], [("request_percentage", 12.5)]),
            ([("user", None), ("client-id", None)], [("consumer_byte_rate", 2048)]),
        ]) == [(0, None)] * 3
        found = quotas.describe(kafka_log.store).entries
        assert found["User:alice"] == {"producer_byte_rate": 1024}
        assert found["Client:etl"] == {"request_percentage": 12.5}
        assert found["<default>/Client:<default>"] == {"consumer_byte_rate": 2048}
        assert not any(k.startswith(("User:bob", "User:x", "User:carol", "User:dave"))
                       or "nan" in k for k in found)
        assert describe(s, [("user", 0, "alice")]) == [
            ((("user", "alice"),), {"producer_byte_rate": 1024.0})]
        assert describe(s, [("client-id", 2, None)], strict=True) == [
            ((("client-id", "etl"),), {"request_percentage": 12.5})]
        assert describe(s, [("client-id", 1, None)]) == [
            ((("user", None), ("client-id", None)), {"consumer_byte_rate": 2048.0})]
        assert describe(s, [("client-id", 1, None)], strict=True) == []
        assert describe(s, [("user", 0, None)]) == 42  # exact without a name
        assert describe(s, [("user", 2, None), ("user", 2, None)]) == 42
        # validate_only writes nothing; remove deletes a key
        assert alter(s, [([("user", "alice")], [("producer_byte_rate", 1)])],
                     validate_only=True) == [(0, None)]
        assert quotas.describe(kafka_log.store).entries["User:alice"] == \
            {"producer_byte_rate": 1024}
        assert alter(s, [([("user", "alice")], [("producer_byte_rate", None)])]) == [(0, None)]
        assert "User:alice" not in quotas.describe(kafka_log.store).entries


def test_each_refused_entry_is_invalid_request_and_the_rest_applied(kafka_gateway, kafka_log):
    with connect(kafka_gateway) as s:
        answers = alter(s, [
            ([("user", "bob"), ("client-id", "app")], [("producer_byte_rate", 1.5)]),
            ([("ip", "1.2.3.4")], [("connection_creation_rate", 5)]),
            ([("user", "x"), ("user", "y")], [("producer_byte_rate", 5)]),
            ([("user", "carol")], [("controller_mutation_rate", 5)]),
            ([("user", "dave")], [("producer_byte_rate", 0)]),
            ([("client-id", "nan")], [("request_percentage", float("nan"))]),
            ([("client-id", "fine")], [("request_percentage", 200)]),
        ])
    assert [code for code, _ in answers] == [42] * 6 + [0]
    assert all(message for _, message in answers[:6])
    assert quotas.describe(kafka_log.store).entries["Client:fine"] == {"request_percentage": 200}
