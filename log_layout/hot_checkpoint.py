"""A hot journal's checkpoint: what a new reader would rebuild by reading its entries.

(The journal's format is ``hot_journal``; the merge it stands for, ``hot_state``.)

A reader of a hot partition merges its ``_log`` version ``C`` with the journal's
entries from ``C.hot_from`` on, one GET each. Until a roll-up moves ``hot_from``
(every ``maintenance.interval.ms``) a new reader would read thousands of entries.
So the journal's writer keeps, like Kafka's KRaft snapshots of its metadata log (the
state at an offset, then the log after it), one **checkpoint** per journal::

    _hot/<journal>/checkpoint

replaced whole (``Store.put_replace``: atomic on every store, so a writer killed
while writing it leaves the one before or none) once ``gateway.hot.checkpoint.
interval.entries`` entries were committed since the last, and their bytes are at
least 1/:data:`BYTES_RATIO` of the last checkpoint's (so checkpoints cost at most
about :data:`BYTES_RATIO` times the journal's entry bytes). A new reader reads it
(one GET, shared by every partition of the journal in the process) and then only
the entries from its ``end`` on.

Its lines, like an entry's::

    {"format": 1, "kind": "hot_checkpoint", "journal": "<journal>", "floor": F, "end": N,
     "seals": [["clicks", "<topic_id>", 5, 9, <seq>], ...],
     "streams": [["clicks", "<topic_id>", 3, 7, [[<seq>, <segments>, <next_offset>,
                                                  <log_start_offset>], ...]], ...]}
    <stream 0: a hot delta manifest (manifest.py format 6), the last line the journal
     has for it, holding every segment its rows added, in order>
    <stream 1 ...>
    <the CRC-32 of every byte before this line's newline, 8 lowercase hex digits>

It stands for entries ``F`` to ``N - 1``: every seal in them (topic, id, partition,
the epoch sealed at, the entry's number) and, for each partition's lines at one topic
id and leader epoch (a **stream**), one row per entry with a line: its number, how
many segments it added, and the partition's next offset and log start offset after
it. ``format`` and ``kind`` are its version marker: a reader takes only format 1 (any
other is refused, and the entries read). Older sparklogs never read the file (it is
no entry: ``paths.hot_entry_seq`` does not match it); their sweeper leaves it.

A reader at ``hot_from`` = ``h`` takes it only when ``F <= h < N`` (else it reads the
entries, as before). The merge is the entries' merge, done from the rows: the rows
from ``h`` on, stopped at the first seal at or after ``h`` that seals the partition at
a higher epoch (then ``hot_from`` is that seal's number, as ``hot_state.merge`` would
make it); the segments those rows added (the last ones of the line), each row's first
segment checked to start at the offset the one before left; fields from the line
(the partition's newest state), the log start offset the largest of the rows'. A
stream with a row at or after its stopping seal (no writer makes one: a sealed
writer is fenced) is read from the entries.

**Verified, never trusted blindly.** A checkpoint that does not parse, fails its
CRC, names another journal, ends with an entry that is not there, or whose rows,
seals or segments do not add up is :class:`CorruptHotCheckpoint`; ``hot_state.merge``
then reads the entries instead (it only saves reads: the entries are the truth, and
a reader never gets a record from a checkpoint it could not get from them). **Fenced**: it is a function of
committed entries, which never change, so a fenced or frozen writer's checkpoint
is still right about them; it holds nothing from an entry after ``N``, so the
seals after it are read from the entries. (The CRC finds damage, not forgery: the
store is trusted with checkpoints as it is with entries.)

**Bounded.** ``F`` is the oldest entry the sweeper left (``hot_sweep`` deletes the
entries before every partition's ``hot_from`` once rolled up): rows before it are
dropped, and a checkpoint holds at most :data:`MAX_SEGMENTS` segments (``F`` moves
up first). ``hot_sweep`` deletes it with its journal.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from log_layout import paths
from log_layout.errors import CorruptManifest
from log_layout.hot_journal import CorruptHotEntry, Entry, checked_lines
from log_layout.manifest import HOT_DELTA_FORMAT, Manifest

FORMAT = 1
KIND = "hot_checkpoint"
#: a checkpoint's name inside its journal's folder
NAME = "checkpoint"
#: a checkpoint is written only once the entries since the last one are at least this
#: fraction of its bytes: checkpoints cost at most this many times the journal's bytes
BYTES_RATIO = 4
#: the most segments a checkpoint holds (~60 bytes each): the floor moves up first
MAX_SEGMENTS = 200_000
#: a process re-reads a journal's checkpoint at most this often (a cached one that
#: does not cover a reader's ``hot_from`` sends it to the entries meanwhile)
REREAD_S = 1.0

Key = tuple[str, int]
StreamKey = tuple[str, str, int, int]  # topic, topic id, partition, leader epoch


class CorruptHotCheckpoint(CorruptHotEntry):
    """A checkpoint that does not parse or does not add up (see the module docstring)."""

    code = "corrupt_hot_checkpoint"


def checkpoint_path(journal: str) -> str:
    """The checkpoint's path in ``journal``'s folder (ValueError for a bad name)."""
    return f"{paths.journal_folder(journal)}/{NAME}"


@dataclasses.dataclass
class Stream:
    """One stream's rows: (entry, segments added, next offset, log start offset)."""

    rows: list[tuple[int, int, int, int]]
    line: bytes | None = None  # as stored; parsed once, on first use
    delta: Manifest | None = None


