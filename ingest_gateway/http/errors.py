"""THE error table of the gateway's HTTP API: every typed error -> HTTP status and error code.

Built once, here, and never changed (a read-only mapping): every route, the
raw produce endpoint and the HTTP protocol's own answers (timeouts, too many
connections) take status and body from :func:`status_of` / :func:`error_body`.
The body is ``{"error_code": 40401, "message": "...", "error": "unknown_topic"}``
(the last field is the machine-readable name, the error's ``code``); an
out-of-order sequence adds ``expected_sequence`` and ``sequence`` so a client
can tell "retry" from "give up".
"""

from __future__ import annotations

import types
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from conf.errors import ConfigError, SparklogError
from conf.topic import InvalidTopicName
from ingest_gateway.errors import (BadRequest, BufferFull, ConsumerFormatMismatch, FlushFailed,
                                   GroupFieldTooLong, SubscriptionConflict, UnknownBroker,
                                   UnknownTopicConfig,
                                   IllegalGeneration, InconsistentGroupProtocol,
                                   InvalidCommitOffset, InvalidGroupId, InvalidKey,
                                   InvalidSessionTimeout, InvalidValue, MissingKey,
                                   NotAuthenticated, NotAuthorized,
                                   NotCoordinator, NotLeader, PartitionNotAssigned,
                                   RebalanceInProgress, RecordNotJson,
                                   RequestTimeout, RequestTooLarge, ShuttingDown,
                                   TooManyConnections, UnknownCluster, UnknownConsumerInstance,
                                   UnknownGroup, UnknownMemberId, UnknownTransactionalId,
                                   UnsupportedContentType)
from log_layout import (CorruptManifest, CorruptSegment, Fenced, InvalidProducerEpoch,
                        InvalidRecords, InvalidTxnState, MaintenanceConflict, OffsetOutOfRange,
                        ProducerFenced,
                        OutOfOrderSequence, RecordTooLarge, StoreError, TopicExists,
                        UnknownPartition, UnknownTopic)
from log_layout.errors import InvalidAcl

#: error class -> (HTTP status, REST Proxy style error_code). Looked up along the MRO,
#: so the most specific class wins. Codes follow the REST Proxy where it has one
#: (40401 unknown topic, 40402 unknown partition, 42201/42202 bad key/value).
ERRORS: types.MappingProxyType[type[BaseException], tuple[int, int]] = types.MappingProxyType({
    UnknownTopic: (404, 40401),
    UnknownPartition: (404, 40402),
    UnknownCluster: (404, 40403),
    OffsetOutOfRange: (416, 41601),
    InvalidKey: (422, 42201),
    InvalidValue: (422, 42202),
    InvalidRecords: (422, 42203),
    MissingKey: (422, 42204),
    BadRequest: (400, 40001),
    TopicExists: (400, 40002),
    InvalidTopicName: (400, 40003),
    ConfigError: (400, 40004),
    # REST Proxy's code for a request Kafka refuses as invalid (its spec documents it
    # for an ACL naming the cluster wrongly); the message names the field
    InvalidAcl: (400, 40002),
    OutOfOrderSequence: (409, 40901),
    InvalidProducerEpoch: (409, 40902),
    MaintenanceConflict: (409, 40903),
    RequestTimeout: (408, 40801),
    RecordTooLarge: (413, 41301),
    RequestTooLarge: (413, 41302),
    UnsupportedContentType: (415, 41501),
    BufferFull: (429, 42901),
    NotLeader: (503, 50301),
    NotCoordinator: (503, 50305),
    Fenced: (503, 50301),
    FlushFailed: (503, 50302),
    ShuttingDown: (503, 50303),
    TooManyConnections: (503, 50304),
    StoreError: (500, 50002),
    CorruptManifest: (500, 50003),
    CorruptSegment: (500, 50004),
    # consumer groups and fetches
    UnknownMemberId: (404, 40403),  # REST Proxy: consumer instance not found
    UnknownConsumerInstance: (404, 40403),
    UnknownGroup: (404, 40404),
    IllegalGeneration: (409, 40911),
    RebalanceInProgress: (409, 40912),
    PartitionNotAssigned: (409, 40913),
    InconsistentGroupProtocol: (409, 40914),
    InvalidGroupId: (400, 40011),
    InvalidCommitOffset: (400, 40012),
    InvalidSessionTimeout: (400, 40013),  # Kafka: INVALID_SESSION_TIMEOUT (26)
    GroupFieldTooLong: (400, 40014),
    RecordNotJson: (422, 42206),  # Kafka: RecordDeserializationException
    ConsumerFormatMismatch: (406, 40601),  # REST Proxy's code and status
    SubscriptionConflict: (409, 40903),  # REST Proxy's code and status
    UnknownTopicConfig: (404, 40405),
    UnknownBroker: (404, 40406),
    NotAuthenticated: (401, 40101),  # REST Proxy's authentication error
    NotAuthorized: (403, 40301),  # REST Proxy's authorization error
    # transactions (v3_transactions): a conflict with the id's state or newer producer,
    # not a malformed request, so 409 (Kafka: PRODUCER_FENCED, INVALID_TXN_STATE)
    ProducerFenced: (409, 40915),
    InvalidTxnState: (409, 40916),
    UnknownTransactionalId: (404, 40407),  # Kafka: TRANSACTIONAL_ID_NOT_FOUND
    SparklogError: (500, 50001),
})
#: errors a client may retry unchanged (idempotently)
RETRIABLE = (BufferFull, NotLeader, NotCoordinator, Fenced, FlushFailed, ShuttingDown,
             TooManyConnections)


