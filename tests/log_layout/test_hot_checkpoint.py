"""A hot journal's checkpoint (log_layout.hot_checkpoint): a new reader reads it and at
most K entries after it instead of every entry since the last roll-up; it merges each
partition exactly as the entries do (seals included); a torn, damaged or hostile one
is refused (CorruptHotCheckpoint) and the entries are read instead, never a wrong
record; the sweeper bounds it. On every store."""

from __future__ import annotations

import json
import random
import zlib

import pyarrow as pa
import pytest

from bench.hot_checkpoint import CountingStore
from compaction.rollup import rollup_partition
from log_layout import hot_checkpoint, hot_state, open_log, paths, wall_clock_ms
from log_layout.hot_checkpoint import CorruptHotCheckpoint
from log_layout.hot_journal import CorruptHotEntry
from log_layout.hot_sweep import MIN_DELAY_MS, sweep
from log_layout.hot_writer import JournalWriter
from log_layout.topics import Log

PARTITIONS = 3
K = 6


def _fresh(store, *, checkpoints: bool = True) -> tuple[Log, CountingStore]:
    counting = CountingStore(open_log(store[0], storage_options=store[1]).store)
    log = Log(counting)
    if not checkpoints:  # as an older sparklog: every entry
        log.journals.checkpoints = _Never()
    return log, counting


class _Never(dict):
    """A checkpoint cache that has "just" found none for every journal."""

    def get(self, key, default=None):
        return (float("inf"), None)


def _round(writers, tag: str, only=None) -> None:
    futures = [w.append_async(pa.table({"key": [f"k{p}".encode()],
                                        "value": [f"{tag}-{p}".encode()]}))
               for p, w in enumerate(writers) if only is None or p in only]
    for f in futures:
        f.result(timeout=60)


def _values(log, p: int) -> list[bytes]:
    return log.partition("t", p).read_table(0).column("value").to_pylist()


@pytest.fixture
def hot(log):
    log.create_topic("t", {"partitions": PARTITIONS})
    journal = JournalWriter(log.journals, "gw-a", checkpoint_entries=K)
    writers = [log.partition("t", p).claim("gw-a", journal) for p in range(PARTITIONS)]
    yield log, journal, writers
    journal.close()


def test_a_new_reader_reads_the_checkpoint_and_at_most_k_entries_after_it(hot, store):
    log, journal, writers = hot
    rounds = 12
    for r in range(rounds):  # one append at a time: an entry each
        for p, w in enumerate(writers):
            w.append(pa.table({"key": [f"k{p}".encode()], "value": [f"r{r}-{p}".encode()]}))
    journal.close()  # a checkpoint being written is finished
    entries = journal.next_seq
    assert entries > 3 * K  # else there is nothing to save
    path = hot_checkpoint.checkpoint_path(journal.name)
    cp = hot_checkpoint.decode(log.store.read(path), path, journal.name)
    assert entries - cp.end < K and cp.floor == 0
    expected = {p: [f"r{r}-{p}".encode() for r in range(rounds)] for p in range(PARTITIONS)}

    reader, counting = _fresh(store)
    assert _values(reader, 0) == expected[0]
    # a partition's first read: the checkpoint, the entries after it and the one GET
    # that finds the end
    assert counting.calls["read checkpoint"] == 1
    assert counting.calls["read entry"] == entries - cp.end + 1
    assert counting.calls["read checkpoint"] + counting.calls["read entry"] <= K + 1
    assert counting.calls["list hot"] == 0
    # the others share both (this process parsed them): each asks for the end again
    for p in range(1, PARTITIONS):
        assert _values(reader, p) == expected[p]
    assert counting.calls["read checkpoint"] == 1
    assert counting.calls["read entry"] == entries - cp.end + PARTITIONS
    assert reader.journals.stats["checkpoint_merges"] == PARTITIONS

    older, counting = _fresh(store, checkpoints=False)  # what it saves
    assert _values(older, 0) == expected[0]
    assert counting.calls["read entry"] == entries + 1
    assert counting.calls["read checkpoint"] == 0


