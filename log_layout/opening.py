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
        # imported here: its HTTP client (urllib3) is a third of the log layout's import
        # time, which every CLI command and Spark Python worker pays
        from log_layout.webhdfs_store import WebHdfsStore

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


#: the store settings every process of an application must share (``store.url`` aside)
STORE_KEYS = ("store.fsync", "store.s3.endpoint.url", "store.hdfs.http.port", "store.hdfs.user",
              "store.hdfs.kerberos", "store.hdfs.delegation.token",
              "store.manifest.versions.retained")


def store_setting_pairs(settings: conf.Settings) -> dict[str, str]:
    """The resolved ``store.*`` settings (but the URL) as ``--set`` pairs, so another
    process (a Spark task on another host, whose environment is not this one's) opens
    the store exactly as this one does. The delegation token only when set: it is a
    secret, and an empty one must not hide the other process's own."""
    store = settings.store
    pairs = {}
    for key in STORE_KEYS:
        value = getattr(store, key[len("store."):].replace(".", "_"))
        if key == "store.hdfs.delegation.token" and not value:
            continue
        pairs[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return pairs


def deciding_key(settings: conf.Settings, explicit: Mapping[str, Any] | None = None) -> str:
    """The setting that decides where and as whom the store is reached: what an error
    reaching it should name (``--storage-options`` when those were given)."""
    if explicit:
        return "--storage-options"
    store = settings.store
    if urlsplit(store.url).scheme in HDFS_SCHEMES:
        if store.hdfs_kerberos:
            return "store.hdfs.kerberos"
        return "store.hdfs.http.port"
    if urlsplit(store.url).scheme in ("s3", "s3a"):
        return "store.s3.endpoint.url"
    return "store.url"


def check_reachable(log: Log, settings: conf.Settings,
                    explicit: Mapping[str, Any] | None = None, *, probe: str) -> None:
    """Read ``probe`` (a small file, absent is fine) to prove the store answers.

    Raises ConfigError naming the setting that decides how the store is reached
    (:func:`deciding_key`) and its value, with the store's own error in one line, when
    it cannot be reached, refuses us, or its filesystem cannot be opened.
    """
    try:
        log.store.read(probe)
    except FileNotFoundError:
        return
    except Exception as e:  # noqa: BLE001 - botocore's errors are no OSError: any failure
        # of this one read means the store cannot be used as the settings describe it
        key = deciding_key(settings, explicit)
        store = settings.store
        if isinstance(e, PermissionError) and key == "store.hdfs.http.port":
            # reached, but refused: who we are is what to fix
            key = "store.hdfs.delegation.token" if store.hdfs_delegation_token \
                else "store.hdfs.user"
        value: Any = {"--storage-options": "<given>", "store.url": store.url,
                      "store.s3.endpoint.url": store.s3_endpoint_url,
                      "store.hdfs.kerberos": store.hdfs_kerberos,
                      "store.hdfs.http.port": store.hdfs_http_port,
                      "store.hdfs.user": store.hdfs_user,
                      "store.hdfs.delegation.token": "<hidden>"}[key]
        why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        where = " (empty: AWS)" if key == "store.s3.endpoint.url" and not value else ""
        raise conf.ConfigError(key, value, f"the store {store.url} cannot be read with it{where}: "
                                      f"{why}") from e


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
