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

The class is a facade over parts that each own their state, as Kafka's
``KafkaProducer`` is: :class:`~ingest_gateway.client.accumulator.RecordAccumulator`
(open batches, the ready queue, sticky partitions, buffer memory),
:class:`~ingest_gateway.client.sender.Sender` (the sender thread, posts, retries),
:class:`~ingest_gateway.client.sequences.PartitionSequences` (producer id, epoch and
sequences), :class:`~ingest_gateway.client.transactions.TransactionManager` and
:class:`~ingest_gateway.client.topic_metadata.TopicMetadata` (partition counts, limits).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ingest_gateway.client.accumulator import RecordAccumulator
from ingest_gateway.client.batch import BatchHandle, SendHandle, to_bytes
from ingest_gateway.client.cluster import METADATA_MAX_AGE_MS, ClusterRouter
from ingest_gateway.client.sender import Sender
from ingest_gateway.client.sequences import PartitionSequences
from ingest_gateway.client.topic_metadata import TopicMetadata
from ingest_gateway.client.transactions import TransactionManager, check_options
from ingest_gateway.errors import ProduceError
from ingest_gateway.protocol.connection_security import ConnectionSecurity
from ingest_gateway.protocol.session import RetryPolicy, Session
from log_layout.partitioner import partition_for_key


