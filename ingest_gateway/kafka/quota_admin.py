"""DescribeClientQuotas and AlterClientQuotas over the Kafka protocol, so
``kafka-configs.sh --bootstrap-server ... --entity-type users|clients`` describes and
alters the store's quotas (``log_layout.quotas``, the same ``sparklog quotas``
writes; every gateway throttles by a change within ``authorizer.refresh.ms``).

Entities are Kafka's: a ``user`` and/or a ``client-id`` component, each a name or the
default (a null name). ``ip`` entities (connection-rate quotas) and the
``controller_mutation_rate`` config are not served: INVALID_REQUEST saying so.

**Describe** (Kafka's ``ClientQuotaFilter``): each component matches its entity type
exactly (``match_type`` 0, a name), the default (1) or any entity of that type (2);
``strict`` keeps only entities with no other component. A component of an unknown
type, given twice, or exact without a name: INVALID_REQUEST. Values are doubles, as
Kafka's.

**Alter**, per entry, as Kafka's ``ClientQuotaControlManager``: an entity of an
unknown or repeated type, an unknown key, a byte rate that is not a whole number of at
least 1, a percentage not above 0: INVALID_REQUEST for that entry, the others applied;
``remove`` deletes a key; ``validate_only`` checks and writes nothing. Each valid
entry is one ``alter_quotas`` (a versioned document: a concurrent change is never
lost).

**ACLs** (Kafka's): DescribeConfigs on the cluster to describe (else
CLUSTER_AUTHORIZATION_FAILED for the request), AlterConfigs on the cluster to alter
(else for each entry).
"""

from __future__ import annotations

import logging
from typing import Any

from conf.errors import ConfigError
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server import security_admin
from ingest_gateway.server.security_admin import CLIENT, CONFIGS, DEFAULT

logger = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_CLIENT_QUOTAS, API_ALTER_CLIENT_QUOTAS = 48, 49
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_CLIENT_QUOTAS: (0, 1),
    API_ALTER_CLIENT_QUOTAS: (0, 1),
}
USER, CLIENT_ID = "user", "client-id"
EXACT, DEFAULT_MATCH, ANY = 0, 1, 2


class _Refused(ValueError):
    """An entity or filter Kafka refuses with INVALID_REQUEST."""


def entity_of(components: dict[str, str | None]) -> str:
    """The store's entity name (``log_layout.quotas``) of Kafka's entity components
    (type -> name, None for the default). Raises _Refused."""
    if not components or set(components) - {USER, CLIENT_ID}:
        bad = sorted(set(components) - {USER, CLIENT_ID}) or ["none"]
        raise _Refused(f"entity types {bad} are not served (user and client-id are)")
    parts = []
    if USER in components:
        name = components[USER]
        parts.append(DEFAULT if name is None else f"User:{name}")
    if CLIENT_ID in components:
        name = components[CLIENT_ID]
        parts.append(f"{CLIENT}{DEFAULT if name is None else name}")
    try:
        return security_admin.quota_entity("/".join(parts))
    except ConfigError as e:
        raise _Refused(str(e)) from None


def components_of(name: str) -> dict[str, str | None]:
    """Kafka's entity components of a store entity name (the inverse of entity_of)."""
    user, sep, client = name.partition(f"/{CLIENT}")
    if not sep and user.startswith(CLIENT):
        user, client = "", user[len(CLIENT):]
    out: dict[str, str | None] = {}
    if user:
        out[USER] = None if user == DEFAULT else user.removeprefix("User:")
    if client:
        out[CLIENT_ID] = None if client == DEFAULT else client
    return out


