"""The HDFS store on a real MiniDFSCluster: what WebHDFS guarantees, and what it must not do.

The storage suite (test_store, test_race, test_crash, ...) runs on HDFS through the
``hdfs`` backend; these tests are about HDFS itself: readers racing writers never
see a half-written file, the URL forms Hadoop uses, credentials kept out of errors,
and clear errors for an unreachable or misconfigured NameNode.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid

import pyarrow as pa
import pytest

from log_layout import StoreError, open_log, open_store
from log_layout.webhdfs_store import WebHdfsStore

pytestmark = pytest.mark.hdfs


@pytest.fixture
def hdfs_store(hdfs_server):
    return open_store(hdfs_server.url(f"w-{uuid.uuid4().hex}"),
                      storage_options=hdfs_server.storage_options())


def _payload(i: int, size: int) -> bytes:
    """``size`` bytes whose last 32 are the SHA-256 of the rest: a partial file fails."""
    body = (b"%08d" % i) * (size // 8)
    return body + hashlib.sha256(body).digest()


def _complete(data: bytes) -> bool:
    return len(data) > 32 and hashlib.sha256(data[:-32]).digest() == data[-32:]


def test_a_reader_never_sees_a_partial_manifest_while_writers_commit(hdfs_store):
    """4 writers race for each of 12 versions (1 MiB each, so a write takes a while);
    a reader lists and reads the folder all along: every file it sees is complete."""
    versions, seen, problems = 12, [], []
    done = threading.Event()

    def writer(w: int) -> None:
        for v in range(versions):
            hdfs_store.put_exclusive(f"m/{v:05d}.json", _payload(w * 100 + v, 1 << 20))

    def reader() -> None:
        while not done.is_set():
            for info in hdfs_store.list("m"):
                try:
                    data = hdfs_store.read(f"m/{info.name}")
                except FileNotFoundError:
                    continue  # a loser's temp file, deleted between list and read
                if info.name.endswith(".json"):
                    seen.append(info.name)
                    if not _complete(data):
                        problems.append((info.name, len(data)))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert problems == []
    assert len(set(seen)) >= 3  # the reader really read while versions appeared
    names = sorted(f.name for f in hdfs_store.list("m"))
    assert names == [f"{v:05d}.json" for v in range(versions)]  # no temp left behind
    assert all(_complete(hdfs_store.read(f"m/{n}")) for n in names)


def test_put_replace_is_atomic_for_readers(hdfs_store):
    hdfs_store.put_replace("r/meta", _payload(0, 256 << 10))
    stop, problems = threading.Event(), []

    def reader() -> None:
        while not stop.is_set():
            if not _complete(hdfs_store.read("r/meta")):
                problems.append(1)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(1, 10):
        hdfs_store.put_replace("r/meta", _payload(i, 256 << 10))
    stop.set()
    t.join()
    assert problems == [] and hdfs_store.read("r/meta") == _payload(9, 256 << 10)
    assert [f.name for f in hdfs_store.list("r")] == ["meta"]


def test_webhdfs_and_hdfs_urls_name_the_same_store(hdfs_server):
    prefix = f"u-{uuid.uuid4().hex}"
    by_rpc = open_log(hdfs_server.url(prefix), storage_options=hdfs_server.storage_options())
    by_rpc.create_topic("t", {"partitions": 2})
    by_rpc.partition("t", 1).claim("w").append(pa.table({"value": [b"a", b"b"]}))
    by_http = open_log(f"webhdfs://127.0.0.1:{hdfs_server.http_port}/{prefix}",
                       storage_options={"user": "sparklog"})
    assert by_http.partition("t", 1).read_table(0).column("value").to_pylist() == [b"a", b"b"]
    assert isinstance(by_http.store, WebHdfsStore)
    # what a Spark executor is given to reopen it
    description = by_rpc.store.describe()
    again = open_log(description["url"], storage_options=description["storage_options"])
    assert again.partition("t", 1).read_table(0).column("value").to_pylist() == [b"a", b"b"]


def test_the_store_makes_its_folders_755_not_777(hdfs_server):
    """WebHDFS's CREATE makes missing parents with mode 777 (any user could delete the
    log's files); the store makes them itself with Hadoop's default 755. Files: 644."""
    prefix = f"p-{uuid.uuid4().hex}"
    log = open_log(hdfs_server.url(prefix), storage_options=hdfs_server.storage_options())
    log.create_topic("t", {"partitions": 1})
    log.partition("t", 0).claim("w").append(pa.table({"value": [b"a"]}))
    top = open_store(hdfs_server.url(""), storage_options=hdfs_server.storage_options())
    folders, files = [prefix], []
    while folders:
        folder = folders.pop()
        assert top._status(folder)["permission"] == "755", folder
        folders += [f"{folder}/{name}" for name in top.list_folders(folder)]
        files += [f"{folder}/{info.name}" for info in top.list(folder)]
    assert len(files) >= 3 and {top._status(f)["permission"] for f in files} == {"644"}


def test_an_unreachable_namenode_is_a_clear_connection_error(hdfs_server):
    from tests.s3server import _free_ports

    (port,) = _free_ports(1)
    store = open_store(f"webhdfs://127.0.0.1:{port}/x", storage_options={"timeout_s": 2})
    where = f"WebHDFS GET LISTSTATUS /x/a at http://127.0.0.1:{port}"
    with pytest.raises(ConnectionError, match=where):
        store.list("a")


def test_an_hdfs_url_without_a_namenode_is_refused():
    with pytest.raises(StoreError, match="names its NameNode"):
        open_store("hdfs:///just/a/path")


def test_a_delegation_token_replaces_the_user_name_and_is_never_shown(hdfs_server, caplog):
    """With a token no ``user.name`` is sent (a cluster without security, as here,
    ignores the token and writes as its static web user, so the file's owner shows
    which was sent), and no error message or log line carries the token (urllib3 logs
    whole URLs: a redirect at INFO, each request at DEBUG). That a secure NameNode
    accepts it over WebHDFS is not tested: this machine has no KDC."""
    secret = "SECRETtokenXYZ123"
    store = open_store(f"webhdfs://127.0.0.1:{hdfs_server.http_port}/tok",
                       storage_options={"delegation_token": secret, "user": "alice"})
    with caplog.at_level(logging.DEBUG, logger="urllib3"):
        store.put_new("owned", b"x")
        assert store.read("owned") == b"x"  # OPEN: redirected to a DataNode
    assert "Redirecting" in caplog.text and "delegation=<hidden>" in caplog.text
    assert secret not in caplog.text
    assert store._status("owned")["owner"] != "alice"
    with pytest.raises(FileNotFoundError) as caught:
        store.read("missing")
    assert secret not in str(caught.value) and "OPEN /tok/missing" in str(caught.value)
    plain = open_store(f"webhdfs://127.0.0.1:{hdfs_server.http_port}/tok",
                       storage_options={"user": "alice"})
    plain.put_new("owned-by-alice", b"x")
    assert plain._status("owned-by-alice")["owner"] == "alice"


def test_kerberos_without_pyspnego_says_what_to_install(hdfs_server, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_spnego(name, *args, **kwargs):
        if name == "spnego":
            raise ImportError("No module named 'spnego'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_spnego)
    store = open_store(hdfs_server.url("k"), storage_options={
        "webhdfs_port": hdfs_server.http_port, "kerberos": True})
    with pytest.raises(StoreError, match="pyspnego"):
        store.list("a")


def _spare_ready(store: WebHdfsStore, folder: str) -> bool:
    """Whether a spare location for ``folder`` is ready, once the helper thread asking
    for one (if any) is done."""
    asking = store._spares._asking.get(folder)
    if asking is not None:
        asking.result(timeout=60)
    return folder in store._spares._ready


def _recording_calls(store: WebHdfsStore) -> list[str]:
    """The URL of every WebHDFS call the store makes from now on."""
    calls, real = [], store._call

    def call(method, url, *args, **kwargs):
        calls.append(url)
        return real(method, url, *args, **kwargs)

    store._call = call
    return calls


def test_a_temp_file_is_written_at_a_location_asked_for_ahead(hdfs_store):
    """After a folder's first temp file, the next one's DataNode location was asked for
    on a helper thread: the write asks the NameNode nothing before the DataNode writes."""
    assert hdfs_store.put_exclusive("m/0.json", b"zero")
    assert _spare_ready(hdfs_store, "m")
    calls = _recording_calls(hdfs_store)
    staged = hdfs_store.stage_exclusive("m/1.json", b"one")
    assert len(calls) == 1 and "/webhdfs/v1/" in calls[0] and "op=CREATE" in calls[0]
    assert "noredirect" not in calls[0]  # the DataNode's URL, not the NameNode's
    assert staged.commit()
    assert hdfs_store.read("m/1.json") == b"one"
    assert [f.name for f in hdfs_store.list("m")] == ["0.json", "1.json"]  # no temp left
    assert not hdfs_store.put_exclusive("m/1.json", b"again")  # still exclusive
    assert hdfs_store.read("m/1.json") == b"one"


def test_a_spare_location_that_fails_or_is_old_is_dropped(hdfs_store, monkeypatch):
    """A spare whose DataNode is gone, or that waited past SPARE_TTL_S, is not used: the
    write asks the NameNode again and succeeds."""
    from log_layout import webhdfs_store

    assert hdfs_store.put_exclusive("m/0.json", b"zero")
    assert _spare_ready(hdfs_store, "m")
    temp, location, when = hdfs_store._spares._ready["m"]
    dead = location.replace(location.split("/webhdfs/")[0], "http://127.0.0.1:9")
    hdfs_store._spares._ready["m"] = (temp, dead, when)  # a DataNode that went away
    calls = _recording_calls(hdfs_store)
    assert hdfs_store.put_exclusive("m/1.json", b"one")
    assert calls[0].startswith("http://127.0.0.1:9/")
    assert any("noredirect" in u for u in calls[1:])  # asked the NameNode again
    assert hdfs_store.read("m/1.json") == b"one"

    assert _spare_ready(hdfs_store, "m")
    calls.clear()
    now = webhdfs_store.time.monotonic()
    monkeypatch.setattr(webhdfs_store.time, "monotonic",
                        lambda: now + webhdfs_store.SPARE_TTL_S + 1)
    assert hdfs_store.put_exclusive("m/2.json", b"two")
    assert "noredirect" in calls[0]  # too old: not used
    assert hdfs_store.read("m/2.json") == b"two"
    assert sorted(f.name for f in hdfs_store.list("m")) == ["0.json", "1.json", "2.json"]
