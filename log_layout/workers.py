"""A few helper threads, for work that overlaps a system call of the calling thread.

Two users: the fsyncs of one commit, run side by side (``store``), and the CRC-32
of a large segment, taken while the calling thread is in the kernel copying the
same bytes into a file (``partition``). Both release the GIL. A forked child makes
threads of its own: its parent's do not exist in it.
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
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        with _lock:
            if _pool is None or _pool_pid != os.getpid():
                _pool, _pool_pid = ThreadPoolExecutor(4, thread_name_prefix="sparklog-io"), \
                    os.getpid()
    return _pool


def submit(fn: Callable[..., Any], *args: Any) -> Future:
    """Run ``fn(*args)`` on a helper thread."""
    return _executor().submit(fn, *args)


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