class Checkpoint:
    """A parsed checkpoint (see the module docstring)."""

    def __init__(self, path: str, journal: str, floor: int, end: int,
                 seals: list[tuple[str, str, int, int, int]], streams: dict[StreamKey, Stream]):
        self.path, self.journal, self.floor, self.end = path, journal, floor, end
        self.seals, self.streams = seals, streams
        self._lock = threading.Lock()

    def covers(self, hot_from: int) -> bool:
        return self.floor <= hot_from < self.end

    def merge(self, cold: Manifest, topic_id: str) -> tuple[Manifest, int, bool] | None:
        """``cold`` merged with entries ``cold.hot_from`` to ``end - 1`` for its topic id
        and leader epoch: (the merge, the first entry not merged, whether a seal
        stopped it), as ``hot_state.merge`` would make it; None if this checkpoint does
        not cover ``cold`` (read the entries). Raises CorruptHotCheckpoint, also when
        a segment does not follow the partition's."""
        h = cold.hot_from
        if cold.hot_journal != self.journal or not self.covers(h):
            return None
        key = (cold.topic, topic_id, cold.partition, cold.leader_epoch)
        stop = next((seq for t, tid, p, e, seq in self.seals
                     if seq >= h and (t, tid, p) == key[:3] and e > cold.leader_epoch), None)
        stream = self.streams.get(key)
        rows = [] if stream is None else stream.rows
        if stop is not None and rows and rows[-1][0] >= stop:
            return None  # a line after its seal: only the entries say what a reader sees
        first = next((i for i, r in enumerate(rows) if r[0] >= h), len(rows))
        end = self.end if stop is None else stop
        if first == len(rows):
            return (cold if end == h else cold.with_fields(hot_from=end)), end, stop is not None
        delta = self._delta(key, stream)
        segments = delta.segments
        skip = sum(r[1] for r in rows[:first])
        expected, at, start = cold.next_offset, skip, cold.log_start_offset
        for _seq, n, next_offset, log_start in rows[first:]:
            if n and segments[at].base_offset != expected:
                raise CorruptHotCheckpoint(self.path, f"its segment of {cold.topic}-"
                                                      f"{cold.partition}"
                                                 f" starts at {segments[at].base_offset}, not "
                                                      f"at the partition's next offset "
                                                      f"{expected}")
            at += n
            expected, start = next_offset, max(start, log_start)
        merged = delta.with_fields(
            segments=cold.segments + segments[skip:], removed=cold.removed,
            version=cold.version, cleaned_offset=cold.cleaned_offset, log_start_offset=start,
            hot=True, hot_journal=cold.hot_journal, hot_from=end,
            aborted=tuple(a for a in delta.aborted if a[2] >= start))
        return merged, end, stop is not None

    def _delta(self, key: StreamKey, stream: Stream) -> Manifest:
        with self._lock:
            if stream.delta is None:
                try:
                    m, delta_of = Manifest._parse(stream.line, path=self.path)
                except CorruptManifest as e:
                    raise CorruptHotCheckpoint(self.path, e.reason) from None
                if (m.topic, m.partition) != (key[0], key[2]) or delta_of is None or not m.hot \
                        or m.leader_epoch != key[3] \
                        or len(m.segments) != sum(r[1] for r in stream.rows) \
                        or any(not s.file.startswith(paths.journal_folder(self.journal) + "/")
                               for s in m.segments):
                    raise CorruptHotCheckpoint(self.path, f"the line of {key[0]}-{key[2]} at "
                                                          f"epoch {key[3]} is not its rows' "
                                                          f"delta in format {HOT_DELTA_FORMAT}")
                stream.delta = m
            return stream.delta


