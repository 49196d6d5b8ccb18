"""The transaction log: one versioned document per transactional id (Kafka's
``__transaction_state``), and the coordinator that moves it through its states.

**Format.** ``_transactions/<transactional_id>/<version:020d>.json``
(``paths.transaction_folder``; the id follows the topic-name rules), a
``versioned_doc``: every change creates the next version exclusively, so
concurrent callers race on one put-if-absent and **exactly one state transition
wins each version**; the loser re-reads the winner's state and decides again
(usually ProducerFenced or InvalidTxnState)::

    {"transactional_id": "etl-1", "producer_id": 5172063455912837641, "epoch": 3,
     "timeout_ms": 60000,             # transaction.timeout.ms
     "state": "Ongoing",              # Kafka's TransactionMetadata states, below
     "started_ms": 1763700000000,     # when the ongoing transaction began (-1: none)
     "updated_ms": 1763700000500,     # the last transition
     "partitions": [["clicks", 0], ["clicks", 3]],          # where its markers go
     "offsets": {"g": {"clicks": {"0": 42}}}}               # pending group offsets

**States** (Kafka's): ``Empty`` (after ``init_transactions``) -> ``Ongoing`` (first
``add_partitions``/``add_offsets``) -> ``PrepareCommit`` | ``PrepareAbort``
(``end_transaction``: **the commit point**) -> ``CompleteCommit`` |
``CompleteAbort`` -> ``Ongoing`` (the next transaction) ...

**Ending a transaction** (``end_transaction``, and ``recover`` for a crash):
1. Ongoing -> Prepare*: from here the outcome is decided and durable;
2. a COMMIT or ABORT marker in every partition of ``partitions``
   (``PartitionWriter.write_marker``, idempotent: a partition that has it already
   is left alone);
3. on commit, ``offsets`` merged into each group's document (``group_offsets``:
   other topics and partitions kept, a fresh ``write_id`` so the group's
   coordinator reloads it; writing the same offsets twice is harmless);
4. Prepare* -> Complete* (partitions and offsets cleared).
Step 3 reads, merges and replaces the group's document; it is not atomic against
the group's coordinator (the gateway) writing the same document at that moment:
the coordinator must reload a document whose ``write_id`` is not its own before
it writes (``group_offsets``), or route these commits through itself.
A crash before 1 leaves the transaction Ongoing: its records stay above the last
stable offset until ``init_transactions`` of its id or ``abort_expired`` aborts it.
A crash after 1 leaves Prepare*: ``recover`` (also run by ``init_transactions``
and ``abort_expired``) redoes 2-4, so a transaction ends whole, committed or
aborted, never half. Partitions are added (and persisted) **before** any record
is written to them, so the markers of 2 reach every partition the transaction
wrote.

**Transactions v2** (KIP-890; ``end_transaction(..., bump=True)``, Kafka's EndTxn v5):
the end moves the producer to the next epoch at its commit point (Prepare* at epoch
E+1, ``"bumped": true``, ``"ended": [producer_id, E, commit]``), the markers are
written at E+1 as *strict* markers (``txn_writes``: they end only records of older
epochs) and the producer gets E+1 back for its next transaction. So a marker of
transaction N that a recovering caller writes late finds transaction N+1's records at
its own epoch and leaves them open: the window the check below leaves is closed for
these producers. A v1 end (no bump) closes it another way: before its commit point it
reads each partition's end offset (``"bounds"``), and its markers end only a
transaction opened below it (``txn_writes``): the producer's next one opens above. A retried end at E (its answer lost) is recognised by ``ended`` and
answered with the current pair. At Kafka's last epoch (32766) the end hands out a new
producer id at epoch 0 instead, as Kafka's coordinator does. An abort by the timeout,
an operator or ``init_transactions`` bumps the epoch too and writes strict markers.

**Fencing.** ``init_transactions`` bumps the epoch (a first use draws a random
63-bit producer id, as the idempotent producer does); it first completes a
Prepare* and aborts an Ongoing transaction of the old epoch (PrepareAbort at the
bumped epoch, whose markers record the new epoch in the partitions: a zombie's
later append there is refused). Every other call names its producer id and
epoch, and a call whose pair is not the document's raises ProducerFenced.

**Races**, each decided by the one exclusive create of the next version:
a zombie and its successor -- whichever transition is created first stands: a
zombie's ``end_transaction`` that wins reaches its commit point and is completed
by the successor's ``init_transactions``; one that loses is fenced. The timeout
aborter and the producer's commit -- whichever Prepare* wins: a committing
producer that loses finds PrepareAbort at a bumped epoch and is fenced; an
aborter that loses finds PrepareCommit and leaves it to be completed.
"""

