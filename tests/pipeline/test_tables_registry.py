"""Topics written by confluent-kafka's AvroSerializer (through the gateway's Kafka
listener and its Schema Registry) materialised as typed Delta tables that evolve with
their subject, and queried by field with ``sparklog sql``; a compacted topic of JSON
Schema values MERGEd by key."""

from __future__ import annotations

import json
import uuid

import pytest

from jobs.cli import main
from log_layout import open_log
from pipeline import tables
from pipeline.errors import TableError
from tests.pipeline.conftest import append
from tests.pipeline.registry_records import avro, jsonschema, record, register

pytestmark = [pytest.mark.spark, pytest.mark.slow]

URL = {"name": "url", "type": "string"}
V1 = record("Click", URL, {"name": "ms", "type": "int"})
# BACKWARD-compatible: int widens to long, a field added with a default
V2 = record("Click", URL, {"name": "ms", "type": "long"},
            {"name": "ref", "type": ["null", "string"], "default": None})
# not Avro-compatible (set NONE to register it), and not a type Delta can widen to
V3 = record("Click", URL, {"name": "ms", "type": "string"},
            {"name": "ref", "type": ["null", "string"], "default": None})


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


def produce(gw, topic: str, schema: dict, values: list[dict]) -> None:
    """``values`` through AvroSerializer (auto-registering ``schema`` under <topic>-value)
    and the gateway's Kafka listener."""
    import confluent_kafka as ck
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": gw.url + "/schema-registry"})
    ser = AvroSerializer(client, json.dumps(schema))
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap})
    for value in values:
        producer.produce(topic, ser(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def sql(store: str, query: str, capsys, *more: str) -> list[dict]:
    capsys.readouterr()
    assert main(["--store", store, "sql", query, "--output", "json", *more]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_avro_topic_becomes_a_typed_table_that_evolves(spark, gw, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient

    topic = f"reg_{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    store = gw.store_url
    produce(gw, topic, V1, [{"url": "/a", "ms": 1}, {"url": "/b", "ms": 2}])
    table = f"{topic}_t"
    args = ["--store", store, "materialize", topic, "--table", table, "--once",
            "--value-format", "avro"]
    assert main(args) == 0
    assert sql(store, f"SELECT url, ms FROM {table} ORDER BY ms", capsys) == [
        {"url": "/a", "ms": 1}, {"url": "/b", "ms": 2}]
    assert spark.table(table).schema["ms"].dataType.simpleString() == "int"
    # the topic itself, decoded by its subject with --schemas (the registry is the
    # session's: v1's id is whatever it was given)
    client = SchemaRegistryClient({"url": gw.url + "/schema-registry"})
    v1 = client.get_version(f"{topic}-value", 1).schema_id
    assert sql(store, f"SELECT value.url, valueSchemaId FROM {topic} ORDER BY offset", capsys,
               "--schemas") == [{"url": "/a", "valueSchemaId": v1},
                                {"url": "/b", "valueSchemaId": v1}]

    # v2: ms widened to long, ref added; the next run evolves the table, then appends
    produce(gw, topic, V2, [{"url": "/c", "ms": 2 ** 40, "ref": "mail"}])
    assert main(args) == 0
    assert sql(store, f"SELECT url, ms, ref FROM {table} WHERE ms > 1 ORDER BY ms", capsys) == [
        {"url": "/b", "ms": 2, "ref": None}, {"url": "/c", "ms": 2 ** 40, "ref": "mail"}]
    schema = spark.read.format("delta").load(tables.table_path(
        tables.default_warehouse(open_log(store)), table)).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields][:3] == [
        ("key", "string"), ("url", "string"), ("ms", "bigint")]

    # v3 (registered under NONE): ms becomes a string, which Delta cannot follow
    client.set_compatibility(f"{topic}-value", "NONE")
    register(open_log(store), f"{topic}-value", V3)
    with pytest.raises(TableError, match=r"Delta cannot follow \(ms: bigint -> string\)"):
        tables.materialize(spark, topic, table, store=store, value_format="avro")
    assert sql(store, f"SELECT count(*) AS n FROM {table}", capsys) == [{"n": 3}]


def test_compacted_json_schema_topic_merges_by_key(spark, local_log, capsys):
    local_log.create_topic("reg_users", {"partitions": 1, "cleanup.policy": "compact"})
    kid = register(local_log, "reg_users-key", {
        "type": "object", "properties": {"id": {"type": "string"}}}, "JSON")
    sid = register(local_log, "reg_users-value", {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                         "timestamp": {"type": "string"}}}, "JSON")
    append(local_log, "reg_users", 0,
           [jsonschema(sid, {"name": "Ann", "age": 30, "timestamp": "t1"}),
            jsonschema(sid, {"name": "Bob", "age": 40}),
            jsonschema(sid, {"name": "Ann", "age": 31}), None],
           keys=[jsonschema(kid, {"id": k}) for k in ("ann", "bob", "ann", "bob")])
    tables.materialize(spark, "reg_users", "reg_users", log=local_log,
                       value_format="jsonschema", key_format="jsonschema")
    rows = spark.table("reg_users").select("key.id", "name", "age", "value_timestamp").collect()
    # the key a struct (MERGE compares it whole); bob's tombstone deleted him; a value
    # field named as a table column is value_<name>
    assert [tuple(r) for r in rows] == [("ann", "Ann", 31, None)]
    with pytest.raises(TableError, match="mode=PERMISSIVE cannot materialise a compacted"):
        tables.materialize(spark, "reg_users", "reg_users", log=local_log,
                           value_format="jsonschema", options={"mode": "permissive"})


def test_a_union_column_evolves_when_a_branch_is_added(spark, local_log):
    """A union of several types is a member0..N struct column; a writer adding a branch
    at the end adds a nested field, which Delta follows by mergeSchema."""
    local_log.create_topic("reg_u", {"partitions": 1})
    u1 = record("U", URL, {"name": "v", "type": ["null", "int", "string"]})
    u2 = record("U", URL, {"name": "v", "type": ["null", "int", "string", "double"]})
    id1 = register(local_log, "reg_u-value", u1)
    append(local_log, "reg_u", 0, [avro(u1, id1, {"url": "/a", "v": 1}),
                                   avro(u1, id1, {"url": "/b", "v": "x"})])
    tables.materialize(spark, "reg_u", "reg_u", log=local_log, value_format="avro")
    assert spark.table("reg_u").schema["v"].dataType.simpleString() == (
        "struct<member0:int,member1:string>")
    id2 = register(local_log, "reg_u-value", u2)
    append(local_log, "reg_u", 0, [avro(u2, id2, {"url": "/c", "v": 2.5})])
    tables.materialize(spark, "reg_u", "reg_u", log=local_log, value_format="avro")
    table = spark.table("reg_u")
    assert table.schema["v"].dataType.simpleString() == (
        "struct<member0:int,member1:string,member2:double>")
    assert sorted(tuple(r) for r in table.selectExpr("url", "v.member0", "v.member1",
                                                     "v.member2").collect()) == [
        ("/a", 1, None, None), ("/b", None, "x", None), ("/c", None, None, 2.5)]