def encode(journal: str, floor: int, end: int, seals: list[tuple[str, str, int, int, int]],
           streams: dict[StreamKey, tuple[list, Manifest]]) -> bytes:
    """A checkpoint's bytes: ``streams`` maps each stream to (its rows, its newest
    delta with every segment its rows added)."""
    order = sorted(streams)
    header = {"format": FORMAT, "kind": KIND, "journal": journal, "floor": floor, "end": end,
              "seals": [list(s) for s in seals],
              "streams": [[*k, [list(r) for r in streams[k][0]]] for k in order]}
    lines = [json.dumps(header, separators=(",", ":")).encode()]
    for k in order:
        m = streams[k][1]
        lines.append(m.to_json(delta_of=m.with_fields(version=m.version - 1, segments=())))
    body = b"\n".join(lines)
    return body + b"\n%08x" % zlib.crc32(body)


def _int(v: Any) -> bool:
    return type(v) is int and v >= 0


def decode(data: bytes, path: str, journal: str) -> Checkpoint:
    """Parse a checkpoint of ``journal`` (stream lines are parsed when used); raises
    CorruptHotCheckpoint naming what is wrong."""
    lines = checked_lines(data, path, CorruptHotCheckpoint)
    try:
        h = json.loads(lines[0])
        if type(h) is not dict or h.get("format") != FORMAT or h.get("kind") != KIND:
            raise ValueError(f"not a hot checkpoint of format {FORMAT}")
        if h.get("journal") != journal:
            raise ValueError(f"it is the checkpoint of {h.get('journal')!r}, not {journal!r}")
        floor, end = h.get("floor"), h.get("end")
        if not (_int(floor) and _int(end) and floor <= end):
            raise ValueError("floor and end must be integers, 0 <= floor <= end")
        seals, rows_of = h.get("seals"), h.get("streams")
        if type(seals) is not list or not all(
                type(s) is list and len(s) == 5 and type(s[0]) is str and type(s[1]) is str
                and _int(s[2]) and type(s[3]) is int and _int(s[4])
                and floor <= s[4] < end for s in seals):
            raise ValueError("seals must be [topic, topic_id, partition, epoch, entry] rows "
                             "of entries between floor and end")
        if [s[4] for s in seals] != sorted(s[4] for s in seals):
            raise ValueError("seals out of order")
        if type(rows_of) is not list or len(lines) != len(rows_of) + 1:
            raise ValueError("one line per stream")
        streams: dict[StreamKey, Stream] = {}
        for i, s in enumerate(rows_of):
            if not (type(s) is list and len(s) == 5 and type(s[0]) is str
                    and type(s[1]) is str and _int(s[2]) and type(s[3]) is int
                    and type(s[4]) is list and s[4]):
                raise ValueError("streams must be [topic, topic_id, partition, epoch, rows]")
            rows = []
            for r in s[4]:
                if not (type(r) is list and len(r) == 4 and all(map(_int, r))
                        and floor <= r[0] < end and (not rows or r[0] > rows[-1][0])):
                    raise ValueError("a row must be [entry, segments, next_offset, "
                                     "log_start_offset], entries rising between floor and end")
                rows.append(tuple(r))
            key = (s[0], s[1], s[2], s[3])
            if key in streams:
                raise ValueError("a stream twice")
            streams[key] = Stream(rows, lines[i + 1])
        return Checkpoint(path, journal, floor, end, [tuple(s) for s in seals], streams)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CorruptHotCheckpoint(path, f"{type(e).__name__}: {e}") from None