from __future__ import annotations

import concurrent.futures
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from log_layout import group_offsets, paths, workers
from log_layout.commit import wall_clock_ms
from log_layout.errors import (Fenced, InvalidTxnState, ProducerFenced, UnknownPartition,
                               UnknownTopic)
from log_layout.versioned_doc import Version, VersionedDoc

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
#: states in which no transaction is under way (the next add begins one)
IDLE = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
#: Kafka's transaction.max.timeout.ms default
MAX_TIMEOUT_MS = 900_000
#: the last epoch a v2 end may move to; past it the producer gets a new id (Kafka's
#: Short.MAX_VALUE - 1)
MAX_EPOCH = 32766
#: times a marker is retried when a claim of its partition fences the writer meanwhile
MARKER_ATTEMPTS = 5
#: writes a committed transaction's offsets of one group: (group, {topic: {p: offset}})
OffsetsWriter = Callable[[str, Mapping[str, Mapping[str, int]]], None]
#: writes one partition's marker: ``(topic, partition, producer_id, epoch, commit, *,
#: now_ms, strict, before)``, as ``PartitionWriter.write_marker`` (raising Fenced when a
#: claim fenced its writer: it is called again). The default writes into the partition's
#: ``_log`` (:func:`direct_marker`); a gateway passes one that asks the partition's
#: leader first (``ingest_gateway.server.transaction_markers``), so a hot partition's
#: journal is not sealed by a marker
MarkerWriter = Callable[..., None]
#: what tells one transaction in one state from another
_IDENTITY = ("state", "producer_id", "epoch", "started_ms")


class _Busy(Exception):
    """The state moved under an ``init_transactions`` step: look again."""


def _doc(log: Any, tid: str) -> VersionedDoc:
    return VersionedDoc(log.store, paths.transaction_folder(tid))


def describe(log: Any, tid: str) -> dict[str, Any] | None:
    """The transactional id's current document (module doc), None if never used."""
    v = _doc(log, tid).newest()
    return v.doc if v is not None and v.number else None


def list_transactions(log: Any) -> list[str]:
    """The transactional ids with a document, sorted."""
    return sorted(log.store.list_folders(paths.TRANSACTIONS_FOLDER))


def _now(now_ms: int | None) -> int:
    return wall_clock_ms() if now_ms is None else now_ms


def _check(tid: str, doc: Mapping[str, Any], producer_id: int, epoch: int,
           operation: str) -> None:
    """Raise InvalidTxnState for an unused id, ProducerFenced unless the producer id and
    epoch are the document's."""
    if not doc:
        raise InvalidTxnState(tid, "Unknown", f"{operation} before init_transactions")
    if (doc["producer_id"], doc["epoch"]) != (producer_id, epoch):
        raise ProducerFenced(tid, producer_id, epoch, doc["producer_id"], doc["epoch"])


