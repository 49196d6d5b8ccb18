"""A topic written by confluent-kafka's ProtobufSerializer (protoc-generated classes, the
gateway's Schema Registry and Kafka listener) read typed through the ``sparklog`` source,
materialised to a typed Delta table and queried by field with ``sparklog sql``."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import pathlib
import sys
import uuid

import pytest

from jobs.cli import main
from tests.pipeline.conftest import read

protoc = pytest.importorskip("grpc_tools.protoc")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# its own package: the generated module registers in the process's default pool, where
# the gateway tests' shop/order.proto may be too
PROTO = """syntax = "proto3";
package sparktab;
import "google/protobuf/timestamp.proto";
enum Kind { VIEW = 0; CLICK = 1; }
message Click {
  string url = 1;
  int64 ms = 2;
  google.protobuf.Timestamp at = 3;
  Kind kind = 4;
  repeated string tags = 5;
  message Where { string country = 1; }
  Where where = 6;
}
"""


# two top-level messages and a nested one, its own package again
MULTI = """syntax = "proto3";
package sparkmulti;
message Visit { string page = 1; }
message Order {
  string id = 1;
  int64 cents = 2;
  message Line { string sku = 1; int32 qty = 2; }
  repeated Line lines = 3;
}
"""


def generated(tmp_path_factory, package: str, name: str, text: str):
    """The protoc-generated ``_pb2`` module of ``text`` as ``package/name.proto``."""
    import grpc_tools

    d = tmp_path_factory.mktemp(f"pb2-{package}")
    (d / package).mkdir()
    (d / package / f"{name}.proto").write_text(text)
    well_known = str(pathlib.Path(grpc_tools.__file__).parent / "_proto")
    assert protoc.main(["protoc", f"-I{d}", f"-I{well_known}", f"--python_out={d}",
                        f"{package}/{name}.proto"]) == 0
    sys.path.insert(0, str(d))
    try:
        return importlib.import_module(f"{package}.{name}_pb2")
    finally:
        sys.path.remove(str(d))


@pytest.fixture(scope="module")
def click_pb2(tmp_path_factory):
    return generated(tmp_path_factory, "sparktab", "click", PROTO)


@pytest.fixture(scope="module")
def multi_pb2(tmp_path_factory):
    return generated(tmp_path_factory, "sparkmulti", "multi", MULTI)


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


def produce(gw, click_pb2, topic: str, values: list[dict]) -> None:
    produce_messages(gw, topic, [(click_pb2.Click, v) for v in values])


def produce_messages(gw, topic: str, records: list[tuple[type, dict]]) -> None:
    """Each (generated message class, its JSON mapping) through its own
    ProtobufSerializer (which writes the class's message indexes) and the Kafka listener."""
    import confluent_kafka as ck
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import json_format

    client = SchemaRegistryClient({"url": gw.url + "/schema-registry"})
    serializers = {cls: ProtobufSerializer(cls, client, {"use.deprecated.format": False,
                                                         "skip.known.types": True})
                   for cls, _ in records}
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap})
    for cls, value in records:
        producer.produce(topic, serializers[cls](json_format.ParseDict(value, cls()), ctx))
    assert producer.flush(30) == 0


