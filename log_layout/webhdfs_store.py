"""The store on HDFS, over WebHDFS: HDFS's own HTTP API on the NameNode.

URLs, as Hadoop writes them:

* ``webhdfs://namenode:9870/path`` (the NameNode's HTTP port), ``swebhdfs://`` over TLS;
* ``hdfs://namenode:8020/path`` (the RPC port, as Spark and Hadoop tools are given):
  the store talks to the same NameNode's HTTP port, ``webhdfs_port`` (9870).

Why WebHDFS and not an fsspec HDFS class: pyarrow's ``HadoopFileSystem`` needs
``libhdfs`` (a JVM in the process), fsspec's ``webhdfs`` creates with a check then an
overwrite (two winners in races) and ignores refused renames, and ``hdfs-native``
took 200-460 ms per small file. These HTTP calls are HDFS's own guarantees:

``put_exclusive(path, data)``
    ``CREATE`` a temp file ``.tmp-<uuid>`` beside ``path`` (the NameNode redirects to
    a DataNode, which writes and closes the file), then ``RENAME`` it with
    ``renameoptions=NONE``: the NameNode renames atomically and refuses an existing
    target (exactly one winner among racing writers, measured). A ``CREATE`` alone
    would not do: its name is visible at length 0 while the bytes are written, so a
    reader could see a half-written manifest. A lost race deletes the temp file.
``put_new(path, data)``
    ``CREATE`` with ``overwrite=false`` under the unique name.
``put_replace(path, data)``
    A temp file, then ``RENAME`` with ``renameoptions=OVERWRITE`` (atomic).
``read`` / ``read_tail`` / ``read_buffer``: ``OPEN`` (with ``offset``/``length``),
``list``: ``LISTSTATUS``, ``delete``: ``DELETE``.
Every ``CREATE`` is ``createparent=false``: a missing folder is made by ``MKDIRS`` with
mode 755 and the file written again (WebHDFS would make it with mode 777).

A ``CREATE`` is two calls: the NameNode only answers which DataNode to write to
(it creates nothing), then the DataNode writes. Temp files have names of the
store's choosing, so after each temp file the store asks the NameNode, on a helper
thread, where to write the next one in the same folder (:class:`_SpareLocations`):
so an append, which writes one temp file, waits only for the DataNode and the
rename (~3 ms less, measured). A spare unused for ``SPARE_TTL_S`` is dropped; one
the DataNode refuses is dropped and the write done the usual way.

Durability: a file's bytes are on the DataNodes' disks when its close returns only
with ``dfs.datanode.synconclose=true`` on the DataNodes (otherwise in their page
cache, replicated). The README's production section says so.

Authentication (storage options): ``user`` (simple authentication: ``user.name``,
default ``$HADOOP_USER_NAME`` or the login name), ``delegation_token`` (sent as
``delegation=``, Hadoop's URL-safe token string), ``kerberos=True`` (SPNEGO with the
process's Kerberos ticket, through ``pyspnego``, an optional package), and for
``swebhdfs`` ``ca_file`` / ``cert_file`` / ``key_file``. Errors: FileNotFoundError,
FileExistsError, PermissionError, or OSError naming the NameNode's exception; no message
and no log line of urllib3's carries the token (it travels in the URL).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3

from log_layout import workers
from log_layout.errors import StoreError
from log_layout.store import TMP_PREFIX, FileInfo, Store

DEFAULT_HTTP_PORT = 9870
#: a DataNode location asked for ahead is used within this many seconds or dropped
#: (its DataNode may have gone; in a secure cluster it carries a token)
SPARE_TTL_S = 20.0
#: folders with a spare location kept at once (the least recently used go first)
SPARE_FOLDERS = 256
#: mode of the folders the store makes: Hadoop's default (777 less its default umask 022)
DIR_PERMISSION = "755"
#: NameNode exceptions that mean the file or folder does not exist / already exists
_NOT_FOUND = {"FileNotFoundException"}
_EXISTS = {"FileAlreadyExistsException"}
_DENIED = {"AccessControlException", "SecurityException", "AuthorizationException"}


class WebHdfsStore(Store):
    """A store on HDFS through WebHDFS (see the module docstring)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None):
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        options = self.storage_options
        parts = urlsplit(self.url)
        if not parts.hostname:
            raise StoreError(url, "an HDFS URL names its NameNode: hdfs://host:port/path")
        scheme = "https" if parts.scheme == "swebhdfs" else "http"
        port = parts.port if parts.scheme in ("webhdfs", "swebhdfs") else None
        port = port or int(options.get("webhdfs_port") or DEFAULT_HTTP_PORT)
        self.base = f"{scheme}://{parts.hostname}:{port}/webhdfs/v1"
        self.root = "/" + parts.path.strip("/") if parts.path.strip("/") else ""
        self.user = options.get("user") or os.environ.get("HADOOP_USER_NAME") or \
            getpass.getuser()
        self.token = options.get("delegation_token")
        if self.token:
            _hide_tokens_from_urllib3_logs()
        self.kerberos = bool(options.get("kerberos"))
        self._auth_cookie: str | None = None
        self._cookie_lock = threading.Lock()
        tls = {}
        if scheme == "https":
            tls = {k: options[o] for k, o in (("ca_certs", "ca_file"), ("cert_file", "cert_file"),
                                              ("key_file", "key_file")) if options.get(o)}
        timeout = float(options.get("timeout_s") or 60)
        self.http = urllib3.PoolManager(
            maxsize=int(options.get("connections") or 16), block=False,
            timeout=urllib3.Timeout(connect=min(timeout, 10.0), read=timeout), **tls)
        self._spares = _SpareLocations(self)

    # -- requests ---------------------------------------------------------------------------
    def _url(self, path: str, op: str, **params: Any) -> str:
        full = f"{self.root}/{path}" if path else (self.root or "/")
        query = [f"op={op}"]
        if self.token:
            query.append(f"delegation={quote(self.token, safe='')}")
        elif not self.kerberos:
            query.append(f"user.name={quote(self.user, safe='')}")
        query += [f"{k}={quote(str(v), safe='/')}" for k, v in params.items()]
        return f"{self.base}{quote(full)}?{'&'.join(query)}"

    def _headers(self, host: str) -> dict[str, str]:
        if not self.kerberos:
            return {}
        with self._cookie_lock:
            if self._auth_cookie:
                return {"Cookie": self._auth_cookie}
        return {"Authorization": "Negotiate " + _spnego_token(self.url, host)}

    def _call(self, method: str, url: str, body: Any = None, *, redirect: bool = False,
              retries: int = 2) -> urllib3.BaseHTTPResponse:
        """One WebHDFS call; raises (see ``_raise``) unless it answered 2xx. Idempotent
        calls (GET, DELETE) are retried on a lost connection; CREATE and RENAME are not:
        a rename that may have happened is resolved by the caller."""
        host = urlsplit(url).hostname or ""
        safe = method in ("GET", "DELETE")
        try:
            r = self.http.request(
                method, url, body=body, headers=self._headers(host), redirect=redirect,
                retries=urllib3.Retry(total=retries if safe else 0, connect=retries,
                                      read=retries if safe else 0, redirect=4 if redirect else 0,
                                      status=0, raise_on_status=False),
                preload_content=True)
        except urllib3.exceptions.HTTPError as e:
            raise ConnectionError(f"WebHDFS {method} {_op(url)} at {self.base}: {e}") from e
        cookie = r.headers.get("Set-Cookie")
        if self.kerberos and cookie and "hadoop.auth=" in cookie:
            with self._cookie_lock:
                self._auth_cookie = cookie.split(";", 1)[0]
        if r.status >= 300:
            self._raise(method, url, r)
        return r

    def _raise(self, method: str, url: str, r: urllib3.BaseHTTPResponse) -> None:
        try:
            remote = json.loads(r.data)["RemoteException"]
            name, message = remote.get("exception", ""), remote.get("message", "")
        except (ValueError, KeyError, TypeError):
            name, message = f"HTTP {r.status}", r.data[:200].decode("utf-8", "replace")
        text = f"WebHDFS {method} {_op(url)}: {name}: {message}"
        if name in _NOT_FOUND or (r.status == 404 and not name.endswith("Exception")):
            raise FileNotFoundError(text)
        if name in _EXISTS:
            raise FileExistsError(text)
        if name in _DENIED or r.status == 401:
            raise PermissionError(text)
        raise OSError(text)

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _create(self, path: str, data: Any, overwrite: bool = False) -> None:
        """Write a whole file: the NameNode names a DataNode, the DataNode writes it.
        A missing folder is made by MKDIRS with DIR_PERMISSION, never by CREATE: the
        DataNode makes a file's missing parents with mode 777 (it creates with a umask
        of 000, measured), which would let any user delete the log's files."""
        body = bytes(data) if not isinstance(data, bytes) else data
        try:
            self._create_in_folder(path, body, overwrite)
        except FileNotFoundError:  # "Parent directory doesn't exist"
            folder = path.rpartition("/")[0]
            self._call("PUT", self._url(folder, "MKDIRS", permission=DIR_PERMISSION))
            self._create_in_folder(path, body, overwrite)

    def _create_in_folder(self, path: str, body: bytes, overwrite: bool) -> None:
        self._call("PUT", self._location(path, overwrite), body=body)

    def _location(self, path: str, overwrite: bool = False) -> str:
        """Where to write ``path``: the DataNode URL the NameNode answers a CREATE with."""
        r = self._call("PUT", self._url(path, "CREATE", overwrite=str(overwrite).lower(),
                                        createparent="false", noredirect="true"))
        return json.loads(r.data)["Location"]

    def _write_temp(self, path: str, data: Any) -> str:
        """A new temp file beside ``path`` holding ``data``; its path. At a spare location
        if one is ready for the folder (see the module docstring)."""
        folder = path.rpartition("/")[0]
        body = bytes(data) if not isinstance(data, bytes) else data  # once, for either way
        spare = self._spares.take(folder)
        temp = None
        if spare is not None:
            temp, location = spare
            try:
                self._call("PUT", location, body=body)
            except (OSError, ConnectionError):  # gone, or refused: the usual way
                self.delete([temp])  # a refused write may have left it, empty or partial
                temp = None
        if temp is None:
            temp = self._temp_beside(path)
            self._create(temp, body)
        self._spares.prepare(folder)
        return temp

    def _rename(self, src: str, dst: str, options: str) -> bool:
        """Rename ``src`` to ``dst``; False if ``dst`` exists (``renameoptions=NONE``).
        If the answer is lost, whether it happened is read back: only this writer knows
        ``src``, so ``src`` gone means renamed."""
        url = self._url(src, "RENAME", destination=self._abs(dst), renameoptions=options)
        try:
            self._call("PUT", url)
            return True
        except FileExistsError:
            return False
        except ConnectionError:
            if self.exists(src):
                return self._rename(src, dst, options)
            return True

    def _temp_beside(self, path: str) -> str:
        folder, _, _ = path.rpartition("/")
        name = f"{TMP_PREFIX}{uuid.uuid4().hex}"
        return f"{folder}/{name}" if folder else name

    # -- the Store primitives ---------------------------------------------------------------
    def read(self, path: str) -> bytes:
        return self._call("GET", self._url(path, "OPEN"), redirect=True).data

    def read_buffer(self, path: str, size: int | None = None) -> Any:
        if size is None:
            return self.read(path)
        return self._call("GET", self._url(path, "OPEN", length=size), redirect=True).data

    def read_range(self, path: str, start: int, length: int) -> Any:
        """One OPEN with ``offset`` and ``length`` (a DataNode reads only those bytes)."""
        if length <= 0:
            return b""
        return self._call("GET", self._url(path, "OPEN", offset=start, length=length),
                          redirect=True).data

    def read_tail(self, path: str, n: int) -> tuple[bytes, int]:
        size = self._status(path)["length"]
        start = max(0, size - n)
        data = self._call("GET", self._url(path, "OPEN", offset=start, length=size - start),
                          redirect=True).data if size else b""
        return data, size

    def _status(self, path: str) -> dict:
        return json.loads(self._call("GET", self._url(path, "GETFILESTATUS")).data)["FileStatus"]

    def exists(self, path: str) -> bool:
        try:
            self._status(path)
        except FileNotFoundError:
            return False
        return True

    stages_exclusive = True

    def stage_exclusive(self, path: str, data: bytes) -> "StagedRename":
        """The temp file, written; ``commit()`` renames it (see ``put_exclusive``)."""
        return StagedRename(self, self._write_temp(path, data), path)

    def put_exclusive(self, path: str, data: bytes) -> bool:
        return self.stage_exclusive(path, data).commit()

    def put_new(self, path: str, data: bytes) -> None:
        self._create(path, data)

    def put_replace(self, path: str, data: bytes) -> str | None:
        temp = self._write_temp(path, data)
        try:
            self._rename(temp, path, "OVERWRITE")
        except BaseException:
            self.delete([temp])
            raise
        return None  # its file id is the NameNode's to tell: one more request

    def read_if_changed(self, path: str, tag: str | None) -> tuple[bytes | None, str | None]:
        st = self._status(path)
        # a replace is a rename of a new file: a new fileId, whatever the clock says
        new = f"{st.get('fileId', '')}:{st['modificationTime']}:{st['length']}"
        if new == tag:
            return None, tag
        return self.read(path), new

    def _list(self, folder: str) -> list[dict]:
        try:
            r = self._call("GET", self._url(folder, "LISTSTATUS"))
        except FileNotFoundError:
            return []
        return json.loads(r.data)["FileStatuses"]["FileStatus"]

    def list(self, folder: str) -> list[FileInfo]:
        return [FileInfo(s["pathSuffix"], int(s["length"]), int(s["modificationTime"]))
                for s in self._list(folder) if s["type"] == "FILE"]

    def list_folders(self, folder: str) -> list[str]:
        return [s["pathSuffix"] for s in self._list(folder) if s["type"] == "DIRECTORY"]

    def delete(self, paths: Iterable[str]) -> None:
        for path in paths:  # a file already gone answers {"boolean": false}: not an error
            self._call("DELETE", self._url(path, "DELETE", recursive="false"))

    def delete_tree(self, folder: str) -> None:
        self._call("DELETE", self._url(folder, "DELETE", recursive="true"))

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}


