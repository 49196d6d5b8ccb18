"""Races of ``log_layout.versioned_doc`` writers, forced step by step: a writer paused
between its exclusive create and the listing that judges it, another building on its
version meanwhile (its change took effect: it must say so, and nothing is deleted or
applied twice), a writer whose number was used and pruned meanwhile (its file is an
orphan: deleted, the change rerun), and every interleaving hypothesis picks of a few
writers on a store, plus processes racing on a local folder. Each checks that what
every writer reports is what the final document shows: no lost and no phantom change.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_

from log_layout import acls, open_store, transactions
from log_layout.acls import AclBinding, AclFilter
from log_layout.errors import OutcomeUnknown
from log_layout.versioned_doc import LINEAGE, Version, VersionedDoc

#: how long a step may take before the test calls it hung (a real store is slow to
#: start, never this slow)
WAIT_S = 60
RACE_BACKENDS = ["file", "memory", "s3", "hdfs"]


@pytest.fixture
def st(store):
    url, options = store
    return open_store(url, storage_options=options)


def acl(name: str) -> AclBinding:
    return AclBinding.create("Topic", name, principal="User:alice", operation="Read")


def names(store, folder: str) -> list[str]:
    return sorted(f.name for f in store.list(folder))


class PausingStore:
    """``store``, except that the thread ``pause_in`` names stops at its first
    ``put_exclusive`` (``before`` or after it) until ``resume`` is set; ``reached`` is
    set when it stops. Every other call goes to ``store`` unchanged."""

    def __init__(self, store, *, before: bool = False):
        self.store, self.before = store, before
        self.pause_in: int | None = None
        self.reached, self.resume = threading.Event(), threading.Event()
        self.created: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def put_exclusive(self, path: str, data: bytes) -> bool:
        mine = threading.get_ident() == self.pause_in and not self.reached.is_set()
        if mine and self.before:
            self._stop()
        won = self.store.put_exclusive(path, data)
        if mine and not self.before:
            self.created.append(path if won else "")
            self._stop()
        return won

    def _stop(self) -> None:
        self.reached.set()
        assert self.resume.wait(WAIT_S), "never resumed"


def paused(store: PausingStore, work: Callable[[], Any]) -> tuple[threading.Thread, list]:
    """Start ``work`` in a thread that ``store`` pauses; wait until it is paused."""
    out: list = []

    def run() -> None:
        store.pause_in = threading.get_ident()
        try:
            out.append(("ok", work()))
        except BaseException as e:  # noqa: BLE001 - the test reads it
            out.append(("raised", e))

    t = threading.Thread(target=run)
    t.start()
    assert store.reached.wait(WAIT_S), f"the writer never paused: {out}"
    return t, out


def finish(store: PausingStore, t: threading.Thread, out: list) -> Any:
    store.resume.set()
    t.join(WAIT_S)
    assert not t.is_alive() and out, "the paused writer never finished"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


# -- the bug: a version built upon is the writer's success ------------------------------
@pytest.mark.parametrize("backend", RACE_BACKENDS)
def test_a_removal_another_writer_built_upon_is_reported_and_kept(st):
    """A removes ACL ``gone`` (version 2) and pauses before judging its create; B adds
    ``x`` on top of A's version (3). A's removal took effect: A reports it, and its
    version stays (B's is built on it). It used to see 3 > 2, delete 2 and run again,
    finding ``gone`` already removed: ``remove_acls`` answered [] for a removal it made.
    """
    acls.add_acls(st, [acl("gone")])
    pausing = PausingStore(st)
    t, out = paused(pausing, lambda: acls.remove_acls(
        pausing, [AclFilter.create("Topic", "gone")]))
    assert pausing.created == ["_security/acls/00000000000000000002.json"]
    assert acls.add_acls(st, [acl("x")]) == [acl("x")]  # B: version 3, on A's 2
    assert finish(pausing, t, out) == [acl("gone")]
    assert acls.load(st) == acls.Acls(3, (acl("x"),))
    assert names(st, "_security/acls") == [f"{n:020d}.json" for n in (1, 2, 3)]


def test_an_init_built_upon_is_not_bumped_twice(tmp_path):
    """Two ``init_transactions`` of one id: A's (epoch 1) is built upon by B's (epoch
    2). A gets epoch 1 (then fenced by B, as Kafka's coordinator would); it used to
    rerun its init on B's version and bump again, to 3, fencing B with no third init."""
    st = open_store(str(tmp_path / "store"))
    log = types.SimpleNamespace(store=st)
    pid, epoch = transactions.init_transactions(log, "app", 60_000)
    assert epoch == 0
    pausing = PausingStore(st)
    t, out = paused(pausing, lambda: transactions.init_transactions(
        types.SimpleNamespace(store=pausing), "app", 60_000))
    assert transactions.init_transactions(log, "app", 60_000) == (pid, 2)  # B
    assert finish(pausing, t, out) == (pid, 1)
    assert transactions.describe(log, "app")["epoch"] == 2


# -- orphans: a number used and pruned meanwhile ----------------------------------------
@pytest.mark.parametrize("backend", RACE_BACKENDS)
def test_a_create_under_a_pruned_number_is_an_orphan_and_runs_again(st):
    """A reads version 1 and stops before its create; others write 2..5 and prune all
    but 4 and 5 (kept=2). A's create of 2 succeeds (the name is free again) but nothing
    is built on it: A deletes it and applies its change on 5, as 6."""
    folder = "_docs/orphan"
    VersionedDoc(st, folder, kept=2).update(lambda cur: {"log": ["first"]})
    pausing = PausingStore(st, before=True)
    mine = VersionedDoc(pausing, folder, kept=2)
    t, out = paused(pausing, lambda: mine.update(
        lambda cur: {"log": [*cur.doc["log"], "A"]}))
    others = VersionedDoc(st, folder, kept=2)
    for i in range(4):
        others.update(lambda cur, i=i: {"log": [*cur.doc["log"], f"B{i}"]})
    assert names(st, folder) == [f"{n:020d}.json" for n in (4, 5)]
    won = finish(pausing, t, out)
    assert won.number == 6 and won.doc == {"log": ["first", "B0", "B1", "B2", "B3", "A"]}
    assert others.newest() == won
    assert names(st, folder) == [f"{n:020d}.json" for n in (5, 6)]


def test_an_outcome_past_the_lineage_is_unknown_and_nothing_is_deleted(tmp_path):
    """A writer that stops after its create while more than LINEAGE versions are built
    (the newest no longer says which version it was) raises OutcomeUnknown, an OSError:
    a store failure's outcome is unknown too. Its version is left alone."""
    st = open_store(str(tmp_path / "store"))
    folder = "_docs/unknown"
    pausing = PausingStore(st)
    mine = VersionedDoc(pausing, folder, kept=LINEAGE + 5)
    t, out = paused(pausing, lambda: mine.update(lambda cur: {"n": 1}))
    others = VersionedDoc(st, folder, kept=LINEAGE + 5)
    for _ in range(LINEAGE):
        others.update(lambda cur: {"n": cur.doc["n"] + 1})
    with pytest.raises(OutcomeUnknown, match="version 1 of _docs/unknown") as e:
        finish(pausing, t, out)
    assert isinstance(e.value, OSError)
    assert f"{1:020d}.json" in names(st, folder)
    assert others.newest().doc == {"n": LINEAGE + 1}


# -- the format: the lineage, and documents written before it ---------------------------
def test_each_version_names_its_lineage_and_readers_never_see_it(tmp_path):
    st = open_store(str(tmp_path / "store"))
    docs = VersionedDoc(st, "_docs/fmt", kept=3)
    made = [docs.update(lambda cur, i=i: {"i": i}) for i in range(LINEAGE + 2)]
    newest = docs.newest()
    assert newest.doc == {"i": LINEAGE + 1} and "_lineage" not in newest.doc
    raw = json.loads(st.read(f"_docs/fmt/{LINEAGE + 2:020d}.json"))
    assert raw["_lineage"] == {"number": LINEAGE + 2,
                               "ids": [v.lineage[0] for v in reversed(made)][:LINEAGE]}
    assert len(newest.lineage) == LINEAGE and newest.lineage == tuple(raw["_lineage"]["ids"])
    assert len({v.lineage[0] for v in made}) == len(made)  # each version its own id


def test_a_document_written_before_lineages_still_reads_and_is_built_on(tmp_path):
    """A version without ``_lineage`` (an older sparklog's, or one written by hand)
    loads as before; the next version's lineage starts with itself. A ``_lineage``
    whose number is not its file's (an older sparklog copied its parent's document)
    is no lineage either."""
    st = open_store(str(tmp_path / "store"))
    st.put_exclusive("_docs/old/00000000000000000001.json", b'{"n": 1}')
    st.put_exclusive("_docs/old/00000000000000000002.json", json.dumps(
        {"n": 2, "_lineage": {"number": 1, "ids": ["aaaaaaaaaaaa"]}}).encode())
    docs = VersionedDoc(st, "_docs/old")
    assert docs.newest() == Version(2, {"n": 2})
    won = docs.update(lambda cur: {"n": cur.doc["n"] + 1})
    assert won.number == 3 and len(won.lineage) == 1
    assert docs.newest() == won


# -- every interleaving of a few writers --------------------------------------------------
class Scheduler:
    """Runs writer threads one store call at a time, in the order ``picks`` chooses:
    before each store call a writer parks, and the scheduler lets exactly one parked
    writer go until it parks again or finishes. Deterministic for given picks."""

    def __init__(self, store):
        self.store = store
        self.cond = threading.Condition()
        self.parked: dict[int, bool] = {}  # writer -> parked now
        self.go: int | None = None
        self.done: set[int] = set()
        self.me = threading.local()

    def gate(self) -> None:
        w = getattr(self.me, "writer", None)
        if w is None:
            return
        with self.cond:
            self.parked[w] = True
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: self.go == w, WAIT_S), "never let go"
            self.go, self.parked[w] = None, False

    def wrap(self) -> Any:
        sched = self

        class Gated:
            def __getattr__(self, name: str) -> Any:
                target = getattr(sched.store, name)
                if name not in ("list", "read", "put_exclusive", "delete"):
                    return target

                def call(*a, **kw):
                    sched.gate()
                    return target(*a, **kw)
                return call
        return Gated()

    def run(self, writers: list[Callable[[], Any]], picks: list[int]) -> list[Any]:
        results: list[Any] = [None] * len(writers)

        def body(w: int) -> None:
            self.me.writer = w
            try:
                results[w] = ("ok", writers[w]())
            except BaseException as e:  # noqa: BLE001 - the test reads it
                results[w] = ("raised", e)
            with self.cond:
                self.done.add(w)
                self.cond.notify_all()

        threads = [threading.Thread(target=body, args=(w,)) for w in range(len(writers))]
        for t in threads:
            t.start()
        step = 0
        with self.cond:
            while len(self.done) < len(writers):
                live = [w for w in range(len(writers)) if w not in self.done]
                assert self.cond.wait_for(
                    lambda: self.go is None and all(self.parked.get(w) or w in self.done
                                                    for w in live), WAIT_S), "stuck"
                live = sorted(w for w in live if w not in self.done)
                if not live:
                    break
                pick = picks[step] if step < len(picks) else 0
                step += 1
                self.go = live[pick % len(live)]
                self.parked[self.go] = False
                self.cond.notify_all()
                assert self.cond.wait_for(
                    lambda: self.go is None or self.go in self.done, WAIT_S), "hung"
                if self.go in self.done:
                    self.go = None
        for t in threads:
            t.join(WAIT_S)
        return results


def appender(docs: VersionedDoc, token: str) -> Callable[[], Version | None]:
    """A writer that appends ``token`` to the document's log (nothing if it is there:
    a rerun of a change that took effect finds it and reports nothing)."""
    def change(cur: Version) -> dict[str, Any] | None:
        log = cur.doc.get("log", [])
        return None if token in log else {"log": [*log, token]}
    return lambda: docs.update(change)


def check_reports(store, folder: str, reports: dict[str, Version | None],
                  base: list[str]) -> None:
    """Every writer reports the version its token went in with, and the final log holds
    each token once, at the place its version's number says: no lost, no phantom and
    no doubled change."""
    final = VersionedDoc(store, folder).newest()
    assert final is not None
    log = final.doc.get("log", [])
    assert len(log) == len(set(log)), f"a change applied twice: {log}"
    assert sorted(log) == sorted(base + list(reports)), f"lost or phantom: {log}"
    for token, won in reports.items():
        assert won is not None, f"{token} reported no change, yet its token is in {log}"
        assert won.doc["log"][-1] == token
        assert log[won.number - 1] == token, (token, won.number, log)
    assert final.number == len(log)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(writers=st_.integers(2, 4), kept=st_.integers(1, 3), each=st_.integers(1, 2),
       picks=st_.lists(st_.integers(0, 3), max_size=80))
def test_every_interleaving_reports_what_the_document_shows(writers, kept, each, picks):
    """Writers append their own tokens (``each`` changes each) on a memory store with
    few versions kept, one store call at a time in the order ``picks`` says: slow
    writers meet built-upon versions, pruned numbers and orphans."""
    from tests.conftest import empty_memory_filesystem

    empty_memory_filesystem()
    store = open_store("memory://vdoc-sched")
    folder = "_docs/sched"
    VersionedDoc(store, folder, kept=kept).update(lambda cur: {"log": ["base"]})
    sched = Scheduler(store)
    gated = sched.wrap()
    docs = VersionedDoc(gated, folder, kept=kept)

    def writer(w: int) -> Callable[[], list[Version | None]]:
        return lambda: [appender(docs, f"w{w}-{j}")() for j in range(each)]

    results = sched.run([writer(w) for w in range(writers)], picks)
    reports: dict[str, Version | None] = {}
    for w, (kind, value) in enumerate(results):
        assert kind == "ok", value
        reports.update({f"w{w}-{j}": v for j, v in enumerate(value)})
    check_reports(store, folder, reports, ["base"])
    # every orphan was deleted by its writer; what is left is the pruning's lag
    assert len(store.list(folder)) <= kept + writers


# -- processes racing on a local folder and on every store ------------------------------
def _process_writer(url: str, folder: str, w: int, each: int, kept: int, start, out) -> None:
    store = open_store(url)
    docs = VersionedDoc(store, folder, kept=kept)
    start.wait()
    got = {}
    for j in range(each):
        won = appender(docs, f"p{w}-{j}")()
        got[f"p{w}-{j}"] = None if won is None else (won.number, won.doc)
    out.put(got)


def test_processes_racing_lose_and_invent_nothing(tmp_path):
    """Three processes append 10 tokens each to one document on a local folder,
    keeping 2 versions: every report matches the final document."""
    url, folder, each = str(tmp_path / "store"), "_docs/procs", 10
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(url, folder, w, each, 2, start, out))
             for w in range(3)]
    for p in procs:
        p.start()
    start.set()
    reports = {}
    for _ in procs:
        reports.update({t: None if v is None else Version(v[0], v[1])
                        for t, v in out.get(timeout=WAIT_S).items()})
    for p in procs:
        p.join(WAIT_S)
        assert p.exitcode == 0
    check_reports(open_store(url), folder, reports, [])


