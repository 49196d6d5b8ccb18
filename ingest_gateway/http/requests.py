"""What the consumer routes share: media types, bounds, the hub, request parsing helpers.

The consumer routes (``fetch_routes``, ``group_routes``, ``rest_consumers``)
read their parameters through these helpers and their JSON bodies as ``bodies``
declares them, so every one refuses a malformed field the same way (400
``malformed_request``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import BadRequest, UnsupportedContentType
from ingest_gateway.http.params import int_param, parse_int, query_param
from ingest_gateway.server.consumer_hub import ConsumerHub
from ingest_gateway.server.rest_instances import Instance
from ingest_gateway.server.topic_metadata import TopicMetadata

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ARROW = "application/vnd.apache.arrow.stream"
V2_RESPONSE = "application/vnd.kafka.v2+json"
FORMATS = {JSON_V2: "json", BINARY_V2: "binary", ARROW: "arrow"}
MAX_WAIT_MS = 300_000
MAX_COUNT = 1_000_000


def hub_of(request: Request) -> ConsumerHub:
    """The gateway's consumer hub, created at the first consumer request (on the loop)."""
    return request.app.state.gateway.hub()


def metadata_of(request: Request) -> TopicMetadata:
    """What the gateway knows of its topics (``Gateway.metadata``), the service the
    Kafka listener reads too."""
    return request.app.state.gateway.metadata


def instance_of(request: Request) -> tuple[ConsumerHub, Instance]:
    """The hub and the route's REST consumer instance (a use of it); raises
    InvalidGroupId or UnknownConsumerInstance (404, 40403)."""
    hub = hub_of(request)
    return hub, hub.instance(group_of(request), request.path_params["instance"])


async def sync_instance(hub: ConsumerHub, inst: Instance) -> None:
    """Follow the instance's group now (off the loop; the caller holds ``inst.lock``)."""
    await hub.run(inst.sync, hub.source.watermarks, hub.now_ms())


def int_q(request: Request, name: str, default: int | None, lo: int, hi: int) -> int:
    value = int_param(name, query_param(request, name), lo=lo, hi=hi)
    if value is None:
        if default is None:
            raise BadRequest(f"query parameter {name!r} is required")
        return default
    return value


def accept(request: Request, default: str = BINARY_V2) -> str:
    raw = request.headers.get("accept", "")
    for part in raw.split(","):
        mt = part.split(";")[0].strip()
        if mt in FORMATS:
            return mt
        if mt in ("application/json", "application/vnd.kafka.v2+json"):
            return JSON_V2
    if raw and "*/*" not in raw:
        raise UnsupportedContentType(raw, tuple(FORMATS))
    return default


def group_of(request: Request) -> str:
    return validate_group_id(request.path_params["group"])


def offsets_doc(committed: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    return {"offsets": [{"topic": t, "partition": p, "offset": o, "metadata": ""}
                        for (t, p), o in sorted(committed.items())]}


def partitions_query(request: Request) -> list[tuple[str, int]] | None:
    raw = query_param(request, "partitions")
    if not raw:
        return None
    out = []
    for item in raw.split(","):
        t, sep, p = item.rpartition(":")
        try:
            partition = parse_int(p) if sep else -1
        except ValueError:
            partition = -1
        if partition < 0 or partition >= 2**31:
            raise BadRequest(f"partitions must be TOPIC:PARTITION,... "
                             f"(a partition is 0 to 2147483647), not {raw[:200]!r}")
        out.append((t, partition))
    return out
