"""Fixtures of the CLI tests: the session's shared gateway on a local store, and the
gateway tests' per-backend gateway (for the consumer-group tests moved here)."""

from __future__ import annotations

import pytest

from tests.ingest_gateway.conftest import gateway, gateway_log, gateway_store  # noqa: F401


@pytest.fixture(scope="session")
def local_gateway(shared_gateway, shared_store):
    """(gateway, store path): tests/conftest.py's ``shared_gateway`` and its store (the
    tests here name their topics and groups uniquely)."""
    return shared_gateway, shared_store
