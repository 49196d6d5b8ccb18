"""A small document kept as numbered versions, each created exclusively: the store's
security documents (``acls``, ``quotas``, ``scram``) and each transactional id's state
(``transactions``) use it.

A folder holds one JSON file per version, named ``<version:020d>.json`` (20 digits,
so a listing sorts numerically, as ``paths`` names manifests)::

    _security/acls/00000000000000000007.json
    _security/acls/00000000000000000008.json     the newest: the current document

**Writing** is the optimistic loop of ``commit.run``: read the newest version N,
apply the change to its document, create version N+1 with ``Store.put_exclusive``
(put-if-absent; on S3 a conditional PUT, on HDFS and local folders a no-replace
rename: never a half-written file under a version's name). A writer that loses the
race re-reads the winner's document and applies its change again on top, so two
writers never lose either change. A change that changes nothing creates no version.

**Pruning.** After a win, versions older than the newest :data:`KEPT` are deleted,
oldest first. So a version's *name* may be used twice: a writer so slow that its
N+1 was created by another *and* pruned meanwhile finds the name free again. Its file
is then an **orphan**, under a number below the newest, that nobody builds on
(writers build on the newest only) and that is not in the document.

**The lineage** tells a version that won from an orphan. Each version carries, beside
the caller's document, ``"_lineage": {"number": N, "ids": [...]}``: a random id of
its own first, then the ids of the versions it descends from, newest first, at most
:data:`LINEAGE` of them. After its create, a writer lists the folder (as before):

* its number is the greatest: it won;
* a greater version exists: it reads the newest (which is never an orphan: an orphan's
  number is below a greater one from its birth; were the newest pruned and its name
  reused between the listing and the read, the orphan read instead still names the
  document's versions below its own number) and finds its own number in the newest's
  lineage: its id there means its version was **built upon**: its change is
  in the document, it won (nothing is deleted and nothing run again); another id means
  its file is an orphan: it deletes it (nobody built on it) and runs its change again
  on the newest;
* the newest's lineage does not reach back to its number (more than LINEAGE versions
  were created while it stood between its create and its listing, or a version
  without a lineage is between): ``errors.OutcomeUnknown``, an OSError, as for a
  store failure mid-write. Its file is left alone: only a proven orphan is ever
  deleted, never a version another was built on (that would lose nothing of the
  document, but it would leave a gap a slow writer could fill with an orphan).

Before the lineage, a writer that found any greater version after its create
deleted its file and ran its change again: when the greater version had been built
on its own, its change was applied twice (``init_transactions`` bumped the epoch
twice) or reported as nothing done (``remove_acls`` answered [] for a removal it
made), and the deleted version left the gap above.

**Format history.** Versions written before the lineage have no ``_lineage`` key: they
load as before (their lineage is empty), and the next version's lineage starts with
its own id. A ``_lineage`` whose ``number`` is not its file's, or that does not
parse, is no lineage either: an older sparklog's ``transactions`` copies a document's
keys into the next version (``{**doc, ...}``) and so copies its parent's lineage
under the wrong number. An older sparklog reads the new files unchanged: ``acls``,
``quotas`` and ``scram`` read their own keys only, ``transactions`` reads the keys it
knows and carries ``_lineage`` along as above. An older writer keeps its old rule
(it may still delete its version when another was built on it: the document loses
nothing). While older and newer writers share a folder, a newer writer that races
with an older one's version above its own raises OutcomeUnknown rather than guess.

**Crashes.** A writer killed after its create leaves either a version that won (the
document), or an orphan below the newest: readers read the newest only, writers build
on it, and pruning deletes the orphan in its turn. Nothing else is ever written.

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
import secrets
from collections.abc import Callable
from typing import Any

from log_layout import commit
from log_layout.errors import CorruptDocument, OutcomeUnknown
from log_layout.store import Store

#: versions kept after a write (older ones are pruned)
KEPT = 10
#: ids a version's lineage holds (its own and its ancestors'): how many versions may be
#: created between a writer's create and its listing before it cannot tell whether its
#: version won (OutcomeUnknown); ~15 bytes each in every version
LINEAGE = 64
#: random bytes of a version's id (hex in the file): a slow writer's orphan mistaken for
#: the version it collides with at one number is a 2**-48 chance
_ID_BYTES = 6
#: the key of the lineage in a version's JSON (never in a caller's document)
LINEAGE_KEY = "_lineage"
#: listings tried when the newest file vanishes before it is read (pruned meanwhile); a
#: store whose listing keeps naming a file it cannot read is broken, not busy
_READ_ATTEMPTS = 10
_NAME = re.compile(r"([0-9]{20})\.json")


def version_name(version: int) -> str:
    return f"{version:020d}.json"


@dataclasses.dataclass(frozen=True)
class Version:
    """One version of a document: its number (0: none written yet), its content, and
    its lineage (its own id, then its ancestors', newest first; empty for a version
    written before lineages, see the module doc)."""

    number: int
    doc: dict[str, Any]
    lineage: tuple[str, ...] = ()

    def descends_from(self, number: int, vid: str) -> bool | None:
        """Whether version ``number`` of this one's lineage is the one with id ``vid``;
        None if the lineage does not reach back to ``number``."""
        back = self.number - number
        if back < 0 or back >= len(self.lineage):
            return None
        return self.lineage[back] == vid


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
        return self._newest(known)[1]

    def _newest(self, known: int | None) -> tuple[list[int], Version | None]:
        """(the numbers listed, the newest version or None if it is ``known``)."""
        for attempt in range(_READ_ATTEMPTS):
            numbers = self._numbers()
            number = numbers[-1] if numbers else 0
            if number == known:
                return numbers, None
            if number == 0:
                return numbers, Version(0, {})
            path = f"{self.folder}/{version_name(number)}"
            try:
                raw = self.store.read(path)
            except FileNotFoundError:  # pruned since the listing: list again
                if attempt + 1 == _READ_ATTEMPTS:
                    raise
                continue
            doc, lineage = _parse(path, number, raw)
            return numbers, Version(number, doc, lineage)
        raise AssertionError("unreachable")

    def update(self, change: Callable[[Version], dict[str, Any] | None]) -> Version | None:
        """Apply ``change`` to the newest version and create the next one with its result.

        ``change(current)`` returns the next document, or None when there is nothing to
        do; it is called again on a newer version after a lost race (so what it decides
        must depend on ``current`` only), never again once its version was created and
        is in the document. Returns the version created (which may already have others
        built on it), or None if ``change`` had nothing to do. Raises whatever
        ``change`` raises, CorruptDocument, OutcomeUnknown (module doc), OSError.
        """
        def attempt(current: Version, doc: dict[str, Any]) -> Version | None:
            number = current.number + 1
            path = f"{self.folder}/{version_name(number)}"
            doc = {k: v for k, v in doc.items() if k != LINEAGE_KEY}
            lineage = (secrets.token_hex(_ID_BYTES), *current.lineage[:LINEAGE - 1])
            data = json.dumps({**doc, LINEAGE_KEY: {"number": number, "ids": list(lineage)}},
                              indent=1, sort_keys=True).encode()
            if not self.store.put_exclusive(path, data):
                return None
            numbers, above = self._newest(known=number)
            if above is not None and above.number > number:
                mine = above.descends_from(number, lineage[0])
                if mine is None:
                    raise OutcomeUnknown(self.folder, number, above.number, len(above.lineage))
                if not mine:  # an orphan: our number was used and pruned meanwhile
                    self.store.delete([path])
                    return None
            self._prune(numbers)
            return Version(number, doc, lineage)

        return commit.run(lambda: self.newest() or Version(0, {}), change, attempt)

    def _prune(self, numbers: list[int]) -> None:
        stale = numbers[:-self.kept] if self.kept > 0 else []
        if stale:
            self.store.delete([f"{self.folder}/{version_name(n)}" for n in stale])


def _parse(path: str, number: int, raw: bytes) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the caller's document, the lineage) of version ``number`` stored at ``path``."""
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise CorruptDocument(path, f"not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CorruptDocument(path, f"expected a JSON object, found {type(doc).__name__}")
    meta = doc.pop(LINEAGE_KEY, None)
    if isinstance(meta, dict):
        n, ids = meta.get("number"), meta.get("ids")
        if (type(n) is int and n == number and isinstance(ids, list) and ids
                and all(isinstance(i, str) for i in ids)):
            return doc, tuple(ids[:LINEAGE])
    return doc, ()  # written before lineages, or copied from its parent: none