class StagedRename:
    """A written temp file that ``commit`` renames to its name unless that exists."""

    def __init__(self, store: WebHdfsStore, temp: str, path: str):
        self.store, self.temp, self.path = store, temp, path

    def commit(self) -> bool:
        try:
            won = self.store._rename(self.temp, self.path, "NONE")
        except BaseException:
            self.discard()
            raise
        if not won:
            self.discard()
        return won

    def discard(self) -> None:
        self.store.delete([self.temp])


class _SpareLocations:
    """For each folder the store writes temp files in, the next temp file's name and
    DataNode location, asked for on a helper thread (see the module docstring)."""

    def __init__(self, store: WebHdfsStore):
        self.store = store
        self._ready: OrderedDict[str, tuple[str, str, float]] = OrderedDict()
        self._asking: dict[str, Future] = {}  # folder -> the helper thread's task
        self._lock = threading.Lock()

    def take(self, folder: str) -> tuple[str, str] | None:
        """The folder's spare (temp path, location), if one is ready and fresh; it is
        no longer kept."""
        with self._lock:
            spare = self._ready.pop(folder, None)
        if spare is None or time.monotonic() - spare[2] > SPARE_TTL_S:
            return None
        return spare[0], spare[1]

    def prepare(self, folder: str) -> None:
        """Ask for the folder's next spare on a helper thread, unless one is on its way."""
        with self._lock:
            if folder in self._ready or folder in self._asking:
                return
            self._asking[folder] = workers.submit(self._ask, folder, kind="remote")

    def _ask(self, folder: str) -> None:
        try:
            temp = self.store._temp_beside(f"{folder}/x")
            location = self.store._location(temp)
        except Exception:  # noqa: BLE001 - only a head start: the next write asks itself
            location = None
        with self._lock:
            self._asking.pop(folder, None)
            if location is not None:
                self._ready[folder] = (temp, location, time.monotonic())
                self._ready.move_to_end(folder)
                while len(self._ready) > SPARE_FOLDERS:
                    self._ready.popitem(last=False)


