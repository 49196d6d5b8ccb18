"""The hot tier's journals: one shared object per gateway flush, one entry per commit.

A gateway in hot mode (``gateway.hot.enable``) writes no per-partition file on the
produce path. It owns one **journal**, ``_hot/<journal>/`` (a name unique to the
process, ``paths.new_journal_name``), and each flush of every partition it leads is

1. one **shared object**, ``<seq>-<uniq>.wal``: the new segment of each partition in
   the flush, back to back, each a complete Arrow IPC file as ``segment`` specifies
   (so a reader of one partition fetches only its bytes, one ranged read);
2. one **entry**, ``<seq:020d>.json``, created exclusively at the journal's next
   sequence number once the object is stored. Creating it commits the whole flush:
   every partition's records become visible together, or (no entry) none of them.

Entries are numbered 0, 1, 2, ... without gaps (the writer commits them in order and
the next only after the last). An entry is lines of JSON::

    {"format": 1, "id": "<uniq>", "object": "_hot/<journal>/<seq>-<uniq>.wal" | null,
     "committed_ms": 1764000000000,
     "partitions": [["clicks", "<topic_id>", 3, 7], ...],   # topic, id, partition, epoch
     "seals": [["clicks", "<topic_id>", 5, 9], ...]}
    <the delta of partitions[0]'s next manifest version, manifest.py format 6>
    <the delta of partitions[1]'s ...>
    <the CRC-32 of every byte before this line's newline, 8 lowercase hex digits>

The checksum makes a damaged entry a CorruptHotEntry rather than other offsets; the
segments' bytes have theirs in the lines (as in ``_log``).

The journal's writer also keeps ``_hot/<journal>/checkpoint``, what its entries add up
to, so a new reader need not read them all (``hot_checkpoint``: its own format and
version marker; no entry's name, so readers of entries never take it for one).

A partition's line is the delta of its version after the writer's last one: the
segments it adds (in ``object``, by ``position`` and ``bytes``) and every other field
whole, as a delta in ``_log`` would be. ``object`` is null when no line adds a segment:
a seal, or a flush of versions that only move a producer's state (an epoch bump, a
transaction marker with nothing open in the partition); a line adding a segment outside
the entry's object is refused. A reader parses the first line and only the
lines of the partitions it reads.

**Seals** fence. A partition's ``_log`` version names the journal its leader writes
(``Manifest.hot_journal``, ``hot_from``); a claim by anyone else first appends an
entry with no object to that journal, sealing the partition at the new leader
epoch (:func:`seal`), then reads the journal up to the seal and commits its claim in
``_log``. The old writer's next commit races the seal for the same sequence number
and loses (exclusive create), reads the seal, and fails that partition's records
with :class:`Fenced` (``JournalWriter``); an entry after the seal is never read for
that partition, so nothing a frozen or partitioned-away writer uploads late is ever
served, and the new leader starts at exactly the offset after the last entry before
the seal.

**Garbage.** An object whose entry was never created (a crash between the two
steps) is named by nothing; one whose partitions have all been rolled up into
their own segments is named by no manifest. ``hot_sweep`` deletes both after
``file.delete.delay.ms``, and entries no partition reads from any more.
"""

from __future__ import annotations

import collections
import json
import threading
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from log_layout import paths
from log_layout.errors import CorruptManifest

FORMAT = 1
#: parsed entries kept per process for readers (an entry of 1,024 partitions is ~0.4 MB)
CACHE_BYTES = 64 << 20

Key = tuple[str, int]  # (topic, partition)


class CorruptHotEntry(CorruptManifest):
    """A journal entry that does not parse or names what it may not."""

    code = "corrupt_hot_entry"


class Entry:
    """One committed journal entry, parsed lazily: the header at once, a partition's
    manifest line when first asked for."""

    def __init__(self, path: str, header: dict[str, Any], lines: list[bytes]):
        self.path = path
        self.id: str = header["id"]
        self.object: str | None = header["object"]
        self.committed_ms: int = header["committed_ms"]
        #: (topic, partition) -> (topic id, leader epoch, line index)
        self.partitions: dict[Key, tuple[str, int, int]] = {}
        for i, (topic, topic_id, partition, epoch) in enumerate(header["partitions"]):
            self.partitions[(topic, partition)] = (topic_id, epoch, i)
        #: (topic, partition) -> (topic id, the leader epoch sealed at)
        self.seals: dict[Key, tuple[str, int]] = {
            (t, p): (tid, e) for t, tid, p, e in header["seals"]}
        self._lines = lines
        self._parsed: dict[Key, Any] = {}
        self.size = sum(map(len, lines)) + 256

    def record(self, key: Key, topic_id: str, epoch: int):
        """The delta manifest this entry commits for ``key`` at ``topic_id`` and leader
        ``epoch``, or None. Raises CorruptHotEntry for a line that does not parse or
        does not belong to that partition."""
        found = self.partitions.get(key)
        if found is None or found[0] != topic_id or found[1] != epoch:
            return None
        if key not in self._parsed:
            from log_layout.manifest import HOT_DELTA_FORMAT, Manifest

            try:
                m, delta_of = Manifest._parse(self._lines[found[2]], path=self.path)
            except CorruptManifest as e:
                raise CorruptHotEntry(self.path, e.reason) from None
            if (m.topic, m.partition) != key or delta_of is None or not m.hot:
                raise CorruptHotEntry(self.path, f"line {found[2] + 2} is not a delta of "
                                                 f"{key[0]}-{key[1]} in format "
                                                 f"{HOT_DELTA_FORMAT}")
            if any(s.file != self.object for s in m.segments):
                raise CorruptHotEntry(self.path, "a segment outside the entry's object")
            self._parsed[key] = m
        return self._parsed[key]


