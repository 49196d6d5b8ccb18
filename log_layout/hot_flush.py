"""The units of a hot journal's flushes (``hot_writer``): an append waiting for a flush,
a partition's appends planned into one, a flush, and the errors a journal's appends fail
with. (The format and the fencing rules are ``hot_journal``'s docstring.)"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from log_layout import segment
from log_layout.errors import Fenced
from log_layout.manifest import Manifest

Key = tuple[str, int]


class JournalBroken(Fenced):
    """The journal's store kept failing while an entry's outcome was unknown: nothing
    more can be committed to it (the writer claims again, with a new journal)."""

    code = "journal_broken"

    def __init__(self, journal: str, cause: BaseException):
        self.journal, self.cause = journal, cause
        Exception.__init__(self, f"hot journal {journal} is broken: {type(cause).__name__}: "
                                 f"{cause}")


class Pending:
    """One append (or marker) waiting for a flush: ``build(head)`` plans it on the
    partition's state (None: nothing to write; a dict: a version without records;
    ``(stats, changes)``: a segment of ``records``)."""

    __slots__ = ("writer", "build", "records", "compression", "nbytes", "future")

    def __init__(self, writer: Any, build: Callable[[Manifest], Any],
                 records: "segment.Records | None", compression: str | None):
        self.writer, self.build, self.records = writer, build, records
        self.compression = compression
        # the buffers' sizes (Arrow's nbytes walks slices: ~20 us a column)
        self.nbytes = 64 if records is None else 64 + sum(
            c.get_total_buffer_size() for c in records.columns if c is not None)
        self.future: concurrent.futures.Future = concurrent.futures.Future()

    @property
    def key(self) -> Key:
        p = self.writer.partition
        return (p.topic, p.partition)


class PredecessorFailed(Exception):
    """An append was planned on the state an earlier flush of its partition was to
    leave, and that flush failed: nothing of it was committed (a retry is safe)."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        super().__init__(f"{topic}-{partition}: an earlier flush this append was planned "
                         "after failed; nothing of it was written")


class Item:
    """One partition's appends planned into a flush, in order, each on the state the
    one before leaves: ``appends`` pairs each with its partition state once committed,
    the first planned on ``base`` (the state the flushes before leave); ``planned`` is
    the last state without its segments, the writer's head after the commit; ``line``
    the partition's one delta line in the entry."""

    __slots__ = ("writer", "key", "base", "appends", "planned", "line", "generation")

    def __init__(self, writer: Any, key: Key, base: Manifest,
                 appends: list[tuple[Pending, Manifest]], generation: int):
        self.writer, self.key, self.base, self.appends = writer, key, base, appends
        last = appends[-1][1]
        self.planned = without_segments(last)
        self.line = last.to_json(delta_of=base)
        #: the partition's planning generation (a failure starts the next one)
        self.generation = generation


class Flush:
    def __init__(self, keys: set[Key], obj: str | None, chunks: list[Any],
                 items: list[Item]):
        #: the partitions taken into this flush (in flight until committed or failed)
        self.keys, self.obj, self.chunks, self.items = keys, obj, chunks, items
        self.uploaded: concurrent.futures.Future | None = None
        self.upload_started = time.monotonic()


def without_segments(m: Manifest) -> Manifest:
    """``m`` without its segments: a writer plans on the rest, and its next delta adds
    only the segments after it."""
    return m.with_fields(segments=())