async def describe_client_quotas(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_CLIENT_QUOTAS, head.api_version)

    def answer(code: int, message: str | None, entries: tuple | None) -> Any:
        return make(mod.DescribeClientQuotasResponse, throttle_time=ZERO,
                    error_code=error(code), error_message=message, entries=entries)

    if not sec.allowed(ctx, "DescribeConfigs", "Cluster", sec.CLUSTER_NAME):
        return answer(sec.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", None)
    try:
        wanted = _filter(req.components)
    except _Refused as e:
        return answer(codes.INVALID_REQUEST, str(e), None)
    try:
        found = await security_admin.describe_quotas(ctx.gateway)
    except Exception as e:  # noqa: BLE001 - the request's error
        logger.warning("DescribeClientQuotas failed: %s", e)
        return answer(codes.code_of(e), "the quotas could not be read", None)
    entries = []
    for name, values in sorted(found.entries.items()):
        parts = components_of(name)
        if not _matches(parts, wanted, bool(req.strict)):
            continue
        entries.append(make(
            mod.EntryData,
            entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n)
                         for t, n in parts.items()),
            values=tuple(make(mod.ValueData, key=k, value=float(v))
                         for k, v in sorted(values.items()))))
    return answer(0, None, tuple(entries))


def _filter(components: Any) -> dict[str, tuple[int, str | None]]:
    wanted: dict[str, tuple[int, str | None]] = {}
    for c in components:
        if c.entity_type in wanted:
            raise _Refused(f"duplicate filter component entity type {c.entity_type!r}")
        if c.entity_type not in (USER, CLIENT_ID, "ip"):
            raise _Refused(f"unknown entity type {c.entity_type!r}")
        if c.match_type not in (EXACT, DEFAULT_MATCH, ANY):
            raise _Refused(f"unknown match type {c.match_type}")
        if c.match_type == EXACT and c.match is None:
            raise _Refused("an exact match needs a name")
        wanted[c.entity_type] = (c.match_type, c.match)
    return wanted


def _matches(parts: dict[str, str | None], wanted: dict[str, tuple[int, str | None]],
             strict: bool) -> bool:
    if strict and set(parts) != set(wanted):
        return False
    for entity_type, (match_type, match) in wanted.items():
        if entity_type not in parts:
            return False
        name = parts[entity_type]
        if match_type == EXACT and name != match:
            return False
        if match_type == DEFAULT_MATCH and name is not None:
            return False
    return True


async def alter_client_quotas(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_ALTER_CLIENT_QUOTAS, head.api_version)
    allowed = sec.allowed(ctx, "AlterConfigs", "Cluster", sec.CLUSTER_NAME)
    results = []
    for entry in req.entries:
        code, message = codes.NONE, None
        if not allowed:
            code, message = sec.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        else:
            try:
                who, add, delete = _alteration(entry)
                if not req.validate_only:
                    await security_admin.alter_quotas(ctx.gateway, who, add=add,
                                                      delete=delete)
            except _Refused as e:
                code, message = codes.INVALID_REQUEST, str(e)
            except Exception as e:  # noqa: BLE001 - this entry's error
                logger.warning("AlterClientQuotas failed: %s", e)
                code, message = codes.code_of(e), "the quotas could not be written"
        results.append(make(mod.EntryData, error_code=error(code), error_message=message,
                            entity=tuple(make(mod.EntityData, entity_type=e.entity_type,
                                              entity_name=e.entity_name)
                                         for e in entry.entity)))
    return make(mod.AlterClientQuotasResponse, throttle_time=ZERO, entries=tuple(results))


def _alteration(entry: Any) -> tuple[str, dict[str, Any], list[str]]:
    """(entity, configs to set, configs to remove) of one entry; raises _Refused."""
    components: dict[str, str | None] = {}
    for e in entry.entity:
        if e.entity_type in components:
            raise _Refused(f"duplicate entity type {e.entity_type!r}")
        components[e.entity_type] = e.entity_name
    who = entity_of(components)
    add: dict[str, Any] = {}
    delete: list[str] = []
    for op in entry.ops:
        if op.key not in CONFIGS:
            raise _Refused(f"unknown or unserved quota key {op.key!r} (served: "
                           f"{', '.join(CONFIGS)})")
        if op.key in add or op.key in delete:
            raise _Refused(f"quota key {op.key!r} given twice")
        if op.remove:
            delete.append(op.key)
            continue
        try:
            add[op.key] = security_admin.quota_rate(op.key, op.value)
        except ConfigError as e:
            raise _Refused(str(e)) from None
    return who, add, delete


HANDLERS = {API_DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
            API_ALTER_CLIENT_QUOTAS: alter_client_quotas}
