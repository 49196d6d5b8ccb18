"""Shared fixtures: the store backends, the S3 and HDFS servers, one SparkSession.

``log`` runs a test once per backend: a local folder, fsspec's memory
filesystem, a real S3 server (SeaweedFS on 127.0.0.1) and a real HDFS
(a MiniDFSCluster on 127.0.0.1, reached over WebHDFS), each server started once
per session. ``spark`` is one local SparkSession for the whole run (a cold start
costs seconds).

Under pytest-xdist (``make test`` runs ``-n``) the controller starts the S3 server and
the MiniDFSCluster once for all its workers (tests/shared_servers.py; every test has a
prefix of its own on them) and each worker starts its own SparkSession (ports:
``jobs.gateway_process.free_port`` never hands one out twice, across processes);
tests that share a module- or class-scoped fixture run on one worker (:func:`_group`),
and the slowest modules start first.
"""

from __future__ import annotations

import os
import sys
import uuid
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from log_layout import open_log  # noqa: E402
from tests import jvm, shared_servers  # noqa: E402

jvm.install()  # before any JVM starts: every worker and child inherits it
# the suite's ~300 gateways fork from a warm parent instead of each importing pyarrow,
# kio and the app afresh (jobs/gateway_forkserver.py): ~1 CPU-s less a start
os.environ.setdefault("SPARKLOG_FORK_GATEWAYS", "1")

BACKENDS = ["file", "memory", "s3", "hdfs"]
#: backends on a server, each marked with its name (``-m "not hdfs"`` deselects it)
SERVER_BACKENDS = ("s3", "hdfs")


@pytest.fixture(scope="session")
def s3_server():
    shared = shared_servers.attach("s3")
    if shared is not None:  # the run's one server (tests/shared_servers.py)
        yield shared
        return
    server = shared_servers.start_s3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def hdfs_server():
    shared = shared_servers.attach("hdfs")
    if shared is not None:
        yield shared
        return
    server = shared_servers.start_hdfs()
    try:
        yield server
    finally:
        server.stop()


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


#: markers set at collection from the fixtures a test uses (``-m "not browser"`` ...)
FIXTURE_MARKERS = {"spark": "spark", "driver": "browser"}
#: modules whose tests all need a tool ``make test`` installs (``make kcat``)
MODULE_MARKERS = {"test_kcat.py": "kcat"}
#: a module importing one of these starts a Spark application (the broker app)
SPARK_APPS = ("BrokerAppProcess", "StandaloneCluster")


# tryfirst: xdist's own hook turns the xdist_group marks into node ids; it must see them
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark ``s3`` (``hdfs``) every test that runs on the S3 (HDFS) backend, so
    ``-m "not s3"`` deselects it; mark ``spark``, ``browser`` and ``kcat`` the tests that
    use a SparkSession (or start a Spark application), Chromium or kcat (``make test-fast``
deselects them all).

    The mark must be set at collection: ``request.applymarker`` inside a fixture
    runs at setup, after ``-m`` has chosen the tests. Marks on a fixture's
    ``pytest.param`` would not do either: an indirect ``parametrize`` replaces the
    fixture's params. So the rule reads the collected parameters: in this suite a
    parameter value ``"s3"`` (``"hdfs"``) always names that backend (``backend``,
    ``gateway_store``, ``spark_store``, a test's own ``backend`` list).

    Then, for xdist: each test sharing a module- or class-scoped fixture joins its
    module's group for its backend (``--dist loadgroup`` runs a group on one worker, so
    the fixture starts once), and modules with slow tests go first, so no long test
    starts last while the other workers sit idle.
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
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in fixtures:
                item.add_marker(getattr(pytest.mark, marker))
        marker = MODULE_MARKERS.get(item.path.name)
        if marker:
            item.add_marker(getattr(pytest.mark, marker))
        if any(hasattr(getattr(item, "module", None), name) for name in SPARK_APPS):
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("xdist_group") is None:
            group = _group(item, params)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
    if not hasattr(config, "workerinput"):  # not an xdist worker: keep the file order
        return
    rank: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        rank[module] = min(rank.get(module, 2), _heaviness(item))
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: order in a module kept


#: xdist groups the SparkSession tests are spread over: each worker that runs one starts a
#: local Spark (a JVM, ~1 GB, 10-30 s of two cores), so they share a few workers, not all
SPARK_GROUPS = 2