def init_transactions(log: Any, tid: str, timeout_ms: int,
                      now_ms: int | None = None, *,
                      markers: MarkerWriter | None = None) -> tuple[int, int]:
    """Register a transactional producer: ``(producer_id, epoch)``, a new id on first
    use, else the same id at epoch + 1 (fencing the older producer). A Prepare*
    transaction is completed and an Ongoing one aborted first. Raises ValueError for
    a timeout outside 1..MAX_TIMEOUT_MS, InvalidTopicName for a bad id. ``markers``:
    the marker writer (``MarkerWriter``; default: :func:`direct_marker`)."""
    if type(timeout_ms) is not int or not 0 < timeout_ms <= MAX_TIMEOUT_MS:
        raise ValueError(f"transaction.timeout.ms must be 1..{MAX_TIMEOUT_MS}, "
                         f"not {timeout_ms!r}")
    d = _doc(log, tid)
    while True:
        current = d.newest() or Version(0, {})
        state = current.doc.get("state")
        if state in PREPARED:
            _complete(log, tid, current.doc, now_ms, markers=markers)
            continue
        if state == ONGOING:
            _abort_ongoing(log, tid, current.doc, now_ms, markers)
            continue

        def init(cur: Version) -> dict[str, Any]:
            doc = cur.doc
            if doc.get("state") not in (None, *IDLE):
                raise _Busy()
            now = _now(now_ms)
            pid, epoch = (doc["producer_id"], doc["epoch"] + 1) if doc \
                else (secrets.randbits(63), 0)
            return {"transactional_id": tid, "producer_id": pid, "epoch": epoch,
                    "timeout_ms": timeout_ms, "state": EMPTY, "started_ms": -1,
                    "updated_ms": now, "partitions": [], "offsets": {}}

        try:
            new = d.update(init)
        except _Busy:
            continue
        return new.doc["producer_id"], new.doc["epoch"]


def _abort_ongoing(log: Any, tid: str, seen: Mapping[str, Any], now_ms: int | None,
                   markers: MarkerWriter | None = None) -> bool:
    """Abort ``seen``'s Ongoing transaction at a bumped epoch (fencing its producer)
    and complete it. False if the state moved first (then nothing was done here)."""
    def prepare(cur: Version) -> dict[str, Any]:
        doc = cur.doc
        if doc.get("state") != ONGOING or (doc["producer_id"], doc["epoch"]) != \
                (seen["producer_id"], seen["epoch"]):
            raise _Busy()
        return {**doc, "state": PREPARE_ABORT, "epoch": doc["epoch"] + 1, "bumped": True,
                "ended": None, "bounds": [], "updated_ms": _now(now_ms)}

    try:
        new = _doc(log, tid).update(prepare)
    except _Busy:
        return False
    _complete(log, tid, new.doc, now_ms, markers=markers)
    return True


def _add(log: Any, tid: str, producer_id: int, epoch: int, operation: str, now_ms: int | None,
         extend: Any) -> None:
    """A transition that begins the transaction if idle and extends it with
    ``extend(doc) -> doc or None`` (None: nothing new, no version)."""
    def change(cur: Version) -> dict[str, Any] | None:
        doc = cur.doc
        _check(tid, doc, producer_id, epoch, operation)
        if doc["state"] in PREPARED:
            raise InvalidTxnState(tid, doc["state"], operation)
        now = _now(now_ms)
        if doc["state"] in IDLE:
            doc = {**doc, "state": ONGOING, "started_ms": now, "partitions": [],
                   "offsets": {}}
        new = extend(doc)
        if new is None:
            return None if cur.doc["state"] == ONGOING else doc | {"updated_ms": now}
        return new | {"updated_ms": now}

    _doc(log, tid).update(change)


def add_partitions(log: Any, tid: str, producer_id: int, epoch: int,
                   partitions: Iterable[tuple[str, int]], *, now_ms: int | None = None) -> None:
    """Add ``(topic, partition)`` pairs to the transaction (beginning it if none is
    under way), persisted before the caller writes a record to any of them. Raises
    ProducerFenced, InvalidTxnState (a Prepare* transaction), InvalidTopicName."""
    wanted = []
    for topic, p in partitions:
        paths.partition_folder(topic, int(p))  # validates the topic name
        wanted.append([topic, int(p)])

    def extend(doc: dict[str, Any]) -> dict[str, Any] | None:
        have = {tuple(x) for x in doc["partitions"]}
        new = [x for x in wanted if tuple(x) not in have]
        if not new:
            return None
        return {**doc, "partitions": sorted(doc["partitions"] + new)}

    _add(log, tid, producer_id, epoch, "add partitions", now_ms, extend)


