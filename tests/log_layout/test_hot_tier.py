"""The hot tier (log_layout.hot_journal): one shared object and one journal entry per
flush for every partition, read back by every reader, fenced by seals, rolled up and
swept. On every store."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from compaction.rollup import rollup_partition
from log_layout import Fenced, open_log, paths, wall_clock_ms
from log_layout.hot_journal import CorruptHotEntry, encode_entry
from log_layout.hot_sweep import MIN_DELAY_MS, sweep
from log_layout.hot_writer import JournalWriter

PARTITIONS = 6


def _values(table: pa.Table) -> list[bytes]:
    return table.column("value").to_pylist()


def _hot_files(log, journal: str) -> tuple[list[str], list[str]]:
    names = [f.name for f in log.store.list(paths.journal_folder(journal))]
    return (sorted(n for n in names if n.endswith(".json")),
            sorted(n for n in names if n.endswith(".wal")))


@pytest.fixture
def hot(log):
    """A topic of PARTITIONS partitions, each claimed through one journal."""
    log.create_topic("t", {"partitions": PARTITIONS})
    journal = JournalWriter(log.journals, "gw-a")
    writers = [log.partition("t", p).claim("gw-a", journal) for p in range(PARTITIONS)]
    yield log, journal, writers
    journal.close()


def _append_round(writers, tag: str) -> list:
    futures = [w.append_async(pa.table({"key": [f"k{p}".encode()],
                                        "value": [f"{tag}-{p}".encode()]}))
               for p, w in enumerate(writers)]
    return [f.result(timeout=60) for f in futures]


def test_a_flush_is_one_object_and_one_entry_for_every_partition(hot, store):
    log, journal, writers = hot
    # the journal is held until every partition has an append waiting: one flush
    gate = threading.Event()
    real = journal._plan
    journal._plan = lambda taken: (gate.wait(30), real(taken))[1]
    futures = [w.append_async(pa.table({"value": [f"v{p}".encode()]}))
               for p, w in enumerate(writers)]
    first = futures[0]
    gate.set()
    results = [f.result(timeout=60) for f in futures]
    assert all(r.base_offset == 0 and r.last_offset == 0 for r in results)
    entries, objects = _hot_files(log, journal.name)
    # the first append may have gone alone (its flush started before the others arrived)
    assert len(entries) == len(objects) <= 2 and first.done()
    fresh = open_log(*store[:1], storage_options=store[1])  # another process's view
    for p in range(PARTITIONS):
        assert _values(fresh.partition("t", p).read_table(0)) == [f"v{p}".encode()]
    # no per-partition file was written on the produce path
    for p in range(PARTITIONS):
        plog = log.partition("t", p)
        assert not [f for f in log.store.list(plog.folder) if f.name.endswith(".arrow")]


def test_rounds_read_back_in_order_with_offsets_and_keys(hot, store):
    log, journal, writers = hot
    for r in range(5):
        results = _append_round(writers, f"r{r}")
        assert [x.base_offset for x in results] == [r] * PARTITIONS
    fresh = open_log(*store[:1], storage_options=store[1])
    for p in range(PARTITIONS):
        t = fresh.partition("t", p).read_table(0)
        assert _values(t) == [f"r{r}-{p}".encode() for r in range(5)]
        assert t.column("offset").to_pylist() == list(range(5))
        assert set(t.column("key").to_pylist()) == {f"k{p}".encode()}
        assert fresh.partition("t", p).read_table(2, 4).column("offset").to_pylist() == [2, 3]


def test_a_claim_seals_the_old_writer_and_starts_after_its_last_commit(hot, store):
    log, journal, writers = hot
    _append_round(writers, "a")
    other = open_log(*store[:1], storage_options=store[1])
    taken = other.partition("t", 0).claim("gw-b")  # a cold claimant seals too
    with pytest.raises(Fenced):
        writers[0].append(pa.table({"value": [b"late"]}))
    assert writers[1].append(pa.table({"value": [b"still mine"]})).base_offset == 1
    assert taken.append(pa.table({"value": [b"b"]})).base_offset == 1
    reader = open_log(*store[:1], storage_options=store[1])
    assert _values(reader.partition("t", 0).read_table(0)) == [b"a-0", b"b"]
    assert _values(reader.partition("t", 1).read_table(0)) == [b"a-1", b"still mine"]


def test_a_hot_claimant_takes_over_a_hot_partition(hot, store):
    log, journal, writers = hot
    _append_round(writers, "a")
    other = open_log(*store[:1], storage_options=store[1])
    journal_b = JournalWriter(other.journals, "gw-b")
    try:
        b = other.partition("t", 2).claim("gw-b", journal_b)
        assert b.append(pa.table({"value": [b"b1"]})).base_offset == 1
        with pytest.raises(Fenced):
            writers[2].append(pa.table({"value": [b"late"]}))
        # and back: gw-a claims again, sealing gw-b's journal
        a2 = log.partition("t", 2).claim("gw-a", journal)
        assert a2.append(pa.table({"value": [b"a2"]})).base_offset == 2
        with pytest.raises(Fenced):
            b.append(pa.table({"value": [b"late b"]}))
        reader = open_log(*store[:1], storage_options=store[1])
        assert _values(reader.partition("t", 2).read_table(0)) == [b"a-2", b"b1", b"a2"]
    finally:
        journal_b.close()


def test_a_frozen_writers_late_entry_is_never_served(hot, store):
    """A writer frozen before its commit, claimed meanwhile, wakes and commits: the
    entry lands after the seal, and no reader ever serves it."""
    log, journal, writers = hot
    _append_round(writers, "a")
    frozen = threading.Event()
    woke = threading.Event()
    real_commit = journal.journals.commit

    def stalled_commit(*args):
        frozen.set()
        woke.wait(60)
        return real_commit(*args)

    journal.journals.commit = stalled_commit
    late = writers[3].append_async(pa.table({"value": [b"late"]}))
    assert frozen.wait(30)
    other = open_log(*store[:1], storage_options=store[1])
    taken = other.partition("t", 3).claim("gw-b")
    woke.set()
    with pytest.raises(Fenced):
        late.result(timeout=60)
    journal.journals.commit = real_commit
    taken.append(pa.table({"value": [b"b"]}))
    reader = open_log(*store[:1], storage_options=store[1])
    assert _values(reader.partition("t", 3).read_table(0)) == [b"a-3", b"b"]
    # a late entry forged after the seal, at the old epoch, is not read either
    seq = reader.journals.end(journal.name, 0)
    line = log.partition("t", 3).snapshot().to_json()  # any parseable line
    reader.store.put_exclusive(paths.hot_entry_path(journal.name, seq), encode_entry(
        "forged", None, 0, [("t", writers[3].topic_id, 3, writers[3].epoch, line)]))
    again = open_log(*store[:1], storage_options=store[1])
    assert _values(again.partition("t", 3).read_table(0)) == [b"a-3", b"b"]


def test_rollup_rewrites_hot_segments_and_the_sweep_deletes_the_objects(hot, store):
    log, journal, writers = hot
    for r in range(3):
        _append_round(writers, f"r{r}")
    config = log.topic("t").config
    now = wall_clock_ms()
    for p in range(PARTITIONS):
        rollup_partition(log.partition("t", p), config, now)
    # the writer goes on after the roll-up; the roll-up took the journal up to here
    _append_round(writers, "after")
    reader = open_log(*store[:1], storage_options=store[1])
    for p in range(PARTITIONS):
        plog = reader.partition("t", p)
        assert _values(plog.read_table(0)) == [f"{t}-{p}".encode()
                                               for t in ("r0", "r1", "r2", "after")]
        cold = plog.versions.cold_snapshot()
        assert cold.hot_from > 0 and not any(paths.is_hot_file(s.file) for s in cold.segments)
    entries_before, objects_before = _hot_files(log, journal.name)
    later = wall_clock_ms() + 10 * MIN_DELAY_MS
    # rolled-up objects are in each partition's removed list until vacuum forgets them
    assert sweep(log, now_ms=later, delay_ms=0).deleted_objects == 0
    for p in range(PARTITIONS):
        log.partition("t", p).vacuum(now_ms=later, delay_ms=0)
        assert not any(paths.is_hot_file(n) for n, _ in log.partition("t", p).snapshot().removed)
    report = sweep(log, now_ms=later, delay_ms=0)
    entries, objects = _hot_files(log, journal.name)
    # what the last round's segments name is kept, every other object is gone, as are
    # the entries before the partitions' hot_from
    last_round = {log.partition("t", p).snapshot().segments[-1].file.rsplit("/", 1)[-1]
                  for p in range(PARTITIONS)}
    assert set(objects) == last_round
    assert report.deleted_objects == len(objects_before) - len(last_round)
    assert len(entries) < len(entries_before)  # (the first sweep already took them)
    for p in range(PARTITIONS):
        assert _values(open_log(*store[:1], storage_options=store[1])
                       .partition("t", p).read_table(0))[-1] == f"after-{p}".encode()


def test_an_object_never_committed_is_swept_and_a_young_one_kept(log):
    log.create_topic("t")
    orphan = paths.hot_object_path("gw-dead-0000000000000000", 0)
    log.store.put_new(orphan, b"ARROW1 partial")
    assert sweep(log, now_ms=wall_clock_ms(), delay_ms=0).kept_objects == 1
    report = sweep(log, now_ms=wall_clock_ms() + 10 * MIN_DELAY_MS, delay_ms=0)
    assert report.deleted_objects == 1
    assert _hot_files(log, "gw-dead-0000000000000000") == ([], [])


@pytest.mark.parametrize("backend", ["file", "memory"], indirect=True)
def test_a_corrupt_entry_is_a_typed_error_never_a_record(hot):
    log, journal, writers = hot
    _append_round(writers, "a")
    seq = log.journals.end(journal.name, 0)
    log.store.put_exclusive(paths.hot_entry_path(journal.name, seq), b'{"format": 1, "id": 5}')
    fresh = open_log(log.url)
    with pytest.raises(CorruptHotEntry):
        fresh.partition("t", 0).read_table(0)


@pytest.mark.parametrize("backend", ["file"], indirect=True)
def test_transactions_commit_and_abort_through_the_journal(hot):
    from log_layout.manifest import ProducerBatch

    log, journal, writers = hot
    w = writers[0]
    pid = 42
    w.append(pa.table({"value": [b"t1", b"t2"]}),
             producer_batches=[(ProducerBatch(pid, 0, 0, 2), 0)], transactional=True)
    plog = log.partition("t", 0)
    assert plog.last_stable_offset() == 0 and plog.high_watermark() == 2
    w.write_marker(pid, 0, False)  # abort
    w.append(pa.table({"value": [b"plain"]}))
    fresh = open_log(log.url).partition("t", 0)
    assert _values(fresh.read_table(0, isolation_level="read_committed")) == [b"plain"]
    assert _values(fresh.read_table(0)) == [b"t1", b"t2", b"plain"]
    assert fresh.last_stable_offset() == fresh.high_watermark() == 4


@pytest.mark.parametrize("backend", ["file"], indirect=True)
def test_a_journal_whose_store_keeps_failing_breaks_and_a_new_one_takes_over(hot, monkeypatch):
    from log_layout import hot_writer
    from log_layout.hot_writer import JournalBroken

    log, journal, writers = hot
    _append_round(writers, "a")
    monkeypatch.setattr(hot_writer, "STORE_TRIES", 2)

    def failing(*_a, **_k):
        raise OSError("the store is down")

    monkeypatch.setattr(journal.journals, "commit", failing)
    with pytest.raises(JournalBroken):
        writers[0].append(pa.table({"value": [b"lost"]}))
    assert journal.broken is not None
    with pytest.raises(JournalBroken):  # every writer of the journal stops
        writers[1].append(pa.table({"value": [b"lost too"]}))
    monkeypatch.undo()
    fresh = JournalWriter(log.journals, "gw-a")
    try:
        w = log.partition("t", 0).claim("gw-a", fresh)
        assert w.append(pa.table({"value": [b"b"]})).base_offset == 1
        assert _values(open_log(log.url).partition("t", 0).read_table(0)) == [b"a-0", b"b"]
    finally:
        fresh.close()


@pytest.mark.parametrize("backend", ["file"], indirect=True)
def test_dump_log_shows_the_journal_and_the_records_of_a_hot_partition(hot):
    from tests.jobs.cli_proc import sparklog, text

    log, journal, writers = hot
    _append_round(writers, "a")
    _append_round(writers, "b")
    run = sparklog("dump-log", "t/2", "--print-data-log", "--store", log.url)
    out = text(run)[0].splitlines()
    assert run.returncode == 0, text(run)
    assert out[1].startswith(f"hot journal: {journal.name}, next entry ")
    segments = [line for line in out if line.startswith("segment: _hot/")]
    assert [line.split()[3] for line in segments] == ["0", "1"]  # their base offsets
    assert [line.rsplit("payload: ", 1)[1] for line in out if "payload: " in line] \
        == ["a-2", "b-2"]


class _HeldUploads:
    """A journal's uploads held until ``gate`` is set; the ``fail``-th (from 1) raises."""

    def __init__(self, journal: JournalWriter, fail: int | None = None):
        self.gate, self.cond, self.started = threading.Event(), threading.Condition(), 0
        real = journal._upload

        def held(flush) -> None:
            with self.cond:
                self.started += 1
                n = self.started
                self.cond.notify_all()
            assert self.gate.wait(30)
            if n == fail:
                raise OSError("the store refused this object")
            real(flush)

        journal._upload = held

    def append_each_in_a_flush(self, writer, tables: list[pa.Table]) -> list:
        """Append each table once the one before is being uploaded (its own flush)."""
        futures = []
        for table in tables:
            futures.append(writer.append_async(table))
            with self.cond:
                assert self.cond.wait_for(lambda: self.started == len(futures), 30)
        return futures


