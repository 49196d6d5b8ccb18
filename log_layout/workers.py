"""A few helper threads, for work that overlaps a system call of the calling thread.

Three users: the fsyncs of one commit, run side by side (``store``), the CRC-32
of a large segment, taken while the calling thread is in the kernel copying the
same bytes into a file (``partition``), and on HDFS an append's segment, written
while the calling thread writes its manifest version (``segment_commit``). All
release the GIL. A forked child makes threads of its own: its parent's do not
exist in it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: whether this process may run on more than one CPU: overlapping work pays only then
PARALLEL = len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") \
    else (os.cpu_count() or 1) > 1

_lock = threading.Lock()
_pools: dict[str, tuple[ThreadPoolExecutor, int]] = {}  # kind -> (pool, pid that made it)
#: threads per kind: fsyncs wait on the disk, checksums only compute (and must not
#: queue behind a slow fsync), "remote" writes wait tens of milliseconds on a remote
#: store (HDFS), one per partition being flushed: the pool must not serialise them
_THREADS = {"io": 4, "cpu": 2, "remote": 32}


def _executor(kind: str) -> ThreadPoolExecutor:
    entry = _pools.get(kind)
    if entry is None or entry[1] != os.getpid():
        with _lock:
            entry = _pools.get(kind)
            if entry is None or entry[1] != os.getpid():
                entry = _pools[kind] = (ThreadPoolExecutor(
                    _THREADS[kind], thread_name_prefix=f"sparklog-{kind}"), os.getpid())
    return entry[0]


def submit(fn: Callable[..., Any], *args: Any, kind: str = "io") -> Future:
    """Run ``fn(*args)`` on a helper thread: ``kind`` "io" for work that waits on a
    device, "remote" for a write to a remote store, "cpu" for work that only computes."""
    return _executor(kind).submit(fn, *args)


def run_all(tasks: list[tuple[Callable[[Any], Any], Any]]) -> None:
    """Run ``fn(arg)`` for each task, in parallel (the first on this thread); raise the
    first error after all have finished."""
    if len(tasks) <= 1:
        for fn, arg in tasks:
            fn(arg)
        return
    futures = [submit(fn, arg) for fn, arg in tasks[1:]]
    error: BaseException | None = None
    try:
        tasks[0][0](tasks[0][1])
    except BaseException as e:  # wait for the others before raising: they may use our fds
        error = e
    for f in futures:
        try:
            f.result()
        except BaseException as e:
            error = error or e
    if error is not None:
        raise error