def add_offsets(log: Any, tid: str, producer_id: int, epoch: int, group: str,
                offsets: Mapping[str, Mapping[int, int]], *, now_ms: int | None = None) -> None:
    """Add a group's offsets ``{topic: {partition: offset}}`` to the transaction
    (Kafka's ``sendOffsetsToTransaction``): committed into the group with it.
    Raises ProducerFenced, InvalidTxnState, InvalidTopicName."""
    paths.group_offsets(group)  # validates the group name
    given = {t: {str(int(p)): int(o) for p, o in parts.items()} for t, parts in offsets.items()}

    def extend(doc: dict[str, Any]) -> dict[str, Any] | None:
        merged = {g: {t: dict(ps) for t, ps in ts.items()} for g, ts in doc["offsets"].items()}
        mine = merged.setdefault(group, {})
        for t, parts in given.items():
            mine.setdefault(t, {}).update(parts)
        return None if merged == doc["offsets"] else {**doc, "offsets": merged}

    _add(log, tid, producer_id, epoch, "add offsets", now_ms, extend)


def end_transaction(log: Any, tid: str, producer_id: int, epoch: int, commit: bool,
                    now_ms: int | None = None, *,
                    commit_offsets: OffsetsWriter | None = None,
                    bump: bool = False, bound_markers: bool = True,
                    markers: MarkerWriter | None = None) -> tuple[int, int]:
    """Commit or abort the ongoing transaction (the module doc's steps 1-4); returns the
    producer id and epoch the producer goes on with (with ``bump``, transactions v2:
    the next epoch, or a new id at epoch 0 past MAX_EPOCH; else the same pair). Ending
    an idle transaction is a no-op, and so is a retry of an end already decided the
    same way. ``commit_offsets(group, {topic: {partition: offset}})`` writes step 3's
    offsets (default: merged into the group's document here); a gateway passes its
    group coordinator's, so a group it holds in memory takes them too and its next
    write of the document keeps them. Raises ProducerFenced, InvalidTxnState (the
    other outcome was decided). ``bound_markers`` (a v1 end): the late-marker guard of
    the module doc, for callers whose records are all committed before they end the
    transaction (Kafka's producers, at acks=all; this module's own appends); a caller
    that may still be flushing records of the transaction (HTTP produce at acks 0 or 1)
    passes False, as a guard read before those land would leave them open. ``markers``:
    the marker writer (``MarkerWriter``; default: :func:`direct_marker`)."""
    prepare_state = PREPARE_COMMIT if commit else PREPARE_ABORT
    done_state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
    operation = "commit" if commit else "abort"
    ended = [producer_id, epoch, commit]
    bounds = _bounds(log, tid) if bound_markers and not bump else []

    def prepare(cur: Version) -> dict[str, Any] | None:
        doc = cur.doc
        if bump and doc.get("ended") == ended and doc["state"] in (prepare_state, done_state):
            return None  # a retry of this v2 end, whose answer was lost
        _check(tid, doc, producer_id, epoch, operation)
        state = doc["state"]
        if state == ONGOING:
            if not bump:
                return {**doc, "state": prepare_state, "bumped": False, "ended": None,
                        "bounds": [b for b in bounds if b[:2] in doc["partitions"]],
                        "updated_ms": _now(now_ms)}
            return {**doc, "state": prepare_state, "epoch": epoch + 1, "bumped": True,
                    "ended": ended, "updated_ms": _now(now_ms)}
        if state in IDLE or state == prepare_state:
            return None  # nothing under way, or a retry of this end
        raise InvalidTxnState(tid, state, operation)

    d = _doc(log, tid)
    d.update(prepare)
    current = d.newest()
    doc = current.doc if current is not None else {}
    mine = doc.get("ended") == ended if bump else doc.get("epoch") == epoch
    if doc.get("state") == prepare_state and mine:
        _complete(log, tid, doc, now_ms, check=False, commit_offsets=commit_offsets,
                  markers=markers)
        doc = (d.newest() or Version(0, {})).doc
    return doc.get("producer_id", producer_id), doc.get("epoch", epoch)