def test_a_partition_is_in_several_uploads_at_once_and_commits_in_order(log, store):
    """Each flush of a partition is planned on the ones in flight before it: with the
    uploads held, four flushes of one partition are out together, then commit in order
    with contiguous offsets."""
    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a", interval_ms=0, uploads_in_flight=4)
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        held = _HeldUploads(journal)
        futures = held.append_each_in_a_flush(
            w, [pa.table({"value": [f"v{i}".encode()] * 3}) for i in range(4)])
        assert held.started == 4  # four uploads of the one partition out together
        held.gate.set()
        results = [f.result(timeout=60) for f in futures]
        assert [(r.base_offset, r.last_offset) for r in results] == \
            [(0, 2), (3, 5), (6, 8), (9, 11)]
        fresh = open_log(*store[:1], storage_options=store[1])
        assert _values(fresh.partition("t", 0).read_table(0)) == \
            [f"v{i}".encode() for i in range(4) for _ in range(3)]
    finally:
        journal.close()


def test_a_failed_upload_fails_the_flushes_planned_after_it_and_nothing_half_shows(log, store):
    """The second of three flushes of a partition fails to upload: the third, planned
    on the state the second was to leave, fails too (PredecessorFailed); the first
    commits, and the next append is planned afresh on what is committed."""
    from log_layout.hot_writer import PredecessorFailed

    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a", interval_ms=0, uploads_in_flight=4)
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        held = _HeldUploads(journal, fail=2)
        futures = held.append_each_in_a_flush(
            w, [pa.table({"value": [f"v{i}".encode()]}) for i in range(3)])
        held.gate.set()
        assert futures[0].result(timeout=60).base_offset == 0
        with pytest.raises(OSError):
            futures[1].result(timeout=60)
        with pytest.raises(PredecessorFailed):
            futures[2].result(timeout=60)
        assert w.append(pa.table({"value": [b"after"]})).base_offset == 1
        fresh = open_log(*store[:1], storage_options=store[1])
        assert _values(fresh.partition("t", 0).read_table(0)) == [b"v0", b"after"]
    finally:
        journal.close()