# -- reading ---------------------------------------------------------------------------
def cached(journals: Any, journal: str, hot_from: int,
           clock: Callable[[], float] = time.monotonic) -> Checkpoint | None:
    """``journal``'s checkpoint if it covers ``hot_from``: the one this process read
    last (``journals.checkpoints``), or read again if that does not cover it and was
    read over REREAD_S ago. None if there is none, it does not cover ``hot_from``, or
    it is corrupt (then the entries are read: see the module docstring)."""
    now = clock()
    with journals.checkpoints_lock:
        hit = journals.checkpoints.get(journal)
    if hit is not None and (hit[1] is not None and hit[1].covers(hot_from)
                            or now - hit[0] < REREAD_S):
        return hit[1] if hit[1] is not None and hit[1].covers(hot_from) else None
    path = checkpoint_path(journal)
    try:
        cp: Checkpoint | None = decode(journals.store.read(path), path, journal)
        # its last entry is there (one HEAD): an end past the journal's would hide the
        # entries between (the sweeper never deletes a journal's newest entries)
        if cp.end > cp.floor and not journals.store.exists(
                paths.hot_entry_path(journal, cp.end - 1)):
            raise CorruptHotCheckpoint(path, f"entry {cp.end - 1} it ends with is not there")
    except FileNotFoundError:
        cp = None
    except CorruptHotCheckpoint:
        cp = None
        journals.stats["corrupt_checkpoints"] += 1
    with journals.checkpoints_lock:
        journals.checkpoints[journal] = (now, cp)
    return cp if cp is not None and cp.covers(hot_from) else None


# -- writing ---------------------------------------------------------------------------
class Builder:
    """The journal writer's side: folds each entry, in order, into the state the next
    checkpoint writes. Not thread-safe by itself: ``fold`` is called from the journal's
    commit path (entries in order), ``snapshot`` under the same lock."""

    def __init__(self, journal: str):
        self.journal = journal
        self.floor = 0
        self.end = 0
        self.seals: list[tuple[str, str, int, int, int]] = []
        #: stream -> (rows, segments, the newest delta): lists only appended to (pruning
        #: builds new ones), so a snapshot holds references and lengths
        self.streams: dict[StreamKey, tuple[list, list, Manifest]] = {}
        self.segments = 0
        #: entry bytes committed since the last checkpoint was taken
        self.bytes_since = 0
        self.entries_since = 0
        self.last_bytes = 0
        #: an entry the writer could not read: no checkpoint covers it or anything after
        self.broken = False

    def fold(self, seq: int, entry: Entry | None, nbytes: int) -> None:
        """Entry ``seq`` (the next one) as committed; None if the writer cannot know it
        (then checkpoints stop). Raises CorruptHotEntry from a line that does not parse."""
        if self.broken or seq != self.end:
            self.broken = True
            return
        if entry is None:
            self.broken = True
            return
        for (t, p), (tid, e) in entry.seals.items():
            self.seals.append((t, tid, p, e, seq))
        for (t, p), (tid, e, _i) in entry.partitions.items():
            delta = entry.record((t, p), tid, e)
            if delta is None:
                continue
            key = (t, tid, p, e)
            rows, segs, _ = self.streams.get(key) or ([], [], None)
            rows.append((seq, len(delta.segments), delta.next_offset, delta.log_start_offset))
            segs.extend(delta.segments)
            self.segments += len(delta.segments)
            self.streams[key] = (rows, segs, delta)
        self.end = seq + 1
        self.entries_since += 1
        self.bytes_since += nbytes
        if self.segments > MAX_SEGMENTS:
            self._cap()

    def due(self, every: int) -> bool:
        return (not self.broken and every > 0 and self.entries_since >= every
                and self.bytes_since * BYTES_RATIO >= self.last_bytes)

    def prune(self, floor: int) -> None:
        """Drop what entries before ``floor`` added (they are swept)."""
        if floor <= self.floor:
            return
        self.floor = floor
        self.seals = [s for s in self.seals if s[4] >= floor]
        kept: dict[StreamKey, tuple[list, list, Manifest]] = {}
        total = 0
        for key, (rows, segs, delta) in self.streams.items():
            cut = next((i for i, r in enumerate(rows) if r[0] >= floor), len(rows))
            if cut == len(rows):
                continue
            drop = sum(r[1] for r in rows[:cut])
            kept[key] = (rows[cut:], segs[drop:], delta)
            total += len(segs) - drop
        self.streams, self.segments = kept, total

    def _cap(self) -> None:
        counts: dict[int, int] = {}
        for rows, _, _ in self.streams.values():
            for r in rows:
                counts[r[0]] = counts.get(r[0], 0) + r[1]
        left = self.segments
        for seq in sorted(counts):
            if left <= MAX_SEGMENTS // 2:
                self.prune(seq)
                return
            left -= counts[seq]
        self.prune(self.end)

    def snapshot(self) -> tuple[int, int, list, dict[StreamKey, tuple[list, Manifest]]]:
        """What the next checkpoint holds (cheap: references); resets ``due``."""
        streams = {k: (rows[:], delta.with_fields(segments=tuple(segs)))
                   for k, (rows, segs, delta) in self.streams.items()}
        self.entries_since = self.bytes_since = 0
        return self.floor, self.end, self.seals[:], streams


