"""Partition manifests: the commit log of one partition's segment set.

A manifest version is a **snapshot** (whole, or a delta: below) stored as
``<topic>/<partition>/_log/<version:020d>-<topic_id>.json`` (see ``paths``). The
file is this JSON text, or -- for an append -- the appended segment itself,
carrying the JSON in a trailer (``segment.trailer``), so an append creates one
file, not two: on a local store one file with two names, the segment's and the
version's (``store.linked_file``); elsewhere under the version's name alone,
which the manifest then names as the segment's file (``_log/<name>``, see
``segment_commit.CarriedAppend``). The name ends in ``.json`` either way:
every kind of commit must race for the same name, or two could win a version::

    {"format": 1, "version": 7, "leader_epoch": 2, "leader": "gateway-1",
     "log_start_offset": 0, "next_offset": 4000,          # next_offset = high watermark
     "segments": {"file": [...], "base_offset": [...], "last_offset": [...],
                  "count": [...], "bytes": [...], "min_ts": [...], "max_ts": [...],
                  "crc32": [...]},                         # columnar: cheap to encode
     "removed": {"file": [...], "at_ms": [...]},          # superseded, not yet deleted
     "producers": {"<producer_id>": {"epoch": 0,
                   "batches": [[first_seq, last_seq, base_offset, last_offset], ...]}},
     "committer": "append", "committed_ms": 1763700000000,
     "cleaned_offset": 0,                                 # optional, default 0
     "epochs": [[1, 0], [2, 4000]]}    # optional: leader epoch, first offset (leader_epochs)

**Deltas.** An append between checkpoints is stored as a delta of the version
before it: ``"format": 2``, ``"delta_of": N-1`` and, under ``segments``, only the
segments it adds (every other field whole, as above). The format number differs
so that a reader that predates deltas refuses one rather than misread it. So an
append's JSON costs O(1) in the segments of the log, not O(segments): at 20,000
segments a whole manifest is
~2 MB. Every version that is a multiple of ``CHECKPOINT_INTERVAL`` is whole, and
so is every commit that is not an append (a claim, maintenance, vacuum), so a
reader applies at most ``CHECKPOINT_INTERVAL - 1`` deltas to a whole version
(usually one, to the snapshot it holds), and vacuum keeps the versions the
newest is read from (Delta Lake's log has the same shape: JSON commits and
periodic checkpoints).

``cleaned_offset`` is the log cleaner's checkpoint (Kafka's
``cleaner-offset-checkpoint``): offsets below it have been compacted, so the
compaction job can tell the clean head of the log from its dirty tail.
Appends carry it over unchanged; only a maintenance commit moves it forward.

Segments are sorted by offset and do not overlap; ``base_offset`` is the first
offset a segment covers and may lie before its first record after compaction
(gaps are expected there). Version N+1 is created *exclusively* (see
``store.put_exclusive``): exactly one writer wins each version; the loser
re-reads and is fenced (higher ``leader_epoch``) or rebases (maintenance only).

``removed`` lists files that a commit stopped naming, with the time it did, so
the retention job deletes them only after ``file.delete.delay.ms`` and a reader
holding an older snapshot never meets a missing file. ``producers`` keeps the
last five batches of each idempotent producer, so a retried batch is answered
with its original offsets even after a gateway restart (the rules that read and
extend it: ``idempotence``).

**Transactions** (Kafka's model, KIP-98; the coordinator is ``transactions``). A
transactional producer's records go into the partition at once, as segments of
their own: a segment never mixes them with other producers' records, so what a
transaction wrote is a set of offset ranges of one producer. A transaction ends
with a **control marker** in each partition it touched: a one-record segment
(COMMIT or ABORT, Kafka's control record: key = int16 version 0, int16 type 0
abort / 1 commit; value = int16 version 0, int32 coordinator epoch) that takes one
offset, as in Kafka, and is never returned to any reader. A manifest of a log
that has ever held a transactional segment is in ``"format": 3`` (whole) or
``4`` (a delta; the same rules as format 2), so a reader that predates
transactions refuses it rather than serve aborted records or markers; it adds::

     "segments": {..., "producer_id": [-1, 7, -1, ...],    # the transactional producer
                       "control": [0, 0, 1, ...]},          # 1 = a marker segment
     "open_txns": {"<producer_id>": first_offset},          # transactions not ended here
     "aborted": [[producer_id, first_offset, last_offset], ...]   # Kafka's .txnindex

``open_txns`` opens with a producer's first transactional segment and closes with
its marker; ``aborted`` gets ``[producer, first, marker offset]`` with each ABORT
marker (replacing that transaction's discarded ranges), and ``[producer, base,
last]`` of each segment discarded from an open transaction (``txn_discard``: a
retried Spark task's first attempt); a producer's ranges never overlap. The **last
stable offset** (LSO) is the first offset of the earliest open
transaction, else the high watermark. A ``read_committed`` reader reads below
the LSO only and drops every transactional segment inside an ``aborted`` range
of its producer; both isolation levels drop marker segments. A marker also sets
the producer's epoch in ``producers`` to the marker's (a bumped epoch forgets the
old epoch's batches): a zombie appending with an older epoch is refused.

**The hot tier** (``hot_journal``, ``hot_state``). A gateway in hot mode commits no
version here on append: each flush is one shared object and one journal entry for every
partition it writes, holding each partition's next version as a delta. A claim points
the partition at its writer's journal; from then on the partition is this folder's
newest version plus the journal's entries for it at its leader epoch. A manifest that
has held hot segments or points at a journal is in ``"format": 5`` (whole) or ``6`` (a
delta, in a journal entry), so a reader that predates the hot tier refuses it; it
always has the transactional columns and adds::

     "segments": {..., "position": [0, 0, 18432, ...]},   # byte offset in a shared object
     "hot": {"journal": "gw-0-1a2b3c", "from": 17},       # or null: follow no journal
     "transactional": false                               # the log has held transactions

A hot segment's ``file`` is the shared object's path from the store's root and its
bytes are ``[position, position + bytes)`` of it. ``from`` is the first journal entry
not merged into this version, so a commit here built on the merged state (a claim,
maintenance) takes every entry before it along.

What maintenance (compaction, retention, roll-up: other packages) keeps, and
where: a rewritten segment holds one kind of records -- non-transactional, one
producer's one transaction, or one marker -- and takes its flags from the
segments its records came from; one that would change whether its records read
as aborted is refused (``txn_maintenance``, in ``replace_segments``). Roll-up
merges runs of one kind only, never a marker, never an open transaction's
segments (``txn_discard`` names them), never discarded with kept ones. The
cleaner stops at the LSO, removes aborted records, dedups committed ones like
any record, and keeps a marker while any record of its transaction is in the
log, then like a tombstone until ``delete.retention.ms`` (``compaction.txn_rules``).
An ``aborted`` entry goes with the last record of its range (by a maintenance
commit: retention, or the cleaner removing aborted records); retention drops
whole segments, so an aborted range cut by the log start still hides the rest.
A marker segment's span may be wider than its one offset where it is the first or
last segment of a rewrite (it takes the removed offsets around it).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from typing import Any

from log_layout import leader_epochs, paths, segment
from log_layout.errors import CorruptManifest
from log_layout.manifest_columns import (COLUMN_OPEN, HOT_FIELDS, NO_PRODUCER, SEGMENT_FIELDS,
                                         TXN_FIELDS, aborted_entry, checked_int,
                                         columns_text, ints, with_positions,
                                         with_txn_columns)

FORMAT = 1  # a whole version
DELTA_FORMAT = 2  # a delta of the version before
TXN_FORMAT = 3  # a whole version of a log that has held transactions
TXN_DELTA_FORMAT = 4  # a delta of such a log
HOT_FORMAT = 5  # a whole version of a log that has held hot segments or follows a journal
HOT_DELTA_FORMAT = 6  # a delta of such a log (a journal entry's)
#: every version that is a multiple of this is whole; an append between them is a delta
CHECKPOINT_INTERVAL = 16
PRODUCER_BATCHES_KEPT = 5  # Kafka keeps the last 5 batches per producer, too


@dataclasses.dataclass(frozen=True)
class SegmentInfo:
    """One segment file as a manifest names it (picklable: Spark tasks carry it)."""

    file: str
    base_offset: int
    last_offset: int
    count: int
    bytes: int
    min_ts: int
    max_ts: int
    crc32: int
    #: the transactional producer whose records these are (NO_PRODUCER: none)
    producer_id: int = NO_PRODUCER
    #: a control marker's segment (one offset, never returned to a reader)
    control: bool = False
    #: where the segment starts in its file (non-zero only in a shared hot object)
    position: int = 0

    @property
    def end_offset(self) -> int:
        """One past the last offset this segment covers."""
        return self.last_offset + 1


@dataclasses.dataclass(frozen=True)
class ProducerBatch:
    """An idempotent producer's batch: ``count`` records from ``first_sequence``."""

    producer_id: int
    producer_epoch: int
    first_sequence: int
    count: int

    @property
    def last_sequence(self) -> int:
        return self.first_sequence + self.count - 1