def test_appends_of_one_partition_waiting_together_go_in_one_flush(log, store):
    """Appends of a partition waiting when a flush starts go into it together, each
    planned on the one before: one object, one entry, their own offsets."""
    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a")
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        gate, planning = threading.Event(), threading.Event()
        real = journal._plan
        journal._plan = lambda taken: (planning.set(), gate.wait(30), real(taken))[2]
        futures = [w.append_async(pa.table({"value": [b"v0"] * 2}))]
        assert planning.wait(30)  # the first flush holds the first append alone
        futures += [w.append_async(pa.table({"value": [f"v{i}".encode()] * 2}))
                    for i in (1, 2, 3)]
        gate.set()
        results = [f.result(timeout=60) for f in futures]
        assert [(r.base_offset, r.last_offset) for r in results] == \
            [(0, 1), (2, 3), (4, 5), (6, 7)]
        entries, objects = _hot_files(log, journal.name)
        assert (len(entries), len(objects)) == (2, 2)  # the three others went together
        fresh = open_log(*store[:1], storage_options=store[1])
        assert _values(fresh.partition("t", 0).read_table(0)) == \
            [f"v{i}".encode() for i in range(4) for _ in range(2)]
        # the three that waited together are one segment (hot_plan: one encode)
        assert [(s.base_offset, s.last_offset, s.count)
                for s in fresh.partition("t", 0).snapshot().segments] == [(0, 1, 2), (2, 7, 6)]
    finally:
        journal.close()


