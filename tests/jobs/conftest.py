"""Fixtures of the CLI tests: a gateway subprocess on a local store, and the gateway
tests' per-backend gateway (for the consumer-group tests moved here)."""

from __future__ import annotations

import pytest

from log_layout import open_log
from tests.ingest_gateway.conftest import gateway, gateway_log, gateway_store  # noqa: F401
from jobs.gateway_process import GatewayProcess


@pytest.fixture(scope="module")
def local_gateway(tmp_path_factory):
    """(gateway, store path) of a gateway on a local store, shared by a module."""
    store = str(tmp_path_factory.mktemp("cli") / "store")
    open_log(store)
    with GatewayProcess(store, settings={"gateway.linger.ms": 2}) as gw:
        yield gw, store
