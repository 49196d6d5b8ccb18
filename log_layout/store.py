"""Storage behind one interface: the few primitives the log needs, each atomic.

A :class:`Store` is opened from an fsspec URL by ``opening.open_store``:

* a plain path or ``file://`` -> ``local_store.LocalStore`` (``os`` calls, fsync);
* ``hdfs://``, ``webhdfs://``, ``swebhdfs://`` -> ``webhdfs_store.WebHdfsStore``;
* ``s3://bucket/prefix``, ``memory://`` ... -> ``fsspec_store.FsspecStore``.

This module is the interface and its contract; each kind of store is its own
module.

The primitives and their atomicity:

``put_exclusive(path, data)``
    Create ``path`` only if it does not exist; ``False`` when it does. Readers
    see nothing or the whole file. Local: write a temp file beside it, fsync,
    then rename it with ``renameat2(RENAME_NOREPLACE)`` (Linux), or else
    ``os.link`` it to the final name and unlink the temp (both fail if the name
    exists, so neither ever replaces). fsspec's ``pipe_file(mode="create")``
    is *not* atomic on local disks (open with O_EXCL, then write), which is why
    local storage does not use it. S3: a conditional PUT ``If-None-Match: *``
    (``pipe_file(mode="create")``; a plain ``open(..., "xb")`` would create an
    *empty* object unconditionally). HDFS: a temp file, then a rename that refuses
    an existing target (``RENAME renameoptions=NONE``). memory: a check-and-set
    under a lock.
``put_new(path, data)``
    Create a file under a name nobody else uses (a segment's unique name).
    Not atomic: a crash may leave it partial, which is harmless because no
    reader opens a segment before a manifest names it and an unnamed segment
    is an orphan. Local: written in place, no temp file and no link; its
    fsyncs (file and folder) run with the next ``put_exclusive`` of the same
    thread, in parallel with that one's (see ``LocalStore._make_durable``).
    S3: a plain PUT.
``linked_file(path)`` (stores with ``supports_links``)
    A new file under the unique name ``path`` (as ``put_new``), then given a
    second name by ``commit(exclusive_path)``, created only if absent (as
    ``put_exclusive``); ``False`` when it exists, and the file is deleted. An
    append commits its segment and its manifest version this way: one file
    creation instead of two, which was most of what an append cost beyond
    writing its bytes. Local: ``os.link``, which is atomic and never replaces;
    the file is complete (and, with fsync, durable) before it gets the second
    name. A crash leaves at most an unnamed segment (an orphan).
    ``delete_linked(path, keep_bytes)`` deletes one name and cuts the file to
    what the other name needs.
``stage_exclusive(path, data)`` then ``commit()`` (or ``discard()``)
    ``put_exclusive`` in two steps, so the slow part can run beside other writes:
    a store where an exclusive create is a write then a rename (HDFS:
    ``stages_exclusive``) writes the temp file when staged and renames at commit;
    elsewhere staging only holds the bytes and commit is ``put_exclusive``. An append
    at a checkpoint version (the two-file way) stages its version while its segment
    is written (``segment_commit``).
``put_replace(path, data)``
    Replace ``path`` atomically (local: temp file + ``os.replace``; S3: one PUT).
    Returns the new file's *tag* when the store knows it without asking again (S3:
    the PUT's ETag; local: inode, modification time and size), else None.
``read_if_changed(path, tag)``
    A conditional read, for documents followed by polling: ``(None, tag)`` when the
    file is still the version ``tag`` names, else ``(bytes, its tag)``. S3: one GET
    with ``If-None-Match`` (a 304 carries no body); HDFS: ``GETFILESTATUS`` (file id,
    modification time, length), then ``OPEN`` only when they differ; local:
    ``fstat`` of the opened file. The tag is taken before the bytes are read, so a
    change racing the read is seen at the next call, never missed.
``read(path)``, ``list(folder)``, ``delete(paths)``, ``delete_tree(folder)``.
``read_buffer(path)``
    A segment's bytes as a ``pyarrow.Buffer``. Local: memory-mapped, so the
    page cache is the only copy (DESIGN: "segments are memory-mapped or
    streamed"); safe because segment files are never modified in place, and a
    file deleted while mapped stays readable until unmapped.

Temp files are named ``.tmp-*``: a crashed writer leaves only such files, which
no reader opens and the retention job removes after ``file.delete.delay.ms``.
"""


from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Any, Protocol

TMP_PREFIX = ".tmp-"