def _held_flush(journal):
    """Hold the journal's next flush until the returned event is set (the appends made
    meanwhile wait together); the first flush's start is awaited on ``planning``."""
    gate, planning = threading.Event(), threading.Event()
    real = journal._plan
    journal._plan = lambda taken: (planning.set(), gate.wait(30), real(taken))[2]
    return gate, planning


def test_a_run_of_plain_appends_is_one_segment_and_a_transaction_ends_it(log, store):
    """Plain appends waiting together become one segment; a transactional append (its
    segment holds one producer's records) and the marker stand alone, and the plain
    appends after them start a new segment. Keys, timestamps and headers of every
    append read back as written, at their offsets; read_committed leaves the aborted
    records out."""
    from log_layout.manifest import ProducerBatch

    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a")
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        gate, planning = _held_flush(journal)
        first = w.append_async(pa.table({"value": [b"first"]}))
        assert planning.wait(30)
        header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        futures = [
            w.append_async(pa.table({"key": [b"k1", None], "value": [b"a", b"b"],
                                     "timestamp": pa.array([1000, 3000], pa.int64())})),
            w.append_async(pa.table({"value": [b"c"],
                                     "headers": pa.array([[{"key": "h", "value": b"x"}]],
                                                         header)})),
            w.append_async(pa.table({"value": [b"t1", b"t2"]}), transactional=True,
                           producer_batches=[(ProducerBatch(42, 0, 0, 2), 0)]),
            w.append_async(pa.table({"key": [b"k2"], "value": [b"d"]})),
            w.append_async(pa.table({"value": [b"e"],
                                     "timestamp": pa.array([2000], pa.int64())})),
        ]
        gate.set()
        assert first.result(timeout=60).base_offset == 0
        assert [(r.base_offset, r.last_offset) for r in
                (f.result(timeout=60) for f in futures)] == [(1, 2), (3, 3), (4, 5), (6, 6),
                                                             (7, 7)]
        w.write_marker(42, 0, False)  # abort
        fresh = open_log(*store[:1], storage_options=store[1]).partition("t", 0)
        assert [(s.base_offset, s.count) for s in fresh.snapshot().segments] == \
            [(0, 1), (1, 3), (4, 2), (6, 2), (8, 1)]
        t = fresh.read_table(0)
        assert t.column("offset").to_pylist() == list(range(8))
        assert _values(t) == [b"first", b"a", b"b", b"c", b"t1", b"t2", b"d", b"e"]
        assert t.column("key").to_pylist()[1:3] == [b"k1", None]
        assert t.column("key").to_pylist()[6] == b"k2"
        stamps = [x.timestamp() * 1000 for x in t.column("timestamp").to_pylist()]
        assert stamps[1:3] == [1000, 3000] and stamps[7] == 2000
        assert t.column("headers").to_pylist()[3] == [{"key": "h", "value": b"x"}]
        assert _values(fresh.read_table(0, isolation_level="read_committed")) == \
            [b"first", b"a", b"b", b"c", b"d", b"e"]
    finally:
        journal.close()


