"""The store primitives on every backend: exclusive create, listing, deletes; bad URLs."""

from __future__ import annotations

import os
import threading

import pytest

from log_layout import StoreError, open_store


@pytest.fixture
def st(store):
    url, options = store
    return open_store(url, storage_options=options)


def test_put_exclusive_creates_once(st):
    assert st.put_exclusive("a/b/x.json", b"first")
    assert not st.put_exclusive("a/b/x.json", b"second")
    assert st.read("a/b/x.json") == b"first"
    assert bytes(st.read_buffer("a/b/x.json")) == b"first"


def test_put_exclusive_race_has_one_winner(st):
    barrier = threading.Barrier(8)
    wins = []

    def put(i):
        barrier.wait()
        if st.put_exclusive("race/v.json", f"writer {i}".encode()):
            wins.append(i)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and st.read("race/v.json") == f"writer {wins[0]}".encode()
    assert [f.name for f in st.list("race")] == ["v.json"]  # no temp file left behind


def test_put_new_replace_list_delete(st):
    st.put_new("p/seg.arrow", b"12345")
    if not st.url.startswith("s3"):  # S3 uses a plain PUT there: segment names are unique
        with pytest.raises(FileExistsError):
            st.put_new("p/seg.arrow", b"again")
    st.put_replace("p/meta.json", b"1")
    st.put_replace("p/meta.json", b"22")
    assert st.read("p/meta.json") == b"22"
    files = {f.name: f.size for f in st.list("p")}
    assert files == {"seg.arrow": 5, "meta.json": 2}
    assert st.list("nope") == [] and st.list_folders("nope") == []
    st.put_new("p/q/deeper.arrow", b"x")
    assert st.list_folders("p") == ["q"]
    st.delete(["p/seg.arrow", "p/seg.arrow", "p/never-was"])  # gone or never there: fine
    assert {f.name for f in st.list("p")} == {"meta.json"}
    with pytest.raises(FileNotFoundError):
        st.read("p/seg.arrow")
    with pytest.raises(FileNotFoundError):
        st.read_buffer("p/seg.arrow")
    st.delete_tree("p")
    st.delete_tree("p")
    assert st.list("p") == [] and not st.exists("p/meta.json")


