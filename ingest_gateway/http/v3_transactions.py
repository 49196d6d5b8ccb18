"""Transactions over HTTP, in REST Proxy v3's style (Kafka's transactional producer
requests, KIP-98), over the coordinator Kafka's requests use too
(``server.transaction_service``; the reads ``server.transaction_admin``).

Routes::

    POST /v3/transactions/{tid}:init        {"transaction_timeout_ms": 60000}
         -> {"transactional_id", "producer_id", "producer_epoch"}   (InitProducerId)
    POST /v3/transactions/{tid}/partitions  {"producer_id", "producer_epoch",
         "partitions": [{"topic", "partition"}]}                    (AddPartitionsToTxn)
    POST /v3/transactions/{tid}/offsets     {"producer_id", "producer_epoch", "group_id",
         "offsets": [{"topic", "partition", "offset"}]}   (AddOffsetsToTxn + TxnOffsetCommit)
    POST /v3/transactions/{tid}:commit      {"producer_id", "producer_epoch"}  (EndTxn)
    POST /v3/transactions/{tid}:abort       {"producer_id", "producer_epoch"}
    GET  /v3/transactions/{tid}             the transaction log's document
    GET  /v3/transactions                   every transactional id's document

Records go into the transaction by the produce route with ``transactional_id``
(``produce``), to partitions added here first. ``:init`` bumps the epoch and so
fences an older producer of the id; every other call names producer id and epoch.
Answers: 200 with a JSON document; 204 for partitions, offsets, commit and abort.
Refusals (``ingest_gateway.error_table``): a body field missing, of the wrong type or out of
range 400 ``bad_request``; a bad transactional id 400 ``invalid_topic_name``; a
bad group id 400 ``invalid_group_id``; an unknown topic or partition 404; an
older epoch 409 ``producer_fenced`` (40915: a conflict with the id's newer
producer, not a malformed request, so 409 and not 400); a call the state does not
allow 409 ``invalid_txn_state`` (40916); an unknown id on GET 404
``unknown_transactional_id``.

Every store call runs on the batcher's pool, off the event loop. Every operation is
``server.transaction_service``'s (Kafka's InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn call it too), as is the aborter of
transactions older than their ``transaction_timeout_ms`` (Kafka's transaction.timeout.ms).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import UnknownTransactionalId
from ingest_gateway.http import access
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import read_body_as
from ingest_gateway.server import transaction_admin
from ingest_gateway.server import transaction_service as coordinator
from ingest_gateway.server.transaction_service import end_transaction


#: Kafka's transaction.timeout.ms default


def _gateway(request: Request) -> Any:
    return request.app.state.gateway


def _tid(request: Request) -> str:
    return validate_topic_name(request.path_params["tid"])


async def init(request: Request) -> Response:
    tid = _tid(request)
    body = await read_body_as(request, bodies.InitTransaction, empty=True)
    timeout = body.transaction_timeout_ms
    pid, epoch = await coordinator.init(_gateway(request), tid, timeout)
    return JSONResponse({"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch})


async def add_partitions(request: Request) -> Response:
    tid = _tid(request)
    body = await read_body_as(request, bodies.AddTxnPartitions)
    pid, epoch = body.producer_id, body.producer_epoch
    pairs = [(validate_topic_name(it.topic), it.partition) for it in body.partitions]
    for topic in sorted({t for t, _ in pairs}):
        access.require(request, "Write", "Topic", topic)  # Kafka's AddPartitionsToTxn
    await coordinator.add_partitions(_gateway(request), tid, pid, epoch, pairs)
    return Response(status_code=204)


async def add_offsets(request: Request) -> Response:
    tid = _tid(request)
    body = await read_body_as(request, bodies.AddTxnOffsets)
    pid, epoch = body.producer_id, body.producer_epoch
    group = validate_group_id(body.group_id)
    access.require(request, "Read", "Group", group)  # Kafka's AddOffsetsToTxn
    offsets: dict[str, dict[int, int]] = {}
    for it in body.offsets:
        offsets.setdefault(validate_topic_name(it.topic), {})[it.partition] = it.offset
    for topic in sorted(offsets):
        access.require(request, "Read", "Topic", topic)  # Kafka's TxnOffsetCommit
    await coordinator.add_offsets(_gateway(request), tid, pid, epoch, group, offsets)
    return Response(status_code=204)


async def _end(request: Request, commit: bool) -> Response:
    tid = _tid(request)
    body = await read_body_as(request, bodies.EndTransaction)
    pid, epoch = body.producer_id, body.producer_epoch
    await end_transaction(_gateway(request), tid, pid, epoch, commit)
    return Response(status_code=204)


async def commit(request: Request) -> Response:
    return await _end(request, True)


async def abort(request: Request) -> Response:
    return await _end(request, False)


def _view(doc: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "KafkaTransaction", "transactional_id": doc["transactional_id"],
            "producer_id": doc["producer_id"], "producer_epoch": doc["epoch"],
            "transaction_timeout_ms": doc["timeout_ms"], "state": doc["state"],
            "started_ms": doc["started_ms"], "updated_ms": doc["updated_ms"],
            "partitions": [{"topic": t, "partition": p} for t, p in doc["partitions"]],
            "offsets": [{"group_id": g, "topic": t, "partition": int(p), "offset": o}
                        for g, ts in sorted(doc["offsets"].items())
                        for t, ps in sorted(ts.items()) for p, o in sorted(ps.items())]}


async def get_transaction(request: Request) -> Response:
    tid = _tid(request)
    doc = await transaction_admin.describe(_gateway(request), tid)
    if doc is None:
        raise UnknownTransactionalId(tid)
    return JSONResponse(_view(doc))


async def list_transactions(request: Request) -> Response:
    found = [doc for _, doc in await transaction_admin.list_all(_gateway(request))]
    docs = access.visible(request, "TransactionalId", found, lambda d: d["transactional_id"])
    return JSONResponse({"kind": "KafkaTransactionList", "data": [_view(d) for d in docs]})


def routes() -> list[BaseRoute]:
    t = "/v3/transactions/{tid}"
    return [
        Route("/v3/transactions", list_transactions, methods=["GET"]),
        Route(t + ":init", init, methods=["POST"]),
        Route(t + ":commit", commit, methods=["POST"]),
        Route(t + ":abort", abort, methods=["POST"]),
        Route(t + "/partitions", add_partitions, methods=["POST"]),
        Route(t + "/offsets", add_offsets, methods=["POST"]),
        Route(t, get_transaction, methods=["GET"]),
    ]
