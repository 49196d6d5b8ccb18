"""Stores on any fsspec filesystem: S3 (s3fs), memory, ... (HDFS is ``webhdfs_store``)

The contract of every primitive is the ``store`` module's; this module is how
fsspec keeps it: a conditional PUT (``If-None-Match: *``) on S3, a
check-and-set under a lock in memory, create-without-overwrite elsewhere.
HDFS is not served here: every fsspec HDFS class fails the exclusive create
(see ``webhdfs_store``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from log_layout.errors import StoreError
from log_layout.store import FileInfo, Store

_memory_lock = threading.Lock()


class FsspecStore(Store):
    """Any fsspec filesystem: S3 (s3fs), memory, ..."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None):
        import fsspec

        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        scheme = urlsplit(url).scheme
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        except (ImportError, ValueError) as e:
            raise StoreError(url, f"cannot open a {scheme}:// filesystem: {e}") from e
        self.scheme = scheme
        self.root = root.rstrip("/")
        # s3fs caches listings; the log must always see other writers' files.
        self._is_s3 = scheme in ("s3", "s3a")
        if scheme == "memory":
            self.fs.makedirs(self.root, exist_ok=True)

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def read(self, path: str) -> bytes:
        if self._is_s3:  # one GET: s3fs's cat_file asks for the size first (a HEAD)
            return self._s3_get(self._abs(path), None)[0]
        return self.fs.cat_file(self._abs(path))

    def read_buffer(self, path: str, size: int | None = None) -> Any:
        # segments: s3fs's cat_file, which fetches a big object in ranges side by side
        # (the whole object, as before: a range of an empty object is an error, 416)
        data = self.fs.cat_file(self._abs(path))
        return data if size is None else data[:size]

    def read_if_changed(self, path: str, tag: str | None) -> tuple[bytes | None, str | None]:
        if not self._is_s3:
            return super().read_if_changed(path, tag)
        data, etag = self._s3_get(self._abs(path), tag)
        return (None, tag) if data is None else (data, etag)

    def _s3_get(self, full: str, etag: str | None) -> tuple[bytes | None, str | None]:
        """One GetObject, ``If-None-Match: etag`` when given: (None, etag) on 304, else
        the body and its ETag. Raises FileNotFoundError, OSError (s3fs's translations)."""
        from fsspec.asyn import sync

        bucket, key, _version = self.fs.split_path(full)

        async def get() -> tuple[bytes | None, str | None]:
            kw = {"IfNoneMatch": etag} if etag else {}
            try:
                resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=key, **kw)
            except OSError as e:
                if etag and _s3_error_code(e) in ("304", "NotModified"):
                    return None, etag
                raise
            try:
                return await resp["Body"].read(), resp.get("ETag")
            finally:
                resp["Body"].close()

        return sync(self.fs.loop, get)

    def read_range(self, path: str, start: int, length: int) -> Any:
        """One ranged GET (S3: ``Range: bytes=start-end``)."""
        if length <= 0:
            return b""
        return self.fs.cat_file(self._abs(path), start=start, end=start + length)

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        """One ranged GET of the last ``n`` bytes (a manifest version carried by a
        segment is read from its end, not downloaded whole), then the size only if the
        file may be longer."""
        full = self._abs(path)
        try:
            data = self.fs.cat_file(full, start=-n) if n > 0 else b""
        except FileNotFoundError:
            raise
        except OSError:  # an empty object has no last bytes to range over (HTTP 416)
            data = self.fs.cat_file(full)
            return data[-n:] if n > 0 else b"", len(data)
        if len(data) < n:
            return data, len(data)
        return data, int(self.fs.size(full))

    def exists(self, path: str) -> bool:
        if self._is_s3:
            self.fs.invalidate_cache(self._abs(path))
        return self.fs.exists(self._abs(path))

    def put_exclusive(self, path: str, data: bytes) -> bool:
        full = self._abs(path)
        if self.scheme == "memory":
            with _memory_lock:
                if self.fs.exists(full):
                    return False
                self.fs.pipe_file(full, bytes(data))
            return True
        if self._is_s3:
            data = bytes(data)
            for attempt in range(10):
                try:
                    self.fs.pipe_file(full, data, mode="create")
                except FileExistsError:
                    return False
                except OSError as e:
                    code = _s3_error_code(e)
                    if code in ("PreconditionFailed", "412"):  # somebody else created it
                        return False
                    if code in ("ConditionalRequestConflict", "409") and attempt < 9:
                        continue  # a concurrent conditional PUT is in flight: ask again
                    raise
                return True
        # Other filesystems: create-without-overwrite.
        try:
            with self.fs.open(full, "xb") as f:
                f.write(data)
        except FileExistsError:
            return False
        return True

    def put_new(self, path: str, data: bytes) -> None:
        if self.scheme == "memory":
            if not self.put_exclusive(path, data):
                raise FileExistsError(path)
        else:  # a unique name: an unconditional PUT cannot replace anyone's file
            self.fs.pipe_file(self._abs(path), bytes(data))

    def put_replace(self, path: str, data: bytes) -> str | None:
        if not self._is_s3:
            self.fs.pipe_file(self._abs(path), bytes(data))
            return None
        from fsspec.asyn import sync

        full = self._abs(path)
        bucket, key, _version = self.fs.split_path(full)
        # put_object itself, for the ETag it answers (pipe_file drops it): a poller of
        # this document can then ask "still mine?" with a 304 instead of a download
        resp = sync(self.fs.loop, self.fs._call_s3, "put_object", Bucket=bucket, Key=key,
                    Body=bytes(data))
        self.fs.invalidate_cache(full)
        return resp.get("ETag")

    def _ls(self, folder: str) -> list[dict]:
        full = self._abs(folder)
        try:
            if self.scheme == "memory":
                # fsspec's memory listing reads each name it found again: a file deleted
                # by another thread in between raised KeyError (a race test met it)
                with _memory_lock:
                    return self.fs.ls(full, detail=True)
            if self._is_s3:
                return self._s3_lsdir(full)
            return self.fs.ls(full, detail=True)
        except FileNotFoundError:
            return []

    def _s3_lsdir(self, full: str) -> list[dict]:
        """One ListObjectsV2 (fresh, never s3fs's cache). s3fs's ``ls`` lists the parent
        too when a folder is empty or absent, to tell a file from nothing: a second LIST
        for every poll of a folder that does not exist yet (``_transactions``...)."""
        from fsspec.asyn import sync

        lsdir = getattr(self.fs, "_lsdir", None)
        if lsdir is None:  # an s3fs without it: its public listing, two LISTs or not
            return self.fs.ls(full, detail=True, refresh=True)
        path = self.fs._strip_protocol(full).rstrip("/")
        entries = sync(self.fs.loop, lsdir, path, refresh=True)
        # _lsdir fills the listings cache; nothing here reads it, so keep it empty
        self.fs.invalidate_cache(path)
        return entries

    def list(self, folder: str) -> list[FileInfo]:
        out = []
        for e in self._ls(folder):
            if e.get("type") != "file":
                continue
            mtime = e.get("LastModified") or e.get("mtime") or e.get("created")
            if hasattr(mtime, "timestamp"):
                mtime_ms = int(mtime.timestamp() * 1000)
            else:
                mtime_ms = int(float(mtime or 0) * 1000)
            out.append(FileInfo(e["name"].rstrip("/").rsplit("/", 1)[-1], int(e.get("size") or 0),
                                mtime_ms))
        return out

    def list_folders(self, folder: str) -> list[str]:
        return [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in self._ls(folder)
                if e.get("type") == "directory"]

    def delete(self, paths: Iterable[str]) -> None:
        full = [self._abs(p) for p in paths]
        if not full:
            return
        for p in full:
            try:
                if self.scheme == "memory":
                    with _memory_lock:  # not while a listing reads names (_ls)
                        self.fs.rm_file(p)
                else:
                    self.fs.rm_file(p)
            except FileNotFoundError:
                pass

    def delete_tree(self, folder: str) -> None:
        try:
            if self.scheme == "memory":
                with _memory_lock:
                    self.fs.rm(self._abs(folder), recursive=True)
            else:
                self.fs.rm(self._abs(folder), recursive=True)
        except FileNotFoundError:
            pass

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}


def _s3_error_code(error: BaseException) -> str | None:
    """The S3 error code behind an exception s3fs raised (it wraps botocore's as OSError)."""
    seen = 0
    while error is not None and seen < 5:
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            err = response.get("Error") or {}
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            return str(err.get("Code") or status or "")
        text = str(error)
        if "PreconditionFailed" in text or "pre-conditions you specified did not hold" in text:
            return "PreconditionFailed"
        error = error.__cause__ or error.__context__
        seen += 1
    return None
