"""The writing side of a hot journal: every partition's appends, one object per flush.

(The format and the fencing rules are ``hot_journal``'s docstring.)

A :class:`JournalWriter` is one process's journal. Partition writers claimed with it
(``PartitionLog.claim(leader, journal=...)``) hand it their appends; it gathers the
appends of every partition into flushes and commits each flush with one object and
one entry, whatever the number of partitions:

* a flush starts when the one before started ``interval_ms`` ago (0: at once) or when
  ``max_bytes`` of records wait, and fewer than ``uploads_in_flight`` flushes are being
  uploaded (on a local store: 0 and 1, Kafka's group commit; on S3 and HDFS, ~100 ms
  and several uploads at once, so throughput is not one flush per round trip);
* a flush is planned on each partition's state after the flushes before it (its
  offsets, producer sequences, transactions: the same rules as an append to
  ``_log``). This process is the partition's only writer (its claim fences every
  other), and entries commit in order, so that state is what the partition will be
  when the flush commits: a partition may be in several flushes being uploaded at
  once (at most ``uploads_in_flight``), a flush takes every append of a partition
  that waits (each planned on the one before; one delta line for them all in the
  entry), and a flush planned on one that then fails fails too (its planned state
  never came to be);
* objects are uploaded at once, entries are committed strictly in order: the entry of
  a flush takes the journal's next sequence number after its upload and after the
  entry before it. An entry that loses its number to a seal fails the sealed
  partitions' appends with :class:`Fenced` and takes the next number for the rest.

Each committed entry (ours, or a seal we lost a number to) is folded into the journal's
**checkpoint** (``hot_checkpoint``), written by its own thread every
``checkpoint_entries`` entries, so a new reader reads it and the few entries after it.

An upload that fails fails its flush's appends (nothing was committed, so nothing is
lost that was acknowledged). An entry whose creation failed with an unknown outcome is
looked for again; if the store keeps failing, the journal is **broken**: every append
of its writers fails (``JournalBroken``, a ``Fenced``) and the gateway claims again,
with a new journal.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from log_layout import hot_checkpoint, hot_journal, paths
from log_layout.commit import wall_clock_ms
from log_layout.errors import Fenced
from log_layout.hot_flush import (Flush, Item, JournalBroken, Key,  # noqa: F401 -- re-exported
                                  Pending, PredecessorFailed, without_segments)
from log_layout.hot_journal import Journals
from log_layout.hot_plan import PartitionPlan
from log_layout.manifest import Manifest

#: tries of a store call before a flush (an upload) or the journal (an entry) gives up
STORE_TRIES = 4
#: an object uploaded longer ago than this is not committed (its flush fails): the
#: sweeper may judge it unnamed by its age (hot_sweep.MIN_DELAY_MS is twice this)
STALE_UPLOAD_S = 15.0
#: appends up to this many bytes may be flushed on the caller's thread (``flush_here``)
INLINE_BYTES = 64 * 1024
#: ``gateway.hot.checkpoint.interval.entries``'s default: a checkpoint (``hot_checkpoint``)
#: once this many entries were committed since the last
CHECKPOINT_ENTRIES = 100


class JournalWriter:
    """One process's hot journal (see the module docstring). Thread-safe."""

    def __init__(self, journals: Journals, owner: str, *, interval_ms: int = 0,
                 max_bytes: int = 4 << 20, uploads_in_flight: int = 1,
                 checkpoint_entries: int = CHECKPOINT_ENTRIES,
                 clock: Callable[[], float] = time.monotonic):
        self.journals, self.store = journals, journals.store
        self.name = paths.new_journal_name(owner)
        journals.own.add(self.name)
        self.interval_s, self.max_bytes = interval_ms / 1000, max_bytes
        self.uploads_in_flight = max(1, uploads_in_flight)
        self._clock = clock
        #: the next sequence number to commit (this journal is new: nothing before it)
        self.next_seq = 0
        self.broken: JournalBroken | None = None
        self._writers: dict[Key, Any] = {}
        self._pending: collections.deque[Pending] = collections.deque()
        self._pending_bytes = 0
        #: partitions in flushes not committed yet, and in how many
        self._in_flight: collections.Counter[Key] = collections.Counter()
        #: partition -> (its writer, the state its last flush in flight leaves); planning
        #: goes on from there, or from the writer's head when nothing is in flight
        self._planned: dict[Key, tuple[Any, Manifest]] = {}
        #: partition -> how many times a failure sent its planning back to the head:
        #: what was planned before a failure, after the failed append, is doomed
        self._generation: collections.Counter[Key] = collections.Counter()
        self._uploading = 0
        self._last_start = float("-inf")
        self._cond = threading.Condition()
        self._closing = False
        self._to_commit: collections.deque[Flush] = collections.deque()
        self._uploads = concurrent.futures.ThreadPoolExecutor(
            self.uploads_in_flight, thread_name_prefix=f"hot-upload-{self.name}")
        #: what has been committed (flushes, entries lost to seals), for metrics and tests
        self.stats = collections.Counter()
        # one flush at a time (a local store): the flush thread commits too, and a
        # commit thread would only be woken by every notify for nothing
        self._threads = [threading.Thread(target=self._flush_loop, daemon=True,
                                          name=f"hot-flush-{self.name}")]
        if self.uploads_in_flight > 1:
            self._threads.append(threading.Thread(target=self._commit_loop, daemon=True,
                                                  name=f"hot-commit-{self.name}"))
        #: the journal's checkpoint: each entry committed goes in (``_commit``, ``_lost_to``)
        self.checkpoints = hot_checkpoint.CheckpointWriter(self.store, self.name,
                                                           checkpoint_entries, self.stats)
        for t in self._threads:
            t.start()

    @classmethod
    def for_store(cls, journals: Journals, owner: str, gateway: Any) -> "JournalWriter":
        """A journal as the store asks, with the ``hot.*`` settings of ``gateway`` (a
        ``conf.GatewaySettings``): on a local store one flush at a time, each as soon
        as the one before ends (group commit); elsewhere (S3, HDFS) every
        ``hot.flush.interval.ms`` with ``hot.uploads.in.flight`` uploads at once."""
        local = journals.store.supports_links
        return cls(journals, owner, interval_ms=0 if local else gateway.hot_flush_interval_ms,
                   max_bytes=gateway.hot_flush_bytes,
                   uploads_in_flight=1 if local else gateway.hot_uploads_in_flight,
                   checkpoint_entries=gateway.hot_checkpoint_interval_entries)

    def __repr__(self) -> str:
        return f"JournalWriter({self.name} @ {self.store.url})"

    # -- what writers call -----------------------------------------------------------
    def register(self, writer: Any) -> None:
        """``writer`` writes its partition through this journal from now on; the writer
        it replaces (an earlier claim of this process) is fenced."""
        p = writer.partition
        with self._cond:
            old = self._writers.get((p.topic, p.partition))
            if old is not None and old is not writer and old.fenced is None:
                old.fenced = Fenced(p.topic, p.partition, old.epoch, writer.epoch)
            self._writers[(p.topic, p.partition)] = writer

    def submit(self, pending: Pending, *, caller_flushes: bool = False
               ) -> concurrent.futures.Future:
        """Queue ``pending`` for the next flush; its future gives the partition's new
        state (a Manifest), None, or raises what planning or committing raised.
        ``caller_flushes``: the caller calls :meth:`flush_here` before it waits for the
        future (at the end of its event loop's turn), so the flush thread is not woken
        now: waking it costs the caller a GIL pass per append for nothing when the
        flush then runs on the caller's thread (a fifth of a one-record request)."""
        with self._cond:
            failed = self.broken or pending.writer.fenced
            if failed is None and self._closing:
                failed = RuntimeError(f"{self} is closed")
            if failed is None:
                self._pending.append(pending)
                self._pending_bytes += pending.nbytes
                if not caller_flushes:
                    self._cond.notify_all()
        if failed is not None:
            pending.future.set_exception(failed)
        return pending.future

    def close(self) -> None:
        """Commit what is queued, then stop the threads (and the checkpoint's, once
        what is due is written)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self.checkpoints.close()
        self._uploads.shutdown(wait=True)

    # -- the flush thread: plan, encode, upload ------------------------------------------
    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    ready = any(self._in_flight[p.key] < self.uploads_in_flight
                                for p in self._pending)
                    if not ready and self._closing and not self._pending \
                            and not self._in_flight:
                        self._to_commit.append(None)  # type: ignore[arg-type]
                        self._cond.notify_all()
                        return
                    wait = self._wait_s()
                    if ready and wait <= 0:
                        break
                    self._cond.wait(wait if ready and wait < 3600 else None)
                taken = self._take()
            if self.uploads_in_flight == 1:
                # one at a time (a local store): upload and commit here, without handing
                # the flush to two more threads (each hand-off costs a one-record
                # append tens of microseconds)
                self._flush_one(taken)
                continue
            flush = self._plan(taken)
            if flush.chunks:
                flush.uploaded = self._uploads.submit(self._upload, flush)
            with self._cond:
                self._to_commit.append(flush)
                self._cond.notify_all()

    def flush_here(self) -> bool:
        """Run the next flush on the calling thread, if the journal is one flush at a
        time on a store whose commits cost microseconds (``Store.cheap_commits``: a local
        store without fsync), nothing is being flushed, and at most ``INLINE_BYTES`` of
        appends wait; True if it ran one (their futures are then done). Else the flush
        thread takes them as usual.

        For a caller on an event loop that has just submitted its appends (a gateway at
        the end of its loop's turn): a lone record's flush then costs no hand-off to the
        flush thread and back, each a wake-up and a GIL pass, as the per-partition path
        writes a small batch on the loop (``ingest_gateway.server.batcher``). Appends
        submitted before the call go in the flush together (group commit); if it does not
        run the flush, it wakes the flush thread for them. Raises nothing: a failed flush
        fails its appends' futures."""
        with self._cond:
            if self.uploads_in_flight != 1 or not self.store.cheap_commits \
                    or self._uploading or self._closing or self.broken is not None \
                    or not self._pending or self._pending_bytes > INLINE_BYTES \
                    or self._wait_s() > 0:
                if self._pending:
                    self._cond.notify_all()
                return False
            taken = self._take()
        self._flush_one(taken)
        return True

    def _take(self) -> list[Pending]:
        """The appends the next flush takes (called holding the lock, a flush slot
        free): every append of a partition with a slot free; they are then in flight."""
        taken, kept = [], collections.deque()
        keys: set[Key] = set()
        for p in self._pending:
            key = p.key
            if key not in keys and self._in_flight[key] >= self.uploads_in_flight:
                kept.append(p)
            else:
                taken.append(p)
                keys.add(key)
        self._pending = kept
        self._pending_bytes = sum(p.nbytes for p in kept)
        self._in_flight.update(keys)
        self._uploading += 1
        self._last_start = self._clock()
        return taken

    def _flush_one(self, taken: list[Pending]) -> None:
        """Plan, upload and commit ``taken`` on this thread (one flush at a time)."""
        flush = self._plan(taken)
        if flush.chunks:
            flush.uploaded = concurrent.futures.Future()
            try:
                self._upload(flush)
                flush.uploaded.set_result(None)
            except BaseException as exc:  # noqa: BLE001 -- _commit fails the flush
                flush.uploaded.set_exception(exc)
        self._committed(flush)

    def _wait_s(self) -> float:
        """Seconds until a flush may start (called holding the lock)."""
        if self._uploading >= self.uploads_in_flight:
            return float("inf")
        if self._closing or self._pending_bytes >= self.max_bytes:
            return 0.0
        return self._last_start + self.interval_s - self._clock()

    def _plan(self, taken: list[Pending]) -> Flush:
        """Plan each partition's appends, in order, on its state and encode their
        segments (``hot_plan``)."""
        obj = paths.hot_object_path(self.name, self.next_seq)
        chunks: list[Any] = []
        items: list[Item] = []
        position = 0
        by_key: dict[Key, list[Pending]] = {}
        for p in taken:
            by_key.setdefault(p.key, []).append(p)
        for key, pendings in by_key.items():
            w = pendings[-1].writer  # the partition's writer now (an earlier one is fenced)
            with self._cond:
                last = self._planned.get(key)
                generation = self._generation[key]
            base = last[1] if last is not None and last[0] is w else w.head
            plan = PartitionPlan(w, key, base, obj, position)
            for p in pendings:
                plan.add(p)
            plan.finish()
            chunks += plan.chunks
            position = plan.position
            if not plan.appends:
                continue
            item = Item(w, key, base, plan.appends, generation)
            items.append(item)
            with self._cond:
                if self._generation[key] == generation:  # else a failure came between
                    self._planned[key] = (w, item.planned)
        return Flush(set(by_key), obj if chunks else None, chunks, items)

    def _upload(self, flush: Flush) -> None:
        data = b"".join(flush.chunks)  # one PUT: the store needs the whole body
        for attempt in range(STORE_TRIES):
            try:
                self.store.put_new(flush.obj, data)
                return
            except FileExistsError:
                return  # an earlier try that failed with an unknown outcome made it
            except Exception:
                if attempt == STORE_TRIES - 1:
                    raise
                time.sleep(0.05 * 2 ** attempt)

    # -- the commit thread: entries in order -----------------------------------------------
    def _commit_loop(self) -> None:
        while True:
            with self._cond:
                while not self._to_commit:
                    self._cond.wait()
                flush = self._to_commit.popleft()
            if flush is None:
                return
            self._committed(flush)

    def _committed(self, flush: Flush) -> None:
        """Commit ``flush`` and free its partitions for the next flush."""
        try:
            self._commit(flush)
        finally:
            with self._cond:
                self._uploading -= 1
                self._in_flight.subtract(flush.keys)
                for key in flush.keys:
                    if self._in_flight[key] <= 0:
                        del self._in_flight[key]
                        self._planned.pop(key, None)  # nothing in flight: plan on the head
                if self._pending or self._closing or self.uploads_in_flight > 1:
                    self._cond.notify_all()  # else no thread waits for this one

    def _fail(self, items: list[Item], exc: BaseException) -> None:
        """``items`` will never commit: fail their appends, and plan their partitions'
        next appends on what is committed (those planned after them fail too)."""
        with self._cond:
            for item in items:
                key = item.key
                if item.generation == self._generation[key]:
                    # what was planned after it is doomed: plan afresh on the head
                    # (entries commit in order, so all before it has been decided)
                    self._generation[key] += 1
                    self._planned.pop(key, None)
        for item in items:
            for p, _ in item.appends:
                p.future.set_exception(exc)

    def _commit(self, flush: Flush) -> None:
        items = flush.items
        if flush.uploaded is not None:
            try:
                flush.uploaded.result()
                if time.monotonic() - flush.upload_started > STALE_UPLOAD_S:
                    raise TimeoutError(f"{flush.obj} was uploaded more than "
                                       f"{STALE_UPLOAD_S:.0f} s before its commit")
            except BaseException as exc:  # noqa: BLE001 -- nothing committed: fail them
                self._fail(items, exc)
                return
        if self.broken is not None:
            self._fail(items, self.broken)
            return
        orphans = [i for i in items if i.base is not i.writer.head]
        if orphans:  # planned after a flush that failed
            items = [i for i in items if i.base is i.writer.head]
            for item in orphans:
                self._fail([item], PredecessorFailed(*item.key))
        entry_id = paths.unique_id()
        seq = self.next_seq
        while items:
            data = hot_journal.encode_entry(
                entry_id, flush.obj, wall_clock_ms(),
                [(i.key[0], i.writer.topic_id, i.key[1], i.writer.epoch, i.line)
                 for i in items])
            try:
                won = self._create(seq, data, entry_id,
                                   {i.key: i.appends[-1][1] for i in items})
            except Exception as exc:  # the store keeps failing: outcome unknown
                self._break(JournalBroken(self.name, exc))
                self._fail(items, self.broken)
                return
            if won:
                break
            items = self._lost_to(seq, items)
            seq += 1
        else:  # every partition of the flush was sealed away
            self.next_seq = seq
            return
        self.next_seq = seq + 1
        self.checkpoints.folded(seq, self.journals.entry(self.name, seq, trust_own=False),
                                len(data))
        self.stats["entries"] += 1
        self.stats["entry_bytes"] += len(data)
        # partitions and appends committed: their ratio is how many appends of a
        # partition a flush takes (the appends of one partition share a segment)
        self.stats["partitions"] += len(items)
        self.stats["appends"] += sum(len(i.appends) for i in items)
        for item in items:
            item.writer.head = item.planned
            for p, new in item.appends:
                p.future.set_result(new)

    def _create(self, seq: int, data: bytes, entry_id: str,
                deltas: dict[Key, Manifest]) -> bool:
        """Create entry ``seq``; True if it is ours (also after a try whose outcome was
        unknown). Raises the store's error after STORE_TRIES tries."""
        for attempt in range(STORE_TRIES):
            try:
                if self.journals.commit(self.name, seq, data, deltas):
                    return True
                found = self.journals.entry(self.name, seq, trust_own=False)
                return found is not None and found.id == entry_id
            except hot_journal.CorruptHotEntry:
                raise
            except Exception:
                if attempt == STORE_TRIES - 1:
                    raise
                time.sleep(0.05 * 2 ** attempt)
                found = _quietly(lambda: self.journals.entry(self.name, seq, trust_own=False))
                if found is not None:
                    return found.id == entry_id
        return False

    def _lost_to(self, seq: int, items: list) -> list:
        """Entry ``seq`` was taken by someone else (a seal): fence what it seals."""
        other = self.journals.entry(self.name, seq, trust_own=False)
        self.checkpoints.folded(seq, other, 0 if other is None else other.size)
        self.stats["lost_to_seal"] += 1
        if other is None:
            return items
        kept = []
        with self._cond:
            sealed = [w for w in (*self._writers.values(), *(i.writer for i in items))
                      if (s := other.seals.get((w.partition.topic, w.partition.partition)))
                      is not None and s[0] == w.topic_id and s[1] > w.epoch]
            for w in sealed:
                if w.fenced is None:
                    w.fenced = Fenced(w.partition.topic, w.partition.partition, w.epoch,
                                      other.seals[(w.partition.topic, w.partition.partition)][1])
        for item in items:
            w = item.writer
            if w.fenced is not None:
                self._fail([item], w.fenced)
            else:
                kept.append(item)
        return kept

    def _break(self, exc: JournalBroken) -> None:
        with self._cond:
            self.broken = exc
            for w in self._writers.values():
                if w.fenced is None:
                    w.fenced = exc
            pending, self._pending = list(self._pending), collections.deque()
            self._pending_bytes = 0
        for p in pending:
            p.future.set_exception(exc)


def _quietly(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None
