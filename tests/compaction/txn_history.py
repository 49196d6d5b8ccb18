"""Builders of transactional histories for the maintenance tests: keyed transactional
appends through the transaction coordinator (``log_layout.transactions``), and views."""

from __future__ import annotations

from log_layout import ProducerBatch
from log_layout import transactions as tx
from tests.compaction.helpers import keyed

RC, RU = "read_committed", "read_uncommitted"


class Txn:
    """One transactional producer of ``topic``'s partition 0, through the coordinator."""

    def __init__(self, log, tid: str, topic: str, now_ms: int):
        self.log, self.tid, self.topic = log, tid, topic
        self.pid, self.epoch = tx.init_transactions(log, tid, 600_000, now_ms=now_ms)

    def send(self, pairs: list[tuple[str, str | None]], ts: int) -> int:
        """Append ``pairs`` (in one segment) inside the transaction; returns the base offset."""
        tx.add_partitions(self.log, self.tid, self.pid, self.epoch, [(self.topic, 0)],
                          now_ms=ts)
        part = self.log.partition(self.topic, 0)
        entry = part.snapshot().producers.get(self.pid)
        seq = 0 if entry is None or entry.epoch < self.epoch else entry.last_sequence + 1
        batch = ProducerBatch(self.pid, self.epoch, seq, len(pairs))
        return part.writer().append(keyed(pairs, ts), producer_batches=[(batch, 0)],
                                    transactional=True, now_ms=ts).base_offset

    def end(self, commit: bool, ts: int) -> None:
        tx.end_transaction(self.log, self.tid, self.pid, self.epoch, commit, now_ms=ts)


def plain(log, topic: str, pairs: list[tuple[str, str | None]], ts: int) -> int:
    """A non-transactional append of ``pairs``; returns its base offset."""
    return log.partition(topic, 0).writer().append(keyed(pairs, ts), now_ms=ts).base_offset


def view(plog, level: str) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) a reader at ``level`` sees from the log start."""
    t = plog.read_table(plog.log_start_offset(), isolation_level=level)
    return [(o, k.decode(), None if v is None else v.decode())
            for o, k, v in zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                               t.column("value").to_pylist())]


def values(plog, level: str) -> list[str | None]:
    return [v for _, _, v in view(plog, level)]


def latest(plog, level: str = RC) -> dict[str, str]:
    """Each key's latest value a reader at ``level`` sees (keys whose latest is a
    tombstone left out): what compaction must never change."""
    out: dict[str, str | None] = {}
    for _, k, v in view(plog, level):
        out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def kinds_exact(m) -> bool:
    """Every marker segment holds one record; no segment mixes kinds (the manifest's
    flags are per segment: a segment of records and a marker are told apart)."""
    return all(s.count == 1 for s in m.segments if s.control)