def _op(url: str) -> str:
    """``OP /path`` of a WebHDFS URL, for messages (never its query: it may hold a token)."""
    parts = urlsplit(url)
    op = next((q[3:] for q in parts.query.split("&") if q.startswith("op=")), "?")
    return f"{op} {parts.path.removeprefix('/webhdfs/v1')}"


#: a WebHDFS URL's token parameter (ours, or one a NameNode puts in a redirect)
_DELEGATION = re.compile(r"(delegation=)[^&\s'\"]+")
#: urllib3's loggers that write request URLs, query included (redirects at INFO,
#: retries at WARNING, every request at DEBUG); a logger's filters bind it alone
_URL_LOGGERS = ("urllib3.poolmanager", "urllib3.connectionpool", "urllib3.util.retry")


class _HideTokens(logging.Filter):
    """Replaces the value of every ``delegation=`` in a log line by ``<hidden>``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "delegation=" in message:
            record.msg, record.args = _DELEGATION.sub(r"\1<hidden>", message), None
        return True


_HIDE_TOKENS = _HideTokens()


def _hide_tokens_from_urllib3_logs() -> None:
    """Keep delegation tokens out of urllib3's log lines (it logs whole URLs, and WebHDFS
    takes the token in the URL: a gateway's log showed it on every redirect)."""
    for name in _URL_LOGGERS:
        logger = logging.getLogger(name)
        if _HIDE_TOKENS not in logger.filters:
            logger.addFilter(_HIDE_TOKENS)


def _spnego_token(url: str, host: str) -> str:
    """A base64 SPNEGO token for ``HTTP@host`` from the process's Kerberos ticket.
    Raises StoreError if ``pyspnego`` is not installed."""
    try:
        import base64

        import spnego
    except ImportError as e:
        raise StoreError(url, "kerberos=True needs the pyspnego package "
                              "(pip install 'pyspnego[kerberos]')") from e
    context = spnego.client(hostname=host, service="HTTP", protocol="kerberos")
    return base64.b64encode(context.step()).decode()