def test_a_run_whose_encoding_fails_fails_alone_and_takes_no_offsets(log, store, monkeypatch):
    """A run whose records cannot be written fails its appends; nothing of it is
    visible, and the next append takes the offsets it would have had."""
    from log_layout import hot_plan

    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a")
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        gate, planning = _held_flush(journal)
        first = w.append_async(pa.table({"value": [b"first"]}))
        assert planning.wait(30)
        real = hot_plan.concat

        def broken(parts):
            if len(parts) > 1:
                raise pa.ArrowInvalid("hostile records")
            return real(parts)
        monkeypatch.setattr(hot_plan, "concat", broken)
        doomed = [w.append_async(pa.table({"value": [b"x"]})) for _ in range(3)]
        gate.set()
        assert first.result(timeout=60).base_offset == 0
        for f in doomed:
            with pytest.raises(pa.ArrowInvalid):
                f.result(timeout=60)
        assert w.append(pa.table({"value": [b"after"]})).base_offset == 1
        fresh = open_log(*store[:1], storage_options=store[1]).partition("t", 0)
        assert _values(fresh.read_table(0)) == [b"first", b"after"]
        assert fresh.high_watermark() == 2
    finally:
        journal.close()


def test_a_claim_while_a_partition_is_in_several_uploads_fences_them_all(log, store):
    """Another gateway claims a partition while two flushes of it are being uploaded:
    the seal takes the journal's next number, so neither flush is ever served (the first
    loses its entry to the seal, the second was planned after it); the new leader starts
    right after the last committed record."""
    from log_layout.hot_writer import PredecessorFailed

    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a", interval_ms=0, uploads_in_flight=4)
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        assert w.append(pa.table({"value": [b"v0"]})).base_offset == 0
        held = _HeldUploads(journal)
        futures = held.append_each_in_a_flush(
            w, [pa.table({"value": [f"v{i}".encode()]}) for i in (1, 2)])
        other = open_log(*store[:1], storage_options=store[1])
        new = other.partition("t", 0).claim("gw-b")  # seals gw-a's journal for it
        held.gate.set()
        with pytest.raises(Fenced):
            futures[0].result(timeout=60)
        with pytest.raises((Fenced, PredecessorFailed)):
            futures[1].result(timeout=60)
        assert new.append(pa.table({"value": [b"b"]})).base_offset == 1
        fresh = open_log(*store[:1], storage_options=store[1])
        assert _values(fresh.partition("t", 0).read_table(0)) == [b"v0", b"b"]
    finally:
        journal.close()


