"""A writer process for the race and crash tests.

``python -m tests.log_layout.writer_proc URL TOPIC NAME MODE COUNT ROWS [OPTIONS_JSON]``
appends ``COUNT`` batches of ``ROWS`` records to partition 0 of ``TOPIC`` and
prints one JSON line per acknowledged append (``{"base": .., "last": .., "tag": ..}``),
flushed at once, so a parent that kills it knows exactly what was acknowledged.
``MODE`` is ``claim`` (claim the partition first; stop quietly when fenced) or
``writer`` (a same-epoch writer that rebases). Values are ``<NAME>-<batch>-<row>``.
With ``WRITER_PROC_CRASH_AT=N`` in the environment the process kills itself
with SIGKILL inside its N-th manifest commit, after the segment (and, locally,
the commit's temp file) is written and before the commit: a crash at the
worst moment, on purpose.
Prints ``ready`` and waits for a line on stdin before the first append, so that
racing processes start together.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pyarrow as pa  # noqa: E402

from log_layout import Fenced, open_log  # noqa: E402


def main(argv: list[str]) -> int:
    url, topic, name, mode, count, rows = argv[:6]
    options = json.loads(argv[6]) if len(argv) > 6 else None
    part = open_log(url, storage_options=options).partition(topic, 0)
    part.snapshot()
    crash_at = int(os.environ.get("WRITER_PROC_CRASH_AT", "0"))
    if crash_at:
        _crash_inside_commit(part.store, crash_at)
    print("ready", flush=True)
    sys.stdin.readline()  # the start signal
    w = part.claim(name) if mode == "claim" else part.writer()
    out = sys.stdout
    for b in range(int(count)):
        tag = f"{name}-{b}"
        values = [f"{tag}-{r}".encode() for r in range(int(rows))]
        try:
            r = w.append(pa.table({"value": values}))
        except Fenced:
            out.write(json.dumps({"fenced": w.epoch}) + "\n")
            out.flush()
            return 0
        out.write(json.dumps({"base": r.base_offset, "last": r.last_offset, "tag": tag,
                              "version": r.version, "epoch": w.epoch}) + "\n")
        out.flush()
    return 0


def _crash_inside_commit(store, n: int) -> None:
    """SIGKILL this process inside its n-th manifest commit: segment stored, manifest
    not. Local stores die just before the link (an append) or rename (other commits)
    that creates the version; HDFS before the rename of the version's written temp
    file; S3 and memory before the conditional PUT."""
    import signal

    from log_layout import local_store as store_module
    from log_layout.webhdfs_store import WebHdfsStore

    commits = []

    def die_at_n(path):
        if "/_log/" in path:
            commits.append(path)
            if len(commits) == n:
                os.kill(os.getpid(), signal.SIGKILL)

    if isinstance(store, store_module.LocalStore):  # appends link, other commits rename
        link, rename = os.link, store_module._rename_noreplace

        def crashing_link(src, dst, **kwargs):
            die_at_n(dst)
            return link(src, dst, **kwargs)

        def crashing_rename(src, dst):
            die_at_n(dst)
            return rename(src, dst)

        os.link, store_module._rename_noreplace = crashing_link, crashing_rename
    elif isinstance(store, WebHdfsStore):
        hdfs_rename = store._rename

        def crashing_hdfs_rename(src, dst, options):
            die_at_n(dst)
            return hdfs_rename(src, dst, options)

        store._rename = crashing_hdfs_rename
    else:
        put = store.put_exclusive

        def crashing_put_exclusive(path, data):
            die_at_n(path)
            return put(path, data)

        store.put_exclusive = crashing_put_exclusive


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