def encode_entry(entry_id: str, obj: str | None, committed_ms: int,
                 partitions: Iterable[tuple[str, str, int, int, bytes]],
                 seals: Iterable[tuple[str, str, int, int]] = ()) -> bytes:
    """An entry's bytes: ``partitions`` as (topic, topic id, partition, epoch, the
    version's delta JSON), ``seals`` as (topic, topic id, partition, epoch)."""
    parts = list(partitions)
    header = {"format": FORMAT, "id": entry_id, "object": obj, "committed_ms": committed_ms,
              "partitions": [[t, tid, p, e] for t, tid, p, e, _ in parts],
              "seals": [list(s) for s in seals]}
    body = b"\n".join([json.dumps(header, separators=(",", ":")).encode(),
                       *(line for *_, line in parts)])
    return body + b"\n%08x" % zlib.crc32(body)


def checked_lines(data: bytes, path: str, error: type[CorruptHotEntry]) -> list[bytes]:
    """The lines of a file whose last line is the CRC-32 of every byte before it (an
    entry's or a checkpoint's form); raises ``error`` if the checksum does not match."""
    body, _, crc = bytes(data).rpartition(b"\n")
    if len(crc) != 8 or crc != b"%08x" % zlib.crc32(body):
        raise error(path, "its checksum does not match its bytes")
    return body.split(b"\n")


def decode_entry(data: bytes, path: str) -> Entry:
    """Parse an entry's header (lines are parsed when read); raises CorruptHotEntry
    naming what is wrong."""
    lines = checked_lines(data, path, CorruptHotEntry)
    try:
        header = json.loads(lines[0])
        if type(header) is not dict or header.get("format") != FORMAT:
            found = header.get("format") if type(header) is dict else header
            raise ValueError(f"unknown format {found!r}")
        if type(header.get("id")) is not str or type(header.get("committed_ms")) is not int:
            raise ValueError("id must be a string and committed_ms an integer")
        obj = header.get("object")
        if obj is not None and not paths.is_hot_object(obj):
            raise ValueError(f"object {obj!r} is not a hot object's path")
        for name, row_len in (("partitions", 4), ("seals", 4)):
            rows = header.get(name)
            if type(rows) is not list or not all(
                    type(r) is list and len(r) == row_len and type(r[0]) is str
                    and type(r[1]) is str and type(r[2]) is int and type(r[3]) is int
                    and r[2] >= 0 for r in rows):
                raise ValueError(f"{name} must be [topic, topic_id, partition, epoch] rows")
        if len(lines) != len(header["partitions"]) + 1:
            raise ValueError(f"{len(header['partitions'])} partitions but "
                             f"{len(lines) - 1} manifest lines")
        if len({(r[0], r[2]) for r in header["partitions"]}) != len(header["partitions"]):
            raise ValueError("a partition twice")
        return Entry(path, header, lines[1:])
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CorruptHotEntry(path, f"{type(e).__name__}: {e}") from None


class _Parsed:
    """Parsed entries by (path, bytes), shared by every ``Journals`` of the process
    (bounded by ``CACHE_BYTES``, least recently used out). An Entry depends on nothing
    but its path and bytes, so a reader that GETs bytes equal to ones parsed before
    (by another Log of this process, or the writer's commit) takes that parse: the
    bytes are still read and compared whole, and other bytes are parsed again. One
    exception to "parsed": an entry this process committed carries the writer's own
    delta manifests (``Journals.commit``), so this process's readers take those, as
    the writer's own Log always did, rather than re-parse lines it wrote itself."""

    def __init__(self, limit: int):
        self._entries: collections.OrderedDict[tuple[str, bytes], Entry] = \
            collections.OrderedDict()
        self._bytes, self._limit = 0, limit
        self._lock = threading.Lock()

    def get(self, path: str, data: bytes) -> Entry | None:
        with self._lock:
            hit = self._entries.get((path, data))
            if hit is not None:
                self._entries.move_to_end((path, data))
            return hit

    def put(self, path: str, data: bytes, entry: Entry) -> None:
        with self._lock:
            if (path, data) in self._entries:
                return
            self._entries[(path, data)] = entry
            self._bytes += entry.size + len(data)
            while self._bytes > self._limit and self._entries:
                (_, old_data), old = self._entries.popitem(last=False)
                self._bytes -= old.size + len(old_data)


