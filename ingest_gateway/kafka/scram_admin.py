"""DescribeUserScramCredentials and AlterUserScramCredentials over the Kafka protocol,
so ``kafka-configs.sh --bootstrap-server ... --entity-type users --alter --add-config
'SCRAM-SHA-256=[iterations=8192,password=...]'`` (and ``--describe``) work unchanged.

The credentials are the store's, read and written through ``server.security_admin``
(the same documents ``sparklog users`` writes); every gateway's SCRAM logins see a change within ``authorizer.refresh.ms``.

**Alter** follows Kafka's ``ScramControlManager``, answered per user: a second
alteration of the same user and mechanism in one request is DUPLICATE_RESOURCE (two
mechanisms of one user are two credentials: ``kafka-configs.sh`` sends both of
``'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'`` in one request); an empty name or
a credential out of bounds (iterations below 4096 or above 16384, an empty or
oversized salt or salted password) UNACCEPTABLE_CREDENTIAL; an unknown mechanism
type UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not exist
RESOURCE_NOT_FOUND. A user's alterations apply together or not at all; the valid
ones of the request are written in one store version (the
upsertion carries the client-salted password; the store keeps only StoredKey and
ServerKey, ``security.scram.from_salted_password``).

**Describe**: the named users (or every user when none is named): each one's
mechanisms and iteration counts, never a key or salt; a user without credentials
RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE.

**ACLs** (Kafka's): Describe on the cluster to describe, Alter on the cluster to alter
(denied: CLUSTER_AUTHORIZATION_FAILED, for the request or each user).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.security.scram import from_salted_password
from ingest_gateway.server import security_admin
from ingest_gateway.server.security_admin import MECHANISMS, MIN_ITERATIONS

logger = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_USER_SCRAM_CREDENTIALS, API_ALTER_USER_SCRAM_CREDENTIALS = 50, 51
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    API_ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}
#: Kafka's ScramMechanism type bytes
MECHANISM_OF = {t: name for name, (t, _) in MECHANISMS.items()}
TYPE_OF = {name: t for t, name in MECHANISM_OF.items()}

RESOURCE_NOT_FOUND = ErrorCode.resource_not_found
DUPLICATE_RESOURCE = ErrorCode.duplicate_resource
UNACCEPTABLE_CREDENTIAL = ErrorCode.unacceptable_credential
UNSUPPORTED_SASL_MECHANISM = ErrorCode.unsupported_sasl_mechanism
_TWICE = "A user credential cannot be altered twice in the same request"


def _name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    """Kafka's ``validateScramUsernameAndMechanism``: (code, message) or None if valid."""
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_OF:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