def _group(item, params) -> str | None:
    """The xdist group of a test that shares a fixture wider than a function with other
    tests: the session's Spark (one of :data:`SPARK_GROUPS`, by module), else its module
    (plus its backend: each backend has its own module fixtures)."""
    module = item.nodeid.split("::")[0]
    if "spark" in getattr(item, "fixturenames", ()):
        return f"spark-{zlib.crc32(module.encode()) % SPARK_GROUPS}"
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if not any(d.scope in ("module", "class", "package") for fds in defs.values() for d in fds):
        return None
    backend = next((v for v in params if isinstance(v, str) and v in BACKENDS), "")
    return f"{module}:{backend}"


def _heaviness(item) -> int:
    """0: a slow or Spark test (its module starts first), 1: a server's, 2: the rest."""
    if item.get_closest_marker("slow") or item.get_closest_marker("spark"):
        return 0
    if any(item.get_closest_marker(name) for name in SERVER_BACKENDS):
        return 1
    return 2


def pytest_configure(config):
    """Per-test CPU into ``$SPARKLOG_TEST_CPU_LOG`` when it is set (tests/cpu_time.py)."""
    from tests.cpu_time import register

    register(config)


def pytest_sessionstart(session):
    """On the xdist controller, before its workers start: fill the download caches the
    selected tests need, one download at a time (tests/warm_caches.py)."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from _pytest.mark.expression import Expression

    expr = config.option.markexpr
    compiled = Expression.compile(expr) if expr else None

    def wanted(marker: str) -> bool:
        return compiled is None or compiled.evaluate(lambda name, **_: name == marker)

    from tests.warm_caches import warm

    try:
        warm(wanted, log=lambda msg: print(msg, flush=True))
    except Exception as e:  # the workers fetch for themselves and fail with the reason
        print(f"warming the download caches failed ({e}); the tests fetch on first use",
              flush=True)
    shared_servers.start(wanted)  # one S3 server and one HDFS for all the workers


def pytest_sessionfinish(session):
    """On the xdist controller, after its workers: stop the run's shared servers."""
    if not hasattr(session.config, "workerinput"):
        shared_servers.stop()


#: a test of policy (which segments, which configs, which names) whose outcome the store
#: cannot change: it runs on the local store only (``log`` on ``file``); the storage
#: contract, commit races, crash tests, readers and maintenance's commits run on every
#: store (README "Tests")
on_local_store = pytest.mark.parametrize("backend", ["file"], indirect=True)


def empty_memory_filesystem() -> None:
    """Forget every ``memory://`` file of this process. fsspec's memory filesystem is one
    dict per process and its ``ls`` scans the whole dict: left to grow, a worker's later
    memory tests listed hundreds of thousands of keys (``test_invariants[memory]`` took
    330 s)."""
    from fsspec.implementations.memory import MemoryFileSystem

    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]


@pytest.fixture(autouse=True)
def _memory_filesystem_emptied():
    """Each test starts with an empty ``memory://`` (none shares one wider than a test)."""
    yield
    empty_memory_filesystem()


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
def shared_store(tmp_path_factory) -> str:
    """The folder of :func:`shared_gateway`'s local store, one per session (per xdist
    worker)."""
    store = str(tmp_path_factory.mktemp("shared") / "store")
    open_log(store)
    return store


@pytest.fixture(scope="session")
def shared_gateway(shared_store):
    """One gateway subprocess with default settings, its HTTP and Kafka listeners on free
    ports (a ``KafkaGatewayProcess``: ``.url``, ``.bootstrap``), on :func:`shared_store`,
    for every test of the session (of the xdist worker) that needs just *a* gateway.

    Safe to share because its users name their topics, subjects, groups and
    transactional ids uniquely (uuid) and assert nothing about the store as a whole; a
    test that kills or reconfigures its gateway, counts global metrics, lists every
    topic or subject, sets ACLs, quotas or the global compatibility, or needs an empty
    store starts a gateway of its own (tests/ingest_gateway/conftest.py says which
    fixture to use when)."""
    from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

    with KafkaGatewayProcess(shared_store) as gw:
        yield gw


@pytest.fixture(scope="session")
def shared_log(shared_store):
    """The Log of :func:`shared_gateway`'s store."""
    return open_log(shared_store)


@pytest.fixture(scope="session")
def spark():
    from pipeline.spark import session

    with jvm.favoured():  # its streaming runners must connect back within 10 s
        spark = session(master="local[2]", extra={"spark.sql.shuffle.partitions": "4",
                                                  "spark.default.parallelism": "4"})
    yield spark
    spark.stop()
