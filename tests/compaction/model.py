"""An independent reference model of Kafka's log cleaner, in plain Python.

The model keeps the partition as a list of ``Rec`` and its own cleaner
checkpoint. The only thing it takes from the real log is where segments begin
and end and their file sizes (byte counts of Arrow files are not something a
model can predict); every record-level decision -- which segments are
cleanable (active segment, ``min.compaction.lag.ms`` from the model's own
record timestamps), whether the dirty ratio is reached, which record of a key
survives, when a tombstone expires -- is made here from the rules as Kafka
states them, with dicts and loops, no Arrow.

Tombstone rule (the one ``compaction/cleaner.py`` documents): a tombstone
that is the latest record of its key is removed by a pass only if it lay below
the checkpoint before the pass and its timestamp is at least
``delete.retention.ms`` before ``now``.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    ts: int  # milliseconds


@dataclasses.dataclass(frozen=True)
class Seg:
    """A segment boundary as the real manifest states it."""

    base: int
    last: int
    bytes: int


@dataclasses.dataclass
class ModelLog:
    records: list[Rec] = dataclasses.field(default_factory=list)
    next_offset: int = 0
    log_start: int = 0
    checkpoint: int = 0

    def append(self, rows: list[tuple[bytes | None, bytes | None, int]]) -> None:
        for key, value, ts in rows:
            self.records.append(Rec(self.next_offset, key, value, ts))
            self.next_offset += 1

    def in_range(self, base: int, last: int) -> list[Rec]:
        return [r for r in self.records if base <= r.offset <= last]

    def clean(self, segments: list[Seg], *, now: int, lag_ms: int, min_ratio: float,
              delete_retention_ms: int) -> bool:
        """One cleaner pass; returns whether the partition was cleaned."""
        if len(segments) < 2:
            return False
        cleanable = []
        for seg in segments[:-1]:  # never the active segment
            newest = max((r.ts for r in self.in_range(seg.base, seg.last)), default=None)
            if lag_ms > 0 and newest is not None and newest > now - lag_ms:
                break
            cleanable.append(seg)
        if not cleanable:
            return False
        first_dirty = max(self.checkpoint, self.log_start)
        clean = sum(s.bytes for s in cleanable if s.last + 1 <= first_dirty)
        dirty = sum(s.bytes for s in cleanable if s.last + 1 > first_dirty)
        if dirty == 0 or dirty / (clean + dirty) < min_ratio:
            return False
        end = cleanable[-1].last + 1
        latest: dict[bytes, int] = {}
        for r in self.records:
            if r.offset < end and r.key is not None:
                latest[r.key] = r.offset  # records are in offset order: the last one wins
        kept = []
        for r in self.records:
            if r.offset >= end:
                kept.append(r)
                continue
            if r.key is not None and latest[r.key] != r.offset:
                continue  # superseded by a newer record of its key
            if r.value is None and r.offset < first_dirty and r.ts <= now - delete_retention_ms:
                continue  # an expired tombstone that a previous pass already kept
            kept.append(r)
        self.records = kept
        self.checkpoint = end
        return True


def records_of(table) -> list[Rec]:
    """The records of a segment-schema Arrow table, as model records."""
    ts = [t // 1000 for t in table.column("timestamp").cast("int64").to_pylist()]
    return [Rec(o, k, v, t) for o, k, v, t in zip(table.column("offset").to_pylist(),
                                                   table.column("key").to_pylist(),
                                                   table.column("value").to_pylist(), ts)]
