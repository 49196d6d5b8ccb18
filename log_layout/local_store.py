"""The local store: a folder on a local (or NFS) filesystem, through ``os`` calls.

The contract of every primitive is the ``store`` module's; this module is how a
local filesystem keeps it: temp file + ``renameat2(RENAME_NOREPLACE)`` (or a
hard link) for ``put_exclusive``, hard links for ``linked_file``, fsync of file
and folder before a commit is acknowledged (unless ``fsync=False``), segments
memory-mapped for reads.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterable
from typing import Any

from log_layout import paths, workers
from log_layout.store import TMP_PREFIX, FileInfo, LinkedFile, Store


class LocalStore(Store):
    """A folder on a local (or NFS) filesystem."""

    def __init__(self, root: str, *, fsync: bool = True):
        self.root = os.path.abspath(root)
        self.url = "file://" + self.root
        self.fsync = fsync
        self.cheap_commits = not fsync
        self._pending: list[tuple[int, str]] = []  # put_new's files, fsync owed
        self._pending_lock = threading.Lock()
        os.makedirs(self.root, exist_ok=True)

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path)

    def read(self, path: str) -> bytes:
        with open(self._abs(path), "rb") as f:
            return f.read()

    #: files at least this big are memory-mapped; smaller ones are cheaper to copy
    MMAP_MIN_BYTES = 512 * 1024

    def read_buffer(self, path: str, size: int | None = None) -> Any:
        import mmap

        import pyarrow as pa

        fd = os.open(self._abs(path), os.O_RDONLY)
        try:
            length = os.fstat(fd).st_size
            if size is not None:  # a segment with a trailer: read the segment only
                length = min(length, size)
            if length >= self.MMAP_MIN_BYTES:
                # the buffer holds the map; the map outlives the fd (and even a delete)
                return pa.py_buffer(mmap.mmap(fd, length, access=mmap.ACCESS_READ))
            chunks = [os.read(fd, length)]
            have = len(chunks[0])
            while size is None or have < length:  # a short read is legal
                more = os.read(fd, (1 << 20) if size is None else length - have)
                if not more:
                    break
                chunks.append(more)
                have += len(more)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        finally:
            os.close(fd)

    def read_range(self, path: str, start: int, length: int) -> Any:
        """``length`` bytes at ``start`` (fewer if the file ends first): a range of
        ``MMAP_MIN_BYTES`` or more is memory-mapped (a segment in a shared hot object,
        read as a file's segment is: no copy), a smaller one read with ``pread``."""
        import mmap

        fd = os.open(self._abs(path), os.O_RDONLY)
        try:
            if length >= self.MMAP_MIN_BYTES:
                end = min(start + length, os.fstat(fd).st_size)  # never map past the end
                if end - start >= self.MMAP_MIN_BYTES:
                    import pyarrow as pa

                    # a map starts at a multiple of the page size; the slice holds the map
                    base = start - start % mmap.ALLOCATIONGRANULARITY
                    view = mmap.mmap(fd, end - base, access=mmap.ACCESS_READ, offset=base)
                    return pa.py_buffer(view).slice(start - base, end - start)
            chunks, have = [], 0
            while have < length:
                more = os.pread(fd, length - have, start + have)
                if not more:
                    break
                chunks.append(more)
                have += len(more)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        finally:
            os.close(fd)

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        fd = os.open(self._abs(path), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - n)
            chunks = []
            while start < size:  # a short read is legal; a cut file ends early
                chunk = os.pread(fd, size - start, start)
                if not chunk:
                    break
                chunks.append(chunk)
                start += len(chunk)
            return b"".join(chunks), size
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def _create_and_write(self, target: str, data: bytes) -> int:
        """Create ``target`` (O_EXCL) and write ``data``; the open fd (removed on failure)."""
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            os.unlink(target)
            raise
        return fd

    def _write_file(self, target: str, data: bytes) -> None:
        """Create ``target`` (O_EXCL), write ``data``, fsync; removed again on failure."""
        fd = self._create_and_write(target, data)
        try:
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(target)
            raise
        os.close(fd)

    def _write_temp(self, final: str, data: bytes) -> str:
        tmp = os.path.join(os.path.dirname(final), f"{TMP_PREFIX}{paths.unique_id()}")
        self._write_file(tmp, data)
        return tmp

    # Durability of a commit. Readers never open a segment before a manifest names it,
    # so a segment only has to be durable (data and name) before the manifest that names
    # it is renamed into place. put_new therefore leaves the segment's fsyncs pending, and
    # the next put_exclusive/put_replace runs them together with its temp file's fsync,
    # in parallel (concurrent fsyncs share journal commits): two rounds of flushes per
    # append instead of four in a row (measured: ~5.4 vs ~10.5 ms). The pending files are
    # the store's, not a thread's: a file written on one thread (a hot object's upload)
    # and named by a commit on another (its journal entry) is durable before the commit,
    # and a thread that never commits leaves no descriptor open.
    def put_new(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        if not self.fsync:
            self._write_file(final, data)
            return
        fd = self._create_and_write(final, data)
        with self._pending_lock:
            self._pending.append((fd, final))
            crowded = len(self._pending) > 64  # many segments before one commit
        if crowded:
            self._make_durable(())

    def _make_durable(self, fds: Iterable[int], folders: Iterable[str] = ()) -> None:
        """fsync ``fds``, ``folders`` and the pending new files (data and folder), in
        parallel."""
        with self._pending_lock:
            items, self._pending[:] = list(self._pending), []
        folders = sorted({os.path.dirname(p) for _fd, p in items} | set(folders))
        tasks = [(os.fsync, fd) for fd, _p in items] + [(os.fsync, fd) for fd in fds] \
            + [(_fsync_folder, f) for f in folders]
        try:
            workers.run_all(tasks)
        finally:
            for fd, _p in items:
                os.close(fd)

    def _write_temp_durably(self, final: str, data: bytes) -> str:
        tmp = os.path.join(os.path.dirname(final), f"{TMP_PREFIX}{paths.unique_id()}")
        fd = self._create_and_write(tmp, data)
        try:
            self._make_durable([fd])
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _sync_folder(self, folder: str) -> None:
        if self.fsync:
            _fsync_folder(folder)

    def put_exclusive(self, path: str, data: bytes) -> bool:
        final = self._abs(path)
        tmp = self._write_temp_durably(final, data) if self.fsync else self._write_temp(final, data)
        try:
            if not _rename_noreplace(tmp, final):
                os.link(tmp, final)  # atomic, and never replaces an existing name
                os.unlink(tmp)
        except FileExistsError:
            os.unlink(tmp)
            return False
        except BaseException:
            self.delete([os.path.relpath(tmp, self.root)])
            raise
        self._sync_folder(os.path.dirname(final))
        return True

    supports_links = True

    def linked_file(self, path: str) -> "LinkedFile":
        return LocalLinkedFile(self, path)

    def delete_linked(self, path: str, keep_bytes: int) -> None:
        """Delete the name ``path`` of a ``linked_file``; if its other name
        still holds it, cut the file to its first ``keep_bytes`` bytes (the part that
        name needs). A file already gone is not an error."""
        try:
            fd = os.open(self._abs(path), os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            os.unlink(self._abs(path))
            st = os.fstat(fd)
            if st.st_nlink > 0 and st.st_size > keep_bytes:
                os.ftruncate(fd, keep_bytes)
        finally:
            os.close(fd)

    def put_replace(self, path: str, data: bytes) -> str | None:
        final = self._abs(path)
        tmp = self._write_temp_durably(final, data) if self.fsync else self._write_temp(final, data)
        tag = _tag(os.stat(tmp))  # before the rename, which keeps them: not a later writer's
        os.replace(tmp, final)
        self._sync_folder(os.path.dirname(final))
        return tag

    def read_if_changed(self, path: str, tag: str | None) -> tuple[bytes | None, str | None]:
        with open(self._abs(path), "rb") as f:
            new = _tag(os.fstat(f.fileno()))
            if new == tag:
                return None, tag
            return f.read(), new

    def list(self, folder: str) -> list[FileInfo]:
        try:
            it = os.scandir(self._abs(folder))
        except FileNotFoundError:
            return []
        out = []
        with it:
            for entry in it:
                try:
                    if entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        out.append(FileInfo(entry.name, st.st_size, st.st_mtime_ns // 1_000_000))
                except FileNotFoundError:
                    # A temp file unlinked between readdir and stat: it is simply gone. (This
                    # once emptied the whole listing, so a busy partition "had no manifest".)
                    continue
        return out

    def list_folders(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._abs(folder)) as it:
                return [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []

    def delete(self, paths: Iterable[str]) -> None:
        gone = set()
        for path in paths:
            full = self._abs(path)
            gone.add(full)
            try:
                os.unlink(full)
            except FileNotFoundError:
                pass
        with self._pending_lock:  # a segment dropped before its commit: no fsync owed
            dropped = [e for e in self._pending if e[1] in gone]
            self._pending[:] = [e for e in self._pending if e[1] not in gone]
        for fd, _p in dropped:
            os.close(fd)

    def delete_tree(self, folder: str) -> None:
        import shutil

        shutil.rmtree(self._abs(folder), ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "fsync": self.fsync}


class LocalLinkedFile:
    """A new file being written under its own (unique) name; ``commit`` gives it its
    second name, exclusively. See ``Store.linked_file``.

    Use it as a context manager: leaving the block without a commit that won
    deletes the file. ``writev`` writes all it is given.
    """

    def __init__(self, store: LocalStore, path: str):
        self.store, self.path, self.committed = store, store._abs(path), False
        self.fd = store._create_and_write(self.path, b"")

    def writev(self, chunks: list[Any]) -> None:
        _write_all(self.fd, chunks)

    def commit(self, exclusive_path: str) -> bool:
        """Link the file to ``exclusive_path`` unless that exists (then False). Durable
        first (data and name) when the store fsyncs, so the new name never names a
        file a crash could lose."""
        store, exclusive = self.store, self.store._abs(exclusive_path)
        if store.fsync:
            store._make_durable([self.fd], [os.path.dirname(self.path)])
        try:
            os.link(self.path, exclusive)  # atomic, and never replaces an existing name
        except FileNotFoundError:
            os.makedirs(os.path.dirname(exclusive), exist_ok=True)
            try:
                os.link(self.path, exclusive)
            except FileExistsError:
                return False
        except FileExistsError:
            return False
        self.committed = True
        if store.fsync:
            _fsync_folder(os.path.dirname(exclusive))
        return True

    def __enter__(self) -> "LocalLinkedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        os.close(self.fd)
        if not self.committed:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _write_all(fd: int, chunks: list[Any]) -> None:
    """Write bytes-like ``chunks`` in order, vectored (a short write is continued)."""
    views = [memoryview(c).cast("B") for c in chunks]
    views = [v for v in views if len(v)]
    while views:
        n = os.writev(fd, views)
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_renameat2: Any = None  # None = not probed yet, False = unavailable


def _rename_noreplace(src: str, dst: str) -> bool:
    """Linux ``renameat2(RENAME_NOREPLACE)``: atomic, never replaces, one step fewer than
    link + unlink. False if the call or the filesystem does not support it (then the
    caller links); raises FileExistsError if ``dst`` exists."""
    global _renameat2
    if _renameat2 is None:
        _renameat2 = False
        if hasattr(os, "uname") and os.uname().sysname == "Linux":
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.renameat2
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]
                fn.restype = ctypes.c_int
                _renameat2 = (fn, ctypes)
            except (OSError, AttributeError):
                pass
    if _renameat2 is False:
        return False
    fn, ctypes = _renameat2
    at_fdcwd, rename_noreplace = -100, 1
    if fn(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        raise FileExistsError(err, os.strerror(err), dst)
    if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.ENOTSUP):
        return False  # this filesystem cannot: fall back to link
    raise OSError(err, os.strerror(err), dst)


def _tag(st: os.stat_result) -> str:
    """A file version's tag: a replaced file is a new inode (or, reused, a new mtime)."""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"
