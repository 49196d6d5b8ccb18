"""Security documents' admin: SCRAM credentials and client quotas, as Kafka's
Describe/AlterUserScramCredentials and Describe/AlterClientQuotas (``kafka-configs.sh
--entity-type users|clients``) reach them.

Both are documents of the store (``log_layout.scram``, ``log_layout.quotas``), the same
``sparklog users`` and ``sparklog quotas`` write; every call runs on the batcher's pool,
off the event loop. Every gateway's SCRAM logins and quota manager read a change within
``authorizer.refresh.ms``. The names and validators a request is checked with
(mechanisms, iteration bounds, quota keys, entity names, rates) are re-exported here, so
the protocol adapters need none of the store's modules.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ingest_gateway.server.gateway import Gateway
from log_layout import quotas, scram
from log_layout.quotas import CLIENT, CONFIGS, DEFAULT
from log_layout.scram import MECHANISMS, MIN_ITERATIONS, Credential

__all__ = ["CLIENT", "CONFIGS", "DEFAULT", "MECHANISMS", "MIN_ITERATIONS", "Credential",
           "quota_entity", "quota_rate", "describe_credentials", "alter_credentials",
           "describe_quotas", "alter_quotas"]

#: the store's entity name of a quota entity; raises ConfigError (``log_layout.quotas``)
quota_entity = quotas.entity
#: a quota config's value checked; raises ConfigError (``log_layout.quotas``)
quota_rate = quotas.rate


async def describe_credentials(gateway: Gateway) -> scram.Credentials:
    """Every user's SCRAM credentials (``.users``: user -> mechanism -> Credential).
    Raises CorruptDocument, OSError."""
    return await gateway.batcher.run_blocking(scram.describe, gateway.log.store)


async def alter_credentials(gateway: Gateway, *, upsert: Mapping[tuple[str, str], Credential],
                            delete: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Set ``upsert`` and remove ``delete`` (keyed by (user, mechanism)) in one version;
    the deletions that found nothing. Raises ValueError (nothing written),
    CorruptDocument, OSError."""
    _, missing = await gateway.batcher.run_blocking(functools.partial(
        scram.alter, gateway.log.store, upsert=upsert, delete=set(delete)))
    return missing


async def describe_quotas(gateway: Gateway) -> quotas.Quotas:
    """Every entity's quotas (``.entries``: entity -> config -> value). Raises
    CorruptDocument, OSError."""
    return await gateway.batcher.run_blocking(quotas.describe, gateway.log.store)


async def alter_quotas(gateway: Gateway, who: str, *, add: Mapping[str, Any],
                       delete: Iterable[str]) -> None:
    """Set ``add`` and remove ``delete`` of entity ``who`` in one version. Raises
    ConfigError (nothing written), CorruptDocument, OSError."""
    await gateway.batcher.run_blocking(functools.partial(
        quotas.alter_quotas, gateway.log.store, who, add=add, delete=list(delete)))
