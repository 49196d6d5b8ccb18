"""The OpenAPI path items of the transaction routes (``v3_transactions``), merged into
``/openapi.json`` by ``openapi.document``."""

from __future__ import annotations

from typing import Any

from ingest_gateway.http import bodies
from ingest_gateway.http.openapi_consumers import errors, p, resp

NAME = {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}
TID = {**p("tid", "path", NAME, "transactional id"), "example": "etl-1"}
S, N = {"type": "string"}, {"type": "integer"}
I64 = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
EPOCH = {"type": "integer", "minimum": 0, "maximum": 32767}
PART = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
TP = {"type": "object", "required": ["topic", "partition"],
      "properties": {"topic": NAME, "partition": PART}}
TPO = {"type": "object", "required": ["topic", "partition", "offset"],
       "properties": {"topic": NAME, "partition": PART, "offset": I64}}
TXN_DOC = {"type": "object", "properties": {
    "kind": {**S, "example": "KafkaTransaction"}, "transactional_id": S, "producer_id": I64,
    "producer_epoch": EPOCH, "transaction_timeout_ms": N,
    "state": {**S, "enum": ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                            "CompleteCommit", "CompleteAbort"]},
    "started_ms": N, "updated_ms": N, "partitions": {"type": "array", "items": TP},
    "offsets": {"type": "array", "items": {**TPO, "properties": {**TPO["properties"],
                                                                   "group_id": NAME}}}}}


def _body(kind: type[bodies.Body], need: bool = True) -> dict[str, Any]:
    return {"required": need, "content": {"application/json": {"schema": bodies.ref(kind)}}}


def _post(summary: str, body: dict[str, Any], ok: dict[str, Any], *codes: int
          ) -> dict[str, Any]:
    return {"post": {"summary": summary, "parameters": [TID], "requestBody": body,
                     "responses": {**ok, **errors(400, *codes)}}}


def txn_paths() -> dict[str, Any]:
    """Every transaction route's path item."""
    t = "/v3/transactions/{tid}"
    done = {"204": resp("done")}
    end = _body(bodies.EndTransaction)
    return {
        "/v3/transactions": {"get": {
            "summary": "every transactional id's state (those the principal may Describe)",
            "responses": {"200": resp("the transactions", {"type": "object", "properties": {
                "kind": S, "data": {"type": "array", "items": TXN_DOC}}})}}},
        t: {"get": {"summary": "a transactional id's state", "parameters": [TID],
                    "responses": {"200": resp("the transaction", TXN_DOC), **errors(404)}}},
        t + ":init": _post(
            "register a transactional producer (Kafka's initTransactions): a new producer "
            "id, or the id's at epoch + 1, fencing the older producer; an ongoing "
            "transaction of the old epoch is aborted",
            _body(bodies.InitTransaction, need=False),
            {"200": resp("the producer", {"type": "object", "properties": {
                "transactional_id": S, "producer_id": I64, "producer_epoch": EPOCH}})}),
        t + "/partitions": _post(
            "add partitions to the transaction (begins one if none is under way), before "
            "producing to them with ?transactional_id=",
            _body(bodies.AddTxnPartitions),
            done, 404, 409),
        t + "/offsets": _post(
            "add a group's offsets to the transaction (Kafka's sendOffsetsToTransaction): "
            "committed into the group with it",
            _body(bodies.AddTxnOffsets),
            done, 409),
        t + ":commit": _post("commit the transaction (its records and offsets all visible)",
                             end, done, 409),
        t + ":abort": _post("abort the transaction (its records never visible to "
                            "read_committed)", end, done, 409),
    }
