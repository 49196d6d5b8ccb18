"""Helpers of the transaction tests: a store that crashes after N writes, small readers."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from log_layout import Log, ProducerBatch


class Crash(OSError):
    """The injected failure: the process 'died' at this write."""


class CrashingStore:
    """Delegates to ``store``; the write after ``writes`` writes raises Crash before it
    happens, and so does every write after it (the process is dead). Writes are the
    store's creating calls: put_exclusive, put_new, put_replace, a staged or linked
    file's commit."""

    def __init__(self, store: Any, writes: int):
        self._store, self.left, self.crashed = store, writes, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def tick(self) -> None:
        if self.left <= 0:
            self.crashed = True
            raise Crash("injected crash")
        self.left -= 1

    def put_exclusive(self, path: str, data: Any) -> bool:
        self.tick()
        return self._store.put_exclusive(path, data)

    def put_new(self, path: str, data: Any) -> None:
        self.tick()
        return self._store.put_new(path, data)

    def put_replace(self, path: str, data: Any) -> None:
        self.tick()
        return self._store.put_replace(path, data)

    def stage_exclusive(self, path: str, data: Any) -> Any:
        return _Staged(self, self._store.stage_exclusive(path, data))

    def linked_file(self, path: str) -> Any:
        return _Linked(self, self._store.linked_file(path))


class _Staged:
    def __init__(self, owner: CrashingStore, staged: Any):
        self.owner, self.staged = owner, staged

    def commit(self) -> bool:
        self.owner.tick()
        return self.staged.commit()

    def discard(self) -> None:
        self.staged.discard()


class _Linked:
    def __init__(self, owner: CrashingStore, f: Any):
        self.owner, self.f = owner, f

    def __enter__(self) -> "_Linked":
        self.f.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.f.__exit__(*exc)

    def writev(self, chunks: Any) -> None:
        self.f.writev(chunks)

    def commit(self, path: str) -> bool:
        self.owner.tick()
        return self.f.commit(path)


def crashing_log(log: Log, writes: int) -> Log:
    """Another Log on ``log``'s store that crashes after ``writes`` writes."""
    return Log(CrashingStore(log.store, writes))


def txn_append(log: Log, topic: str, partition: int, pid: int, epoch: int, values: list[bytes]
               ) -> int:
    """A transactional append of ``values`` by ``pid``/``epoch`` at its next sequence;
    returns the base offset."""
    part = log.partition(topic, partition)
    entry = part.snapshot().producers.get(pid)
    seq = 0 if entry is None or entry.epoch < epoch else entry.last_sequence + 1
    batch = ProducerBatch(pid, epoch, seq, len(values))
    return part.writer().append(pa.table({"value": values}), producer_batches=[(batch, 0)],
                                transactional=True).base_offset


def plain_append(log: Log, topic: str, partition: int, values: list[bytes]) -> int:
    return log.partition(topic, partition).writer().append(
        pa.table({"value": values})).base_offset


def values(log: Log, topic: str, partition: int, level: str = "read_uncommitted") -> list:
    t = log.partition(topic, partition).read_table(0, isolation_level=level)
    return t.column("value").to_pylist()


def offsets(log: Log, topic: str, partition: int, level: str = "read_uncommitted") -> list:
    t = log.partition(topic, partition).read_table(0, isolation_level=level)
    return t.column("offset").to_pylist()