def test_the_checkpoint_merges_every_version_as_the_entries_do_seals_included(hot, store):
    log, journal, writers = hot
    for r in range(4):
        _round(writers, f"r{r}")
    # partition 1 is claimed away (a seal in the journal), the others go on
    log.partition("t", 1).claim("gw-b")
    for r in range(4, 8):
        _round(writers, f"r{r}", only=(0, 2))
    journal.close()  # then one that covers every entry (the thread may have written it)
    journal.checkpoints.write(force=True)
    path = hot_checkpoint.checkpoint_path(journal.name)
    cp = hot_checkpoint.decode(log.store.read(path), path, journal.name)
    assert cp.end == journal.next_seq and len(cp.seals) == 1
    walker, _ = _fresh(store, checkpoints=False)
    tried = stopped = 0
    for p in range(PARTITIONS):
        plog = walker.partition("t", p)
        topic_id = plog.versions.topic_id
        newest = plog.versions.cold_snapshot().version
        # every _log version that follows the journal, as a reader holding it merges it
        for v in range(newest + 1):
            try:
                cold = plog.versions.load(v)
            except FileNotFoundError:
                continue
            if cold.hot_journal != journal.name:
                continue
            got = cp.merge(cold, topic_id)
            if got is None:
                continue
            tried += 1
            stopped += got[2]
            walked = hot_state.merge(cold, walker.journals, topic_id)
            merged, seq, was_stopped = got
            if not was_stopped:  # the entries after the checkpoint (none here)
                merged = hot_state.merge(cold, walker.journals, topic_id, start=merged)
            assert merged == walked
    assert tried >= PARTITIONS and stopped >= 1
    # and whole reads through the checkpoint
    reader, _ = _fresh(store)
    assert _values(reader, 1) == [f"r{r}-1".encode() for r in range(4)]
    assert _values(reader, 2) == [f"r{r}-2".encode() for r in range(8)]


def test_older_readers_never_take_the_checkpoint_for_an_entry_or_an_object():
    path = hot_checkpoint.checkpoint_path("gw-a-0123456789abcdef")
    assert paths.hot_entry_seq(hot_checkpoint.NAME) is None
    assert not paths.is_hot_object(path) and not paths.is_segment_file(path)


