"""Fixtures of the Spark tests: a store Spark's Python workers can open, and builders.

Spark tasks run in separate Python processes, so fsspec's in-process
``memory://`` store cannot serve them: these tests run on a local folder and
on the SeaweedFS S3 server (segments read through fsspec, no S3A jars) and on
HDFS (segments read over WebHDFS by sparklog's store, not by Spark's Hadoop client).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from log_layout import open_log
from tests.conftest import make_log_url


@pytest.fixture(params=["file", "s3", "hdfs"])
def spark_store(request, tmp_path):
    """(url, storage_options) of an empty store on a local folder, on S3 and on HDFS
    (marked ``s3`` / ``hdfs`` at collection by tests/conftest.py)."""
    return make_log_url(request.param, request, tmp_path)


@pytest.fixture
def slog(spark_store):
    url, options = spark_store
    return open_log(url, storage_options=options)


def ts(ms: int) -> dt.datetime:
    """A record timestamp as Spark returns it (UTC session time zone, naive)."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)


def append(log, topic: str, partition: int, values, *, keys=None, now_ms: int = 1_000,
           timestamps=None, headers=None) -> int:
    """Append one segment; returns its base offset. ``values`` are str/bytes/None."""
    enc = [v.encode() if isinstance(v, str) else v for v in values]
    cols = {"value": pa.array(enc, pa.binary())}
    if keys is not None:
        cols["key"] = pa.array([k.encode() if isinstance(k, str) else k for k in keys], pa.binary())
    if timestamps is not None:
        cols["timestamp"] = pa.array(timestamps, pa.int64())
    if headers is not None:
        cols["headers"] = pa.array(headers, pa.list_(pa.struct([("key", pa.string()),
                                                                 ("value", pa.binary())])))
    part = log.partition(topic, partition)
    writer = part.writer() if part.snapshot().leader_epoch else part.claim("test")
    return writer.append(pa.table(cols), now_ms=now_ms).base_offset


def source_options(log, **more) -> dict[str, str]:
    """Options of ``format("sparklog")`` for ``log``'s store plus ``more``."""
    import json

    d = log.store.describe()
    opts = {"store": d["url"]}
    if d.get("storage_options"):
        opts["storageOptions"] = json.dumps(d["storage_options"])
    opts.update({k: str(v) for k, v in more.items()})
    return opts


def read(spark, log, **options):
    return spark.read.format("sparklog").options(**source_options(log, **options)).load()
