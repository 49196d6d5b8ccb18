"""Shared fixtures: the store backends, the S3 and HDFS servers, one SparkSession.

``log`` runs a test once per backend: a local folder, fsspec's memory
filesystem, a real S3 server (SeaweedFS on 127.0.0.1) and a real HDFS
(a MiniDFSCluster on 127.0.0.1, reached over WebHDFS), each server started once
per session. ``spark`` is one local SparkSession for the whole run (a cold start
costs seconds).
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from log_layout import open_log  # noqa: E402

BACKENDS = ["file", "memory", "s3", "hdfs"]
#: backends on a server, each marked with its name (``-m "not hdfs"`` deselects it)
SERVER_BACKENDS = ("s3", "hdfs")


@pytest.fixture(scope="session")
def s3_server():
    from tests.s3server import SeaweedS3

    with SeaweedS3() as server:
        yield server


@pytest.fixture(scope="session")
def hdfs_server():
    from bench.hdfs_side import MiniHdfs

    with MiniHdfs() as server:
        yield server


def make_log_url(backend: str, request, tmp_path) -> tuple[str, dict | None]:
    """A fresh, empty store URL (and storage options) on ``backend``."""
    if backend == "file":
        return str(tmp_path / "store"), None
    if backend == "memory":
        return f"memory://sparklog-{uuid.uuid4().hex}", None
    if backend == "hdfs":
        server = request.getfixturevalue("hdfs_server")
        return server.url(f"sparklog-{uuid.uuid4().hex}"), server.storage_options()
    server = request.getfixturevalue("s3_server")
    return f"s3://{server.bucket}/{uuid.uuid4().hex}", server.storage_options()


def pytest_collection_modifyitems(items):
    """Mark ``s3`` (``hdfs``) every test that runs on the S3 (HDFS) backend, so
    ``-m "not s3"`` deselects it.

    The mark must be set at collection: ``request.applymarker`` inside a fixture
    runs at setup, after ``-m`` has chosen the tests. Marks on a fixture's
    ``pytest.param`` would not do either: an indirect ``parametrize`` replaces the
    fixture's params. So the rule reads the collected parameters: in this suite a
    parameter value ``"s3"`` (``"hdfs"``) always names that backend (``backend``,
    ``gateway_store``, ``spark_store``, a test's own ``backend`` list).
    """
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        fixtures = getattr(item, "fixturenames", ())
        for name in SERVER_BACKENDS:
            # isinstance first: `==` on an array parameter would compare elementwise
            if any(isinstance(value, str) and value == name for value in params) \
                    or f"{name}_server" in fixtures:
                item.add_marker(getattr(pytest.mark, name))


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def store(backend, request, tmp_path):
    """(url, storage_options) of an empty store on each backend."""
    return make_log_url(backend, request, tmp_path)


@pytest.fixture
def log(store):
    url, options = store
    return open_log(url, storage_options=options)


@pytest.fixture
def local_log(tmp_path):
    return open_log(str(tmp_path / "store"))


@pytest.fixture(scope="session")
def spark():
    from pipeline.spark import session

    spark = session(master="local[2]", extra={"spark.sql.shuffle.partitions": "4",
                                              "spark.default.parallelism": "4"})
    yield spark
    spark.stop()
