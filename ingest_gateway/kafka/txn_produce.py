"""Transactional Produce over Kafka's protocol: a Produce request with a
``transactional_id`` writes into its producer's ongoing transaction.

A request without one is ``produce.produce``'s (this handler passes it on unchanged).
With one, each partition's record batches must be transactional, idempotent
(producer id >= 0) and not control batches (a client never writes markers): else
``INVALID_RECORD`` for that partition. They go to ``Batcher.produce`` with the
transactional id, the same path as an HTTP transactional produce: the batcher checks
the transaction (``server.txn_produce.check_in_transaction``: this producer's epoch,
Ongoing, the partition added by AddPartitionsToTxn) before it takes anything, and
appends with ``transactional=True``. A fenced producer gets ``INVALID_PRODUCER_EPOCH``
(47, what Kafka's partition leader answers a Produce from an older epoch), a partition
not in the transaction ``INVALID_TXN_STATE`` (48). acks keeps ``produce``'s meaning
(Kafka's transactional producers send acks=all).

**Transactions v2** (KIP-890): a client of Produce v12+ does not send
AddPartitionsToTxn; the partition joins the transaction with its first record
(``transactions.add_partitions`` before the batcher's check, beginning the
transaction if none is under way), as Kafka's partition leader adds it through the
coordinator. Adding a partition already in it writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ingest_gateway.kafka import codes, produce as plain, records
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import KafkaContext
from ingest_gateway.kafka.txn import INVALID_TXN_STATE
from ingest_gateway.kafka.wire import Header
from ingest_gateway.server.codec import Parsed
from ingest_gateway.server import transaction_service as coordinator
from ingest_gateway.server.transaction_service import InvalidProducerEpoch, InvalidTxnState

logger = logging.getLogger("sparklog.gateway.kafka")
#: the first Produce version whose transactional clients add partitions implicitly
TV2_PRODUCE = 12


class _NotTransactional(ValueError):
    error_code = codes.INVALID_RECORD

    def __init__(self, why: str):
        super().__init__(f"a transactional Produce carries {why}")


async def produce(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """The Produce handler: transactional requests here, the others ``produce``'s."""
    tid = req.transactional_id
    if tid is None:
        return await plain.produce(ctx, head, req)
    refused = plain.acks_refusal(head, req)
    if refused is not None:
        return refused
    acks = int(req.acks)
    implicit = head.api_version >= TV2_PRODUCE
    results = await asyncio.gather(*(
        _partition(ctx, tid, t.name, p.index, p.records, acks, implicit)
        for t in req.topic_data for p in t.partition_data))
    return plain.answer(head, acks, results)


async def _partition(ctx: KafkaContext, tid: str, topic: str, partition: int,
                     data: bytes | None, acks: int, implicit: bool = False) -> plain.Outcome:
    """One partition's outcome (``produce.Outcome``); ``implicit``: the partition joins
    the transaction first (transactions v2, module doc)."""
    # Kafka's ACLs for a transactional Produce: Write on the transactional id and topic
    if not sec.allowed(ctx, "Write", "TransactionalId", tid):
        return (topic, partition, sec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1,
                "not authorized to write with this transactional id")
    if not sec.allowed(ctx, "Write", "Topic", topic):
        return topic, partition, sec.TOPIC_AUTHORIZATION_FAILED, -1, "not authorized to write"
    base = -1
    try:
        batches = records.decode_batches(
            bytes(data or b""), max_bytes=ctx.settings.gateway.max_uncompressed_request_size)
        for b in batches:
            if b.is_control or not b.is_transactional or b.producer_id < 0:
                raise _NotTransactional("a control batch" if b.is_control else
                                        "a batch that is not transactional")
            if implicit:
                await _join(ctx, tid, b.producer_id, b.producer_epoch, topic, partition)
                implicit = False
            result = await ctx.batcher.produce(
                topic, Parsed({partition: b.table}), acks=acks,
                producer=(b.producer_id, b.producer_epoch),
                sequences={partition: b.base_sequence}, transactional_id=tid)
            r = result[0]
            if r.error is not None:
                raise r.error
            if base < 0 and r.base_offset is not None:
                base = r.base_offset
        return topic, partition, codes.NONE, base, None
    except InvalidProducerEpoch as e:  # ProducerFenced too: Kafka's leader answers 47
        return topic, partition, codes.INVALID_PRODUCER_EPOCH, -1, str(e)
    except InvalidTxnState as e:
        return topic, partition, INVALID_TXN_STATE, -1, str(e)
    except Exception as e:  # noqa: BLE001 - every failure is this partition's error code
        code = codes.code_of(e)
        if code == codes.UNKNOWN_SERVER_ERROR:
            logger.exception("transactional produce to %s-%d failed", topic, partition)
        return topic, partition, code, -1, str(e)


async def _join(ctx: KafkaContext, tid: str, producer_id: int, epoch: int, topic: str,
                partition: int) -> None:
    """Add ``topic``-``partition`` to the producer's transaction (transactions v2).
    Raises UnknownPartition, ProducerFenced, InvalidTxnState, StoreError."""
    await coordinator.add_partitions(ctx.gateway, tid, producer_id, epoch,
                                     [(topic, partition)])
