"""Fixtures of the gateway tests: a live gateway subprocess per backend (local, S3, HDFS).

Which gateway fixture to use:

- ``shared_gateway`` (tests/conftest.py; ``kafka_gateway`` in kafka/, ``local_gateway`` in
  tests/jobs/ are the same process): one default gateway, HTTP and Kafka listeners, on a
  local store, per session (per xdist worker). The first choice for a test that needs
  just *a* gateway: it names its topics, subjects, groups and transactional ids uniquely
  (uuid) and asserts nothing about the store as a whole.
- ``gateway`` (here, module-scoped): a default gateway on a fresh store per backend, for
  the tests that must run on S3 and HDFS too (commits, reads; ``on_local_store`` keeps a
  module to the local one), and ``topic`` on it.
- a module's own module-scoped gateway (``own_kafka_gateway`` in kafka/, or a
  ``GatewayProcess`` in the module's fixture): when its tests need settings other than
  the defaults (timeouts, limits, authentication, TLS), or change or count what every
  user of a store sees: client quotas, ACLs, the registry's global compatibility or
  mode, global metrics, every topic or subject listed, an empty ``_schemas``.
- a gateway of the test's own (``with GatewayProcess(...)`` in the test): when the test
  kills, restarts or reconfigures it, or needs a store that nothing else has touched.
"""

from __future__ import annotations

import uuid

import pytest

from log_layout import open_log
from tests.conftest import make_log_url
from jobs.gateway_process import GatewayProcess
from tests.clock import Clock

# The memory backend lives inside one process, so a gateway subprocess cannot share it.
GATEWAY_BACKENDS = ["file", "s3", "hdfs"]

#: a test of HTTP shapes, policy or client logic, whose outcome the store cannot change:
#: it runs on the local store only (commits, races, crashes and readers run on every
#: store; README "Tests" says which suites run where)
on_local_store = pytest.mark.parametrize("gateway_store", ["file"], indirect=True)


@pytest.fixture(scope="module", params=GATEWAY_BACKENDS)
def gateway_store(request, tmp_path_factory):
    """(url, storage_options) of a fresh store per backend, shared by a module (``s3``
    and ``hdfs`` marked at collection by tests/conftest.py)."""
    return make_log_url(request.param, request, tmp_path_factory.mktemp("gw"))


@pytest.fixture(scope="module")
def gateway(gateway_store):
    url, options = gateway_store
    with GatewayProcess(url, options) as gw:  # the default: group commit, no linger
        yield gw


@pytest.fixture(scope="module")
def gateway_log(gateway_store):
    url, options = gateway_store
    return open_log(url, storage_options=options)


@pytest.fixture
def topic(gateway_log):
    """A fresh 3-partition topic on the gateway's store."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    gateway_log.create_topic(name, {"partitions": 3})
    return name


@pytest.fixture
def clock() -> Clock:
    """A hand-set clock (tests.clock) for the coordinator's and the hub's now_ms."""
    return Clock()
