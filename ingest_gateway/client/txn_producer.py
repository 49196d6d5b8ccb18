"""The Producer's transactions: Kafka's transactional producer API (KIP-98) over the
gateway's transaction routes (``ingest_gateway.http.v3_transactions``)::

    producer = Producer(gateways, transactional_id="etl-1", transaction_timeout_ms=60_000)
    producer.init_transactions()          # fences any older producer of "etl-1"
    producer.begin_transaction()
    producer.send("out", b"value")        # registers out-P with the gateway, then sends
    producer.send_offsets_to_transaction({("in", 0): 42}, "etl-group")
    producer.commit_transaction()         # flushes first; records and offsets, or nothing

``send`` notes its partition for the transaction; before the partition's first
batch is posted, every partition noted so far is added at the gateway in one call
(Kafka's batched AddPartitionsToTxn), and the records go out as the idempotent
producer's, with ``transactional_id`` on each request. A producer whose epoch was bumped (a newer
``init_transactions`` of the same id, or the gateway's abort after
``transaction_timeout_ms``) gets ``ProducerFenced`` (``log_layout.errors``, with the
producer ids and epochs): from the call that met it, and from ``commit_transaction``
when a record of the transaction was refused so; it must be closed. Any other failed
record makes ``commit_transaction`` raise IllegalState (Kafka's abortable error):
call ``abort_transaction`` and begin again. The transaction calls are retried while
no gateway answers or one answers 5xx/429, until ``delivery_timeout_ms`` (each is
idempotent at the coordinator). Misuse (``send`` outside a transaction,
``begin`` twice) raises IllegalState.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway.client.batch import to_bytes
from ingest_gateway.protocol.connection_security import AUTH_ERRORS
from ingest_gateway.protocol.session import RETRIABLE_STATUS
from ingest_gateway.errors import GatewayError, IllegalState, ProduceError
from log_layout.errors import InvalidTxnState, ProducerFenced
from log_layout.partitioner import partition_for_key

#: Kafka's transaction.max.timeout.ms default (the gateway's bound)
MAX_TIMEOUT_MS = 900_000
UNINITIALIZED, READY, IN_TRANSACTION, ABORTABLE, FENCED = (
    "uninitialized", "ready", "in_transaction", "abortable", "fenced")


class TransactionalProducer:
    """The transactional half of :class:`~ingest_gateway.client.producer.Producer` (a
    base class sharing its state, as ``Delivery`` is)."""

    transactional_id: str | None = None
    producer_id: int | None
    producer_epoch: int
    _router: Any
    _lock: Any
    _retry: Any  # RetryPolicy
    delivery_timeout_s: float

    def _setup_transactions(self, transactional_id: str | None, timeout_ms: int,
                            idempotent: bool) -> None:
        if transactional_id is not None:
            validate_topic_name(transactional_id)  # transactional ids follow the topic rules
            if not idempotent:
                raise ValueError("a transactional producer needs enable_idempotence=True")
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
            raise ValueError(f"transaction_timeout_ms must be 1..{MAX_TIMEOUT_MS}, "
                             f"not {timeout_ms!r}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = timeout_ms
        self._txn_state = UNINITIALIZED
        self._txn_partitions: set[tuple[str, int]] = set()  # added at the gateway
        self._txn_pending: set[tuple[str, int]] = set()  # sent to, not added yet
        self._txn_mutex = threading.Lock()
        #: the first record failure of the ongoing transaction (set by _count_failure)
        self._txn_error: ProduceError | None = None

    # -- the gateway's transaction routes ------------------------------------------------
    def _txn_post(self, suffix: str, body: Mapping[str, Any]) -> Any:
        tid = self.transactional_id
        assert tid is not None
        path = f"/v3/transactions/{quote(tid, safe='')}{suffix}"
        errors = {
            "producer_fenced": lambda d: ProducerFenced(
                tid, d.get("producer_id", self.producer_id), d.get("producer_epoch", -1),
                d.get("current_producer_id", -1), d.get("current_epoch", -1)),
            "invalid_txn_state": lambda d: InvalidTxnState(tid, d.get("state", "?"),
                                                           d.get("operation", suffix)),
        }
        # Every call may be retried: each is idempotent at the coordinator (an add of what
        # is there, an end already decided the same way, an init bumping once more)
        retries = self._retry.start(time.monotonic() + self.delivery_timeout_s)
        while True:
            try:
                return self._router.any_gateway(
                    lambda s: s.call("POST", path, body, errors=errors))
            except ProducerFenced:
                self._txn_state = FENCED
                raise
            except (OSError, GatewayError) as e:  # no gateway reached, or a passing 5xx
                if isinstance(e, GatewayError) and e.status not in RETRIABLE_STATUS or \
                        isinstance(e, AUTH_ERRORS) or not retries.wait():
                    raise

    def _ids(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}

    def _require(self, *states: str, what: str) -> None:
        if self.transactional_id is None:
            raise IllegalState(f"{what} needs a transactional producer (transactional_id=...)")
        if self._txn_state == FENCED:
            raise IllegalState(f"{what}: this producer was fenced by a newer producer of "
                               f"{self.transactional_id!r}; close it")
        if self._txn_state not in states:
            raise IllegalState(f"{what} is not allowed in state {self._txn_state}")

    # -- Kafka's API ------------------------------------------------------------------------
    def init_transactions(self) -> None:
        """Register with the gateway (Kafka's initTransactions): a producer id and a new
        epoch, fencing older producers of the id and aborting their open transaction.
        Raises IllegalState (not transactional, or a transaction under way)."""
        self._require(UNINITIALIZED, READY, what="init_transactions")
        doc = self._txn_post(":init", {"transaction_timeout_ms": self.transaction_timeout_ms})
        with self._lock:
            self.producer_id, self.producer_epoch = doc["producer_id"], doc["producer_epoch"]
            # a new epoch: every partition's sequence starts at 0 again
            self._sequences.clear()  # type: ignore[attr-defined]
            self._poisoned.clear()  # type: ignore[attr-defined]
        self._txn_state = READY

    def begin_transaction(self) -> None:
        """Start a transaction (local: the gateway learns of it with its first partition)."""
        self._require(READY, what="begin_transaction")
        self._txn_partitions = set()
        self._txn_pending = set()
        self._txn_error = None
        self._txn_state = IN_TRANSACTION

    def _txn_partition(self, topic: str, partition: int) -> None:
        """Before a record for ``(topic, partition)`` is queued: note the partition for the
        transaction (the gateway learns of it from ``_register_partition``)."""
        if self.transactional_id is None:
            return
        self._require(IN_TRANSACTION, what="send")
        tp = (topic, partition)
        if tp not in self._txn_partitions and tp not in self._txn_pending:
            with self._txn_mutex:
                self._txn_pending.add(tp)

    def _register_partition(self, topic: str, partition: int) -> None:
        """Before a batch for ``(topic, partition)`` is posted: add it to the transaction at
        the gateway if it is not there yet, with every other partition noted since, in
        one call -- as Kafka's sender batches AddPartitionsToTxn, so a transaction over
        N partitions costs one call, not N sequential ones. Raises ProduceError (code
        ``producer_fenced`` when fenced): the batch fails, nothing of it was sent."""
        if (topic, partition) in self._txn_partitions:
            return
        with self._txn_mutex:
            if (topic, partition) in self._txn_partitions:
                return  # another delivery thread registered it meanwhile
            adding = sorted(self._txn_pending | {(topic, partition)})
            try:
                self._txn_post("/partitions", {**self._ids(), "partitions": [
                    {"topic": t, "partition": p} for t, p in adding]})
            except ProducerFenced as e:
                raise ProduceError(topic, partition, None, "producer_fenced", str(e)) from e
            except (InvalidTxnState, OSError, SparklogError) as e:
                raise ProduceError(topic, partition, None, getattr(e, "code", "txn_error"),
                                   f"adding the partition to the transaction: {e}") from e
            self._txn_partitions.update(adding)
            self._txn_pending.difference_update(adding)

    def _transactional_send(self, topic: str, value: Any, key: Any, partition: int | None,
                            headers: Any, timestamp: int | None) -> Any:
        """``send`` of a transactional producer: the partition chosen here, added to the
        transaction, then queued as any record."""
        if key is not None and key.__class__ is not bytes:
            key = to_bytes("key", key)
        if partition is None:
            partition = partition_for_key(key, self.partitions_for(topic)) \
                if key is not None else self._sticky_partition(topic)  # type: ignore[attr-defined]
        self._txn_partition(topic, partition)
        return self._append(topic, value, key, partition, headers,  # type: ignore[attr-defined]
                            timestamp)

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_id: str) -> None:
        """Commit a consumer group's offsets with the transaction (consume-transform-produce).
        ``offsets`` maps ``(topic, partition)`` (or a TopicPartition) to the next offset to
        read (an int, or anything with ``.offset``: Kafka's OffsetAndMetadata)."""
        self._require(IN_TRANSACTION, what="send_offsets_to_transaction")
        items = []
        for tp, off in offsets.items():
            topic, partition = (tp.topic, tp.partition) if hasattr(tp, "topic") else tp
            items.append({"topic": topic, "partition": int(partition),
                          "offset": int(getattr(off, "offset", off))})
        if items:
            self._txn_post("/offsets", {**self._ids(), "group_id": group_id, "offsets": items})

    def commit_transaction(self) -> None:
        """Flush, then commit: every record and offset of the transaction becomes visible
        to read_committed consumers, or (on any error) none. Raises ProducerFenced, or
        IllegalState when a record failed (then ``abort_transaction``)."""
        self._require(IN_TRANSACTION, what="commit_transaction")
        self.flush()  # type: ignore[attr-defined]
        failed = self._txn_error
        if failed is not None and failed.error != "producer_fenced":
            self._txn_state = ABORTABLE
            raise IllegalState(f"the transaction cannot commit: a record failed ({failed}); "
                               "call abort_transaction() and begin again") from failed
        # a record fenced: the commit is refused too, with the fencing's facts
        self._txn_post(":commit", self._ids())
        self._txn_state = READY

    def abort_transaction(self) -> None:
        """Wait for what is in flight, then abort: no record or offset of the transaction
        ever reaches a read_committed consumer. Raises ProducerFenced."""
        self._require(IN_TRANSACTION, ABORTABLE, what="abort_transaction")
        self.flush()  # type: ignore[attr-defined]
        self._txn_post(":abort", self._ids())
        self._txn_state = READY
