"""The producer's transactions (Kafka's ``TransactionManager``): the transactional
producer API (KIP-98) over the gateway's transaction routes (``/v3/transactions``)::

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
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway.client.sequences import PartitionSequences
from ingest_gateway.protocol.connection_security import AUTH_ERRORS
from ingest_gateway.protocol.session import RETRIABLE_STATUS
from ingest_gateway.errors import GatewayError, IllegalState, ProduceError
from log_layout.errors import InvalidTxnState, ProducerFenced

#: Kafka's transaction.max.timeout.ms default (the gateway's bound)
MAX_TIMEOUT_MS = 900_000
UNINITIALIZED, READY, IN_TRANSACTION, ABORTABLE, FENCED = (
    "uninitialized", "ready", "in_transaction", "abortable", "fenced")



def check_options(transactional_id: str | None, timeout_ms: int, *, idempotent: bool) -> None:
    """Raises ValueError (or the topic-name rules' error) for options no producer may have."""
    if transactional_id is not None:
        validate_topic_name(transactional_id)  # transactional ids follow the topic rules
        if not idempotent:
            raise ValueError("a transactional producer needs enable_idempotence=True")
    if type(timeout_ms) is not int or not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise ValueError(f"transaction_timeout_ms must be 1..{MAX_TIMEOUT_MS}, "
                         f"not {timeout_ms!r}")


class TransactionManager:
    """One producer's transaction state and calls (``transactional_id`` None: a producer
    that is not transactional, whose every transactional call raises IllegalState).

    ``sequences`` (:class:`~ingest_gateway.client.sequences.PartitionSequences`) holds the
    producer id and epoch the calls carry; ``init_transactions`` hands the new ones to
    its ``adopt`` argument, which resets the sequences under the accumulator's lock.
    """

    def __init__(self, transactional_id: str | None, timeout_ms: int, *, idempotent: bool,
                 router: Any, retry: Any, delivery_timeout_s: float,
                 sequences: PartitionSequences):
        check_options(transactional_id, timeout_ms, idempotent=idempotent)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = timeout_ms
        self._router, self._retry = router, retry  # a ClusterRouter, a RetryPolicy
        self._delivery_timeout_s = delivery_timeout_s
        self._sequences = sequences
        self._state = UNINITIALIZED
        self._partitions: set[tuple[str, int]] = set()  # added at the gateway
        self._pending: set[tuple[str, int]] = set()  # sent to, not added yet
        self._mutex = threading.Lock()
        #: the first record failure of the ongoing transaction (see record_failure)
        self._error: ProduceError | None = None

    # -- the gateway's transaction routes ------------------------------------------------
    def _post(self, suffix: str, body: Mapping[str, Any]) -> Any:
        tid = self.transactional_id
        assert tid is not None
        path = f"/v3/transactions/{quote(tid, safe='')}{suffix}"
        errors = {
            "producer_fenced": lambda d: ProducerFenced(
                tid, d.get("producer_id", self._sequences.producer_id),
                d.get("producer_epoch", -1), d.get("current_producer_id", -1),
                d.get("current_epoch", -1)),
            "invalid_txn_state": lambda d: InvalidTxnState(tid, d.get("state", "?"),
                                                           d.get("operation", suffix)),
        }
        # Every call may be retried: each is idempotent at the coordinator (an add of what
        # is there, an end already decided the same way, an init bumping once more)
        retries = self._retry.start(time.monotonic() + self._delivery_timeout_s)
        while True:
            try:
                return self._router.any_gateway(
                    lambda s: s.call("POST", path, body, errors=errors))
            except ProducerFenced:
                self._state = FENCED
                raise
            except (OSError, GatewayError) as e:  # no gateway reached, or a passing 5xx
                if isinstance(e, GatewayError) and e.status not in RETRIABLE_STATUS or \
                        isinstance(e, AUTH_ERRORS) or not retries.wait():
                    raise

    def _ids(self) -> dict[str, Any]:
        return {"producer_id": self._sequences.producer_id,
                "producer_epoch": self._sequences.producer_epoch}

    def _require(self, *states: str, what: str) -> None:
        if self.transactional_id is None:
            raise IllegalState(f"{what} needs a transactional producer (transactional_id=...)")
        if self._state == FENCED:
            raise IllegalState(f"{what}: this producer was fenced by a newer producer of "
                               f"{self.transactional_id!r}; close it")
        if self._state not in states:
            raise IllegalState(f"{what} is not allowed in state {self._state}")

    # -- Kafka's API (the Producer's methods of the same names call these) ------------------
    def init_transactions(self, adopt: Callable[[int, int], None]) -> None:
        """Register with the gateway: a producer id and a new epoch, handed to ``adopt``."""
        self._require(UNINITIALIZED, READY, what="init_transactions")
        doc = self._post(":init", {"transaction_timeout_ms": self.transaction_timeout_ms})
        adopt(doc["producer_id"], doc["producer_epoch"])
        self._state = READY

    def begin_transaction(self) -> None:
        self._require(READY, what="begin_transaction")
        self._partitions = set()
        self._pending = set()
        self._error = None
        self._state = IN_TRANSACTION

    def note_partition(self, topic: str, partition: int) -> None:
        """Before a record for ``(topic, partition)`` is queued: note the partition for the
        transaction (the gateway learns of it from ``register_partition``)."""
        self._require(IN_TRANSACTION, what="send")
        tp = (topic, partition)
        if tp not in self._partitions and tp not in self._pending:
            with self._mutex:
                self._pending.add(tp)

    def register_partition(self, topic: str, partition: int) -> None:
        """Before a batch for ``(topic, partition)`` is posted (the sender's threads): add it
        to the transaction at the gateway if it is not there yet, with every other
        partition noted since, in one call -- as Kafka's sender batches
        AddPartitionsToTxn, so a transaction over N partitions costs one call, not N
        sequential ones. Raises ProduceError (code ``producer_fenced`` when fenced): the
        batch fails, nothing of it was sent."""
        if (topic, partition) in self._partitions:
            return
        with self._mutex:
            if (topic, partition) in self._partitions:
                return  # another delivery thread registered it meanwhile
            adding = sorted(self._pending | {(topic, partition)})
            try:
                self._post("/partitions", {**self._ids(), "partitions": [
                    {"topic": t, "partition": p} for t, p in adding]})
            except ProducerFenced as e:
                raise ProduceError(topic, partition, None, "producer_fenced", str(e)) from e
            except (InvalidTxnState, OSError, SparklogError) as e:
                raise ProduceError(topic, partition, None, getattr(e, "code", "txn_error"),
                                   f"adding the partition to the transaction: {e}") from e
            self._partitions.update(adding)
            self._pending.difference_update(adding)

    def record_failure(self, error: ProduceError) -> None:
        """A record of the transaction failed (the accumulator's lock is held): the first
        such error decides how ``commit_transaction`` ends."""
        if self._error is None:
            self._error = error

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_id: str) -> None:
        self._require(IN_TRANSACTION, what="send_offsets_to_transaction")
        items = []
        for tp, off in offsets.items():
            topic, partition = (tp.topic, tp.partition) if hasattr(tp, "topic") else tp
            items.append({"topic": topic, "partition": int(partition),
                          "offset": int(getattr(off, "offset", off))})
        if items:
            self._post("/offsets", {**self._ids(), "group_id": group_id, "offsets": items})

    def commit_transaction(self, flush: Callable[[], None]) -> None:
        """``flush`` (the producer's), then commit; see Producer.commit_transaction."""
        self._require(IN_TRANSACTION, what="commit_transaction")
        flush()
        failed = self._error
        if failed is not None and failed.error != "producer_fenced":
            self._state = ABORTABLE
            raise IllegalState(f"the transaction cannot commit: a record failed ({failed}); "
                               "call abort_transaction() and begin again") from failed
        # a record fenced: the commit is refused too, with the fencing's facts
        self._post(":commit", self._ids())
        self._state = READY

    def abort_transaction(self, flush: Callable[[], None]) -> None:
        """``flush`` (the producer's), then abort; see Producer.abort_transaction."""
        self._require(IN_TRANSACTION, ABORTABLE, what="abort_transaction")
        flush()
        self._post(":abort", self._ids())
        self._state = READY