_PARSED = _Parsed(CACHE_BYTES)


def parsed_entry(data: bytes, path: str) -> Entry:
    """``decode_entry``, once per process for equal bytes at ``path`` (a new reader of
    a hot partition would otherwise parse every entry since the last roll-up again:
    ~30% of a direct consumer's time on a fresh Log, measured 2026-11-29). Raises
    CorruptHotEntry."""
    data = bytes(data)
    hit = _PARSED.get(path, data)
    if hit is not None:
        return hit
    entry = decode_entry(data, path)
    _PARSED.put(path, data, entry)
    return entry


class Journals:
    """The journal entries one process has read or written, shared by all its readers
    (``Versions``): each entry is fetched once (one GET) and parsed once. Thread-safe."""

    def __init__(self, store: Any, cache_bytes: int = CACHE_BYTES):
        self.store = store
        self._cache: collections.OrderedDict[tuple[str, int], Entry] = collections.OrderedDict()
        self._bytes, self._limit = 0, cache_bytes
        self._lock = threading.Lock()
        #: journals this process writes: each entry it commits is remembered here, so
        #: its readers need not ask the store for the next one (see ``entry``)
        self.own: set[str] = set()
        self._own_end: dict[str, int] = {}  # own journal -> one past its newest entry known
        #: journal -> (when read, its checkpoint or None): ``hot_checkpoint.cached``'s
        self.checkpoints: dict[str, tuple[float, Any]] = {}
        self.checkpoints_lock = threading.Lock()
        #: counts for tests and metrics ("corrupt_checkpoints")
        self.stats: collections.Counter[str] = collections.Counter()

    def entry(self, journal: str, seq: int, *, refresh: bool = True,
              trust_own: bool = True) -> Entry | None:
        """Entry ``seq`` of ``journal`` if it is committed; None if not (yet), or if it
        is not cached and ``refresh`` is False, or (``trust_own``) if the journal is
        this process's own: a seal another process appends to it is read by the
        journal's writer (``trust_own=False``), and readers of a sealed partition move
        to its claimant's journal through ``_log``. Raises CorruptHotEntry."""
        key = (journal, seq)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        if not refresh or (trust_own and journal in self.own
                           and seq >= self._own_end.get(journal, 0)):
            return None
        path = paths.hot_entry_path(journal, seq)
        try:
            data = self.store.read(path)
        except FileNotFoundError:
            return None
        entry = parsed_entry(data, path)
        self.remember(journal, seq, entry)
        return entry

    def remember(self, journal: str, seq: int, entry: Entry) -> None:
        """Cache ``entry``, committed as ``seq`` of ``journal`` (a writer's own, so
        its readers need no GET)."""
        with self._lock:
            if journal in self.own:
                self._own_end[journal] = max(self._own_end.get(journal, 0), seq + 1)
            if (journal, seq) in self._cache:
                return
            self._cache[(journal, seq)] = entry
            self._bytes += entry.size
            while self._bytes > self._limit and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.size

    def commit(self, journal: str, seq: int, data: bytes,
               deltas: Mapping[Key, Any] | None = None) -> bool:
        """Create entry ``seq`` exclusively; True if this call made it (then cached).
        ``deltas`` are the writer's own delta manifests of its lines, by partition:
        cached as parsed, so this process's readers of a partition parse none of them."""
        path = paths.hot_entry_path(journal, seq)
        if not self.store.put_exclusive(path, data):
            return False
        entry = decode_entry(data, path)
        if deltas:
            entry._parsed.update(deltas)
        self.remember(journal, seq, entry)
        _PARSED.put(path, bytes(data), entry)  # this process's other readers parse none
        return True

    def end(self, journal: str, start: int) -> int:
        """The first sequence number at or after ``start`` with no entry (reads them)."""
        seq = start
        while self.entry(journal, seq, trust_own=False) is not None:
            seq += 1
        return seq


def seal(journals: Journals, journal: str, topic: str, topic_id: str, partition: int,
         epoch: int, start: int, now_ms: int) -> int:
    """Seal ``topic``-``partition`` in ``journal`` at leader ``epoch``: an entry with no
    object at the journal's next sequence number (read from ``start``). Returns its
    sequence number: the partition's records in ``journal`` are those of the entries
    before it. The journal's writer loses that number to the seal and is fenced."""
    data = encode_entry(paths.unique_id(), None, now_ms, (),
                        [(topic, topic_id, partition, epoch)])
    seq = start
    while True:
        seq = journals.end(journal, seq)
        if journals.commit(journal, seq, data):
            return seq