@pytest.mark.parametrize("backend", RACE_BACKENDS)
def test_threads_racing_lose_and_invent_nothing(st):
    """Four threads append 6 tokens each, keeping 2 versions, on every store."""
    folder, each = "_docs/threads", 6
    docs = VersionedDoc(st, folder, kept=2)
    barrier = threading.Barrier(4)
    reports: dict[str, Version | None] = {}
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            barrier.wait()
            for j in range(each):
                reports[f"t{w}-{j}"] = appender(docs, f"t{w}-{j}")()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    check_reports(st, folder, reports, [])


# -- crashes: a writer killed right after its create ------------------------------------
class _StaleThenKilled:
    """A local store as a writer that read version ``stale`` long ago sees it (its
    listing and read answer that version), killed (SIGKILL) right after its create."""

    def __init__(self, store, stale: int, raw: bytes | None):
        self.store, self.stale, self.raw = store, stale, raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def list(self, folder: str):
        if self.raw is None:
            return self.store.list(folder)
        return [f for f in self.store.list(folder)
                if f.name == f"{self.stale:020d}.json"] or [
            types.SimpleNamespace(name=f"{self.stale:020d}.json")]

    def read(self, path: str) -> bytes:
        return self.raw if self.raw is not None else self.store.read(path)

    def put_exclusive(self, path: str, data: bytes) -> bool:
        won = self.store.put_exclusive(path, data)
        os.kill(os.getpid(), signal.SIGKILL)
        return won