@dataclasses.dataclass(frozen=True)
class ProducerEntry:
    epoch: int
    #: (first_seq, last_seq, base_offset, last_offset), oldest first
    batches: tuple[tuple[int, int, int, int], ...]

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


@dataclasses.dataclass(frozen=True)
class Manifest:
    """An immutable snapshot of one partition."""

    topic: str
    partition: int
    version: int
    leader_epoch: int = 0
    leader: str | None = None
    log_start_offset: int = 0
    next_offset: int = 0
    segments: tuple[SegmentInfo, ...] = ()
    removed: tuple[tuple[str, int], ...] = ()
    producers: dict[int, ProducerEntry] = dataclasses.field(default_factory=dict)
    committer: str = "create"
    committed_ms: int = 0
    #: the log cleaner's checkpoint: offsets below it are compacted (0 = never cleaned)
    cleaned_offset: int = 0
    #: transactional producer id -> first offset of its transaction open here
    open_txns: dict[int, int] = dataclasses.field(default_factory=dict)
    #: (producer_id, first_offset, last_offset) of aborted transactions, oldest first
    aborted: tuple[tuple[int, int, int], ...] = ()
    #: the log has held transactional segments: stored in the TXN formats
    transactional: bool = False
    #: (leader epoch, its first offset), oldest first: see leader_epochs
    epochs: tuple[tuple[int, int], ...] = ()
    #: the log has held hot segments or follows a journal: stored in the HOT formats
    hot: bool = False
    #: the journal whose entries at this leader epoch follow this version (None: none)
    hot_journal: str | None = None
    #: the first entry of ``hot_journal`` not merged into this version
    hot_from: int = 0

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into Spark tasks: the fields only, not the encoding caches.
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    # -- queries ---------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.next_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark:
        a read_committed reader reads below it only."""
        return min(self.open_txns.values(), default=self.next_offset)

    def is_aborted(self, info: SegmentInfo) -> bool:
        """Whether ``info`` holds records of an aborted transaction."""
        pid = info.producer_id
        if pid == NO_PRODUCER or not self.aborted:
            return False
        index = self.__dict__.get("_aborted_index")
        if index is None:  # producer -> its aborted ranges, by first offset (built once)
            index = {}
            for p, first, last in sorted(self.aborted):
                index.setdefault(p, ([], []))
                index[p][0].append(first)
                index[p][1].append(last)
            object.__setattr__(self, "_aborted_index", index)
        ranges = index.get(pid)
        if ranges is None:
            return False
        i = bisect.bisect_right(ranges[0], info.base_offset) - 1
        return i >= 0 and info.base_offset <= ranges[1][i]

    @property
    def size_bytes(self) -> int:
        return sum(s.bytes for s in self.segments)

    @property
    def record_count(self) -> int:
        return sum(s.count for s in self.segments)

    def segments_between(self, start: int, end: int) -> list[SegmentInfo]:
        """Segments holding any offset in ``[start, end)``, in offset order."""
        return [s for s in self.segments if s.last_offset >= start and s.base_offset < end]

    # -- changes (each returns a new snapshot for version + 1) -----------
    def next(self, **changes: Any) -> "Manifest":
        unknown = changes.keys() - _MANIFEST_FIELDS
        if unknown or "version" in changes:
            raise TypeError(f"Manifest.next() cannot change {sorted(unknown or {'version'})}")
        # dataclasses.replace, without its __init__ (a frozen one sets field by field):
        # every append makes one of these
        new = object.__new__(Manifest)
        fields = self.__dict__
        new.__dict__.update({f: fields[f] for f in _MANIFEST_FIELDS}, **changes,
                            version=self.version + 1)
        # The newest segment text encoded along this line of versions (a delta built
        # none): lets the next full encoding encode only the segments added since.
        encoded = self.__dict__.get("_segments_text") or self.__dict__.get("_parent_segments_text")
        if encoded is not None:
            object.__setattr__(new, "_parent_segments_text", encoded)
        return new

    def with_fields(self, **changes: Any) -> "Manifest":
        """This snapshot with ``changes``, at the same version (the hot tier's merge and
        its writers' trimmed states: not a commit)."""
        new = object.__new__(Manifest)
        new.__dict__.update({f: self.__dict__[f] for f in _MANIFEST_FIELDS}, **changes)
        return new

    def is_delta_of(self, parent: "Manifest") -> bool:
        """Whether this version only adds segments after ``parent``'s (the version
        before it), so it may be stored as a delta of it (see ``to_json``)."""
        k = len(parent.segments)
        return self.version == parent.version + 1 and len(self.segments) > k \
            and self.segments[:k] == parent.segments

    def on_top_of(self, parent: "Manifest", *, path: str) -> "Manifest":
        """This version, read as a delta of ``parent`` (its segments are only those it
        adds), as a whole snapshot. Raises CorruptManifest if ``parent`` is not the
        version before it or the added segments do not follow its own."""
        if parent.version != self.version - 1 or (parent.topic, parent.partition) != \
                (self.topic, self.partition):
            raise CorruptManifest(path, f"it is a delta of version {self.version - 1}, "
                                        f"not of {parent.topic}-{parent.partition} "
                                        f"version {parent.version}")
        if parent.segments and self.segments \
                and self.segments[0].base_offset <= parent.segments[-1].last_offset:
            raise CorruptManifest(path, "its segments overlap those of the version before")
        whole = object.__new__(Manifest)
        whole.__dict__.update({f: self.__dict__[f] for f in _MANIFEST_FIELDS},
                              segments=parent.segments + self.segments)
        return whole

    # -- encoding ----------------------------------------------------------
    def _segment_columns(self) -> tuple[str, ...]:
        """Each ``segments`` column as the JSON text between its brackets, built
        incrementally where possible.

        A whole version costs O(segments) to encode (~2 ms at 2,000 segments);
        between two of them appends only add segments, so the text of the last
        whole version along this line (see ``next``) is reused and only the
        segments added since are encoded.
        """
        cached = self.__dict__.get("_segments_text")
        if cached is None:
            segs = self.segments
            parent = self.__dict__.pop("_parent_segments_text", None)
            cols = None
            if parent is not None:
                psegs, pcols = parent
                k = len(psegs)
                if len(segs) >= k and segs[:k] == psegs:
                    extra = columns_text(segs[k:])
                    cols = tuple(a + "," + b if a and b else a or b for a, b in zip(pcols, extra))
            if cols is None:
                cols = columns_text(segs)
            cached = (segs, cols)
            object.__setattr__(self, "_segments_text", cached)
        return cached[1]

    def to_json(self, *, delta_of: "Manifest | None" = None) -> bytes:
        """The version's JSON: a whole snapshot, or with ``delta_of`` (the version
        before, see ``is_delta_of``) only the segments added since it. A delta costs
        O(1) in the segments of the log where a snapshot costs O(segments)."""
        doc = {
            "format": FORMAT, "topic": self.topic, "partition": self.partition,
            "version": self.version, "leader_epoch": self.leader_epoch, "leader": self.leader,
            "log_start_offset": self.log_start_offset, "next_offset": self.next_offset,
            "removed": {"file": [r[0] for r in self.removed],
                        "at_ms": [r[1] for r in self.removed]},
            "producers": {str(pid): {"epoch": e.epoch, "batches": e.batches}  # as lists (json)
                          for pid, e in self.producers.items()},
            "committer": self.committer, "committed_ms": self.committed_ms,
        }
        if self.cleaned_offset:  # absent = 0, so older manifests read the same
            doc["cleaned_offset"] = self.cleaned_offset
        if self.epochs:  # absent = no history (written before it was kept)
            doc["epochs"] = [list(pair) for pair in self.epochs]
        if delta_of is not None:
            doc["format"], doc["delta_of"] = DELTA_FORMAT, delta_of.version
            added = self.segments[len(delta_of.segments):]
            columns = columns_text(added)
        else:
            added = self.segments
            columns = self._segment_columns()
        extra: tuple[str, ...] = ()
        if self.hot:
            doc["format"] += 4  # 1 -> 5, 2 -> 6
            doc["hot"] = None if self.hot_journal is None else \
                {"journal": self.hot_journal, "from": self.hot_from}
            doc["transactional"] = self.transactional
            extra = HOT_FIELDS
        elif self.transactional:
            doc["format"] += 2  # 1 -> 3, 2 -> 4
            extra = TXN_FIELDS
        if extra:
            doc["open_txns"] = {str(pid): off for pid, off in self.open_txns.items()}
            doc["aborted"] = [list(a) for a in self.aborted]
            columns = (*columns, *(",".join(str(int(getattr(s, f))) for s in added)
                                   for f in extra))
        rest = json.dumps(doc, separators=(",", ":"))
        # One join: the segment columns are most of the text (they grow with the log).
        parts = ['{"segments":{']
        for i, text in enumerate(columns):
            parts += (COLUMN_OPEN[i] if i < len(COLUMN_OPEN) else
                      f',"{extra[i - len(COLUMN_OPEN)]}":[', text, "]")
        parts += ("},", rest[1:])
        return "".join(parts).encode()

    @classmethod
    def from_file(cls, data: bytes, *, path: str) -> tuple["Manifest", int | None]:
        """Parse a manifest version file: JSON text, or the end of an append's segment
        that carries its manifest in a trailer (``segment.read_trailer``). Returns the
        manifest and, for a delta, the version it is a delta of (its segments are then
        only those it adds: see ``on_top_of``). Raises CorruptManifest naming the
        path and the problem."""
        try:
            carried = segment.read_trailer(data)
        except ValueError as e:
            raise CorruptManifest(path, f"it is a segment carrying a manifest, but {e}") from None
        return cls._parse(data if carried is None else carried, path=path)

    @classmethod
    def from_json(cls, data: bytes, *, path: str) -> "Manifest":
        """Parse a whole manifest; raises CorruptManifest naming the path and the
        problem (a delta, too: it is read through its partition, see ``from_file``)."""
        m, delta_of = cls._parse(data, path=path)
        if delta_of is not None:
            raise CorruptManifest(path, f"it is a delta of version {delta_of}, not a whole "
                                        f"manifest")
        return m

    @classmethod
    def _parse(cls, data: bytes, *, path: str) -> tuple["Manifest", int | None]:
        try:
            doc = json.loads(data)
            fmt = doc.get("format")
            if fmt not in (FORMAT, DELTA_FORMAT, TXN_FORMAT, TXN_DELTA_FORMAT, HOT_FORMAT,
                           HOT_DELTA_FORMAT):
                raise CorruptManifest(path, f"unknown format {fmt!r}")
            hot = fmt in (HOT_FORMAT, HOT_DELTA_FORMAT)
            txn = hot or fmt in (TXN_FORMAT, TXN_DELTA_FORMAT)
            cols = doc["segments"]
            n = len(cols["file"])
            if any(len(cols[f]) != n for f in SEGMENT_FIELDS + (
                    HOT_FIELDS if hot else TXN_FIELDS if txn else ())):
                raise CorruptManifest(path, "segment columns differ in length")
            files = cols["file"]
            bad = [f for f in (*files, *doc["removed"]["file"]) if not paths.is_segment_file(f)]
            if bad:
                raise CorruptManifest(path, f"names a file that is not a segment: {bad[0]!r}")
            # int() on every number: a manifest with a string where a count belongs is
            # refused here, not met later as a TypeError deep inside a read.
            numbers = [ints(cols[f]) for f in SEGMENT_FIELDS[1:]]
            segments = tuple(map(_segment_info, zip(files, *numbers)))
            open_txns: dict[int, int] = {}
            aborted: tuple[tuple[int, int, int], ...] = ()
            if txn:
                segments = with_txn_columns(segments, ints(cols["producer_id"]),
                                             ints(cols["control"]))
                open_txns = {int(pid): checked_int(off)
                             for pid, off in doc["open_txns"].items()}
                aborted = tuple(aborted_entry(a) for a in doc["aborted"])
            hot_journal, hot_from = None, 0
            if hot:
                segments = with_positions(segments, ints(cols["position"]))
                pointer = doc["hot"]
                if pointer is not None:
                    hot_journal = pointer["journal"]
                    hot_from = checked_int(pointer["from"])
                    paths.journal_folder(hot_journal)  # a name, not a path: ValueError
                    if hot_from < 0:
                        raise ValueError(f"hot.from must be >= 0, not {hot_from}")
                txn = doc["transactional"] is True
            removed = tuple(zip(doc["removed"]["file"],
                                map(checked_int, doc["removed"]["at_ms"])))
            producers = {int(pid): ProducerEntry(int(e["epoch"]), tuple(
                tuple(map(checked_int, b)) for b in e["batches"]))
                         for pid, e in doc["producers"].items()}
            m = cls(topic=doc["topic"], partition=int(doc["partition"]),
                    version=int(doc["version"]), leader_epoch=int(doc["leader_epoch"]),
                    leader=doc.get("leader"), log_start_offset=int(doc["log_start_offset"]),
                    next_offset=int(doc["next_offset"]), segments=segments, removed=removed,
                    producers=producers, committer=doc.get("committer", ""),
                    committed_ms=int(doc.get("committed_ms", 0)),
                    cleaned_offset=int(doc.get("cleaned_offset", 0)),
                    open_txns=open_txns, aborted=aborted, transactional=txn,
                    epochs=leader_epochs.parse(doc["epochs"]) if "epochs" in doc else (),
                    hot=hot, hot_journal=hot_journal, hot_from=hot_from)
            is_delta = fmt in (DELTA_FORMAT, TXN_DELTA_FORMAT, HOT_DELTA_FORMAT)
            delta_of = doc.get("delta_of") if is_delta else None
            if is_delta and (type(delta_of) is not int or delta_of != m.version - 1):
                raise CorruptManifest(path, f"version {m.version} cannot be a delta of "
                                            f"{delta_of!r}")
            return m, delta_of
        except CorruptManifest:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptManifest(path, f"{type(e).__name__}: {e}") from None


_MANIFEST_FIELDS = frozenset(f.name for f in dataclasses.fields(Manifest))


def _segment_info(row: tuple) -> SegmentInfo:
    """SegmentInfo(*row) without the frozen dataclass's per-field ``object.__setattr__``
    (4x faster; parsing a manifest of 2,000 segments is mostly this). Fields are
    validated by the caller."""
    info = object.__new__(SegmentInfo)
    info.__dict__.update(zip(SEGMENT_FIELDS, row))
    return info
