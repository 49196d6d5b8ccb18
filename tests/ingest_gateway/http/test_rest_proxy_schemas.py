"""REST Proxy's embedded formats with a schema (Avro, JSON Schema) on a real gateway, over
real HTTP, checked against confluent-kafka's own serializers and deserializers:

- v2 produce (``vnd.kafka.avro.v2+json`` / ``jsonschema``) with ``value_schema`` /
  ``key_schema`` text or ``*_schema_id``: what it writes is read over the Kafka listener
  and decoded by confluent-kafka's AvroDeserializer / JSONDeserializer;
- v3 records with ``type`` + ``schema``, ``schema_id``, ``subject`` + ``schema_version``;
- what AvroSerializer produced over the Kafka listener is answered decoded by a v2
  consumer instance of format avro;
- hostile input (records not fitting the schema, schemas invalid, deep or huge, unknown
  ids, an incompatible schema, Protobuf, fuzzed data) refused with Confluent's codes,
  nothing written, nothing registered, never a 500.
"""

from __future__ import annotations

import json
import random
import uuid

import pytest
import urllib3

pytest.importorskip("fastavro")

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.json_schema import JSONDeserializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from tests.ingest_gateway.consumers import consume  # noqa: E402

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
CLICK = json.dumps({"type": "record", "name": "Click", "namespace": "demo", "fields": [
    {"name": "url", "type": "string"}, {"name": "ms", "type": "long"},
    {"name": "referrer", "type": ["null", "string"], "default": None}]})
KEY = json.dumps({"type": "record", "name": "UserKey", "fields": [{"name": "user", "type": "int"}]})
ORDER = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
                    "required": ["id"]})


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager()


@pytest.fixture(scope="module")
def registry(gw):
    return SchemaRegistryClient({"url": gw.url + "/schema-registry"})


@pytest.fixture(scope="module")
def cluster(gw, http):
    return json.loads(http.request("GET", gw.url + "/v3/clusters").data)["data"][0]["cluster_id"]


