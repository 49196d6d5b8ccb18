"""Facts about SeaweedFS + s3fs that the storage layer relies on.

See the docstring of tests/s3server.py for the summary.
"""

from __future__ import annotations

import errno
import threading
import uuid

import pytest

s3fs = pytest.importorskip("s3fs")
from botocore.exceptions import ClientError  # noqa: E402

from tests.s3server import SeaweedS3, is_create_conflict  # noqa: E402

pytestmark = pytest.mark.s3


@pytest.fixture(scope="module")
def s3():
    with SeaweedS3() as server:
        rss = server.rss_bytes()
        print(
            f"\nSeaweedFS S3 up in {server.startup_seconds:.2f}s at {server.endpoint_url}, "
            f"RSS {rss / 2**20 if rss else float('nan'):.0f} MiB"
        )
        yield server


def new_fs(s3, **kw):
    # skip_instance_cache: a genuinely separate client (own listing cache).
    return s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options(), **kw)


@pytest.fixture
def prefix(s3):
    return f"{s3.bucket}/{uuid.uuid4().hex}"


def test_endpoint_is_loopback_and_ports_explicit(s3):
    assert s3.endpoint_url.startswith("http://127.0.0.1:")
    assert set(s3.ports) == {
        "master", "master_grpc", "volume", "volume_grpc",
        "filer", "filer_grpc", "s3", "s3_grpc",
    }
    assert len(set(s3.ports.values())) == 8
    opts = s3.storage_options()
    assert opts["key"] == s3.key and opts["secret"] == s3.secret
    assert opts["client_kwargs"]["endpoint_url"] == s3.endpoint_url


def test_create_is_exclusive_and_conflict_exception_type(s3, prefix):
    fs = new_fs(s3)
    path = f"{prefix}/seg-0"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(OSError) as ei:
        fs.pipe_file(path, b"second", mode="create")
    exc = ei.value
    # Exact type on SeaweedFS: plain OSError(EINVAL), NOT FileExistsError.
    assert type(exc) is OSError
    assert exc.errno == errno.EINVAL
    assert isinstance(exc.__cause__, ClientError)
    err = exc.__cause__.response
    assert err["Error"]["Code"] == "PreconditionFailed"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert is_create_conflict(exc)
    assert fs.cat_file(path) == b"first"
    # overwrite mode still overwrites
    fs.pipe_file(path, b"third")
    assert fs.cat_file(path) == b"third"


def test_create_exclusive_on_multipart_upload(s3, prefix):
    # pipe_file switches to multipart for len(data) >= 2*chunksize; the
    # If-None-Match then rides on CompleteMultipartUpload.
    fs = new_fs(s3)
    path = f"{prefix}/big"
    fs.pipe_file(path, b"x", mode="create")
    data = b"y" * (11 * 2**20)
    with pytest.raises(OSError) as ei:
        fs.pipe_file(path, data, mode="create", chunksize=5 * 2**20)
    assert is_create_conflict(ei.value)
    assert fs.cat_file(path) == b"x"
    # and a fresh key via multipart works
    fs.pipe_file(f"{prefix}/big2", data, mode="create", chunksize=5 * 2**20)
    assert fs.size(f"{prefix}/big2") == len(data)


def test_racing_creates_exactly_one_winner(s3, prefix):
    path = f"{prefix}/race"
    n = 8
    fss = [new_fs(s3) for _ in range(n)]
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i):
        payload = f"writer-{i}".encode() * 100
        barrier.wait()
        try:
            fss[i].pipe_file(path, payload, mode="create")
            results[i] = ("won", payload)
        except BaseException as e:  # noqa: BLE001
            results[i] = ("lost", e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [r[1] for r in results if r[0] == "won"]
    losers = [r[1] for r in results if r[0] == "lost"]
    assert len(winners) == 1, results
    assert len(losers) == n - 1
    for e in losers:
        assert is_create_conflict(e), repr(e)
        assert type(e) is OSError
    assert new_fs(s3).cat_file(path) == winners[0]


def test_list_cat_rm_and_listing_cache(s3, prefix):
    writer = new_fs(s3)
    reader = new_fs(s3)

    writer.pipe_file(f"{prefix}/a", b"A")
    assert reader.ls(prefix, detail=False) == [f"{prefix}/a"]  # now cached

    writer.pipe_file(f"{prefix}/b", b"B")
    # s3fs listing cache: the reader does not see the other instance's write.
    assert reader.ls(prefix, detail=False) == [f"{prefix}/a"]
    # ... refresh=True bypasses it
    assert sorted(reader.ls(prefix, detail=False, refresh=True)) == [
        f"{prefix}/a", f"{prefix}/b"]
    # cat_file always goes to the server
    assert reader.cat_file(f"{prefix}/b") == b"B"

    writer.rm(f"{prefix}/a")
    assert sorted(reader.ls(prefix, detail=False)) == [f"{prefix}/a", f"{prefix}/b"]  # stale
    reader.invalidate_cache(prefix)
    assert reader.ls(prefix, detail=False) == [f"{prefix}/b"]
    with pytest.raises(FileNotFoundError):
        reader.cat_file(f"{prefix}/a")

    writer.pipe_file(f"{prefix}/c", b"C")
    reader.invalidate_cache()  # whole cache
    assert sorted(reader.ls(prefix, detail=False)) == [f"{prefix}/b", f"{prefix}/c"]

    # writes through the same instance invalidate its own cache
    reader.pipe_file(f"{prefix}/d", b"D")
    assert sorted(reader.ls(prefix, detail=False)) == [
        f"{prefix}/b", f"{prefix}/c", f"{prefix}/d"]

    # use_listings_cache=False: always fresh
    nocache = new_fs(s3, use_listings_cache=False)
    assert len(nocache.ls(prefix, detail=False)) == 3
    writer.pipe_file(f"{prefix}/e", b"E")
    assert len(nocache.ls(prefix, detail=False)) == 4

    # find / glob / rm recursive
    assert writer.find(prefix) == [f"{prefix}/{c}" for c in "bcde"]
    writer.rm(prefix, recursive=True)
    fresh = new_fs(s3)
    # SURPRISE: SeaweedFS keeps the (now empty) "directory": a delimiter
    # listing still shows the prefix, and find() on it returns the prefix as a
    # directory entry.  Only entries with type == "file" are real objects.
    assert prefix in fresh.ls(s3.bucket, detail=False, refresh=True)
    files = [p for p, d in fresh.find(prefix, detail=True).items() if d["type"] == "file"]
    assert files == []
    # A flat ListObjectsV2 (no delimiter) is correct: no keys.
    resp = fresh.call_s3("list_objects_v2", Bucket=s3.bucket, Prefix=prefix.split("/", 1)[1])
    assert resp["KeyCount"] == 0 and "Contents" not in resp


def test_second_instance_side_by_side(s3):
    with SeaweedS3(bucket="other-bucket") as other:
        assert other.ports["s3"] != s3.ports["s3"]
        fs = new_fs(other)
        fs.pipe_file("other-bucket/k", b"v", mode="create")
        assert fs.cat_file("other-bucket/k") == b"v"
        tmp = other.tmpdir
    assert other.proc is None and not __import__("os").path.exists(tmp)
