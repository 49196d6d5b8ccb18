"""The idempotent producer's sequence numbers per partition (Kafka's ``TxnPartitionMap``).

A batch gets its partition's next sequence when it closes and keeps it across
retries, so a gateway that already wrote it answers with its original offsets.
:class:`PartitionSequences` owns the producer id and epoch, the next sequence of
each partition, the batches sent but not answered (in sequence order), and the
partitions whose order is lost. It has no lock of its own: every method is called
under the lock of the :class:`~ingest_gateway.client.accumulator.RecordAccumulator`
that owns it, which also guards the batches these methods change.
"""

from __future__ import annotations

from ingest_gateway.client.batch import MAX_OUT_PER_PARTITION, SendBatch
from ingest_gateway.errors import ProduceError

TopicPartition = tuple[str, int]


class PartitionSequences:
    """Sequences of one producer id and epoch; ``producer_id`` None: not idempotent."""

    def __init__(self, producer_id: int | None, producer_epoch: int = 0):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next: dict[TopicPartition, int] = {}
        #: idempotent batches sent but not answered, per partition, in sequence order
        self._unacked: dict[TopicPartition, list[SendBatch]] = {}
        #: batches closed so far per partition: a batch's ordinal (see may_send)
        self._closed_batches: dict[TopicPartition, int] = {}
        #: partitions whose order is lost: a batch failed with an unknown outcome
        self._poisoned: dict[TopicPartition, ProduceError] = {}

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: every partition's sequence starts at 0 again."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next.clear()
        self._poisoned.clear()

    def assign(self, batch: SendBatch) -> None:
        """The batch closed (``batch.count`` is set): give it its partition's next sequence."""
        key = (batch.topic, batch.partition)
        batch.sequence = self._next.get(key, 0)
        self._next[key] = batch.sequence + batch.count
        if self.producer_id is not None:
            self._unacked.setdefault(key, []).append(batch)
            batch.doomed = self._poisoned.get(key)
            batch.ordinal = self._closed_batches.get(key, 0)
            self._closed_batches[key] = batch.ordinal + 1

    def may_send(self, batch: SendBatch) -> bool:
        """Whether the batch is at most 4 batches after its partition's oldest batch not yet
        answered.

        Counting requests alone let later batches be written one after the other while
        an earlier one, written but not yet answered, waited to retry; its retry then
        fell outside the 5 batches the gateway remembers, and was refused as out of order.
        """
        unanswered = self._unacked.get((batch.topic, batch.partition))
        return not unanswered or batch.ordinal - unanswered[0].ordinal < MAX_OUT_PER_PARTITION

    def settle(self, batch: SendBatch, failure: ProduceError | None) -> None:
        """The batch is answered; after a failure, keep the partition's sequence without a
        gap, as Kafka's producer does (nothing to do without idempotence).

        A batch that surely was not written (every attempt answered 4xx) gives its
        sequence numbers back: the partition's later batches are renumbered and their
        retries fit again. One that may yet be written (an attempt went unanswered
        or got a 5xx) leaves a gap that nothing may fill: the later batches fail
        naming it, and so does every later send to that partition.
        """
        if self.producer_id is None:
            return
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
            self._next[key] -= batch.count
            return
        cause = self._poisoned[key] = ProduceError(
            batch.topic, batch.partition, failure.status, "earlier_batch_failed",
            f"a batch (sequence {batch.sequence}) failed ({failure.message or failure.error}) "
            "and a batch of this partition may yet be written out of order: this producer "
            "cannot keep order on this partition any more; create a new Producer")
        for doomed in later[known:]:
            doomed.doomed = cause