def test_an_entry_that_cannot_be_written_fails_the_later_uploads_of_its_partition(
        log, store, monkeypatch):
    """The store fails every try of an entry while two later flushes of its partition are
    uploaded: the journal breaks and all three fail (JournalBroken), nothing of them shows,
    and a new journal claims the partition right after the last committed record."""
    from log_layout import hot_writer
    from log_layout.hot_writer import JournalBroken

    monkeypatch.setattr(hot_writer, "STORE_TRIES", 2)
    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw-a", interval_ms=0, uploads_in_flight=4)
    try:
        w = log.partition("t", 0).claim("gw-a", journal)
        assert w.append(pa.table({"value": [b"v0"]})).base_offset == 0
        real_commit = log.journals.commit

        def failing(name, seq, *a, **k):
            if name == journal.name and seq >= 1:
                raise OSError("the store is down")
            return real_commit(name, seq, *a, **k)

        monkeypatch.setattr(log.journals, "commit", failing)
        held = _HeldUploads(journal)
        futures = held.append_each_in_a_flush(
            w, [pa.table({"value": [f"v{i}".encode()]}) for i in (1, 2, 3)])
        held.gate.set()
        for f in futures:
            with pytest.raises(JournalBroken):
                f.result(timeout=60)
        monkeypatch.undo()
        fresh_journal = JournalWriter(log.journals, "gw-a")
        try:
            again = log.partition("t", 0).claim("gw-a", fresh_journal)
            assert again.append(pa.table({"value": [b"b"]})).base_offset == 1
        finally:
            fresh_journal.close()
        fresh = open_log(*store[:1], storage_options=store[1])
        assert _values(fresh.partition("t", 0).read_table(0)) == [b"v0", b"b"]
    finally:
        journal.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_an_idle_journal_on_a_cheap_store_flushes_on_the_callers_thread(tmp_path, fsync):
    """``flush_here``: on a local store without fsync (commits cost microseconds) an
    idle journal runs the flush of what waits on the caller's thread, every
    partition's appends in one entry; with fsync it leaves them to its flush thread.
    Either way they commit and read back."""
    log = open_log(str(tmp_path), fsync=fsync)
    log.create_topic("t", {"partitions": 3})
    journal = JournalWriter.for_store(log.journals, "gw-a", _Hot())
    planned_on: list[int] = []
    real = journal._plan
    journal._plan = lambda taken: (planned_on.append(threading.get_ident()), real(taken))[1]
    try:
        writers = [log.partition("t", p).claim("gw-a", journal) for p in range(3)]
        with journal._cond:  # the flush thread cannot take them before flush_here
            futures = [w.append_async(pa.table({"value": [f"v{p}".encode()]}))
                       for p, w in enumerate(writers)]
            ran = journal.flush_here()
            assert ran is not fsync
            if ran:  # done before flush_here returned: no other thread was involved
                assert all(f.done() for f in futures)
        assert [f.result(timeout=60).base_offset for f in futures] == [0, 0, 0]
        assert (planned_on[0] == threading.get_ident()) is not fsync
        assert journal.stats["entries"] == 1 and journal.stats["partitions"] == 3
        fresh = open_log(str(tmp_path))
        assert [_values(fresh.partition("t", p).read_table(0)) for p in range(3)] == \
            [[b"v0"], [b"v1"], [b"v2"]]
        assert not journal.flush_here()  # nothing waits
    finally:
        journal.close()


class _Hot:
    """The ``hot.*`` settings ``JournalWriter.for_store`` reads, at their defaults."""

    hot_flush_interval_ms = 50
    hot_flush_bytes = 4 << 20
    hot_uploads_in_flight = 4
    hot_checkpoint_interval_entries = 100
