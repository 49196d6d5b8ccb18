"""The one way to open a store or a log: from a URL, from settings, or once per process.

:func:`open_store` picks the store by URL scheme (a path or ``file://``: the
local store; ``hdfs://``, ``webhdfs://``: WebHDFS; anything else: fsspec);
:func:`open_log` opens a log on it.

The gateway, the CLI, the maintenance jobs and the Spark source all open their
log here, so a store URL with its storage options means the same store
everywhere (S3 endpoint from ``store.s3.endpoint.url``, credentials from the
environment as boto does), and a Python worker that Spark reuses across tasks
opens each store once.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import conf
from log_layout.errors import StoreError
from log_layout.fsspec_store import FsspecStore
from log_layout.local_store import LocalStore
from log_layout.store import Store
from log_layout.topics import Log
from log_layout.webhdfs_store import WebHdfsStore

#: URL schemes of HDFS (``webhdfs_store``); ``hdfs://`` is given its RPC address
HDFS_SCHEMES = ("hdfs", "webhdfs", "swebhdfs")


def open_store(url: str, *, storage_options: Mapping[str, Any] | None = None,
               fsync: bool = True) -> Store:
    """Open the store at ``url`` (a path, ``file://``, ``s3://``, ``hdfs://``, ``memory://``...).

    Raises StoreError for an empty URL or a scheme no installed package serves.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreError(str(url), "the store URL is empty")
    parts = urlsplit(url)
    if parts.scheme in ("", "file", "local") or (len(parts.scheme) == 1 and os.name == "nt"):
        return LocalStore(parts.path if parts.scheme in ("file", "local") else url, fsync=fsync)
    if parts.scheme in HDFS_SCHEMES:
        return WebHdfsStore(url, storage_options)
    return FsspecStore(url, storage_options)


def open_log(url: str, *, storage_options: Mapping[str, Any] | None = None,
             fsync: bool = True, manifest_versions_retained: int = 100) -> Log:
    """Open the log stored at ``url`` (see :func:`open_store`)."""
    return Log(open_store(url, storage_options=storage_options, fsync=fsync),
               manifest_versions_retained=manifest_versions_retained)


def storage_options_for(settings: conf.Settings,
                        explicit: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Storage options: ``explicit`` if given, else what the settings say about the
    store's kind: the S3 endpoint (credentials then come from AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY), or HDFS's WebHDFS port and authentication."""
    if explicit:
        return dict(explicit)
    store = settings.store
    if urlsplit(store.url).scheme in HDFS_SCHEMES:
        options: dict[str, Any] = {"webhdfs_port": store.hdfs_http_port}
        if store.hdfs_user:
            options["user"] = store.hdfs_user
        if store.hdfs_kerberos:
            options["kerberos"] = True
        if store.hdfs_delegation_token:
            options["delegation_token"] = store.hdfs_delegation_token
        return options
    if settings.store.s3_endpoint_url:
        return {"client_kwargs": {"endpoint_url": settings.store.s3_endpoint_url}}
    return None


def open_log_from_settings(settings: conf.Settings, *,
                           storage_options: Mapping[str, Any] | None = None) -> Log:
    """A new Log for ``store.url`` with the settings' fsync and manifest retention
    (``storage_options`` overrides the options the settings imply)."""
    return open_log(settings.store.url,
                    storage_options=storage_options_for(settings, storage_options),
                    fsync=settings.store.fsync,
                    manifest_versions_retained=settings.store.manifest_versions_retained)


_shared: dict[str, Log] = {}
_shared_lock = threading.Lock()


def shared_log(url: str, *, storage_options: Mapping[str, Any] | None = None,
               fsync: bool = True, manifest_versions_retained: int = 100) -> Log:
    """The process's one Log for this store description, opened on first use.

    Used where one process serves many tasks (Spark's reused Python workers):
    opening a store costs a filesystem client and a topic-metadata cache each time.
    Raises what :func:`open_log` raises.
    """
    key = json.dumps([url, storage_options or {}, fsync, manifest_versions_retained],
                     sort_keys=True, default=str)
    with _shared_lock:
        log = _shared.get(key)
        if log is None:
            log = _shared[key] = open_log(url, storage_options=storage_options, fsync=fsync,
                                          manifest_versions_retained=manifest_versions_retained)
        return log