async def alter_user_scram_credentials(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_ALTER_USER_SCRAM_CREDENTIALS, head.api_version)
    errors: dict[str, tuple[int, str | None]] = {}  # per user: its first refusal
    if not sec.allowed(ctx, "Alter", "Cluster", sec.CLUSTER_NAME):
        for item in (*req.deletions, *req.upsertions):
            errors[item.name] = (sec.CLUSTER_AUTHORIZATION_FAILED, None)
        return _alter_answer(mod, [], errors)
    seen: set[tuple[str, int]] = set()
    twice: set[tuple[str, int]] = set()
    for item in (*req.deletions, *req.upsertions):
        key = (item.name, item.mechanism)
        (twice if key in seen else seen).add(key)
    deletions: dict[tuple[str, str], Any] = {}
    upserts: dict[tuple[str, str], Any] = {}
    for item in (*req.deletions, *req.upsertions):
        if item.name in errors:
            continue
        if (item.name, item.mechanism) in twice:
            errors[item.name] = (DUPLICATE_RESOURCE, _TWICE)
        elif (bad := _name_and_mechanism(item.name, item.mechanism)) is not None:
            errors[item.name] = bad
        elif hasattr(item, "salted_password"):
            try:
                upserts[(item.name, MECHANISM_OF[item.mechanism])] = from_salted_password(
                    MECHANISM_OF[item.mechanism], item.salted_password, item.salt,
                    item.iterations)
            except ValueError as e:
                errors[item.name] = (UNACCEPTABLE_CREDENTIAL, _unacceptable(item, str(e)))
        else:
            deletions[(item.name, MECHANISM_OF[item.mechanism])] = item
    # a user's alterations all apply or none does
    upserts = {k: v for k, v in upserts.items() if k[0] not in errors}
    deletions = {k: v for k, v in deletions.items() if k[0] not in errors}
    names = list(dict.fromkeys(k[0] for k in (*deletions, *upserts)))
    if names:
        try:
            missing = await security_admin.alter_credentials(
                ctx.gateway, upsert=upserts, delete=set(deletions))
        except Exception as e:  # noqa: BLE001 - every user of the request is answered
            logger.warning("AlterUserScramCredentials failed: %s", e)
            code = codes.code_of(e)
            for name in names:
                errors[name] = (code, "the credentials could not be written")
        else:
            for name, _mechanism in missing:
                errors[name] = (RESOURCE_NOT_FOUND,
                                "Attempt to delete a user credential that does not exist")
    return _alter_answer(mod, [n for n in names if n not in errors], errors)


def _unacceptable(item: Any, reason: str) -> str:
    if "iterations" in reason:
        return "Too few iterations" if item.iterations < MIN_ITERATIONS \
            else "Too many iterations"
    return f"Unacceptable credential: {reason}"


def _alter_answer(mod: Any, done: list[str], errors: dict[str, tuple[int, str | None]]) -> Any:
    results = [make(mod.AlterUserScramCredentialsResult, user=name, error_code=error(0),
                    error_message=None) for name in done]
    results += [make(mod.AlterUserScramCredentialsResult, user=name, error_code=error(code),
                     error_message=message) for name, (code, message) in errors.items()]
    return make(mod.AlterUserScramCredentialsResponse, throttle_time=ZERO,
                results=tuple(results))


async def describe_user_scram_credentials(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_USER_SCRAM_CREDENTIALS, head.api_version)

    def answer(code: int, message: str | None, results: tuple = ()) -> Any:
        return make(mod.DescribeUserScramCredentialsResponse, throttle_time=ZERO,
                    error_code=error(code), error_message=message, results=results)

    if not sec.allowed(ctx, "Describe", "Cluster", sec.CLUSTER_NAME):
        return answer(sec.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        found = await security_admin.describe_credentials(ctx.gateway)
    except Exception as e:  # noqa: BLE001 - the request's error
        logger.warning("DescribeUserScramCredentials failed: %s", e)
        return answer(codes.code_of(e), "the credentials could not be read")
    named = [u.name for u in (req.users or ())]
    seen: dict[str, bool] = {}  # user -> named twice
    for name in named or sorted(found.users):
        seen[name] = name in seen
    results = []
    for name, twice in seen.items():
        mechanisms = found.users.get(name, {})
        if twice:
            code, message, infos = DUPLICATE_RESOURCE, f"Cannot describe SCRAM credentials " \
                                                       f"for the same user twice in a single " \
                                                       f"request: {name}", ()
        elif not mechanisms:
            code, message, infos = RESOURCE_NOT_FOUND, f"Attempt to describe a user " \
                                                       f"credential that does not exist: " \
                                                       f"{name}", ()
        else:
            code, message = 0, None
            infos = tuple(make(mod.CredentialInfo, mechanism=TYPE_OF[m], iterations=c.iterations)
                          for m, c in sorted(mechanisms.items()))
        results.append(make(mod.DescribeUserScramCredentialsResult, user=name,
                            error_code=error(code), error_message=message,
                            credential_infos=infos))
    return answer(0, None, tuple(results))


HANDLERS = {API_DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
            API_ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials}
