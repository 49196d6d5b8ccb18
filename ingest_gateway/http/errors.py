"""The gateway's HTTP errors: status and JSON body of every typed error.

From the gateway's one error table (``ingest_gateway.error_table``): every route, the
raw produce endpoint and the HTTP protocol's own answers (timeouts, too many
connections) take status and body from :func:`status_of` / :func:`error_body`.
The body is ``{"error_code": 40401, "message": "...", "error": "unknown_topic"}``
(the last field is the machine-readable name, the error's ``code``); an
out-of-order sequence adds ``expected_sequence`` and ``sequence`` so a client
can tell "retry" from "give up".
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ingest_gateway.error_table import answer_of
from ingest_gateway.errors import (BufferFull, FlushFailed, NotAuthenticated, NotAuthorized,
                                   NotCoordinator, NotLeader, ShuttingDown, TooManyConnections)
from log_layout import Fenced, InvalidTxnState, OutOfOrderSequence, ProducerFenced

#: errors a client may retry unchanged (idempotently)
RETRIABLE = (BufferFull, NotLeader, NotCoordinator, Fenced, FlushFailed, ShuttingDown,
             TooManyConnections)


def status_of(exc: BaseException) -> tuple[int, int]:
    """(HTTP status, error code) of ``exc``: its most specific class in the table."""
    answer = answer_of(exc)
    return answer.http_status, answer.rest_code


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
