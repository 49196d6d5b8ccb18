"""Topics as tables: Structured Streaming from a topic into a Delta table.

:func:`materialize` runs a query from the ``sparklog`` source into the Delta
table ``<warehouse>/<table>``, continuously or once (``Trigger.AvailableNow``),
exactly once across restarts:

* an **event topic** (``cleanup.policy=delete``) is appended through Delta's
  streaming sink, which records each micro-batch as a transaction
  (``txnAppId`` = query id, ``txnVersion`` = batch id) so a batch replayed
  after a crash is skipped;
* a **compacted topic** (``cleanup.policy`` contains ``compact``) becomes a
  latest-value-per-key table: each micro-batch keeps the record with the
  highest offset per key and MERGEs it, a tombstone (null value) deleting the
  row. Replaying the last micro-batch after a crash applies the same values
  again, which leaves the table as it was (MERGE of the newest value per key is
  idempotent), so the checkpoint alone makes it exactly once.

``value_format`` decodes values: ``raw`` (binary), ``string`` (UTF-8 key and
value), ``json`` (the value's fields become columns; ``schema`` as a DDL
string, or inferred from the records there are now), ``avro`` / ``jsonschema`` /
``protobuf`` (Confluent's wire format, decoded by the Schema Registry in the same store: the
subject's latest version's fields become typed columns, :mod:`pipeline.registry_decode`;
``key_format`` likewise decodes keys; ``value_message`` / ``key_message`` choose a
Protobuf file's message by its full name, the source's ``valueProtobufMessage`` /
``keyProtobufMessage``). Each run takes the subject's latest version and
evolves the table to it first (:mod:`pipeline.table_evolution`: added fields become
columns, widened types widen, what Delta cannot follow is refused naming the field).

Where tables live: ``warehouse`` (default: ``<store>/_tables``, beside the log:
a local folder, ``s3://`` through S3A, ``hdfs://`` or ``webhdfs://``; a
``memory://`` store's tables go to ``./sparklog-warehouse``); checkpoints under
``<warehouse>/_checkpoints/<table>``. Tables are registered in the session's
catalog by path, and :func:`register_tables` registers every table of a
warehouse in a new session, so no metastore is needed.

Concurrent writers: on a local folder and on HDFS, Delta commits by an atomic
rename that refuses an existing target, so any number of drivers may write one
table. On S3, Delta's default LogStore (S3SingleDriverLogStore) is safe within one
driver only: run one ``materialize`` per table (the multi-driver S3DynamoDBLogStore
is Delta's other option and is not configured here; Delta for Spark does not use
S3's conditional writes).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from log_layout import Log, open_log, open_log_from_settings
from pipeline.errors import TableError
from pipeline.table_evolution import create_or_evolve

VALUE_FORMATS = ("raw", "string", "json", "avro", "jsonschema", "protobuf")
REGISTRY_FORMATS = ("avro", "jsonschema", "protobuf")  # decoded by the source (pipeline.registry_decode)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_META = ("topic", "partition", "offset", "timestamp", "timestampType")
CHECKPOINTS = "_checkpoints"


#: store URL schemes whose tables Spark can keep beside the log
_SPARK_SCHEMES = ("s3", "s3a", "hdfs", "webhdfs", "swebhdfs")


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL for Spark's Hadoop filesystems (not a local path)."""
    return urlsplit(location).scheme in _SPARK_SCHEMES + ("file",)


def default_warehouse(log: Log) -> str:
    """``<store>/_tables`` for a local, S3 or HDFS store; ``./sparklog-warehouse`` for
    others (``memory://``, which Spark cannot reach)."""
    parts = urlsplit(log.url)
    if parts.scheme in ("", "file"):
        return os.path.join(parts.path if parts.scheme else log.url, "_tables")
    if parts.scheme in _SPARK_SCHEMES:
        return log.url.rstrip("/") + "/_tables"
    return os.path.abspath("sparklog-warehouse")


def table_path(warehouse: str, table: str) -> str:
    if is_url(warehouse):
        return warehouse.rstrip("/") + "/" + table
    return os.path.join(warehouse, table)


def _absolute(location: str) -> str:
    return location if is_url(location) else os.path.abspath(location)


def check_table_name(table: str) -> str:
    if not isinstance(table, str) or not _NAME.match(table):
        raise TableError(str(table), "a table name is letters, digits and underscores, "
                         "not starting with a digit")
    return table


