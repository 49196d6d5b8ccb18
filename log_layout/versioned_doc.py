"""A small document kept as numbered versions, each created exclusively: the store's
security documents (``acls``, ``quotas``) use it.

A folder holds one JSON file per version, named ``<version:020d>.json`` (20 digits,
so a listing sorts numerically, as ``paths`` names manifests)::

    _security/acls/00000000000000000007.json
    _security/acls/00000000000000000008.json     the newest: the current document

**Writing** is the optimistic loop of ``commit.run``: read the newest version N,
apply the change to its document, create version N+1 with ``Store.put_exclusive``
(put-if-absent). A writer that loses the race re-reads the winner's document and
applies its change again on top, so two writers never lose either change. A change
that changes nothing creates no version. A crash leaves version N or N+1 whole
(the exclusive create is atomic), never a mix.

**Pruning.** After a win, versions older than the newest :data:`KEPT` are deleted,
oldest first. A writer that was so slow that its N+1 had already been created *and*
pruned would create a file under a number that sorts below the newest: it checks
the listing after its create, finds a greater version, deletes its file and runs its
change again on the newest.

**Reading** costs one LIST: the greatest name is the current version, and its file
is read only when that number differs from the one the reader already holds
(:meth:`VersionedDoc.newest` with ``known``). A file pruned between the listing and
the read sends the reader back to list again. No files at all is version 0, the
empty document ``{}``.

Raises CorruptDocument for a newest version that is not a JSON object (written by
hand or by a foreign tool: never by this module).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

from log_layout import commit
from log_layout.errors import CorruptDocument
from log_layout.store import Store

#: versions kept after a write (older ones are pruned)
KEPT = 10
#: listings tried when the newest file vanishes before it is read (pruned meanwhile); a
#: store whose listing keeps naming a file it cannot read is broken, not busy
_READ_ATTEMPTS = 10
_NAME = re.compile(r"([0-9]{20})\.json")


def version_name(version: int) -> str:
    return f"{version:020d}.json"


@dataclasses.dataclass(frozen=True)
class Version:
    """One version of a document: its number (0: none written yet) and its content."""

    number: int
    doc: dict[str, Any]


class VersionedDoc:
    """The versions of one document in ``folder`` of ``store`` (see the module doc)."""

    def __init__(self, store: Store, folder: str, *, kept: int = KEPT):
        self.store, self.folder, self.kept = store, folder, kept

    def _numbers(self) -> list[int]:
        """Version numbers present, ascending (one LIST)."""
        return sorted(int(m.group(1)) for f in self.store.list(self.folder)
                      if (m := _NAME.fullmatch(f.name)))

    def newest(self, *, known: int | None = None) -> Version | None:
        """The current version; None if it is ``known`` (then nothing was read but the
        listing). Raises CorruptDocument, OSError if the store cannot be reached
        (FileNotFoundError if the newest listed file never reads)."""
        for attempt in range(_READ_ATTEMPTS):
            numbers = self._numbers()
            number = numbers[-1] if numbers else 0
            if number == known:
                return None
            if number == 0:
                return Version(0, {})
            path = f"{self.folder}/{version_name(number)}"
            try:
                raw = self.store.read(path)
            except FileNotFoundError:  # pruned since the listing: list again
                if attempt + 1 == _READ_ATTEMPTS:
                    raise
                continue
            return Version(number, _parse(path, raw))
        raise AssertionError("unreachable")

    def update(self, change: Callable[[Version], dict[str, Any] | None]) -> Version | None:
        """Apply ``change`` to the newest version and create the next one with its result.

        ``change(current)`` returns the next document, or None when there is nothing to
        do; it is called again on a newer version after a lost race (so what it decides
        must depend on ``current`` only). Returns the
        version created, or None if ``change`` had nothing to do. Raises whatever
        ``change`` raises, CorruptDocument, OSError.
        """
        def attempt(current: Version, doc: dict[str, Any]) -> Version | None:
            number = current.number + 1
            path = f"{self.folder}/{version_name(number)}"
            data = json.dumps(doc, indent=1, sort_keys=True).encode()
            if not self.store.put_exclusive(path, data):
                return None
            numbers = self._numbers()
            if numbers and numbers[-1] > number:  # our number was already used and pruned
                self.store.delete([path])
                return None
            self._prune(numbers)
            return Version(number, doc)

        return commit.run(lambda: self.newest() or Version(0, {}), change, attempt)

    def _prune(self, numbers: list[int]) -> None:
        stale = numbers[:-self.kept] if self.kept > 0 else []
        if stale:
            self.store.delete([f"{self.folder}/{version_name(n)}" for n in stale])


def _parse(path: str, raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise CorruptDocument(path, f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CorruptDocument(path, f"expected a JSON object, found {type(doc).__name__}")
    return doc