@pytest.mark.parametrize("n", [10, 1 << 20])  # read, and memory-mapped (>= 512 KB)
def test_read_buffer_and_read_tail_take_part_of_a_file(st, n):
    data = bytes(range(256)) * (2 * n // 256 + 1)
    st.put_new("r/f", data)
    assert bytes(st.read_buffer("r/f", n)) == data[:n]
    assert bytes(st.read_buffer("r/f", len(data) + 5)) == data  # more than there is: all
    assert st.read_tail("r/f", n) == (data[-n:], len(data))
    assert st.read_tail("r/f", len(data) + 5) == (data, len(data))


def test_empty_file_reads(st):
    st.put_new("e/empty", b"")
    assert bytes(st.read_buffer("e/empty")) == b"" and st.read("e/empty") == b""
    assert st.read_tail("e/empty", 10) == (b"", 0)


def test_read_tail_of_a_file_exactly_that_long_or_missing(st):
    st.put_new("t/f", b"0123456789")
    assert st.read_tail("t/f", 10) == (b"0123456789", 10)
    assert st.read_tail("t/f", 3) == (b"789", 10)
    with pytest.raises(FileNotFoundError):
        st.read_tail("t/missing", 10)


@pytest.mark.parametrize("url", ["", "   ", None, "nosuchscheme://bucket/x"])
def test_bad_urls_raise_store_error(url):
    with pytest.raises(StoreError) as e:
        open_store(url)
    assert "store" in str(e.value)


def test_describe_reopens(st):
    again = open_store(**st.describe())
    st.put_replace("d.json", b"x")
    assert again.read("d.json") == b"x"


def _open_fds() -> int:
    """Open file descriptors of this process on regular files: not sockets or pipes, which
    other tests' helper threads may open meanwhile (an HDFS store asks for its next
    DataNode location in the background)."""
    import os
    import stat

    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += stat.S_ISREG(os.stat(f"/proc/self/fd/{fd}").st_mode)
        except OSError:  # closed meanwhile (the listing's own fd among them)
            pass
    return count


def test_local_segment_fsyncs_wait_for_the_commit_and_leak_nothing(tmp_path):
    """Segments written by put_new are made durable by the next exclusive commit of the
    same thread (in parallel with it); a segment deleted before its commit is dropped."""
    import os

    st = open_store(str(tmp_path / "s"))
    before = _open_fds()
    for i in range(3):
        st.put_new(f"p/{i}.arrow", b"x" * 1000)
    assert _open_fds() == before + 3  # pending: fsynced at the commit
    assert st.put_exclusive("p/_log/1.json", b"{}")
    assert _open_fds() == before
    st.put_new("p/dropped.arrow", b"y")
    st.delete(["p/dropped.arrow"])
    assert _open_fds() == before and not os.path.exists(tmp_path / "s" / "p" / "dropped.arrow")
    for i in range(70):  # many segments before one commit: flushed in bounded groups
        st.put_new(f"q/{i}.arrow", b"z")
    assert _open_fds() <= before + 65
    st.put_replace("q/meta.json", b"1")
    assert _open_fds() == before
    assert sorted(f.name for f in st.list("p")) == ["0.arrow", "1.arrow", "2.arrow"]


def test_local_commits_from_many_threads(tmp_path):
    """Each thread's pending segments are its own: a commit never waits on another's."""
    st = open_store(str(tmp_path / "s"))
    before = _open_fds()
    errors = []

    def work(t):
        try:
            for i in range(20):
                st.put_new(f"t{t}/{i}.arrow", b"s" * 100)
                assert st.put_exclusive(f"t{t}/_log/{i}.json", b"m")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and _open_fds() == before
    assert all(len(st.list(f"t{t}")) == 20 for t in range(6))


def test_memory_listing_while_another_thread_deletes():
    """fsspec's memory listing reads every name it found a second time: a file deleted
    in between raised KeyError out of ``list`` (met once by an ACL race test); the
    store serialises its memory listings and deletes."""
    import uuid

    st = open_store(f"memory://list-race-{uuid.uuid4().hex}")
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        i = 0
        while not stop.is_set():
            st.put_replace(f"d/f{i % 50}", b"x")
            st.delete([f"d/f{(i + 25) % 50}"])
            i += 1

    def lister() -> None:
        try:
            for _ in range(5000):
                st.list("d")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    churner = threading.Thread(target=churn)
    churner.start()
    listers = [threading.Thread(target=lister) for _ in range(2)]
    for t in listers:
        t.start()
    for t in listers:
        t.join()
    stop.set()
    churner.join()
    assert errors == []


def _open_paths() -> set[str]:
    """The files this process holds a descriptor on."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return held


def test_a_file_written_on_one_thread_is_made_durable_by_a_commit_on_another(tmp_path):
    """A hot object is uploaded on one thread and named by a journal entry committed on
    another: the local store's pending fsync of the object runs with that commit (it
    was per thread, and an upload thread that never committed kept every object's
    descriptor open: 898 in one test worker), and then no descriptor is left."""
    store = open_store(str(tmp_path / "s"), fsync=True)
    uploader = threading.Thread(target=store.put_new, args=("j/0-a.wal", b"x" * 100))
    uploader.start()
    uploader.join()
    obj = str(tmp_path / "s" / "j" / "0-a.wal")
    assert obj in _open_paths()  # written, its fsync owed to the next commit
    assert store.put_exclusive("j/0.json", b"entry")
    assert obj not in _open_paths()
    assert store.read("j/0-a.wal") == b"x" * 100