def source_options(log: Log, topic: str, *, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options of the ``sparklog`` source reading ``topic`` of ``log``'s store."""
    description = log.store.describe()
    opts = {"store": description["url"], "subscribe": topic}
    if description.get("storage_options"):
        opts["storageOptions"] = json.dumps(description["storage_options"])
    opts.update(extra or {})
    return opts


def decode(df, value_format: str, value_schema):
    """Columns of the table from the source's columns: key and value decoded as asked."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    if value_format == "raw":
        return df.select("key", "value", *_META)
    key = F.col("key").cast("string").alias("key") \
        if isinstance(df.schema["key"].dataType, BinaryType) else F.col("key")
    if value_format in REGISTRY_FORMATS:
        return _registry_columns(df, key)
    if value_format == "string":
        return df.select(key, F.col("value").cast("string").alias("value"), *_META)
    parsed = F.from_json(F.col("value").cast("string"), value_schema)
    fields = [F.col("_v").getField(f.name).alias(f.name) for f in value_schema.fields
              if f.name not in ("key", *_META)]
    return df.select(key, parsed.alias("_v"), F.col("value").isNull().alias("_tombstone"),
                     *_META).select("key", *fields, "_tombstone", *_META)


def _registry_columns(df, key):
    """The decoded value's fields as columns (a value that is not a record: ``value``); a
    field named as one of the table's own columns (``key``, ``timestamp``, ...) becomes
    ``value_<name>``. A tombstone is a null value that carried no schema id."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    value_type = df.schema["value"].dataType
    taken = {"key", "_tombstone", *_META}
    if isinstance(value_type, StructType):
        fields = [F.col("value").getField(f.name).alias(
            f"value_{f.name}" if f.name in taken else f.name) for f in value_type.fields]
    else:
        fields = [F.col("value")]
    tomb = (F.col("value").isNull() & F.col("valueSchemaId").isNull()).alias("_tombstone")
    return df.select(key, *fields, tomb, *_META)


def infer_json_schema(spark, log: Log, topic: str, *, sample: int = 10_000):
    """The schema of the JSON values of ``topic`` (the latest ``sample`` records)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    rows = (spark.read.format("sparklog").options(**source_options(log, topic)).load()
            .where(F.col("value").isNotNull()).orderBy(F.col("offset").desc()).limit(sample)
            .select(F.col("value").cast("string").alias("value")))
    schema = spark.read.json(rows).schema
    if not isinstance(schema, StructType) or not schema.fields \
            or "_corrupt_record" in schema.fieldNames():
        raise TableError(topic, "cannot infer a JSON schema: the topic has no values, or some "
                         "are not JSON objects; give the schema explicitly")
    return schema


def _value_schema(spark, log: Log, topic: str, table: str, value_format: str, schema):
    from pyspark.sql.types import StructType, _parse_datatype_string

    if value_format not in VALUE_FORMATS:
        raise TableError(table, f"value_format must be one of {', '.join(VALUE_FORMATS)}, "
                         f"not {value_format!r}")
    if value_format != "json":
        if schema is not None and value_format in REGISTRY_FORMATS:
            raise TableError(table, f"value_format={value_format!r} takes its schema from the "
                             "Schema Registry (the topic's -value subject), not a DDL string")
        if schema is not None:
            raise TableError(table, "a schema is only used with value_format='json'")
        return None
    if schema is None:
        return infer_json_schema(spark, log, topic)
    if isinstance(schema, str):
        try:
            schema = _parse_datatype_string(schema)
        except Exception as e:  # pyspark raises several parse error types
            raise TableError(table, f"schema {schema!r} is not a valid DDL string: {e}") from None
    if not isinstance(schema, StructType):
        raise TableError(table, "a JSON schema must be a struct (DDL like 'id INT, name STRING')")
    return schema


def materialize(spark, topic: str, table: str, *, store: str | None = None,
                storage_options: Mapping[str, Any] | None = None, log: Log | None = None,
                once: bool = True, value_format: str = "raw", schema=None,
                warehouse: str | None = None, checkpoint: str | None = None,
                options: Mapping[str, str] | None = None, trigger_ms: int | None = None,
                wait: bool = True, key_format: str | None = None,
                value_message: str | None = None, key_message: str | None = None):
    """Materialise ``topic`` into the Delta table ``table``; returns the StreamingQuery.

    ``once=True`` runs ``Trigger.AvailableNow`` and waits for it to finish (unless
    ``wait=False``: the caller follows the query);
    otherwise the query keeps running (a micro-batch every ``trigger_ms``, if given)
    and the caller stops it. ``options`` are more ``sparklog`` source options
    (``maxOffsetsPerTrigger``, ``startingOffsets`` for a new table...).
    ``value_message`` / ``key_message``: with ``protobuf``, the message's full name (the
    source's ``valueProtobufMessage`` / ``keyProtobufMessage``; default the file's first).
    Raises TableError for a bad name, format or schema, UnknownTopic for a
    missing topic.
    """
    from pyspark.sql import functions as F

    check_table_name(table)
    if log is None and store is None:
        import conf

        log = open_log_from_settings(conf.load(), storage_options=storage_options)
    elif log is None:
        log = open_log(store, storage_options=storage_options)
    info = log.topic(topic, refresh=True)
    value_schema = _value_schema(spark, log, topic, table, value_format, schema)
    warehouse = warehouse or default_warehouse(log)
    path = table_path(warehouse, table)
    checkpoint = checkpoint or table_path(table_path(warehouse, CHECKPOINTS), table)

    src = {"startingOffsets": "earliest", **(options or {}),
           **_registry_options(table, value_format, key_format, info.config.compacted,
                               options or {}, {"value": value_message, "key": key_message})}
    if value_format in REGISTRY_FORMATS:
        # the subjects checked here, in the driver's Python, so a missing one is our own
        # error rather than text inside Spark's PYTHON_DATA_SOURCE_ERROR
        from pipeline.source import SparklogDataSource

        SparklogDataSource(source_options(log, topic, extra=src)).schema()
    stream = (spark.readStream.format("sparklog")
              .options(**source_options(log, topic, extra=src)).load())
    rows = decode(stream, value_format, value_schema)
    compacted = info.config.compacted
    if not compacted and "_tombstone" in rows.columns:
        rows = rows.drop("_tombstone")
    if compacted:
        rows = rows.where(F.col("key").isNotNull())  # Kafka refuses null keys in compacted topics
    columns = [c for c in rows.columns if c != "_tombstone"]
    create_or_evolve(spark, path, rows.select(*columns).schema, table)
    register(spark, table, path)

    writer = rows.writeStream.option("checkpointLocation", checkpoint).queryName(
        f"materialize_{table}")
    if compacted:
        writer = writer.foreachBatch(_merge_batch(path, columns, value_format))
    else:
        writer = writer.format("delta").outputMode("append").option("path", path)
    if once:
        writer = writer.trigger(availableNow=True)
    elif trigger_ms:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    query = writer.start()
    if once and wait:
        query.awaitTermination()
    return query


def _registry_options(table: str, value_format: str, key_format: str | None,
                      compacted: bool, given: Mapping[str, str],
                      messages: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The source options decoding keys and values by the registry; ``messages``:
    {"value"/"key": a Protobuf message's full name or None}. Raises TableError for
    ``mode=PERMISSIVE`` on a compacted topic, or a message without ``protobuf``."""
    modes = [str(v).strip().upper() for k, v in given.items() if k.lower() == "mode"]
    out: dict[str, str] = {}
    if value_format in REGISTRY_FORMATS:
        out["valueFormat"] = value_format
    if key_format is not None:
        if key_format not in REGISTRY_FORMATS or value_format == "raw":
            raise TableError(table, f"key_format must be one of {', '.join(REGISTRY_FORMATS)} "
                             f"(with a value_format other than raw), not {key_format!r}")
        out["keyFormat"] = key_format
    for column, message in (messages or {}).items():
        if message is None:
            continue
        if out.get(f"{column}Format") != "protobuf":
            raise TableError(table, f"{column}_message ({message!r}) chooses a Protobuf "
                             f"message: it needs {column}_format protobuf")
        out[f"{column}ProtobufMessage"] = message
    if out and compacted and "PERMISSIVE" in modes:
        raise TableError(table, "mode=PERMISSIVE cannot materialise a compacted topic: a "
                         "record it cannot decode would read as a tombstone and delete its key")
    return out


