"""The producer's batches and what ``send`` hands back.

A :class:`SendBatch` collects one partition's records as Python lists (or takes
a whole Arrow table from ``send_batch``) and owns the ONE
``concurrent.futures.Future`` its records' handles point into: a
:class:`SendHandle` is two slots (batch, index), as Kafka's
``FutureRecordMetadata`` over ``ProduceRequestResult``. The columns are built
once, when the batch is sent (:meth:`SendBatch.to_table`).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ingest_gateway.errors import ProduceError
from log_layout.segment import HEADER_TYPE

NO_LIMIT = 1 << 62
#: requests of one partition out at once, and with idempotence batches not yet answered
#: that may be sent, at most. The gateway remembers a producer's last 5 batches per
#: partition (as Kafka's broker does), so a batch retried after its first answer was
#: lost is still known as a duplicate only if no more than 4 later batches of its
#: partition were written meanwhile (Kafka's max.in.flight <= 5 rule).
MAX_OUT_PER_PARTITION = 5


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int | None  # None with acks=0


class BatchMetadata(NamedTuple):
    topic: str
    partition: int
    base_offset: int | None
    count: int


class SendBatch:
    """One partition's records on their way to the gateway, and their one future."""

    __slots__ = ("topic", "partition", "keys", "values", "headers", "timestamps", "nbytes",
                 "created", "future", "sequence", "table", "count", "has_keys", "unknown",
                 "doomed", "max_record", "ordinal", "plain")

    def __init__(self, topic: str, partition: int, now: float):
        self.topic, self.partition = topic, partition
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.headers: list[Any] | None = None
        self.timestamps: list[Any] | None = None
        self.nbytes = 0
        self.created = now
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.sequence = -1
        self.table: pa.Table | None = None
        self.count = 0
        self.has_keys = False
        #: an attempt's outcome is unknown (no answer, or a 5xx): it may yet be written
        self.unknown = False
        #: set when an earlier batch of the partition failed and this one cannot follow
        self.doomed: ProduceError | None = None
        #: the topic's max.message.bytes when the batch opened (send()'s fast path)
        self.max_record = NO_LIMIT
        #: its place among its partition's batches (0, 1, ...), set when it closes
        self.ordinal = 0
        #: values only so far (no keys, headers or timestamps): send()'s fast path
        #: may add a plain record
        self.plain = True

    def to_table(self) -> pa.Table:
        if self.table is not None:
            return self.table
        cols = {"value": binary_array(self.values)}
        if self.has_keys:
            cols["key"] = binary_array(self.keys)
        if self.timestamps is not None:
            self.timestamps += [None] * (len(self.values) - len(self.timestamps))
            cols["timestamp"] = pa.array(self.timestamps, pa.int64())
        if self.headers is not None:
            self.headers += [None] * (len(self.values) - len(self.headers))
            cols["headers"] = pa.array(self.headers, HEADER_TYPE)
        return pa.table(cols)


class SendHandle:
    """What ``send`` returns: a light future-like reference to one record of a batch."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: SendBatch, index: int):
        self._batch, self._index = batch, index

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """(topic, partition, offset) once acknowledged; raises ProduceError."""
        meta: BatchMetadata = self._batch.future.result(timeout)
        offset = None if meta.base_offset is None else meta.base_offset + self._index
        return RecordMetadata(meta.topic, meta.partition, offset)

    get = result

    def done(self) -> bool:
        return self._batch.future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.future.exception(timeout)

    def add_done_callback(self, fn) -> None:
        self._batch.future.add_done_callback(lambda _f: fn(self))


class BatchHandle:
    """What ``send_batch`` returns: the batch's (topic, partition, base_offset, count)."""

    __slots__ = ("_batch",)

    def __init__(self, batch: SendBatch):
        self._batch = batch

    def result(self, timeout: float | None = None) -> BatchMetadata:
        return self._batch.future.result(timeout)

    def done(self) -> bool:
        return self._batch.future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.future.exception(timeout)

    def add_done_callback(self, fn) -> None:
        """Call ``fn(handle)`` once the batch is acknowledged or failed (on the
        producer's I/O thread; at once if already done)."""
        self._batch.future.add_done_callback(lambda _f: fn(self))


def to_bytes(field: str, x: Any) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{field} must be bytes or str, not {type(x).__name__}")


def header_dicts(headers: Any) -> list[dict[str, Any]]:
    items = headers.items() if isinstance(headers, dict) else headers
    return [{"key": k, "value": None if v is None else to_bytes("header value", v)}
            for k, v in items]


def headers_size(h: list[dict[str, Any]]) -> int:
    """Bytes of a record's header keys and values (part of its size for max.message.bytes;
    the gateway's codec counts them the same way)."""
    return sum(len(x["key"]) + len(x["value"] or b"") for x in h)


def binary_array(items: list[bytes | None]) -> pa.Array:
    """A binary array from bytes objects: one join and one length pass, about 4x faster
    than ``pa.array(items)``; with nulls it falls back to ``pa.array``."""
    try:
        data = b"".join(items)  # TypeError on a None
    except TypeError:
        return pa.array(items, pa.binary())
    if len(data) >= 2**31:
        return pa.array(items, pa.binary())  # int32 offsets would overflow
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int32, count=len(items)), out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(items),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])
