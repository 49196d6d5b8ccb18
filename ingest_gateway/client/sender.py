"""The producer's I/O (Kafka's ``Sender``): the sender thread, deliveries and retries.

The sender thread takes closed batches from the
:class:`~ingest_gateway.client.accumulator.RecordAccumulator` whenever a request
slot is free (at most ``max_in_flight`` out); a worker posts each as an Arrow IPC
stream to its partition's leader gateway (the ``cluster`` router's lookup) and
retries it under the producer's retry policy, following the leader when it
moves, until ``delivery_timeout_s``. The answer goes back to the accumulator,
which settles the partition's idempotent sequences, before the batch's handles
resolve. A transactional producer's batch first has its partition added to the
transaction (:class:`~ingest_gateway.client.transactions.TransactionManager`).

A 401 or 403 (from the partition's leader, or from the metadata request that looks
for it) is never retried: the batch's handles fail with NotAuthenticated or
NotAuthorized, and its sequence numbers are given back (nothing was written).
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import urllib3

from ingest_gateway.client.accumulator import RecordAccumulator
from ingest_gateway.client.batch import BatchMetadata, SendBatch
from ingest_gateway.client.cluster import NOT_LEADER_ERRORS
from ingest_gateway.client.sequences import PartitionSequences
from ingest_gateway.client.transactions import TransactionManager
from ingest_gateway.errors import ProduceError
from ingest_gateway.protocol.connection_security import AUTH_ERRORS, auth_error
from ingest_gateway.protocol.session import RETRIABLE_STATUS, RetryPolicy
from log_layout.errors import ProducerFenced

ARROW_STREAM = "application/vnd.apache.arrow.stream"


class Sender:
    """Posts the accumulator's batches to their leaders and settles them."""

    def __init__(self, accumulator: RecordAccumulator, router: Any, sequences: PartitionSequences,
                 *, acks: str, max_in_flight: int, delivery_timeout_s: float,
                 retry: RetryPolicy, transactions: TransactionManager | None = None):
        self._accumulator, self._router, self._sequences = accumulator, router, sequences
        self._acks, self._delivery_timeout_s, self._retry = acks, delivery_timeout_s, retry
        self._transactions = transactions
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._workers = concurrent.futures.ThreadPoolExecutor(max_in_flight,
                                                              thread_name_prefix="sparklog-send")
        self._thread = threading.Thread(target=self._run, name="sparklog-sender", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Wait for the sender thread (it ends once the accumulator is closed and empty)
        and the deliveries under way."""
        self._thread.join(timeout)
        self._workers.shutdown(wait=True)

    def _run(self) -> None:
        # a batch is drained only when a request slot is free (see RecordAccumulator.drain)
        while True:
            self._slots.acquire()
            batch = self._accumulator.drain()
            if batch is None:
                self._slots.release()
                return
            self._workers.submit(self._deliver, batch)

    def _deliver(self, batch: SendBatch) -> None:
        failure: ProduceError | None = None
        try:
            meta = self.post(batch)
        except AUTH_ERRORS as e:  # the metadata request was refused: nothing was sent
            failure = ProduceError(batch.topic, batch.partition,
                                   401 if e.code == "not_authenticated" else 403, e.code, str(e))
            failure.__cause__ = e
        except BaseException as e:  # noqa: BLE001 - every failure goes to the handles
            failure = e if isinstance(e, ProduceError) else ProduceError(
                batch.topic, batch.partition, None, type(e).__name__, str(e))
            if not isinstance(e, ProduceError):
                batch.unknown = True
        finally:
            self._slots.release()
            self._accumulator.complete(batch, failure)
        # handles resolve after the sequences are settled: a caller reacting to the
        # failure by sending again gets a sequence that fits
        if failure is not None:
            # a refusal of the credentials or the operation, or the producer's fencing
            # (met adding the partition to the transaction), is raised as its own type
            cause = failure.__cause__
            batch.future.set_exception(
                cause if isinstance(cause, (*AUTH_ERRORS, ProducerFenced)) else failure)
        else:
            batch.future.set_result(meta)

    def _body(self, batch: SendBatch) -> bytes:
        table = batch.to_table()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        batch.values = batch.keys = []  # type: ignore[assignment]  (free them early)
        return sink.getvalue()

    def _path(self, batch: SendBatch) -> str:
        """The batch's produce path without its sequence (read per attempt)."""
        path = f"/topics/{quote(batch.topic, safe='')}/partitions/{batch.partition}" \
            f"?acks={self._acks}"
        producer_id = self._sequences.producer_id
        if producer_id is not None:
            path += f"&producer_id={producer_id}&producer_epoch={self._sequences.producer_epoch}"
        if self._transactions is not None:  # into the producer's ongoing transaction
            path += f"&transactional_id={quote(self._transactions.transactional_id, safe='')}"
            self._transactions.register_partition(batch.topic, batch.partition)
        return path

    def post(self, batch: SendBatch) -> BatchMetadata:
        """Post the batch to its partition's leader until it is answered, retrying what
        may be retried (with the same sequence) until delivery_timeout_s.

        A NOT_LEADER answer or an unreachable gateway makes the router forget the
        leader and ask for metadata again; a refusal that names the new leader is
        retried there at once. Raises ProduceError.
        """
        body = memoryview(self._body(batch))
        base = self._path(batch)
        idempotent = self._sequences.producer_id is not None
        retries = self._retry.start(time.monotonic() + self._delivery_timeout_s)
        redirected = False
        while True:
            if batch.doomed is not None:
                raise batch.doomed
            # the sequence is read per attempt: an earlier batch's failure may renumber it
            path = f"{base}&sequence={batch.sequence}" if idempotent else base
            leader = self._router.leader(batch.topic, batch.partition)
            if leader is None:
                # No gateway is known to lead it (an assignment on its way, or none
                # reachable): nothing was sent, so what is known of the batch stays.
                if not retries.wait():
                    raise ProduceError(batch.topic, batch.partition, None, "delivery_timeout",
                                       "gave up after delivery_timeout_ms: no gateway is known "
                                       "to lead the partition")
                continue
            status, doc, retry_after = self._attempt(leader, path, body)
            if status == 200:
                part = doc["offsets"][0]
                if part.get("error_code") is None:
                    return BatchMetadata(batch.topic, part["partition"], part["base_offset"],
                                         part["count"])
                doc = {"error": "partition_error", "message": part.get("error")}
                batch.unknown = True  # e.g. a failed flush: the commit's outcome is not known
            if status is None or status >= 500 or (
                    status == 409 and doc.get("error") == "out_of_order_sequence"
                    and doc.get("sequence", 0) < doc.get("expected_sequence", 0)):
                # no answer, a server error, or a sequence already passed that the gateway
                # no longer remembers: this batch may have been written
                batch.unknown = True
            if status is None:
                self._router.invalidate(failed=leader)
            elif status == 503 and doc.get("error") in NOT_LEADER_ERRORS:
                moved = self._router.invalidate(topic=batch.topic, partition=batch.partition,
                                                hint=doc.get("leader"), asked=leader)
                if moved and not redirected:
                    # the refusal named the new leader: go there now. Only once in a
                    # row, so two gateways that disagree for a moment still back off.
                    redirected = True
                    continue
            redirected = False
            retriable = status is None or status in RETRIABLE_STATUS or (
                status == 409 and doc.get("error") == "out_of_order_sequence"
                and doc.get("sequence", 0) > doc.get("expected_sequence", 0))
            if not retriable or not idempotent and status is None:
                # Without idempotence a blind retry after a lost answer could duplicate.
                raise ProduceError(batch.topic, batch.partition, status, doc.get("error", ""),
                                   doc.get("message", "")) from auth_error(status or 0, doc)
            if not retries.wait(retry_after):
                raise ProduceError(batch.topic, batch.partition, status, "delivery_timeout",
                                   f"gave up after delivery_timeout_ms: {doc.get('message')}")

    def _attempt(self, session: Any, path: str, body: memoryview,
                 ) -> tuple[int | None, dict[str, Any], str | None]:
        """One POST to ``session``'s gateway: (status, JSON body, Retry-After); status
        None if no answer came (the body then says why)."""
        status, retry_after = None, None
        try:
            r = session.send("POST", path, body, {"Content-Type": ARROW_STREAM})
            status = r.status
            doc = json.loads(r.data) if r.data else {}
            retry_after = r.retry_after
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            doc = {"error": "connection", "message": f"{type(e).__name__}: {e}"}
        return status, doc, retry_after
