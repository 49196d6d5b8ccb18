"""One SeaweedFS S3 server and one MiniDFSCluster for a whole parallel run.

Under pytest-xdist each worker that needs a server used to start its own: four
MiniDFSClusters (a JVM each, ~25 CPU-seconds to start on two cores) and four SeaweedFS
servers per ``make test``. The tests only read a server's address and credentials, and
every test works under a prefix of its own (``make_log_url``: a fresh UUID), so one
server per run serves them all.

The xdist controller starts them (:func:`start`, from ``pytest_sessionstart``, once
the downloads are in the caches), each in a thread so the workers' start and collection
go on meanwhile, and stops them after the last worker (:func:`stop`). It writes each
server's address to ``<folder>/<name>.json`` (or why it failed to ``<name>.error``) in the
folder :data:`ENV` names, which the workers inherit; a worker's session fixture waits
for the file (:func:`attach`) and rebuilds a server object with no process of its own:
it never stops the server. Without xdist (``-n 0``, or a single test) :data:`ENV` is
unset and the fixtures start their own servers as before. The MiniDFSCluster stops when
its input closes, so it ends with the controller even if that is killed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

#: the folder of the run's server files (set by the controller, read by its workers)
ENV = "SPARKLOG_TEST_SHARED_SERVERS"
#: how long a worker waits for a server the controller is starting
ATTACH_TIMEOUT_S = 300.0

_running: list = []
_threads: list[threading.Thread] = []
#: the folder this process made in :func:`start` (None: it started nothing)
_started: str | None = None


def _publish(folder: str, name: str, start: Callable[[], object],
             describe: Callable[[object], dict]) -> None:
    """Start a server and write its description (or the failure) for the workers."""
    try:
        server = start()
        _running.append(server)
        body, suffix = json.dumps(describe(server)), ".json"
    except Exception as e:  # the workers' fixtures raise it, naming the server
        body, suffix = f"{type(e).__name__}: {e}", ".error"
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(body)
    os.rename(tmp, os.path.join(folder, name + suffix))


def start_s3():
    """A SeaweedFS S3 server, started (the run's, or a session's own under ``-n 0``)."""
    from tests.s3server import SeaweedS3

    # Its ports are the kernel's choice (its gRPC ports are port+10000, not free_port's):
    # another server may take one before the bind; a new choice then fixes it.
    for attempt in range(3):
        try:
            return SeaweedS3().start()
        except RuntimeError:
            if attempt == 2:
                raise


def start_hdfs():
    """A MiniDFSCluster with the tests' quick-start JVM flags, started."""
    from bench.hdfs_side.minihdfs import MiniHdfs
    from tests import jvm

    return MiniHdfs(java_options=jvm.QUICK_START).start()


def start(wanted: Callable[[str], bool]) -> None:
    """On the xdist controller: start the servers the selected tests need (``wanted``:
    whether tests with the marker ``s3`` / ``hdfs`` are selected), in the background."""
    global _started
    folder = _started = tempfile.mkdtemp(prefix="sparklog-servers-")
    os.environ[ENV] = folder
    jobs = []
    if wanted("s3"):
        jobs.append(("s3", start_s3, lambda s: {
            "bucket": s.bucket, "key": s.key, "secret": s.secret, "ports": s.ports}))
    if wanted("hdfs"):
        jobs.append(("hdfs", start_hdfs, lambda s: {
            "rpc_port": s.rpc_port, "http_port": s.http_port}))
    for name, starter, describe in jobs:
        thread = threading.Thread(target=_publish, args=(folder, name, starter, describe),
                                  name=f"start-{name}", daemon=True)
        thread.start()
        _threads.append(thread)


def stop() -> None:
    """On the controller, after the workers: stop the servers and remove the folder.
    Does nothing in any other process: a pytest a test runs as a child inherits the
    folder's name (and may attach), and ending it must not end the run's servers."""
    global _started
    if _started is None:
        return
    for thread in _threads:
        thread.join(timeout=ATTACH_TIMEOUT_S)
    while _running:
        _running.pop().stop()
    os.environ.pop(ENV, None)
    shutil.rmtree(_started, ignore_errors=True)
    _started = None


def attach(name: str):
    """In a worker: the run's ``name`` server (``"s3"``: a SeaweedS3, ``"hdfs"``: a
    MiniHdfs) without a process of its own, or None when the run shares none. Raises
    RuntimeError if the controller could not start it or it is not up in
    :data:`ATTACH_TIMEOUT_S`."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    path = os.path.join(folder, name)
    deadline = time.monotonic() + ATTACH_TIMEOUT_S
    while not os.path.exists(path + ".json"):
        if os.path.exists(path + ".error"):
            with open(path + ".error") as f:
                raise RuntimeError(f"the run's {name} server did not start: {f.read()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the run's {name} server was not up in {ATTACH_TIMEOUT_S} s")
        time.sleep(0.2)
    with open(path + ".json") as f:
        found = json.load(f)
    if name == "s3":
        from tests.s3server import SeaweedS3

        server = SeaweedS3(bucket=found["bucket"], key=found["key"], secret=found["secret"])
        server.ports = found["ports"]
        return server
    from bench.hdfs_side.minihdfs import MiniHdfs

    server = MiniHdfs()
    server.rpc_port, server.http_port = found["rpc_port"], found["http_port"]
    return server