@dataclasses.dataclass(frozen=True)
class FileInfo:
    name: str
    size: int
    mtime_ms: int


class LinkedFile(Protocol):
    """A new file being written under its own (unique) name; ``commit`` gives it its
    second name, exclusively (see ``Store.linked_file``). A context manager: leaving
    the block without a commit that won deletes the file."""

    def writev(self, chunks: list[Any]) -> None: ...

    def commit(self, exclusive_path: str) -> bool: ...

    def __enter__(self) -> "LinkedFile": ...

    def __exit__(self, *exc: Any) -> None: ...


class StagedFile(Protocol):
    """A file staged for an exclusive create (``Store.stage_exclusive``)."""

    def commit(self) -> bool: ...

    def discard(self) -> None: ...


class DeferredExclusive:
    """Staging where an exclusive create is one step: commit is ``put_exclusive``."""

    def __init__(self, store: "Store", path: str, data: bytes):
        self.store, self.path, self.data = store, path, data

    def commit(self) -> bool:
        return self.store.put_exclusive(self.path, self.data)

    def discard(self) -> None:
        pass


class Store:
    """Abstract store rooted at ``url``. Paths are relative, ``/``-separated."""

    url: str

    def read(self, path: str) -> bytes:  # FileNotFoundError if absent
        raise NotImplementedError

    def read_buffer(self, path: str, size: int | None = None) -> Any:
        """The file's bytes, at most its first ``size``, as a ``pyarrow.Buffer`` (or
        bytes); see the module docstring. FileNotFoundError if absent."""
        data = self.read(path)
        return data if size is None else data[:size]

    def read_range(self, path: str, start: int, length: int) -> Any:
        """``length`` bytes of a file from byte ``start`` (a segment in a shared hot
        object: one ranged read); fewer if the file ends first. FileNotFoundError if
        absent."""
        return self.read(path)[start:start + length]

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        """The last ``n`` bytes of a file (all of a smaller one) and its size; never
        memory-mapped. FileNotFoundError if absent."""
        data = self.read(path)
        return data[-n:], len(data)

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def read_if_changed(self, path: str, tag: str | None) -> tuple[bytes | None, str | None]:
        """``(None, tag)`` if ``path`` is still the version ``tag`` names, else its bytes
        and their tag (see the module docstring). This default reads the whole file and
        tags it by a hash of its bytes. FileNotFoundError if absent."""
        data = self.read(path)
        new = "sha1:" + hashlib.sha1(data).hexdigest()
        return (None, tag) if new == tag else (data, new)

    def put_exclusive(self, path: str, data: bytes) -> bool:
        raise NotImplementedError

    #: ``stage_exclusive`` writes the file (only the commit is left): worth running
    #: beside other writes
    stages_exclusive = False

    def stage_exclusive(self, path: str, data: bytes) -> StagedFile:
        """``put_exclusive`` in two steps (see the module docstring)."""
        return DeferredExclusive(self, path, data)

    def put_new(self, path: str, data: bytes) -> None:
        """Create ``path``, a name no one else uses; may be left partial by a crash."""
        if not self.put_exclusive(path, data):
            raise FileExistsError(path)

    #: whether ``linked_file`` works here (hard links: local filesystems)
    supports_links = False
    #: a small commit takes tens of microseconds and never waits on a device or a
    #: network (a local store without fsync): a caller on an event loop may run it
    #: inline instead of paying two thread hand-offs
    cheap_commits = False

    def linked_file(self, path: str) -> "LinkedFile":
        """A new file under the unique name ``path`` to write, then ``commit`` under a
        second name, exclusively."""
        raise NotImplementedError

    def delete_linked(self, path: str, keep_bytes: int) -> None:
        """Delete ``path``, one name of a ``linked_file``; the file keeps only its first
        ``keep_bytes`` bytes under its other name."""
        raise NotImplementedError

    def put_replace(self, path: str, data: bytes) -> str | None:
        """Replace ``path`` atomically; the new file's tag if known (``read_if_changed``)."""
        raise NotImplementedError

    def list(self, folder: str) -> list[FileInfo]:
        """Files (not folders) directly in ``folder``; [] if it does not exist."""
        raise NotImplementedError

    def list_folders(self, folder: str) -> list[str]:
        raise NotImplementedError

    def delete(self, paths: Iterable[str]) -> None:
        """Delete files; a file already gone is not an error."""
        raise NotImplementedError

    def delete_tree(self, folder: str) -> None:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What a Spark executor needs to reopen this store: ``open_store(**d)``."""
        return {"url": self.url}