def recover(log: Any, tid: str, now_ms: int | None = None, *,
            markers: MarkerWriter | None = None) -> str | None:
    """Finish a transaction left at its commit point (Prepare*) by a crash: markers,
    offsets, Complete*. Returns the state it is in after (None: never used)."""
    current = _doc(log, tid).newest()
    if current is None or not current.number:
        return None
    if current.doc["state"] in PREPARED:
        return _complete(log, tid, current.doc, now_ms, markers=markers)
    return current.doc["state"]


def abort(log: Any, tid: str, now_ms: int | None = None, *,
          markers: MarkerWriter | None = None) -> str | None:
    """An operator's abort of ``tid``: its Ongoing transaction is aborted at a bumped
    epoch (its producer is fenced, as by the timeout) and a decided one is finished.
    Returns the state after (None: never used)."""
    while True:
        current = _doc(log, tid).newest()
        if current is None or not current.number:
            return None
        if current.doc["state"] in PREPARED:
            return _complete(log, tid, current.doc, now_ms, markers=markers)
        if current.doc["state"] != ONGOING:
            return current.doc["state"]
        if _abort_ongoing(log, tid, current.doc, now_ms, markers):
            return (_doc(log, tid).newest() or current).doc["state"]


def abort_expired(log: Any, now_ms: int, *,
                  markers: MarkerWriter | None = None) -> list[str]:
    """Abort every Ongoing transaction older than its ``timeout_ms`` (Kafka's
    ``transaction.timeout.ms``), at a bumped epoch so its producer is fenced; also
    finish every Prepare* transaction (its completer crashed, or is finishing it
    now: completing twice is harmless). Returns the transactional ids aborted here."""
    aborted = []
    for tid in list_transactions(log):
        doc = describe(log, tid)
        if not doc:
            continue
        if doc["state"] == ONGOING and now_ms - doc["started_ms"] > doc["timeout_ms"]:
            if _abort_ongoing(log, tid, doc, now_ms, markers):
                aborted.append(tid)
        elif doc["state"] in PREPARED:  # decided, its completer gone or slow: finish it
            _complete(log, tid, doc, now_ms, markers=markers)
    return aborted


def _complete(log: Any, tid: str, doc: Mapping[str, Any], now_ms: int | None, *,
              check: bool = True, commit_offsets: OffsetsWriter | None = None,
              markers: MarkerWriter | None = None) -> str:
    """Steps 2-4 for a Prepare* ``doc``: markers, offsets, Complete*. Returns the state
    after (Complete*, or whatever another caller moved it to meanwhile).

    ``check``: a recovering caller (not the producer ending its own transaction)
    re-reads the document before each marker and stops once another caller
    completed it, so its markers do not reach the producer's next transaction.
    The window between that read and the marker's commit remains: a marker does not
    name its transaction, only its producer and epoch."""
    commit = doc["state"] == PREPARE_COMMIT
    strict = bool(doc.get("bumped"))  # the records are of an older epoch: txn_writes
    bound = {(t, p): off for t, p, off in doc.get("bounds") or ()}
    d = _doc(log, tid)
    if check:
        for topic, p in doc["partitions"]:
            if not _same(d, doc):
                return (d.newest() or Version(0, {})).doc.get("state", doc["state"])
            _marker(log, topic, p, doc["producer_id"], doc["epoch"], commit, now_ms, strict,
                    bound.get((topic, p)), markers)
    else:
        # the producer ending its own transaction: nobody else completes it meanwhile,
        # so its markers go side by side (each waits on its own fsyncs; "remote" threads,
        # as the fsyncs of each commit take the "io" ones)
        futures = [workers.submit(_marker, log, topic, p, doc["producer_id"], doc["epoch"],
                                  commit, now_ms, strict, bound.get((topic, p)), markers,
                                  kind="remote")
                   for topic, p in doc["partitions"]]
        concurrent.futures.wait(futures)
        for f in futures:
            f.result()  # the first failure, once all have finished: the end is retried
    if commit:
        for group, offsets in sorted(doc["offsets"].items()):
            if commit_offsets is None:
                merge_group_offsets(log, group, offsets, _now(now_ms))
            else:
                commit_offsets(group, offsets)
    done = COMPLETE_COMMIT if commit else COMPLETE_ABORT

    def complete(cur: Version) -> dict[str, Any] | None:
        c = cur.doc
        if any(c.get(k) != doc.get(k) for k in _IDENTITY):
            return None  # completed (or moved on) by another caller
        after = {**c, "state": done, "started_ms": -1, "partitions": [], "offsets": {},
                 "updated_ms": _now(now_ms)}
        if c.get("ended") is not None and c["epoch"] >= MAX_EPOCH:  # Kafka's id rotation
            after |= {"producer_id": secrets.randbits(63), "epoch": 0}
        return after

    d.update(complete)
    return (d.newest() or Version(0, {})).doc.get("state", done)