def _killed_writer(url: str, folder: str, stale: int, raw: bytes | None) -> None:
    store = _StaleThenKilled(open_store(url), stale, raw)
    VersionedDoc(store, folder, kept=2).update(
        lambda cur: {"log": [*cur.doc["log"], "killed"]})


def test_a_writer_killed_after_its_create_breaks_nothing(tmp_path):
    """Two writers are SIGKILLed right after their create: one that won (its version
    is the document) and one whose snapshot was so old that its number had been used
    and pruned (its file is an orphan under the newest). Readers read the newest;
    the next writer builds on it and its pruning deletes the orphan."""
    url = str(tmp_path / "store")
    st = open_store(url)
    won_f, orphan_f = "_docs/killed-won", "_docs/killed-orphan"
    VersionedDoc(st, won_f, kept=2).update(lambda cur: {"log": ["a"]})
    docs = VersionedDoc(st, orphan_f, kept=2)
    docs.update(lambda cur: {"log": ["a"]})
    old = st.read(f"{orphan_f}/{1:020d}.json")  # what the slow writer read long ago
    for i in range(4):
        docs.update(lambda cur, i=i: {"log": [*cur.doc["log"], f"b{i}"]})
    assert names(st, orphan_f) == [f"{n:020d}.json" for n in (4, 5)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_killed_writer, args=(url, won_f, 0, None)),
             ctx.Process(target=_killed_writer, args=(url, orphan_f, 1, old))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(WAIT_S)
        assert p.exitcode == -signal.SIGKILL
    # the winner's version is the document
    assert VersionedDoc(st, won_f).newest().doc == {"log": ["a", "killed"]}
    # the orphan is there, below the newest, and nobody reads it
    assert names(st, orphan_f) == [f"{n:020d}.json" for n in (2, 4, 5)]
    assert docs.newest().number == 5 and "killed" not in docs.newest().doc["log"]
    won = docs.update(lambda cur: {"log": [*cur.doc["log"], "next"]})
    assert won.number == 6 and won.doc["log"] == ["a", "b0", "b1", "b2", "b3", "next"]
    assert names(st, orphan_f) == [f"{n:020d}.json" for n in (5, 6)]
