"""The producer's sending side: the sender thread, deliveries, retries, sequences.

:class:`Delivery` is the half of :class:`~ingest_gateway.client.producer.Producer`
that runs off the caller's thread: the sender picks ready batches (partition
order kept, at most ``max_in_flight`` requests and 5 per partition out), a
worker posts each as an Arrow IPC stream to its partition's leader gateway (the
``cluster`` router's lookup) and retries it under the producer's retry policy,
following the leader when it moves, and the answer settles the partition's idempotent sequences
before the batch's handles resolve. It shares the Producer's state (one lock,
one set of per-partition tables), so it is a base class, not an object of its own.

A 401 or 403 (from the partition's leader, or from the metadata request that looks
for it) is never retried: the batch's handles fail with NotAuthenticated or
NotAuthorized, and its sequence numbers are given back (nothing was written).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import urllib3

from ingest_gateway.client.batch import MAX_OUT_PER_PARTITION, BatchMetadata, SendBatch
from ingest_gateway.client.cluster import NOT_LEADER_ERRORS
from ingest_gateway.protocol.connection_security import AUTH_ERRORS, auth_error
from ingest_gateway.protocol.session import RETRIABLE_STATUS
from ingest_gateway.errors import ProduceError
from log_layout.errors import ProducerFenced

ARROW_STREAM = "application/vnd.apache.arrow.stream"


class Delivery:
    """Sending, retrying and settling batches (the Producer's attributes; see Producer)."""

    _router: Any  # ClusterRouter
    transactional_id: str | None
    _retry: Any  # RetryPolicy
    _lock: Any

    def _run(self) -> None:
        # Like Kafka's sender: a batch is only drained when a request slot is free, so
        # while all slots are busy the open batches keep growing (up to batch_size).
        while True:
            self._slots.acquire()
            with self._lock:
                while True:
                    if not self._ready:
                        now = time.monotonic()
                        wait = None
                        for batch in list(self._open.values()):
                            due = batch.created + self.linger_s
                            if due <= now or self._flush_now or self._closed:
                                self._close_batch(batch)
                            else:
                                wait = due - now if wait is None else min(wait, due - now)
                        if not self._open:
                            self._flush_now = False
                    batch = self._next_ready()
                    if batch is not None or (self._closed and not self._open and not self._ready):
                        break
                    self._lock.wait(wait if not self._ready else None)  # or a delivery ends
                if batch is not None:
                    key = (batch.topic, batch.partition)
                    self._out[key] = self._out.get(key, 0) + 1
            if batch is None:
                self._slots.release()
                return
            self._workers.submit(self._deliver, batch)

    def _next_ready(self) -> SendBatch | None:
        """Under the lock: take the first ready batch whose partition may have one more
        request out (ready batches of one partition stay in sequence order).

        With idempotence a batch also goes only if it is at most 4 batches after its
        partition's oldest batch not yet answered. Counting requests alone let later
        batches be written one after the other while an earlier one, written but not
        yet answered, waited to retry; its retry then fell outside the 5 batches the
        gateway remembers, and was refused as out of order.
        """
        for i, batch in enumerate(self._ready):
            key = (batch.topic, batch.partition)
            if self._out.get(key, 0) >= MAX_OUT_PER_PARTITION:
                continue
            unanswered = self._unacked.get(key)
            if unanswered and batch.ordinal - unanswered[0].ordinal >= MAX_OUT_PER_PARTITION:
                continue
            del self._ready[i]
            return batch
        return None

    def _deliver(self, batch: SendBatch) -> None:
        failure: ProduceError | None = None
        try:
            meta = self._post(batch)
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
            with self._lock:
                key = (batch.topic, batch.partition)
                self._out[key] -= 1
                if not self._out[key]:
                    del self._out[key]
                if self.producer_id is not None:
                    self._settle_sequences(batch, failure)
                if failure is not None:
                    self._count_failure(batch.count, failure)
                self._outstanding -= 1
                self._queued -= batch.nbytes
                self._lock.notify_all()
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

    def _settle_sequences(self, batch: SendBatch, failure: ProduceError | None) -> None:
        """Under the lock: the batch is answered; after a failure, keep the partition's
        sequence without a gap, as Kafka's producer does.

        A batch that surely was not written (every attempt answered 4xx) gives its
        sequence numbers back: the partition's later batches are renumbered and their
        retries fit again. One that may yet be written (an attempt went unanswered
        or got a 5xx) leaves a gap that nothing may fill: the later batches fail
        naming it, and so does every later send to that partition.
        """
        key = (batch.topic, batch.partition)
        unacked = self._unacked.get(key, [])
        if batch in unacked:
            unacked.remove(batch)
        if not unacked:
            self._unacked.pop(key, None)
        if failure is None or key in self._poisoned:
            return
        later = [b for b in unacked if b.sequence > batch.sequence]
        # renumber the later batches up to the first that may have been written
        known = 0 if batch.unknown else next(
            (i for i, b in enumerate(later) if b.unknown), len(later))
        for b in later[:known]:
            b.sequence -= batch.count
        if not batch.unknown and known == len(later):
            self._sequences[key] -= batch.count
            return
        cause = self._poisoned[key] = ProduceError(
            batch.topic, batch.partition, failure.status, "earlier_batch_failed",
            f"a batch (sequence {batch.sequence}) failed ({failure.message or failure.error}) "
            "and a batch of this partition may yet be written out of order: this producer "
            "cannot keep order on this partition any more; create a new Producer")
        for doomed in later[known:]:
            doomed.doomed = cause

    def _body(self, batch: SendBatch) -> bytes:
        table = batch.to_table()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        batch.values = batch.keys = []  # type: ignore[assignment]  (free them early)
        return sink.getvalue()

    def _post(self, batch: SendBatch) -> BatchMetadata:
        """Post the batch to its partition's leader until it is answered, retrying what
        may be retried (with the same sequence) until delivery_timeout_ms.

        A NOT_LEADER answer or an unreachable gateway makes the router forget the
        leader and ask for metadata again; a refusal that names the new leader is
        retried there at once. Raises ProduceError.
        """
        body = memoryview(self._body(batch))
        base = f"/topics/{quote(batch.topic, safe='')}/partitions/{batch.partition}" \
            f"?acks={self.acks}"
        if self.producer_id is not None:
            base += f"&producer_id={self.producer_id}&producer_epoch={self.producer_epoch}"
        if self.transactional_id is not None:  # into the producer's ongoing transaction
            base += f"&transactional_id={quote(self.transactional_id, safe='')}"
            self._register_partition(batch.topic, batch.partition)  # type: ignore[attr-defined]
        retries = self._retry.start(time.monotonic() + self.delivery_timeout_s)
        redirected = False
        while True:
            if batch.doomed is not None:
                raise batch.doomed
            # the sequence is read per attempt: an earlier batch's failure may renumber it
            path = base if self.producer_id is None else f"{base}&sequence={batch.sequence}"
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
            if not retriable or self.producer_id is None and status is None:
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
