"""``format("sparklog")`` with ``valueFormat=avro``: typed columns in Spark, batch and
streaming, for a topic written with two schema versions (records in Confluent's wire
format, schemas in the store's registry)."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import append, read, source_options
from tests.pipeline.registry_records import avro, record, register

pytestmark = [pytest.mark.spark, pytest.mark.slow]

V1 = record("Click", {"name": "url", "type": "string"}, {"name": "ms", "type": "int"})
V2 = record("Click", {"name": "url", "type": "string"}, {"name": "ms", "type": "long"},
            {"name": "ref", "type": ["null", "string"], "default": None})


def test_batch_and_streaming_reads_give_typed_fields(spark, local_log, tmp_path):
    local_log.create_topic("reg_clicks", {"partitions": 2})
    id1 = register(local_log, "reg_clicks-value", V1)
    append(local_log, "reg_clicks", 0, [avro(V1, id1, {"url": f"/a{i}", "ms": i})
                                        for i in range(3)])
    id2 = register(local_log, "reg_clicks-value", V2)
    append(local_log, "reg_clicks", 1, [avro(V2, id2, {"url": "/b", "ms": 2 ** 40, "ref": "r"})])

    df = read(spark, local_log, subscribe="reg_clicks", valueFormat="avro")
    assert df.schema["value"].dataType.simpleString() == "struct<url:string,ms:bigint,ref:string>"
    got = sorted(tuple(r) for r in df.selectExpr("value.url", "value.ms", "value.ref",
                                                  "valueSchemaId").collect())
    assert got == [("/a0", 0, None, id1), ("/a1", 1, None, id1), ("/a2", 2, None, id1),
                   ("/b", 2 ** 40, "r", id2)]
    # SQL over the fields, Spark filtering on a decoded one
    df.createOrReplaceTempView("reg_clicks_view")
    assert spark.sql("SELECT sum(value.ms) AS s FROM reg_clicks_view "
                     "WHERE value.ref IS NULL").first().s == 3

    stream = (spark.readStream.format("sparklog")
              .options(**source_options(local_log, subscribe="reg_clicks", valueFormat="avro",
                                        startingOffsets="earliest")).load())
    query = (stream.selectExpr("value.*", "offset").writeStream.format("memory")
             .queryName("reg_clicks_stream").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(tuple(r) for r in spark.table("reg_clicks_stream")
                  .select("url", "ms", "ref").collect()) == [
        ("/a0", 0, None), ("/a1", 1, None), ("/a2", 2, None), ("/b", 2 ** 40, "r")]


def test_an_undecodable_record_fails_the_query_naming_its_offset(spark, local_log):
    from pyspark.errors import PythonException
    from pyspark.errors.exceptions.captured import CapturedException

    from pipeline.errors import spark_failure_message

    local_log.create_topic("reg_bad", {"partitions": 1})
    sid = register(local_log, "reg_bad-value", V1)
    append(local_log, "reg_bad", 0, [avro(V1, sid, {"url": "/a", "ms": 1}), b'{"url": "/b"}'])
    with pytest.raises((PythonException, CapturedException)) as caught:
        read(spark, local_log, subscribe="reg_bad", valueFormat="avro").collect()
    assert spark_failure_message(caught.value).startswith(
        "reg_bad-0 offset 1: the value cannot be decoded: the first byte is 0x7b")
    rows = read(spark, local_log, subscribe="reg_bad", valueFormat="avro",
                mode="PERMISSIVE").orderBy("offset").select("value.url").collect()
    assert [r.url for r in rows] == ["/a", None]


UNION = record("Shape", {"name": "size", "type": ["null", "int", "string"]},
               {"name": "parts", "type": {"type": "array", "items": ["long", "string"]}})


def test_unions_read_as_member_structs_batch_and_streaming(spark, local_log, tmp_path):
    local_log.create_topic("reg_shapes", {"partitions": 1})
    sid = register(local_log, "reg_shapes-value", UNION)
    append(local_log, "reg_shapes", 0, [avro(UNION, sid, {"size": 3, "parts": [1, "a"]}),
                                        avro(UNION, sid, {"size": "big", "parts": []}),
                                        avro(UNION, sid, {"size": None, "parts": ["b"]})])
    df = read(spark, local_log, subscribe="reg_shapes", valueFormat="avro")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<size:struct<member0:int,member1:string>,"
        "parts:array<struct<member0:bigint,member1:string>>>")
    query = "value.size.member0 AS n, value.size.member1 AS s, value.parts.member1 AS p"
    want = [(3, None, [None, "a"]), (None, "big", []), (None, None, ["b"])]
    assert [tuple(r) for r in df.orderBy("offset").selectExpr(*query.split(", "))
            .collect()] == want
    stream = (spark.readStream.format("sparklog")
              .options(**source_options(local_log, subscribe="reg_shapes", valueFormat="avro",
                                        startingOffsets="earliest")).load())
    q = (stream.selectExpr(*query.split(", "), "offset").writeStream.format("memory")
         .queryName("reg_shapes_stream").option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert [tuple(r)[:3] for r in spark.table("reg_shapes_stream").orderBy("offset")
            .collect()] == want
