"""The Python producer client: batches like Kafka's producer, posts Arrow to the gateway.

::

    with Producer("127.0.0.1:8082,127.0.0.1:8083", linger_ms=5) as producer:
        handle = producer.send("clicks", b"value", key=b"user-1")
        producer.flush()
        print(handle.result())          # RecordMetadata(topic, partition, offset)

``send`` appends to the open batch of the record's partition (explicit, else
Kafka's murmur2 of the key, else a sticky partition that moves on when its
batch is sent) and returns a :class:`SendHandle`: two slots pointing into the
batch, which owns the ONE real ``concurrent.futures.Future`` resolved when the
gateway answers (Kafka's Java client does the same with ``FutureRecordMetadata``
over ``ProduceRequestResult``). A sender thread closes a batch after
``linger_ms`` or at ``batch_size`` bytes, builds its Arrow columns once, and
posts it as an Arrow IPC stream to ``/topics/{topic}/partitions/{p}`` of the
partition's leader gateway over a keep-alive connection pool (``session``), with
at most ``max_in_flight`` requests outstanding. ``bootstrap_servers`` is Kafka's
bootstrap list (a comma-separated string or a list; one gateway is enough): the
``cluster`` router asks any of them which gateway leads which partition, and
follows the leader when a NOT_LEADER answer or a dead gateway says it moved.
:meth:`Producer.send_batch` takes whole Arrow columns for bulk producers (no
per-record Python work at all).

Idempotence (on by default): the producer draws a random 63-bit producer id
(the gateway's ``POST /v3/producers`` does the same; no coordination is needed
at that size) and numbers each partition's records with consecutive sequences
assigned when a batch is closed. Retriable failures (connection errors, 429,
503 such as NOT_LEADER, and an out-of-order answer while an earlier batch is
being retried) are retried with the *same* sequence, at the new leader if it
moved, until ``delivery_timeout_ms``, so a batch a gateway already committed is
answered with its original offsets, not written twice (the new leader reads the
producer's sequences from the partition's manifest). Other errors fail the batch's
handles with :class:`ProduceError`.
"""

from __future__ import annotations

import concurrent.futures
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import urllib3

from ingest_gateway.client.batch import (NO_LIMIT, BatchHandle, SendBatch, SendHandle,
                                         header_dicts, headers_size, to_bytes)
from ingest_gateway.client.cluster import METADATA_MAX_AGE_MS, ClusterRouter
from ingest_gateway.protocol.connection_security import (AUTH_ERRORS, ConnectionSecurity,
                                                         auth_error)
from ingest_gateway.client.delivery import Delivery
from ingest_gateway.protocol.session import RetryPolicy, Session
from ingest_gateway.client.txn_producer import TransactionalProducer
from ingest_gateway.errors import ProduceError
from log_layout.partitioner import partition_for_key


