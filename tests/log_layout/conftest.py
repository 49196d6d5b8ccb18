"""Fixtures shared by the storage tests (``log`` and ``store`` are in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def part(log):
    """Partition 0 of a new one-partition topic ``t``, on every backend."""
    log.create_topic("t")
    return log.partition("t", 0)
