"""Options and input columns of the ``sparklog`` sink, as Spark's Kafka sink takes them.

Columns of the DataFrame written (Spark's "Writing Data to Kafka")::

    key        binary or string, optional (null: no key)
    value      binary or string, required (null: a tombstone)
    topic      string, required unless the ``topic`` option is given
    partition  int, optional: else Kafka's default partitioner (murmur2 of the key;
               keyless rows sticky, see ``sink_partition``)
    headers    array<struct<key: string, value: binary>>, optional

Other columns are ignored, as Spark's Kafka sink ignores them. Options:

    ``topic``          the topic every row goes to; wins over a ``topic`` column
                       (Spark: "the topic option overrides the topic column")
    ``store``, ``storageOptions``, ``store.s3.endpoint.url``, ``store.s3.key``,
    ``store.s3.secret``  the store, as the source takes them (:mod:`pipeline.options`)
    ``transaction.timeout.ms``  how long a sink transaction may stay open before the
                       store's timeout aborter may abort it (Kafka's producer key; default
                       900000, the store's maximum, Kafka's ``transaction.max.timeout.ms``,
                       not the producer's 60000: a job's transaction lasts as long as the
                       job, and a batch job or micro-batch that outlasts it fails at commit)
    ``checkpointLocation``, ``path``, ``queryName``  Spark's own, accepted and ignored here
    ``kafka.*``        accepted and ignored (``kafka.bootstrap.servers`` ...), so Kafka
                       jobs run unchanged

Validation that needs only the schema happens on the driver when the write is planned
(:func:`check_schema`); what needs the store (the topic exists, the ``partition`` column
is in range) is checked for the ``topic`` option on the driver too, and for values of
the ``topic``/``partition`` columns by each task before it appends anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import (ArrayType, BinaryType, DataType, IntegerType, StringType,
                               StructType)

from pipeline.errors import InvalidSinkColumn, InvalidSinkOption
from pipeline.options import parse_store
from pipeline.sink_txn import MAX_TIMEOUT_MS

_KNOWN = {"topic", "store", "storageoptions", "store.s3.endpoint.url", "store.s3.key",
          "store.s3.secret", "transaction.timeout.ms"}
_IGNORED = {"checkpointlocation", "path", "queryname"}
COLUMNS = ("key", "value", "topic", "partition", "headers")


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """The parsed sink options (see the module docstring)."""

    store_url: str
    storage_options: dict[str, Any] | None
    topic: str | None
    transaction_timeout_ms: int
    checkpoint_location: str | None

    @property
    def store_description(self) -> dict[str, Any]:
        return {"url": self.store_url, "storage_options": self.storage_options}


def parse_sink(options: Mapping[str, str]) -> SinkOptions:
    """Parse the sink's options; raises InvalidSinkOption naming the bad one."""
    opts = {str(k).lower(): v for k, v in options.items()}
    for name in opts:
        if name not in _KNOWN and name not in _IGNORED and not name.startswith("kafka."):
            raise InvalidSinkOption(name, None, "is not an option of the sparklog sink "
                                    "(see pipeline/sink_options.py for the list)")
    topic = opts.get("topic")
    if topic is not None and not str(topic).strip():
        raise InvalidSinkOption("topic", topic, "names no topic")
    raw = opts.get("transaction.timeout.ms", "900000")
    try:
        timeout = int(str(raw).strip())
    except ValueError:
        raise InvalidSinkOption("transaction.timeout.ms", raw, "must be an integer") from None
    if not 1 <= timeout <= MAX_TIMEOUT_MS:
        raise InvalidSinkOption("transaction.timeout.ms", raw,
                                f"must be 1 to {MAX_TIMEOUT_MS} (transaction.max.timeout.ms)")
    try:
        url, storage = parse_store(opts)
    except ValueError as e:  # the shared parser speaks of the source's options
        raise InvalidSinkOption(getattr(e, "option", "store"), getattr(e, "value", None),
                                getattr(e, "reason", str(e))) from None
    return SinkOptions(store_url=url, storage_options=storage,
                       topic=None if topic is None else str(topic).strip(),
                       transaction_timeout_ms=timeout,
                       checkpoint_location=opts.get("checkpointlocation"))


def _is_header_type(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = t.elementType.fields
    return ([f.name for f in fields] == ["key", "value"]
            and isinstance(fields[0].dataType, StringType)
            and isinstance(fields[1].dataType, BinaryType))


def check_schema(schema: StructType, opts: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write, naming the column (Spark's Kafka rules)."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise InvalidSinkColumn("value", "is required (binary or string) and missing")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (BinaryType, StringType)):
            raise InvalidSinkColumn(name, f"must be binary or string, not "
                                    f"{types[name].simpleString()}")
    if opts.topic is None:
        if "topic" not in types:
            raise InvalidSinkColumn("topic", "is required when the topic option is not set")
        if not isinstance(types["topic"], StringType):
            raise InvalidSinkColumn("topic", f"must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise InvalidSinkColumn("partition", f"must be int, not "
                                f"{types['partition'].simpleString()}")
    if "headers" in types and not _is_header_type(types["headers"]):
        raise InvalidSinkColumn("headers", f"must be array<struct<key:string,value:binary>>, "
                                f"not {types['headers'].simpleString()}")