def _merge_batch(path: str, columns: list[str], value_format: str):
    """foreachBatch function: newest record per key, MERGE with tombstone = delete."""

    def merge(batch, batch_id: int) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        tomb = F.col("_tombstone") if "_tombstone" in batch.columns else F.col("value").isNull()
        newest = (batch.withColumn("_tombstone", tomb)
                  .withColumn("_rank", F.row_number().over(
                      Window.partitionBy("key").orderBy(F.col("offset").desc())))
                  .where("_rank = 1").drop("_rank"))
        target = DeltaTable.forPath(batch.sparkSession, path)
        (target.alias("t").merge(newest.alias("s"), "t.key = s.key")
         .whenMatchedDelete(condition="s._tombstone")
         .whenMatchedUpdate(set={c: f"s.`{c}`" for c in columns})
         .whenNotMatchedInsert(condition="NOT s._tombstone",
                               values={c: f"s.`{c}`" for c in columns})
         .execute())

    return merge


def _registry_decoding(log: Log, topic: str) -> dict[str, str]:
    """Source options decoding ``topic``'s key and value by their registry subjects."""
    from pipeline.registry_decode import subject_format

    description = log.store.describe()
    out = {}
    for column in ("key", "value"):
        fmt = subject_format({"url": description["url"],
                              "storage_options": description.get("storage_options")},
                             f"{topic}-{column}")
        if fmt:
            out[f"{column}Format"] = fmt
    return out