def test_protobuf_topic_reads_typed_and_becomes_a_typed_table(spark, gw, click_pb2, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic

    from log_layout import open_log

    topic = f"pb_{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})  # kept alive till the answer
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    produce(gw, click_pb2, topic, [
        {"url": "/a", "ms": "5", "at": "2026-11-29T04:30:00Z", "kind": "CLICK",
         "tags": ["x", "y"], "where": {"country": "NL"}},
        {"url": "/b", "ms": "7"}])

    df = read(spark, open_log(gw.store_url), subscribe=topic, valueFormat="protobuf")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<url:string,ms:bigint,at:timestamp,kind:string,tags:array<string>,"
        "where:struct<country:string>>")
    got = [tuple(r) for r in df.orderBy("offset").selectExpr(
        "value.url", "value.kind", "value.where.country", "size(value.tags)", "value.at").collect()]
    at = got[0][4]
    assert at is not None and at.astimezone(dt.timezone.utc) == dt.datetime(
        2026, 11, 29, 4, 30, tzinfo=dt.timezone.utc)
    assert [g[:4] for g in got] == [("/a", "CLICK", "NL", 2), ("/b", "VIEW", None, 0)]

    table = f"{topic}_t"
    store = gw.store_url
    assert main(["--store", store, "materialize", topic, "--table", table, "--once",
                 "--value-format", "protobuf"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "sql", f"SELECT url, ms, kind FROM {table} WHERE ms > 5",
                 "--output", "json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"url": "/b", "ms": 7, "kind": "VIEW"}]
    assert spark.table(table).schema["ms"].dataType.simpleString() == "bigint"

    # v2, a field added (registered as .proto text, a record written straight into the log):
    # the next run adds the column (Delta's mergeSchema); the older rows read null there
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from pipeline.registry_protobuf import compile_file, first_message
    from tests.pipeline.conftest import append
    from tests.pipeline.registry_records import header

    v2 = PROTO.replace("Where where = 6;", "Where where = 6;\n  string ref = 7;")
    client = SchemaRegistryClient({"url": gw.url + "/schema-registry"})
    v2_id = client.register_schema(f"{topic}-value", Schema(v2, "PROTOBUF"))
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(first_message(compile_file(v2, [], "t")))
    append(open_log(store), topic, 0,
           [header(v2_id) + b"\0" + cls(url="/c", ms=9, ref="mail").SerializeToString()])
    assert main(["--store", store, "materialize", topic, "--table", table, "--once",
                 "--value-format", "protobuf"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "sql", f"SELECT url, ref FROM {table} ORDER BY ms",
                 "--output", "json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"url": "/a", "ref": None}, {"url": "/b", "ref": None}, {"url": "/c", "ref": "mail"}]


def test_a_message_other_than_the_files_first_is_chosen_by_its_full_name(spark, gw, multi_pb2,
                                                                          capsys):
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.errors import PythonException
    from pyspark.errors.exceptions.captured import CapturedException

    from log_layout import open_log
    from pipeline.errors import spark_failure_message

    topic = f"pbm_{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    Order, Line = multi_pb2.Order, multi_pb2.Order.Line
    produce_messages(gw, topic, [
        (Order, {"id": "o-1", "cents": "1250", "lines": [{"sku": "a", "qty": 2}]}),
        (Line, {"sku": "b", "qty": 3}),
        (Order, {"id": "o-2", "cents": "7"})])
    log = open_log(gw.store_url)

    order = read(spark, log, subscribe=topic, valueFormat="protobuf",
                 valueProtobufMessage="sparkmulti.Order", mode="PERMISSIVE")
    assert order.schema["value"].dataType.simpleString() == (
        "struct<id:string,cents:bigint,lines:array<struct<sku:string,qty:int>>>")
    assert [tuple(r) for r in order.orderBy("offset").selectExpr(
        "value.id", "value.cents", "get(value.lines, 0).sku").collect()] == [
        ("o-1", 1250, "a"), (None, None, None), ("o-2", 7, None)]
    line = read(spark, log, subscribe=topic, valueFormat="protobuf", mode="PERMISSIVE",
                valueProtobufMessage="sparkmulti.Order.Line")
    assert line.schema["value"].dataType.simpleString() == "struct<sku:string,qty:int>"
    assert [tuple(r) for r in line.orderBy("offset").selectExpr(
        "value.sku", "value.qty").collect()] == [(None, None), ("b", 3), (None, None)]
    # without the option: the file's first message (Visit), which no record here is
    first = read(spark, log, subscribe=topic, valueFormat="protobuf", mode="PERMISSIVE")
    assert first.schema["value"].dataType.simpleString() == "struct<page:string>"
    assert first.where("value IS NULL").count() == 3

    with pytest.raises((PythonException, CapturedException)) as caught:
        read(spark, log, subscribe=topic, valueFormat="protobuf",
             valueProtobufMessage="sparkmulti.Order").collect()
    assert spark_failure_message(caught.value).startswith(
        f"{topic}-0 offset 1: the value cannot be decoded: it is a sparkmulti.Order.Line "
        "message (indexes [1, 0] of schema id ")
    assert "not the sparkmulti.Order the column reads" in spark_failure_message(caught.value)

    with pytest.raises(Exception) as refused:  # at load(), before any task
        read(spark, log, subscribe=topic, valueFormat="protobuf",
             valueProtobufMessage="sparkmulti.Lines")
    said = spark_failure_message(refused.value) or str(refused.value)
    assert "'valueProtobufMessage' 'sparkmulti.Lines': is not a message of " \
        f"{topic}-value version 1 (its messages, by full name: sparkmulti.Visit, " \
        "sparkmulti.Order, sparkmulti.Order.Line)" in said

    # materialize with the message chosen: the nested message's rows, others refused
    table = f"{topic}_lines"
    assert main(["--store", gw.store_url, "materialize", topic, "--table", table, "--once",
                 "--value-format", "protobuf", "--value-protobuf-message",
                 "sparkmulti.Order.Line", "--option", "mode=PERMISSIVE"]) == 0
    capsys.readouterr()
    assert main(["--store", gw.store_url, "sql", f"SELECT sku, qty FROM {table} "
                 "WHERE sku IS NOT NULL", "--output", "json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"sku": "b", "qty": 3}]