def _corrupt_cases(data: bytes) -> list[tuple[str, bytes]]:
    rng = random.Random(30)
    cases = [("empty", b""), ("truncated", data[: len(data) // 2]),
             ("garbage", bytes(rng.randrange(256) for _ in range(4096))),
             ("no checksum", data.rpartition(b"\n")[0])]
    for i in range(40):  # bytes flipped, checksum left alone
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        cases.append((f"flip {i}", bytes(b)))
    return cases


def _resealed(lines: list[bytes]) -> bytes:
    body = b"\n".join(lines)
    return body + b"\n%08x" % zlib.crc32(body)


def _hostile_cases(data: bytes, other_journal: str) -> list[tuple[str, bytes]]:
    """Checkpoints whose checksum is right but whose content does not add up."""
    lines = data.rpartition(b"\n")[0].split(b"\n")
    header = json.loads(lines[0])
    out = []

    def with_header(name, change):
        h = json.loads(lines[0])
        change(h)
        out.append((name, _resealed([json.dumps(h).encode(), *lines[1:]])))

    with_header("another journal", lambda h: h.update(journal=other_journal))
    with_header("format 2", lambda h: h.update(format=2))
    with_header("floor past end", lambda h: h.update(floor=h["end"] + 1))
    with_header("an end past the journal's", lambda h: h.update(end=h["end"] + 1000))
    with_header("a row past end", lambda h: h["streams"][0][4].append([h["end"], 1, 9, 0]))
    with_header("rows backwards", lambda h: h["streams"][0][4].reverse())
    with_header("a row's segments off by one",
                lambda h: h["streams"][0][4][-1].__setitem__(1, h["streams"][0][4][-1][1] + 1))
    with_header("a row's count a string",
                lambda h: h["streams"][0][4][0].__setitem__(1, "1"))
    with_header("streams swapped", lambda h: h["streams"].reverse())
    with_header("a stream twice", lambda h: h["streams"].append(h["streams"][0]))
    with_header("a seal row short", lambda h: h["seals"].append(["t", "x", 0]))
    with_header("a negative partition", lambda h: h["streams"][0].__setitem__(2, -1))
    out.append(("a line missing", _resealed(lines[:-1])))
    out.append(("a line of another journal's object",
                _resealed([lines[0], *(ln.replace(b"_hot/gw-a", b"_hot/gw-z") for ln in
                                       lines[1:])])))
    # the first segment of a stream moved: its rows' offsets no longer follow
    line = json.loads(lines[1])
    line["segments"]["base_offset"][0] += 1
    out.append(("a segment not where the partition was",
                _resealed([lines[0], json.dumps(line).encode(), *lines[2:]])))
    assert len(header["streams"]) == PARTITIONS
    return out


def test_a_damaged_or_hostile_checkpoint_is_refused_and_the_entries_are_read(hot, store):
    log, journal, writers = hot
    rounds = 3 * K
    for r in range(rounds):
        _round(writers, f"r{r}")
    journal.close()
    path = hot_checkpoint.checkpoint_path(journal.name)
    good = log.store.read(path)
    expected = {p: [f"r{r}-{p}".encode() for r in range(rounds)] for p in range(PARTITIONS)}
    other = journal.name[:-1] + ("0" if journal.name[-1] != "0" else "1")
    cases = _corrupt_cases(good) + _hostile_cases(good, other)
    # on the slow stores, a few of each kind (every case runs on the memory and file ones)
    if store[0].startswith(("s3", "hdfs", "webhdfs")):
        cases = cases[:4] + cases[-6:]
    refused = 0
    for name, bad in cases:
        try:
            cp = hot_checkpoint.decode(bad, path, journal.name)
        except CorruptHotCheckpoint:
            refused += 1
        else:  # parsed: refused when read (its end) or when a partition's merge uses it
            log.store.put_replace(path, bad)
            if hot_checkpoint.cached(Log(log.store).journals, journal.name, 0) is not None:
                with pytest.raises(CorruptHotEntry):
                    for p in range(PARTITIONS):
                        plog = log.partition("t", p)
                        cp.merge(plog.versions.cold_snapshot(), plog.versions.topic_id)
                    raise AssertionError(f"{name}: taken")
        log.store.put_replace(path, bad)
        reader, counting = _fresh(store)
        assert {p: _values(reader, p) for p in range(PARTITIONS)} == expected, name
        assert reader.journals.stats["corrupt_checkpoints"] >= 1, name
        # every entry, and each partition's GET that finds the end
        assert counting.calls["read entry"] == journal.next_seq + PARTITIONS, name
    # every damaged one (and most hostile ones) is refused by its parse already
    assert refused >= len(cases) - 5


def test_the_checkpoint_drops_what_the_sweeper_deleted_and_goes_with_its_journal(hot, store):
    log, journal, writers = hot
    for r in range(2 * K):
        _round(writers, f"r{r}")
    now = wall_clock_ms()
    for p in range(PARTITIONS):
        rollup_partition(log.partition("t", p), log.topic("t").config, now)
    later = wall_clock_ms() + 10 * MIN_DELAY_MS
    for p in range(PARTITIONS):
        log.partition("t", p).vacuum(now_ms=later, delay_ms=0)
    sweep(log, now_ms=later, delay_ms=0)
    rolled_up = min(log.partition("t", p).versions.cold_snapshot().hot_from
                    for p in range(PARTITIONS))
    assert rolled_up > 0 and not log.store.exists(paths.hot_entry_path(journal.name, 0))
    for r in range(2 * K, 3 * K):
        _round(writers, f"r{r}")
    journal.close()  # then one that covers every entry (the thread may have written it)
    journal.checkpoints.write(force=True)
    path = hot_checkpoint.checkpoint_path(journal.name)
    cp = hot_checkpoint.decode(log.store.read(path), path, journal.name)
    assert cp.end == journal.next_seq
    assert cp.floor >= rolled_up - 1 and cp.floor > 0
    assert all(r[0] >= cp.floor for s in cp.streams.values() for r in s.rows)
    reader, counting = _fresh(store)
    for p in range(PARTITIONS):
        assert _values(reader, p) == [f"r{r}-{p}".encode() for r in range(3 * K)]
    assert counting.calls["read entry"] == journal.next_seq - cp.end + PARTITIONS
    assert reader.journals.stats["checkpoint_merges"] == PARTITIONS
    # every partition goes cold elsewhere and is rolled up: no one follows the journal
    for p in range(PARTITIONS):
        log.partition("t", p).claim("gw-b")
        rollup_partition(log.partition("t", p), log.topic("t").config, wall_clock_ms())
    assert log.store.exists(path)
    sweep(log, now_ms=wall_clock_ms() + 10 * MIN_DELAY_MS, delay_ms=0)
    assert not log.store.exists(path)


def test_a_writer_that_cannot_read_an_entry_it_lost_writes_no_checkpoint_past_it():
    b = hot_checkpoint.Builder("gw-a-0123456789abcdef")
    b.fold(0, None, 100)
    assert b.broken and not b.due(1)
    b = hot_checkpoint.Builder("gw-a-0123456789abcdef")
    b.fold(1, None, 100)  # not the next entry: no checkpoint may skip one
    assert b.broken


def test_a_checkpoint_over_its_segment_cap_drops_its_oldest_rows_and_readers_still_read_all(
        hot, store, monkeypatch):
    log, journal, writers = hot
    monkeypatch.setattr(hot_checkpoint, "MAX_SEGMENTS", 10)
    for r in range(2 * K):
        _round(writers, f"r{r}")
    journal.close()
    journal.checkpoints.write(force=True)
    path = hot_checkpoint.checkpoint_path(journal.name)
    cp = hot_checkpoint.decode(log.store.read(path), path, journal.name)
    assert cp.floor > 0 and cp.end == journal.next_seq
    assert sum(r[1] for s in cp.streams.values() for r in s.rows) <= 10
    # readers from before the floor (every partition's hot_from is 0) read the entries
    reader, counting = _fresh(store)
    for p in range(PARTITIONS):
        assert _values(reader, p) == [f"r{r}-{p}".encode() for r in range(2 * K)]
    assert reader.journals.stats["checkpoint_merges"] == 0
    assert counting.calls["read entry"] >= journal.next_seq


def test_a_checkpoint_waits_until_the_entries_since_are_worth_a_quarter_of_it():
    b = hot_checkpoint.Builder("gw-a-0123456789abcdef")
    b.last_bytes = 4000
    b.entries_since, b.bytes_since = K, 999
    assert not b.due(K)  # 999 B of entries would cost a 4,000 B checkpoint
    b.bytes_since = 1000
    assert b.due(K) and not b.due(K + 1) and not b.due(0)


def test_a_temp_file_a_killed_write_left_in_a_journal_folder_is_swept_once_old(hot):
    log, journal, writers = hot
    _round(writers, "r0")
    left = f"{paths.journal_folder(journal.name)}/.tmp-0123456789abcdef"
    log.store.put_new(left, b"half a checkpoint")
    sweep(log, now_ms=wall_clock_ms(), delay_ms=0)
    assert log.store.exists(left)  # young: perhaps a write under way
    sweep(log, now_ms=wall_clock_ms() + 10 * MIN_DELAY_MS, delay_ms=0)
    assert not log.store.exists(left)
    assert _values(log, 0) == [b"r0-0"]