def quote_identifier(name: str) -> str:
    """``name`` as one Spark SQL identifier: backticks around, embedded backticks doubled
    (a topic may be called ``page-views`` or ``a.b``)."""
    return "`" + name.replace("`", "``") + "`"


def _catalog_name(spark, table: str) -> str:
    """``table`` qualified with the current catalog and database: a temporary view of
    the same name (a topic) never answers for it."""
    return ".".join(quote_identifier(part) for part in (
        spark.catalog.currentCatalog(), spark.catalog.currentDatabase(), table))


def register(spark, table: str, path: str) -> None:
    """Make ``table`` name the Delta table at ``path`` in this session's catalog.

    A temporary view of the same name (a topic's, see :func:`register_topics`)
    is left alone. Raises TableError for a bad name.
    """
    from delta.tables import DeltaTable

    check_table_name(table)
    name = _catalog_name(spark, table)
    if spark.catalog.tableExists(name):
        current = DeltaTable.forName(spark, name).detail().first()["location"]
        if current.rstrip("/").removeprefix("file:") == _absolute(path).rstrip("/"):
            return
        # the name now means the table of this warehouse (an external table: DROP
        # forgets the name, the other table's data stays where it is)
        spark.sql("DROP TABLE IDENTIFIER(:name)", args={"name": name})
    spark.catalog.createTable(name, path=_absolute(path), source="delta")


def _table_folders(spark, warehouse: str) -> list[str]:
    """Names of the folders of ``warehouse`` that hold a ``_delta_log``: a local folder
    by ``os``, a URL by Spark's own Hadoop filesystem (what Delta will read it with)."""
    if not is_url(warehouse):
        if not os.path.isdir(warehouse):
            return []
        return [n for n in sorted(os.listdir(warehouse))
                if os.path.isdir(os.path.join(warehouse, n, "_delta_log"))]
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(warehouse)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return []
    names = [s.getPath().getName() for s in fs.listStatus(root) if s.isDirectory()]
    return [n for n in sorted(names)
            if fs.exists(jvm.org.apache.hadoop.fs.Path(table_path(warehouse, n) + "/_delta_log"))]


def mentioned(names: Iterable[str], query: str) -> set[str]:
    """The ``names`` that appear in ``query`` as words (a superset of those it reads:
    a name inside a string literal counts too). Registering only these keeps a query's
    start-up independent of how many topics and tables there are (a topic's view costs
    a data-source round trip to a Python worker)."""
    return {n for n in names
            if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", query, re.IGNORECASE)}


def register_tables(spark, warehouse: str, *, query: str | None = None) -> list[str]:
    """Register every Delta table of ``warehouse`` (folders holding ``_delta_log``), or
    those ``query`` mentions (:func:`mentioned`)."""
    names = []
    found = _table_folders(spark, warehouse)
    for name in found if query is None else sorted(mentioned(found, query)):
        if _NAME.match(name):
            register(spark, name, table_path(warehouse, name))
            names.append(name)
    return names


def register_topics(spark, log: Log, *, include_headers: bool = False,
                    query: str | None = None, decode: bool = False) -> list[str]:
    """Every topic of ``log`` (or those ``query`` mentions: :func:`mentioned`) as a
    temporary view of its raw records (Kafka-source columns); returns the names
    registered.

    A view is named as its topic (quote names like ``page-views`` in SQL with
    backticks). A topic whose name a catalog table already has is left out: the
    table materialised from it keeps the name (``register_tables`` first). ``decode``:
    a topic whose ``-value`` / ``-key`` subject is in the registry (Avro, JSON Schema,
    Protobuf) shows them decoded (the source's ``valueFormat`` / ``keyFormat``).
    """
    registered = []
    topics = log.topics()
    for topic in topics if query is None else sorted(mentioned(topics, query)):
        if spark.catalog.tableExists(_catalog_name(spark, topic)):
            continue
        extra = {"includeHeaders": "true"} if include_headers else {}
        if decode:
            extra.update(_registry_decoding(log, topic))
        (spark.read.format("sparklog").options(**source_options(log, topic, extra=extra)).load()
         .createOrReplaceTempView(quote_identifier(topic)))
        registered.append(topic)
    return registered