def _bounds(log: Any, tid: str) -> list[list[Any]]:
    """[topic, partition, end offset] of each partition of ``tid``'s ongoing
    transaction, read before its commit point (a v1 end's late-marker guard, module
    doc); a partition that cannot be read gets none."""
    doc = describe(log, tid) or {}
    if doc.get("state") != ONGOING:
        return []
    out = []
    for topic, p in doc["partitions"]:
        try:
            out.append([topic, p, log.partition(topic, p).snapshot().next_offset])
        except (UnknownTopic, UnknownPartition):
            continue
    return out


def _same(d: VersionedDoc, doc: Mapping[str, Any]) -> bool:
    """Whether the newest document is still ``doc``'s transaction in ``doc``'s state."""
    cur = (d.newest() or Version(0, {})).doc
    return all(cur.get(k) == doc.get(k) for k in _IDENTITY)


def direct_marker(log: Any) -> MarkerWriter:
    """The marker writer that writes into the partition's ``_log`` (whoever leads it:
    a hot partition's journal is sealed by it, ``log_layout.writer``)."""
    def write(topic: str, partition: int, producer_id: int, epoch: int, commit: bool, *,
              now_ms: int, strict: bool = False, before: int | None = None) -> None:
        log.partition(topic, partition).writer().write_marker(
            producer_id, epoch, commit, now_ms=now_ms, strict=strict, before=before)
    return write


def _marker(log: Any, topic: str, partition: int, producer_id: int, epoch: int,
            commit: bool, now_ms: int | None, strict: bool = False,
            before: int | None = None, markers: MarkerWriter | None = None) -> None:
    """One partition's marker (``strict``: of a bumped end; ``before``: the partition's
    end at the commit point of a v1 end; ``txn_writes``) by ``markers`` (default:
    :func:`direct_marker`); retried when a claim fences the writer meanwhile. A deleted
    topic needs none."""
    write = markers or direct_marker(log)
    for attempt in range(MARKER_ATTEMPTS):
        try:
            write(topic, partition, producer_id, epoch, commit, now_ms=_now(now_ms),
                  strict=strict, before=before)
            return
        except (UnknownTopic, UnknownPartition):
            return
        except Fenced:
            if attempt + 1 == MARKER_ATTEMPTS:
                raise


def merge_group_offsets(log: Any, group: str, offsets: Mapping[str, Mapping[str, int]],
                    now: int) -> None:
    """Merge a committed transaction's offsets into the group's document."""
    doc = dict(group_offsets.read_group_offsets(log.store, group)
               or {"group": group, "generation": 0, "strategy": None})
    merged = {t: dict(ps) for t, ps in (doc.get("offsets") or {}).items()}
    for topic, parts in offsets.items():
        for p, off in parts.items():
            merged.setdefault(topic, {})[str(p)] = {"offset": off, "metadata": "",
                                                    "commit_ms": now}
    doc["offsets"] = merged
    doc["write_id"] = secrets.token_hex(8)
    group_offsets.write_group_offsets(log.store, group, doc)
