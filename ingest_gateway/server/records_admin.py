"""Records admin: moving a partition's log start offset forward (Kafka's DeleteRecords,
``sparklog records delete``'s commit) and placing a leader epoch in a partition's
history (OffsetForLeaderEpoch).

**Delete** is ``log_layout.delete_records``: one manifest version, so every reader stops
returning the records below the new start at once, and the partition's leader rebases
its next append on it. Offset -1 means the high watermark (Kafka's convention).

**Epoch end** follows Kafka's ``LeaderEpochFileCache.endOffsetFor`` over the manifest's
history (``log_layout.leader_epochs``: each claim adds its epoch at the log end
offset): the current epoch answers the log end offset; an older one the largest epoch
at most the requested one with the first offset written after it; one after the
current, or one the history does not hold, answers (-1, -1).

Both read and write the store on the batcher's pool, off the event loop.
"""

from __future__ import annotations

from typing import NamedTuple

from ingest_gateway.server.gateway import Gateway
from log_layout import leader_epochs
from log_layout.delete_records import delete_records as _delete_records


class EpochEnd(NamedTuple):
    """The partition's current leader epoch, and the (epoch, end offset) answering the
    one asked for."""
    current: int
    epoch: int
    end_offset: int


async def delete_records(gateway: Gateway, topic: str, partition: int, offset: int) -> int:
    """Move the log start offset of ``topic``-``partition`` to ``offset`` (-1: the high
    watermark); the new log start offset. Raises UnknownTopic, UnknownPartition,
    OffsetOutOfRange (past the high watermark, or below -1), StoreError."""
    plog = await gateway.batcher.run_blocking(gateway.log.partition, topic, partition)
    m = await gateway.batcher.run_blocking(_delete_records, plog, offset)
    return m.log_start_offset


async def epoch_end(gateway: Gateway, topic: str, partition: int, wanted: int) -> EpochEnd:
    """The end of leader epoch ``wanted`` in ``topic``-``partition`` (module doc).
    Raises UnknownTopic, UnknownPartition, StoreError."""
    def read() -> EpochEnd:
        m = gateway.log.partition(topic, partition).snapshot()
        if wanted == m.leader_epoch:
            return EpochEnd(m.leader_epoch, m.leader_epoch, m.next_offset)
        return EpochEnd(m.leader_epoch,
                        *leader_epochs.end_offset_for(m.epochs, wanted, m.next_offset))

    return await gateway.batcher.run_blocking(read)
