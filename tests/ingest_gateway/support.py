"""Helpers of the gateway tests that drive a live gateway over HTTP: ``produce`` writes
records to one partition through the REST Proxy v2 route."""

from __future__ import annotations

import base64

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"


def produce(gw, topic: str, partition: int, values, *, fmt: str = BINARY_V2) -> dict:
    """POST ``values`` (bytes for ``BINARY_V2``, JSON values otherwise) to
    ``topic``/``partition`` of ``gw`` (a GatewayProcess) and return the answer's body.

    Raises AssertionError when the gateway answers anything but 200.
    """
    if fmt == BINARY_V2:
        records = [{"value": base64.b64encode(v).decode()} for v in values]
    else:
        records = [{"value": v} for v in values]
    status, body, _ = gw.request("POST", f"/topics/{topic}/partitions/{partition}",
                                 body={"records": records}, content_type=fmt)
    assert status == 200, body
    return body
