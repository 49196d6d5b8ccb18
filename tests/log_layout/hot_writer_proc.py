"""A hot-journal writer process for the crash tests (tests/log_layout/test_hot_crash.py).

``python -m tests.log_layout.hot_writer_proc URL TOPIC PARTITIONS [OPTIONS_JSON]``
claims every partition of TOPIC through one journal and appends rounds of one record
to each partition (at once, so rounds share flushes), printing one JSON line per
acknowledged append, ``{"p": .., "offset": .., "value": ..}``, flushed at once: a
parent that kills it knows exactly what was acknowledged.

``HOT_CRASH=<where>:<n>`` kills the process with SIGKILL at the n-th ``where``:
``upload`` (inside a shared object's upload, half of it written on a local store),
``entry`` (after the object is stored, before its entry is created) or ``acked``
(just after an entry is created, before anyone is told) or ``checkpoint`` (while the
journal's checkpoint is written: half of its bytes are left in its place, as a store
that is not atomic would leave them, then SIGKILL). ``HOT_DEPTH=<k>`` appends k
rounds before waiting for the first (default 1), so a flush takes several appends of
each partition: one segment per partition (``log_layout.hot_plan``).
``HOT_CHECKPOINT=<k>`` writes the journal's checkpoint every k entries (default 3).

``HOT_UPLOADS=<n>`` gives the journal n uploads in flight and keeps HOT_DEPTH rounds
out at all times (a new round as soon as the oldest is acknowledged, and more, up to
four times HOT_DEPTH, while the oldest waits), each hot upload held until another is
out with it (or the producer waits on its oldest round), so every partition is in
several uploads at once. The most uploads seen
out at once is written to the file ``HOT_OVERLAP_FILE``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pyarrow as pa  # noqa: E402

from log_layout import hot_checkpoint, open_log, paths  # noqa: E402
from log_layout.hot_writer import JournalWriter  # noqa: E402


def _crash_at(store, where: str, n: int) -> None:
    count = {"n": 0}

    def hit() -> bool:
        count["n"] += 1
        return count["n"] >= n

    put_new, put_exclusive = store.put_new, store.put_exclusive

    def crashing_put_new(path, data):
        if where == "upload" and path.startswith(paths.HOT_FOLDER) and hit():
            if store.supports_links:  # a local store: leave half a file behind
                with open(store._abs(path), "wb") as f:
                    f.write(bytes(data)[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return put_new(path, data)

    def crashing_put_exclusive(path, data):
        if where == "entry" and path.startswith(paths.HOT_FOLDER) and hit():
            os.kill(os.getpid(), signal.SIGKILL)
        won = put_exclusive(path, data)
        if where == "acked" and path.startswith(paths.HOT_FOLDER) and hit():
            os.kill(os.getpid(), signal.SIGKILL)
        return won

    put_replace = store.put_replace

    def crashing_put_replace(path, data):
        if where == "checkpoint" and path.endswith("/" + hot_checkpoint.NAME) and hit():
            put_replace(path, bytes(data)[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return put_replace(path, data)

    store.put_new, store.put_exclusive = crashing_put_new, crashing_put_exclusive
    store.put_replace = crashing_put_replace


class Overlap:
    """Holds each hot upload until another is out with it or the producer has nothing
    more to give (it waits on its oldest round), and writes the most uploads out at
    once to ``report``."""

    def __init__(self, store, report: str):
        self._changed = threading.Condition()
        self._out = self._most = 0
        self._producer_waits = False
        self._report = report
        self._put_new = store.put_new
        store.put_new = self._held

    def _held(self, path, data):
        if not path.startswith(paths.HOT_FOLDER) or not path.endswith(".wal"):
            return self._put_new(path, data)
        with self._changed:
            self._out += 1
            if self._out > self._most:
                self._most = self._out
                with open(self._report, "w") as f:
                    f.write(str(self._most))
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._out >= 2 or self._producer_waits)
        try:
            return self._put_new(path, data)
        finally:
            with self._changed:
                self._out -= 1

    def result(self, future: concurrent.futures.Future):
        """``future.result()``, releasing held uploads while it waits."""
        if future.done():
            return future.result()
        with self._changed:
            self._producer_waits = True
            self._changed.notify_all()
        try:
            return future.result()
        finally:
            with self._changed:
                self._producer_waits = False


def _done_within(future: concurrent.futures.Future, seconds: float) -> bool:
    done, _ = concurrent.futures.wait([future], timeout=seconds)
    return bool(done)


def main(argv: list[str]) -> int:
    url, topic, partitions = argv[0], argv[1], int(argv[2])
    options = json.loads(argv[3]) if len(argv) > 3 else None
    log = open_log(url, storage_options=options)
    uploads = int(os.environ.get("HOT_UPLOADS", "0"))
    journal = JournalWriter(log.journals, "crash", interval_ms=5,
                            uploads_in_flight=max(1, uploads),
                            checkpoint_entries=int(os.environ.get("HOT_CHECKPOINT", "3")))
    writers = [log.partition(topic, p).claim("crash", journal) for p in range(partitions)]
    crash = os.environ.get("HOT_CRASH")
    if crash:
        where, n = crash.split(":")
        _crash_at(log.store, where, int(n))
    print("ready", flush=True)
    out = sys.stdout
    depth = int(os.environ.get("HOT_DEPTH", "1"))
    if uploads:
        overlap = Overlap(log.store, os.environ["HOT_OVERLAP_FILE"])
        window: collections.deque = collections.deque()
        for r in range(100_000):  # depth rounds out at all times
            window.append([(p, f"r{r}-p{p}", w.append_async(
                pa.table({"value": [f"r{r}-p{p}".encode()]}))) for p, w in enumerate(writers)])
            if len(window) < depth:
                continue
            # a held upload waits for the next flush: feed it rather than wait on it
            oldest = window[0][0][2]
            if len(window) < 4 * depth and not _done_within(oldest, 0.02):
                continue
            for p, value, fut in window.popleft():
                res = overlap.result(fut)
                out.write(json.dumps({"p": p, "offset": res.base_offset, "value": value}) + "\n")
            out.flush()
        return 0
    for first in range(0, 100_000, depth):
        futures = [(p, f"r{r}-p{p}", w.append_async(pa.table({"value": [f"r{r}-p{p}".encode()]})))
                   for r in range(first, first + depth) for p, w in enumerate(writers)]
        for p, value, fut in futures:
            res = fut.result()
            out.write(json.dumps({"p": p, "offset": res.base_offset, "value": value}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