def oldest_entry(store: Any, journal: str, floor: int, end: int) -> int:
    """The oldest entry in ``floor``..``end - 1`` still stored, ``floor`` if it is (one
    ``exists``), else by bisection (the sweeper deletes the oldest first)."""
    if floor >= end or store.exists(paths.hot_entry_path(journal, floor)):
        return floor
    lo, hi = floor + 1, end - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if store.exists(paths.hot_entry_path(journal, mid)):
            hi = mid
        else:
            lo = mid + 1
    return lo


class CheckpointWriter:
    """A journal writer's checkpoint: :meth:`folded` takes each entry committed, in
    order; its own thread writes the checkpoint when due (so a PUT of it never delays
    an entry). ``every`` 0: never. Thread-safe."""

    def __init__(self, store: Any, journal: str, every: int, stats: Any):
        self.store, self.journal, self.every, self.stats = store, journal, every, stats
        self._builder = Builder(journal)
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closing = False
        self._thread = None
        if every > 0:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"hot-checkpoint-{journal}")
            self._thread.start()

    def folded(self, seq: int, entry: Entry | None, nbytes: int) -> None:
        """Entry ``seq`` is committed (the writer's or a seal; None: it could not be
        read, and no checkpoint covers it or anything after it)."""
        if self.every <= 0:
            return
        with self._lock:
            try:
                self._builder.fold(seq, entry, nbytes)
            except CorruptHotEntry:
                self._builder.broken = True  # a reader meets it in the entry
            due = self._builder.due(self.every)
        if due:
            self._wanted.set()

    def close(self) -> None:
        """Write what is due, then stop the thread."""
        self._closing = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            closing = self._closing
            try:
                self.write(force=False)
            except Exception:  # noqa: BLE001 -- readers read the entries meanwhile
                self.stats["checkpoint_failures"] += 1
            if closing:
                return

    def write(self, *, force: bool = False) -> bool:
        """Write the checkpoint if one is due (``force``: if anything was committed since
        the last); True if written. Raises the store's errors."""
        b = self._builder
        with self._lock:
            if b.broken or not (force and b.entries_since or b.due(self.every)):
                return False
            floor, end = b.floor, b.end
        floor = oldest_entry(self.store, self.journal, floor, end)
        with self._lock:
            b.prune(floor)
            snap = b.snapshot()
        data = encode(self.journal, *snap)
        self.store.put_replace(checkpoint_path(self.journal), data)
        with self._lock:
            b.last_bytes = len(data)
        self.stats["checkpoints"] += 1
        self.stats["checkpoint_bytes"] += len(data)
        return True