class Producer(TransactionalProducer, Delivery):
    """Batches records per partition and posts them to a gateway (thread-safe).

    ``bootstrap_servers``: gateways to ask for the cluster's metadata (``HOST:PORT``
    or http(s) URLs, comma-separated or a list); raises ValueError naming an entry
    that is not one, or for an empty list.

    Kafka-named options: ``acks`` (0, 1, "all"), ``linger_ms``, ``batch_size``
    (bytes of keys and values per batch), ``max_in_flight`` (requests
    outstanding), ``enable_idempotence``, ``delivery_timeout_ms``,
    ``retry_backoff_ms``, ``request_timeout_ms``, ``buffer_memory`` (bytes queued
    unanswered before ``send`` blocks), ``max_block_ms`` (how long it blocks
    before raising TimeoutError) and ``metadata_max_age_ms``.

    Security, kafka-python's names (``client.connection_security``): ``ssl_cafile``
    (the CAs an ``https://`` gateway's certificate chains to), ``ssl_certfile`` and
    ``ssl_keyfile`` (a client certificate), ``sasl_plain_username`` and
    ``sasl_plain_password`` (HTTP Basic) or ``sasl_oauth_token`` (a bearer token, or a
    callable returning one); ValueError for a missing file or a bad combination. A
    gateway refusing the credentials (401) or the operation (403) is never retried:
    ``send`` raises NotAuthenticated / NotAuthorized when the topic cannot be read,
    and a batch refused so fails its handles with that error.

    Transactions (``client.txn_producer``): ``transactional_id`` and
    ``transaction_timeout_ms`` (Kafka's names); ``init_transactions``,
    ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
    ``abort_transaction``.

    Failures, as in Kafka's producer: a record over the topic's
    ``max.message.bytes`` fails alone (its handle raises ProduceError 413); a
    batch the gateway refuses gives its idempotent sequence numbers back, so
    the partition's later batches still fit; a batch whose outcome is unknown
    when its delivery timeout passes stops that partition for this producer
    (``earlier_batch_failed``), since nothing sent after it could keep order.
    ``records_failed`` counts every record whose handle failed, and
    ``first_errors`` keeps the first few distinct errors, for callers that do
    not keep every handle.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] = "http://127.0.0.1:8082", *,
                 acks: int | str = "all", linger_ms: float = 5, batch_size: int = 1 << 20,
                 max_in_flight: int = 5, enable_idempotence: bool = True,
                 delivery_timeout_ms: int = 120_000, retry_backoff_ms: int = 50,
                 request_timeout_ms: int = 30_000, buffer_memory: int = 32 << 20,
                 max_block_ms: int = 60_000, metadata_max_age_ms: int = METADATA_MAX_AGE_MS,
                 ssl_cafile: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None,
                 sasl_oauth_token: str | Callable[[], str] | None = None,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60_000):
        self._setup_transactions(transactional_id, transaction_timeout_ms, enable_idempotence)
        security = ConnectionSecurity.of(
            ssl_cafile=ssl_cafile, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
            sasl_plain_username=sasl_plain_username, sasl_plain_password=sasl_plain_password,
            sasl_oauth_token=sasl_oauth_token)
        acks = str(acks).lower()
        if acks not in ("0", "1", "all", "-1"):
            raise ValueError(f"acks must be 0, 1 or all, not {acks!r}")
        if linger_ms < 0 or batch_size < 1 or max_in_flight < 1:
            raise ValueError("linger_ms must be >= 0, batch_size and max_in_flight >= 1")
        self.acks = "all" if acks == "-1" else acks
        self.linger_s = linger_ms / 1000
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self._queued = 0  # bytes of keys and values sent but not yet answered
        self.producer_id = secrets.randbits(63) if enable_idempotence else None
        self.producer_epoch = 0
        self._retry = RetryPolicy(backoff_s=retry_backoff_ms / 1000)

        def connect(url: str) -> Session:
            return Session(url, max_connections=max_in_flight + 1, block=True,
                           connect_timeout_s=min(5.0, request_timeout_ms / 1000),
                           read_timeout_s=request_timeout_ms / 1000, retry=self._retry,
                           security=security)

        # one Session per gateway; each batch goes to its partition's leader
        self._router = ClusterRouter(bootstrap_servers, session_factory=connect,
                                     retry_backoff_ms=retry_backoff_ms,
                                     metadata_max_age_ms=metadata_max_age_ms,
                                     request_timeout_s=request_timeout_ms / 1000)
        # send() takes the bare mutex (a C-level context manager); the sender waits
        # on a condition over the same mutex.
        self._mutex = threading.Lock()
        self._acquire, self._release = self._mutex.acquire, self._mutex.release
        self._lock = threading.Condition(self._mutex)
        self._open: dict[tuple[str, int], SendBatch] = {}
        self._ready: deque[SendBatch] = deque()
        self._sticky: dict[str, int] = {}
        #: topic -> its sticky partition's open batch (send()'s fast path)
        self._sticky_open: dict[str, SendBatch] = {}
        self._partitions: dict[str, int] = {}
        #: topic -> its max.message.bytes, read with the partition count
        self._max_record: dict[str, int] = {}
        self._sequences: dict[tuple[str, int], int] = {}
        #: idempotent batches sent but not answered, per partition, in sequence order
        self._unacked: dict[tuple[str, int], list[SendBatch]] = {}
        #: batches closed so far per partition: a batch's ordinal (see _next_ready)
        self._closed_batches: dict[tuple[str, int], int] = {}
        #: partitions whose order is lost: a batch failed with an unknown outcome
        self._poisoned: dict[tuple[str, int], ProduceError] = {}
        self._outstanding = 0  # batches closed but not answered
        #: records whose handles failed so far (Kafka's record-error-total metric): a
        #: caller that does not keep every handle still learns of every refusal
        self.records_failed = 0
        #: the first few distinct failures, in the order they happened
        self.first_errors: list[ProduceError] = []
        self._out: dict[tuple[str, int], int] = {}  # requests out per partition
        self._flush_now = False
        self._closed = False
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._workers = concurrent.futures.ThreadPoolExecutor(max_in_flight,
                                                              thread_name_prefix="sparklog-send")
        self._sender = threading.Thread(target=self._run, name="sparklog-sender", daemon=True)
        self._sender.start()

    # -- metadata --------------------------------------------------------------------
    def partitions_for(self, topic: str) -> int:
        """The topic's partition count (asked from a gateway once, then cached); raises
        ProduceError (unknown topic, or no gateway reachable)."""
        n = self._partitions.get(topic)
        return self._read_topic(topic) if n is None else n

    def _read_topic(self, topic: str) -> int:
        """Ask a gateway (any reachable one: every gateway reads the topics from the
        store) for the topic's partition count and max.message.bytes. Raises
        ProduceError, or NotAuthenticated / NotAuthorized for a 401 / 403."""
        path = f"/topics/{quote(topic, safe='')}"
        try:
            r = self._router.any_gateway(lambda s: s.send("GET", path))
            doc = json.loads(r.data or b"null")
        except AUTH_ERRORS:
            raise
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise ProduceError(topic, -1, None, "connection",
                               f"cannot read the topic's metadata: {e}") from None
        denied = auth_error(r.status, doc if isinstance(doc, dict) else {})
        if denied is not None:
            raise denied
        if r.status != 200:
            raise ProduceError(topic, -1, r.status, (doc or {}).get("error", ""),
                               (doc or {}).get("message", r.data.decode(errors="replace")))
        limit = (doc.get("configs") or {}).get("max.message.bytes")
        self._max_record[topic] = NO_LIMIT if limit is None else int(limit)
        n = self._partitions[topic] = len(doc["partitions"])
        return n

    def _refused(self, topic: str, partition: int, size: int) -> "SendHandle | None":
        """A failed handle if a record of ``size`` bytes is over the topic's
        max.message.bytes (read again first: it may have been raised), else None.

        As in Kafka's producer, an oversized record fails alone at send() rather
        than failing its whole batch at the gateway.
        """
        self._read_topic(topic)
        limit = self._max_record.get(topic, NO_LIMIT)
        if size <= limit:
            return None
        batch = SendBatch(topic, partition, time.monotonic())
        error = ProduceError(
            topic, partition, 413, "record_too_large",
            f"a record of {size} bytes exceeds max.message.bytes={limit} of topic {topic!r}")
        with self._lock:
            self._count_failure(1, error)
        batch.future.set_exception(error)
        return SendHandle(batch, 0)

    def _count_failure(self, records: int, error: ProduceError) -> None:
        """Under the lock: ``records`` records failed with ``error``."""
        self.records_failed += records
        if self.transactional_id is not None and self._txn_error is None:
            self._txn_error = error
        if len(self.first_errors) < 3 and all(str(e) != str(error) for e in self.first_errors):
            self.first_errors.append(error)

    def _sticky_partition(self, topic: str) -> int:
        p = self._sticky.get(topic)
        if p is None:
            p = self._sticky[topic] = secrets.randbelow(self.partitions_for(topic))
        return p

    # -- sending -------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             partition: int | None = None, headers: Any = None,
             timestamp: int | None = None) -> SendHandle:
        """Queue one record; returns a handle whose ``result()`` is its RecordMetadata.

        ``headers`` is a list of ``(key, value)`` pairs or a dict; ``timestamp``
        is milliseconds since the epoch (default: the gateway's flush time).
        """
        if value.__class__ is not bytes and value is not None:
            value = to_bytes("value", value)
        if self.transactional_id is not None:
            return self._transactional_send(topic, value, key, partition, headers, timestamp)
        handle = None
        if key is None and partition is None and headers is None and timestamp is None:
            # The common case, about a third cheaper: a plain keyless record joins the
            # topic's open sticky batch if that batch has no keys, headers or timestamps.
            # acquire/release, not `with`: ~100 ns less a call (measured, Python 3.11),
            # a tenth of send(); try/finally costs nothing until it raises.
            self._acquire()
            try:
                batch = self._sticky_open.get(topic)
                if batch is not None and batch.plain and self._queued <= self.buffer_memory \
                        and (value is None or len(value) <= batch.max_record):
                    values = batch.values
                    index = len(values)
                    values.append(value)
                    if value is not None:
                        size = len(value)
                        batch.nbytes += size
                        self._queued += size
                        if batch.nbytes >= self.batch_size:
                            self._close_batch(batch)
                            self._lock.notify()
                    handle = SendHandle(batch, index)
            finally:
                self._release()
        if handle is None:
            handle = self._append(topic, value, key, partition, headers, timestamp)
        if handle._index & 1023 == 1023 and self._outstanding:
            # Let the delivery threads have the GIL now. A tight send() loop holds it,
            # and a thread wanting it back after I/O waits for the 5 ms switch interval
            # each time: a 1 MB POST took ~28 ms, ~16 ms with this, and acks=all latency
            # at full speed halved (p99 ~125 -> ~50 ms) with throughput unchanged
            # (bench/produce.py, case c).
            time.sleep(0)
        return handle

    def _append(self, topic: str, value: bytes | None, key: Any, partition: int | None,
                headers: Any, timestamp: int | None) -> SendHandle:
        """send()'s general path: any key, partition, headers or timestamp."""
        if key is not None and key.__class__ is not bytes:
            key = to_bytes("key", key)
        sticky = partition is None and key is None
        if partition is None:
            partition = partition_for_key(key, self.partitions_for(topic)) if key is not None \
                else self._sticky_partition(topic)
        if headers is not None:
            headers = header_dicts(headers)
        size = len(value) if value is not None else 0
        record_size = size + (len(key) if key is not None else 0) + (
            headers_size(headers) if headers else 0)
        if record_size > self._max_record.get(topic, NO_LIMIT):
            refused = self._refused(topic, partition, record_size)
            if refused is not None:
                return refused
        with self._mutex:
            if self._queued > self.buffer_memory:
                self._wait_for_room()
            batch = self._open.get((topic, partition))
            if batch is None:
                batch = self._new_batch(topic, partition)
            elif sticky:
                self._sticky_open[topic] = batch
            values = batch.values
            index = len(values)
            values.append(value)
            # keys, headers and timestamps lists exist only once a record has one
            if key is not None or batch.has_keys:
                if not batch.has_keys:
                    batch.keys = [None] * index
                    batch.has_keys = True
                    batch.plain = False
                batch.keys.append(key)
                if key is not None:
                    size += len(key)
            if headers is not None or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [None] * index
                    batch.plain = False
                batch.headers.append(headers)
            if timestamp is not None or batch.timestamps is not None:
                if batch.timestamps is None:
                    batch.timestamps = [None] * index
                    batch.plain = False
                batch.timestamps.append(timestamp)
            batch.nbytes += size
            self._queued += size
            if batch.nbytes >= self.batch_size:
                self._close_batch(batch)
                self._lock.notify()
        return SendHandle(batch, index)

    def _wait_for_room(self) -> None:
        """Under the lock: block until answers free ``buffer_memory`` (Kafka's max.block.ms)."""
        deadline = time.monotonic() + self.max_block_s
        self._flush_now = True  # what is open can go now: lingering only adds to the wait
        self._lock.notify_all()
        while self._queued > self.buffer_memory:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"send blocked {self.max_block_s:.0f} s: {self._queued} bytes "
                                   f"unanswered exceed buffer_memory={self.buffer_memory}")
            self._lock.wait(left)

    def _new_batch(self, topic: str, partition: int) -> SendBatch:
        """Under the lock: open a batch for (topic, partition)."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        batch = self._open[(topic, partition)] = SendBatch(topic, partition, time.monotonic())
        batch.max_record = self._max_record.get(topic, NO_LIMIT)
        if self._sticky.get(topic) == partition:
            self._sticky_open[topic] = batch
        self._lock.notify()
        return batch

    def send_batch(self, topic: str, value: Any, key: Any = None, partition: int | None = None,
                   timestamp: Any = None, headers: Any = None) -> BatchHandle:
        """Queue whole Arrow columns (or sequences) as one batch of one partition.

        Without ``partition`` the batch goes to the topic's sticky partition
        (keys are not hashed here: give ``partition`` for keyed data).
        """
        cols: dict[str, Any] = {"value": value}
        for name, col in (("key", key), ("timestamp", timestamp), ("headers", headers)):
            if col is not None:
                cols[name] = col
        table = value if isinstance(value, pa.Table) else pa.table(cols)
        if table.num_rows == 0:
            raise ValueError("send_batch needs at least one record")
        if partition is None:
            partition = self._sticky_partition(topic)
        self._txn_partition(topic, partition)
        with self._lock:
            if self._closed:
                raise RuntimeError("the producer is closed")
            if self._queued > self.buffer_memory:
                self._wait_for_room()
            batch = SendBatch(topic, partition, time.monotonic())
            batch.table = table
            batch.nbytes = table.get_total_buffer_size()
            self._queued += batch.nbytes
            self._close_batch(batch)
            self._lock.notify()
        return BatchHandle(batch)

    def _close_batch(self, batch: SendBatch) -> None:
        """Under the lock: assign sequences, queue for sending (keeps partition order)."""
        key = (batch.topic, batch.partition)
        if self._open.get(key) is batch:
            del self._open[key]
            if self._sticky_open.get(batch.topic) is batch:
                del self._sticky_open[batch.topic]
            if self._sticky.get(batch.topic) == batch.partition:
                n = self._partitions.get(batch.topic, 1)
                self._sticky[batch.topic] = (batch.partition + 1) % n
        batch.count = batch.table.num_rows if batch.table is not None else len(batch.values)
        batch.sequence = self._sequences.get(key, 0)
        self._sequences[key] = batch.sequence + batch.count
        if self.producer_id is not None:
            self._unacked.setdefault(key, []).append(batch)
            batch.doomed = self._poisoned.get(key)
            batch.ordinal = self._closed_batches.get(key, 0)
            self._closed_batches[key] = batch.ordinal + 1
        self._outstanding += 1
        self._ready.append(batch)


    def flush(self, timeout: float | None = None) -> None:
        """Send every open batch now and wait until all are answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flush_now = True
            self._lock.notify_all()
            while self._outstanding or self._open:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"flush: {self._outstanding} batches still unanswered")
                if self._open:
                    self._flush_now = True
                    self._lock.notify_all()
                self._lock.wait(left if left is not None else 0.5)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender and release the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._lock.notify_all()
            self._sender.join(timeout)
            self._workers.shutdown(wait=True)
            self._router.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