def post(http, gw, path, body, content_type=AVRO_V2, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = http.request("POST", gw.url + path, body=data,
                     headers={"Content-Type": content_type, **(headers or {})})
    return r.status, (json.loads(r.data) if r.data else None)


def new_topic(gw, partitions=1) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
    return topic


def end_offset(http, gw, topic, partition=0) -> int:
    r = http.request("GET", gw.url + f"/topics/{topic}/partitions/{partition}/offsets")
    return json.loads(r.data)["end_offset"]


def test_v2_avro_produce_read_by_confluents_avro_deserializer(gw, http, registry):
    topic = new_topic(gw)
    records = [{"key": {"user": i}, "value": {"url": f"/p/{i}", "ms": i * 10,
                                              "referrer": None if i % 2 else {"string": "x"}}}
               for i in range(6)]
    status, doc = post(http, gw, f"/topics/{topic}",
                       {"key_schema": KEY, "value_schema": CLICK, "records": records})
    assert status == 200, doc
    # the ids are the registry's, under the topic's subjects (TopicNameStrategy)
    assert doc["value_schema_id"] == registry.get_latest_version(f"{topic}-value").schema_id
    assert doc["key_schema_id"] == registry.get_latest_version(f"{topic}-key").schema_id
    assert [o["offset"] for o in doc["offsets"]] == list(range(6))
    de = AvroDeserializer(registry)
    got = consume(gw, topic, 6)
    for i, msg in enumerate(got):
        assert msg.value()[:5] == b"\x00" + doc["value_schema_id"].to_bytes(4, "big")
        assert de(msg.key(), SerializationContext(topic, MessageField.KEY)) == {"user": i}
        assert de(msg.value(), SerializationContext(topic, MessageField.VALUE)) == {
            "url": f"/p/{i}", "ms": i * 10, "referrer": None if i % 2 else "x"}
    # the same schema again, by text then by id: the same id, no new version
    again = post(http, gw, f"/topics/{topic}", {"value_schema": CLICK, "records": [
        {"value": {"url": "/again", "ms": 1, "referrer": None}}]})[1]
    by_id = post(http, gw, f"/topics/{topic}", {"value_schema_id": doc["value_schema_id"],
                                                "records": [{"value": {"url": "/id", "ms": 2,
                                                                       "referrer": None}}]})[1]
    assert again["value_schema_id"] == by_id["value_schema_id"] == doc["value_schema_id"]
    assert registry.get_versions(f"{topic}-value") == [1]


def test_v2_jsonschema_produce_read_by_confluents_json_deserializer(gw, http, registry):
    topic = new_topic(gw)
    values = [{"id": i, "item": f"book-{i}"} for i in range(4)]
    status, doc = post(http, gw, f"/topics/{topic}",
                       {"value_schema": ORDER, "records": [{"value": v} for v in values]},
                       JSONSCHEMA_V2)
    assert status == 200, doc
    assert doc["key_schema_id"] is None
    assert registry.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"
    de = JSONDeserializer(None, schema_registry_client=registry)
    got = [de(m.value(), SerializationContext(topic, MessageField.VALUE))
           for m in consume(gw, topic, 4)]
    assert got == values


def test_v3_records_with_schemas(gw, http, registry, cluster):
    topic = new_topic(gw)
    path = f"/v3/clusters/{cluster}/topics/{topic}/records"
    value = {"url": "/v3", "ms": 5, "referrer": {"string": "r"}}
    status, first = post(http, gw, path, {"value": {"type": "AVRO", "schema": CLICK,
                                                    "data": value}}, "application/json")
    assert status == 200, first
    sid = registry.get_latest_version(f"{topic}-value").schema_id
    assert first["value"] == {"type": "AVRO", "size": first["value"]["size"],
                              "subject": f"{topic}-value", "schema_id": sid,
                              "schema_version": 1}
    # by id, by subject and version, by type alone (the latest), and a tombstone
    body = "".join(json.dumps(r) for r in (
        {"value": {"schema_id": sid, "data": value}},
        {"value": {"subject": f"{topic}-value", "schema_version": 1, "data": value}},
        {"value": {"type": "AVRO", "data": value}},
        {"key": {"type": "STRING", "data": "k"}, "value": {"type": "AVRO", "data": None}}))
    r = http.request("POST", gw.url + path, body=body.encode(),
                     headers={"Content-Type": "application/json"})
    reports = [json.loads(line) for line in r.data.decode().splitlines()]
    assert [x["error_code"] for x in reports] == [200] * 4, reports
    assert all(x["value"]["schema_id"] == sid for x in reports[:3])
    de = AvroDeserializer(registry)
    msgs = consume(gw, topic, 5)
    decoded = [None if m.value() is None else
               de(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in msgs]
    assert decoded.count(None) == 1
    assert all(d == {"url": "/v3", "ms": 5, "referrer": "r"} for d in decoded if d is not None)
    # JSONSCHEMA: its own subject; JSON stays the schemaless type
    other = new_topic(gw)
    status, doc = post(http, gw, f"/v3/clusters/{cluster}/topics/{other}/records",
                       {"value": {"type": "JSONSCHEMA", "schema": ORDER, "data": {"id": 1}}},
                       "application/json")
    assert status == 200 and doc["value"]["type"] == "JSONSCHEMA", doc


def test_avro_serializer_over_kafka_read_decoded_by_a_v2_avro_consumer(gw, http, registry):
    topic = new_topic(gw)
    ser = AvroSerializer(registry, CLICK)
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap})
    sent = [{"url": f"/k/{i}", "ms": i, "referrer": "x" if i % 2 else None} for i in range(5)]
    for v in sent:
        producer.produce(topic, ser(v, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    status, inst = post(http, gw, f"/consumers/{group}", {"name": "i1", "format": "avro",
                                                          "auto.offset.reset": "earliest"},
                        "application/vnd.kafka.v2+json")
    assert status == 200, inst
    base = f"/consumers/{group}/instances/i1"
    assert post(http, gw, base + "/subscription", {"topics": [topic]},
                "application/vnd.kafka.v2+json")[0] == 204
    got = []
    for _ in range(20):
        r = http.request("GET", gw.url + base + "/records?timeout=2000",
                         headers={"Accept": AVRO_V2})
        assert r.status == 200, r.data
        assert r.headers["Content-Type"].startswith(AVRO_V2)
        got += json.loads(r.data)
        if len(got) >= 5:
            break
    # Avro's JSON encoding, as Confluent's REST Proxy answers: a union's branch named
    assert [g["value"] for g in got] == [
        {"url": f"/k/{i}", "ms": i, "referrer": {"string": "x"} if i % 2 else None}
        for i in range(5)]
    http.request("DELETE", gw.url + base)


def test_a_record_that_is_not_avro_stops_an_avro_consumer_where_it_is(gw, http, cluster):
    topic = new_topic(gw)
    post(http, gw, f"/topics/{topic}", {"records": [{"value": "plain"}]},
         "application/vnd.kafka.json.v2+json")
    group = f"g-{uuid.uuid4().hex[:6]}"
    post(http, gw, f"/consumers/{group}", {"name": "i1", "format": "avro",
                                           "auto.offset.reset": "earliest"},
         "application/vnd.kafka.v2+json")
    base = f"/consumers/{group}/instances/i1"
    post(http, gw, base + "/subscription", {"topics": [topic]}, "application/vnd.kafka.v2+json")
    for _ in range(10):
        r = http.request("GET", gw.url + base + "/records?timeout=1000",
                         headers={"Accept": AVRO_V2})
        if r.status != 200 or json.loads(r.data):
            break
    body = json.loads(r.data)
    assert (r.status, body["error_code"], body["offset"]) == (422, 42206, 0), body
    assert "wire format" in body["message"]
    status, doc = post(http, gw, f"/consumers/{group}", {"name": "p", "format": "thrift"},
                       "application/vnd.kafka.v2+json")
    assert (status, doc["error_code"]) == (400, 40001) and "protobuf" in doc["message"]
    http.request("DELETE", gw.url + base)


# -- hostile input ----------------------------------------------------------------------
def _refused(http, gw, topic, body, content_type=AVRO_V2):
    before = end_offset(http, gw, topic)
    status, doc = post(http, gw, f"/topics/{topic}", body, content_type)
    assert end_offset(http, gw, topic) == before, "a refused request wrote records"
    return status, doc


def test_hostile_v2_bodies_refused_with_confluents_codes(gw, http, registry):
    topic = new_topic(gw)
    ok = {"url": "/x", "ms": 1, "referrer": None}
    cases = [
        # a record not matching the schema: the whole request refused, nothing registered
        ({"value_schema": CLICK, "records": [{"value": ok}, {"value": {"url": 3}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": {**ok, "ms": 2**63}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": {**ok, "referrer": 5}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": [ok]}]}, 422, 42203),
        ({"records": [{"value": ok}]}, 422, 42202),  # no value schema
        ({"value_schema": CLICK, "records": [{"key": 1, "value": ok}]}, 422, 42201),
        ({"value_schema": "{not json", "records": [{"value": ok}]}, 422, 42205),
        ({"value_schema": json.dumps({"type": "record", "name": "1bad", "fields": []}),
          "records": [{"value": ok}]}, 422, 42205),
        ({"value_schema": 7, "records": [{"value": ok}]}, 422, 42205),
        ({"value_schema_id": "1", "records": [{"value": ok}]}, 400, 40001),
        ({"value_schema_id": 2**31, "records": [{"value": ok}]}, 400, 40001),
        ({"value_schema_id": 987654, "records": [{"value": ok}]}, 422, 42207),
        ({"value_schema": CLICK, "records": [{"value": ok, "partition": 9}]}, 404, 40402),
    ]
    for body, status, code in cases:
        got = _refused(http, gw, topic, body)
        assert got[0:1] + (got[1]["error_code"],) == (status, code), (body, got)
    with pytest.raises(Exception):  # nothing was registered by any of them
        registry.get_latest_version(f"{topic}-value")


def test_deep_huge_and_incompatible_schemas_refused(gw, http, registry):
    topic = new_topic(gw)
    deep: object = "string"
    for i in range(200):
        deep = {"type": "array", "items": deep}
    huge = {"type": "record", "name": "H", "fields": [{"name": f"f{i}", "type": "int"}
                                                      for i in range(6000)]}
    for schema in (deep, huge):
        status, doc = _refused(http, gw, topic, {"value_schema": json.dumps(schema),
                                                 "records": [{"value": {}}]})
        assert (status, doc["error_code"]) == (422, 42205), doc
    assert post(http, gw, f"/topics/{topic}", {"value_schema": CLICK, "records": [
        {"value": {"url": "/a", "ms": 1, "referrer": None}}]})[0] == 200
    # a new required field without a default: BACKWARD refuses; the registry's 409 inside
    narrowed = json.loads(CLICK)
    narrowed["fields"].append({"name": "extra", "type": "int"})
    status, doc = _refused(http, gw, topic, {"value_schema": json.dumps(narrowed), "records": [
        {"value": {"url": "/a", "ms": 1, "referrer": None, "extra": 1}}]})
    assert (status, doc["error_code"]) == (422, 42207) and "incompatible" in doc["message"]
    assert registry.get_versions(f"{topic}-value") == [1]


def test_bad_v3_shapes_refused(gw, http, cluster):
    topic = new_topic(gw)
    path = f"/v3/clusters/{cluster}/topics/{topic}/records"
    for value, status, code in [
        ({"type": "PROTO", "data": {}}, 400, 40001),
        ({"type": "JSON", "schema": ORDER, "data": {}}, 400, 40001),
        ({"schema": CLICK, "data": {}}, 400, 40001),  # text without a type
        ({"schema_id": 1, "schema_version": 1, "data": {}}, 400, 40001),
        ({"type": "AVRO", "schema_id": True, "data": {}}, 400, 40001),
        ({"type": "AVRO", "subject_name_strategy": "RECORD_NAME", "data": {}}, 400, 40001),
        ({"type": "AVRO", "subject_name_strategy": "FOO", "schema": CLICK}, 400, 40001),
        ({"type": "JSONSCHEMA", "subject_name_strategy": "RECORD_NAME", "schema": ORDER,
          "data": {"id": 1}}, 422, 42205),  # RECORD_NAME needs a title
        ({"type": "AVRO", "schema": CLICK, "data": {"url": 1}}, 422, 42203),
        ({"schema_id": 987654, "data": {}}, 422, 42207),
        ({"type": "AVRO", "subject": "nobody-value", "data": {}}, 422, 42207),
    ]:
        got = post(http, gw, path, {"value": value}, "application/json")
        assert (got[0], got[1]["error_code"]) == (status, code), (value, got)
    assert end_offset(http, gw, topic) == 0


def test_fuzzed_data_never_crashes_the_encoder(gw, http):
    """Random JSON values against a schema with every Avro kind: each request is either
    written (200) or refused with 42203, never a 500."""
    schema = json.dumps({"type": "record", "name": "All", "fields": [
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
        {"name": "f", "type": "float"}, {"name": "b", "type": "boolean"},
        {"name": "s", "type": "string"}, {"name": "y", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["null", "int", "string"]},
        {"name": "x", "type": {"type": "fixed", "name": "X", "size": 2}}]})
    topic = new_topic(gw)
    rnd = random.Random(32)
    atoms = [None, True, 0, -1, 2**31, 2**63, 1.5, "", "A", "ab", "\u00ff\u00fe", [], {},
             [1, 2], {"k": "v"}, {"int": 1}, {"string": "s"}, {"long": 1}, {"null": None}]
    statuses = set()
    for _ in range(60):
        value = {name: rnd.choice(atoms) for name in "ilfbsyeamux" if rnd.random() < 0.9}
        status, doc = post(http, gw, f"/topics/{topic}", {"value_schema": schema,
                                                          "records": [{"value": value}]})
        assert status == 200 or (status, doc["error_code"]) == (422, 42203), (value, doc)
        statuses.add(status)
    good = {"i": 1, "l": 2, "f": 1.5, "b": True, "s": "s", "y": "\u00ff", "e": "A", "a": [1],
            "m": {"k": "v"}, "u": {"string": "s"}, "x": "ab"}
    assert post(http, gw, f"/topics/{topic}", {"value_schema": schema,
                                               "records": [{"value": good}]})[0] == 200
    assert 422 in statuses


def test_json_schema_patterns_cannot_backtrack_without_bound(gw, http):
    """A registered pattern that backtracks exponentially in Python's re (``^(a+)+$``
    against 5,000 ``a`` and a ``!``) is run by RE2: refused at once (422 42203), the
    gateway free; a pattern RE2 cannot run (a backreference) is 42207, never a hang."""
    topic = new_topic(gw)
    schema = json.dumps({"type": "object", "properties": {"a": {
        "type": "string", "pattern": "^(a+)+$"}}, "patternProperties": {
        "^(x+)+$": {"type": "integer"}}, "additionalProperties": False})
    quick = urllib3.PoolManager(timeout=urllib3.Timeout(total=30), retries=False)
    for value in ({"a": "a" * 5000 + "!"}, {"x" * 5000 + "!": 1}):
        status, doc = post(quick, gw, f"/topics/{topic}", {"value_schema": schema, "records": [
            {"value": value}]}, JSONSCHEMA_V2)
        assert (status, doc["error_code"]) == (422, 42203), doc
    assert post(quick, gw, f"/topics/{topic}", {"value_schema": schema, "records": [
        {"value": {"a": "aaa", "xx": 1}}]}, JSONSCHEMA_V2)[0] == 200
    backref = json.dumps({"type": "string", "pattern": "(a)\\1"})
    status, doc = post(quick, gw, f"/topics/{new_topic(gw)}", {"value_schema": backref,
                                                              "records": [{"value": "aa"}]},
                       JSONSCHEMA_V2)
    assert (status, doc["error_code"]) == (422, 42207) and "linear time" in doc["message"], doc


def test_json_schema_references_resolve_by_their_names(gw, http, registry):
    """A JSON Schema whose ``$ref`` names another subject's schema by its reference name
    (Confluent's references) validates through it when REST Proxy encodes by its id."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    topic = new_topic(gw)
    address = json.dumps({"type": "object", "properties": {"zip": {"type": "string"}},
                          "required": ["zip"]})
    registry.register_schema(f"{topic}-address", Schema(address, "JSON"))
    person = json.dumps({"type": "object", "properties": {
        "name": {"type": "string"}, "home": {"$ref": "address.json"}}})
    sid = registry.register_schema(f"{topic}-value", Schema(person, "JSON", [
        SchemaReference("address.json", f"{topic}-address", 1)]))
    ok = post(http, gw, f"/topics/{topic}", {"value_schema_id": sid, "records": [
        {"value": {"name": "a", "home": {"zip": "1000"}}}]}, JSONSCHEMA_V2)
    assert ok[0] == 200, ok
    status, doc = post(http, gw, f"/topics/{topic}", {"value_schema_id": sid, "records": [
        {"value": {"name": "a", "home": {"zip": 1000}}}]}, JSONSCHEMA_V2)
    assert (status, doc["error_code"]) == (422, 42203) and "/home/zip" in doc["message"], doc


def test_v3_record_name_strategies(gw, http, registry, cluster):
    """subject_name_strategy RECORD_NAME / TOPIC_RECORD_NAME: the subject is the schema's
    record name (Avro's full name), or the topic and it, as Confluent's strategies."""
    topic = new_topic(gw)
    path = f"/v3/clusters/{cluster}/topics/{topic}/records"
    value = {"url": "/r", "ms": 1, "referrer": None}
    got = {}
    for strategy in ("RECORD_NAME", "TOPIC_RECORD_NAME"):
        status, doc = post(http, gw, path, {"value": {
            "type": "AVRO", "subject_name_strategy": strategy, "schema": CLICK, "data": value}},
            "application/json")
        assert status == 200, doc
        got[strategy] = doc["value"]["subject"]
    assert got == {"RECORD_NAME": "demo.Click", "TOPIC_RECORD_NAME": f"{topic}-demo.Click"}
    sid = registry.get_latest_version("demo.Click").schema_id
    assert registry.get_latest_version(f"{topic}-demo.Click").schema_id == sid
    # by id, the strategy names the subject the report gives
    status, doc = post(http, gw, path, {"value": {
        "subject_name_strategy": "RECORD_NAME", "schema_id": sid, "data": value}},
        "application/json")
    assert (status, doc["value"]["subject"], doc["value"]["schema_version"]) == \
        (200, "demo.Click", 1), doc
    de = AvroDeserializer(registry)
    assert all(de(m.value(), SerializationContext(topic, MessageField.VALUE)) == value
               for m in consume(gw, topic, 3))