def status_of(exc: BaseException) -> tuple[int, int]:
    """(HTTP status, error code) of ``exc``: its most specific class in ERRORS."""
    for cls in type(exc).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return 500, 50001


def error_body(exc: BaseException) -> dict[str, Any]:
    """The JSON body the gateway answers for ``exc``."""
    status, code = status_of(exc)
    name = getattr(exc, "code", "internal_error")
    body: dict[str, Any] = {"error_code": code, "message": str(exc), "error": name}
    if isinstance(exc, OutOfOrderSequence):  # lets a client tell "retry" from "give up"
        body["expected_sequence"], body["sequence"] = exc.expected, exc.got
    elif isinstance(exc, NotLeader):  # where to go instead (None: ask for metadata)
        body["leader"] = exc.leader
    elif isinstance(exc, NotCoordinator):
        body["coordinator"] = exc.coordinator
    elif isinstance(exc, ProducerFenced):  # the facts, for the client to raise it again
        body.update(transactional_id=exc.transactional_id, producer_id=exc.producer_id,
                    producer_epoch=exc.epoch, current_producer_id=exc.current_producer_id,
                    current_epoch=exc.current_epoch)
    elif isinstance(exc, InvalidTxnState):
        body.update(transactional_id=exc.transactional_id, state=exc.state,
                    operation=exc.operation)
    elif isinstance(exc, NotAuthorized):  # what was refused, for a client to read as is
        body.update(principal=exc.principal, operation=exc.operation,
                    resource_type=exc.resource_type, resource_name=exc.name)
    return body


def refusal(state: Any, exc: BaseException) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, body, headers) of the answer to ``exc``, counted in the metrics."""
    status, _code = status_of(exc)
    body = error_body(exc)
    state.metrics.rejected(body["error"])
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, BufferFull) else {}
    if isinstance(exc, NotAuthenticated):  # RFC 9110: a 401 names the schemes it accepts
        headers = {"WWW-Authenticate": ", ".join(
            f'{scheme} realm="{exc.realm}"' for scheme in exc.schemes or ("Basic",))}
    return status, body, headers


async def sparklog_error(request: Request, exc: Exception) -> Response:
    """Starlette's handler of every SparklogError a route raises."""
    status, body, headers = refusal(request.app.state, exc)
    return JSONResponse(body, status_code=status, headers=headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, wrong method) in the same JSON shape."""
    assert isinstance(exc, HTTPException)
    name = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse({"error_code": exc.status_code * 100, "message": str(exc.detail),
                         "error": name}, status_code=exc.status_code, headers=exc.headers)