class Producer:
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

    Transactions (``client.transactions``): ``transactional_id`` and
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
        check_options(transactional_id, transaction_timeout_ms, idempotent=enable_idempotence)
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
        retry = RetryPolicy(backoff_s=retry_backoff_ms / 1000)

        def connect(url: str) -> Session:
            return Session(url, max_connections=max_in_flight + 1, block=True,
                           connect_timeout_s=min(5.0, request_timeout_ms / 1000),
                           read_timeout_s=request_timeout_ms / 1000, retry=retry,
                           security=security)

        # one Session per gateway; each batch goes to its partition's leader
        self._router = ClusterRouter(bootstrap_servers, session_factory=connect,
                                     retry_backoff_ms=retry_backoff_ms,
                                     metadata_max_age_ms=metadata_max_age_ms,
                                     request_timeout_s=request_timeout_ms / 1000)
        self._sequences = PartitionSequences(
            secrets.randbits(63) if enable_idempotence else None)
        self._transactions = TransactionManager(
            transactional_id, transaction_timeout_ms, idempotent=enable_idempotence,
            router=self._router, retry=retry, delivery_timeout_s=self.delivery_timeout_s,
            sequences=self._sequences)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        transactional = self._transactions if transactional_id is not None else None
        self._metadata = TopicMetadata(self._router)
        self._accumulator = RecordAccumulator(
            self._metadata, self._sequences, linger_s=self.linger_s, batch_size=batch_size,
            buffer_memory=buffer_memory, max_block_s=self.max_block_s,
            on_failure=None if transactional is None else transactional.record_failure)
        #: send()'s one call into the accumulator, bound once
        self._append = self._accumulator.append
        if transactional_id is None:
            # send() of a producer without transactions IS the accumulator's append (same
            # signature; it converts the value): a Python call less per record, ~5% of
            # send() (issue 29: the facade's forwarding frame cost more than it did before
            # the producer was split into parts)
            self.send = self._append  # type: ignore[method-assign]
        self._sender = Sender(self._accumulator, self._router, self._sequences,
                              acks=self.acks, max_in_flight=max_in_flight,
                              delivery_timeout_s=self.delivery_timeout_s, retry=retry,
                              transactions=transactional)
        self._closed = False

    # -- state the parts own ---------------------------------------------------------------
    @property
    def producer_id(self) -> int | None:
        """This producer's id (None without idempotence)."""
        return self._sequences.producer_id

    @property
    def producer_epoch(self) -> int:
        return self._sequences.producer_epoch

    @property
    def records_failed(self) -> int:
        """Records whose handles failed so far (Kafka's record-error-total metric)."""
        return self._accumulator.records_failed

    @property
    def first_errors(self) -> list[ProduceError]:
        """The first few distinct failures, in the order they happened."""
        return self._accumulator.first_errors

    @property
    def _post(self) -> Callable[[Any], Any]:
        """The sender's post of one batch: a seam where a test may delay an answer
        (``producer._post = wrapper``), as nothing public can."""
        return self._sender.post

    @_post.setter
    def _post(self, post: Callable[[Any], Any]) -> None:
        self._sender.post = post  # type: ignore[method-assign]

    # -- metadata --------------------------------------------------------------------
    def partitions_for(self, topic: str) -> int:
        """The topic's partition count (asked from a gateway once, then cached); raises
        ProduceError (unknown topic, or no gateway reachable)."""
        return self._metadata.partitions(topic)

    # -- sending -------------------------------------------------------------------------
    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             partition: int | None = None, headers: Any = None,
             timestamp: int | None = None) -> SendHandle:
        """Queue one record; returns a handle whose ``result()`` is its RecordMetadata.

        ``headers`` is a list of ``(key, value)`` pairs or a dict; ``timestamp``
        is milliseconds since the epoch (default: the gateway's flush time).
        Raises TypeError for a value or key not bytes, str or None, TimeoutError once
        ``max_block_ms`` passed with ``buffer_memory`` full, RuntimeError when a record
        needs a new batch after ``close``. Without a ``transactional_id`` the instance's
        ``send`` is ``RecordAccumulator.append`` itself (``__init__``).
        """
        if self.transactional_id is not None:
            return self._transactional_send(topic, value, key, partition, headers, timestamp)
        return self._append(topic, value, key, partition, headers, timestamp)

    def _transactional_send(self, topic: str, value: bytes | None, key: Any,
                            partition: int | None, headers: Any,
                            timestamp: int | None) -> SendHandle:
        """``send`` of a transactional producer: the partition chosen here, noted for the
        transaction, then queued as any record."""
        if value.__class__ is not bytes and value is not None:
            value = to_bytes("value", value)  # refused before the partition is noted
        if key is not None and key.__class__ is not bytes:
            key = to_bytes("key", key)
        if partition is None:
            partition = partition_for_key(key, self._metadata.partitions(topic)) \
                if key is not None else self._accumulator.sticky_partition(topic)
        self._transactions.note_partition(topic, partition)
        return self._append(topic, value, key, partition, headers, timestamp)

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
            partition = self._accumulator.sticky_partition(topic)
        if self.transactional_id is not None:
            self._transactions.note_partition(topic, partition)
        return self._accumulator.append_table(topic, partition, table)

    def flush(self, timeout: float | None = None) -> None:
        """Send every open batch now and wait until all are answered."""
        self._accumulator.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender and release the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._accumulator.close()
            self._sender.close(timeout)
            self._router.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- transactions (client.transactions) ------------------------------------------------
    def init_transactions(self) -> None:
        """Register with the gateway (Kafka's initTransactions): a producer id and a new
        epoch, fencing older producers of the id and aborting their open transaction.
        Raises IllegalState (not transactional, or a transaction under way)."""
        self._transactions.init_transactions(self._accumulator.reset_producer)

    def begin_transaction(self) -> None:
        """Start a transaction (local: the gateway learns of it with its first partition)."""
        self._transactions.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_id: str) -> None:
        """Commit a consumer group's offsets with the transaction (consume-transform-produce).
        ``offsets`` maps ``(topic, partition)`` (or a TopicPartition) to the next offset to
        read (an int, or anything with ``.offset``: Kafka's OffsetAndMetadata)."""
        self._transactions.send_offsets_to_transaction(offsets, group_id)

    def commit_transaction(self) -> None:
        """Flush, then commit: every record and offset of the transaction becomes visible
        to read_committed consumers, or (on any error) none. Raises ProducerFenced, or
        IllegalState when a record failed (then ``abort_transaction``)."""
        self._transactions.commit_transaction(self.flush)

    def abort_transaction(self) -> None:
        """Wait for what is in flight, then abort: no record or offset of the transaction
        ever reaches a read_committed consumer. Raises ProducerFenced."""
        self._transactions.abort_transaction(self.flush)
