"""Typed errors of the gateway's HTTP edge (the log's own live in ``log_layout.errors``).

Each carries its facts as attributes and reads as a sentence; ``code`` is the
machine-readable name the gateway puts beside the numeric REST-Proxy-style
``error_code`` (see ``ingest_gateway.app.ERRORS``).
"""

from __future__ import annotations

from conf.errors import SparklogError


class BadRequest(SparklogError, ValueError):
    """The request body or a parameter is malformed (JSON, base64, Arrow, a field)."""

    code = "malformed_request"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class InvalidKey(BadRequest):
    code = "invalid_key"


class InvalidValue(BadRequest):
    code = "invalid_value"


class UnsupportedContentType(SparklogError):
    code = "unsupported_content_type"

    def __init__(self, content_type: str, supported: tuple[str, ...]):
        self.content_type, self.supported = content_type, supported
        super().__init__(f"content type {content_type!r} is not supported here; use one of "
                         + ", ".join(supported))


class RequestTooLarge(SparklogError):
    code = "request_too_large"

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        super().__init__(f"the request body has at least {size} bytes, more than "
                         f"max.request.size={limit}")


class MissingKey(SparklogError, ValueError):
    """A record without a key sent to a compacted topic (Kafka refuses these too)."""

    code = "missing_key"

    def __init__(self, topic: str, row: int):
        self.topic, self.row = topic, row
        super().__init__(f"topic {topic!r} has cleanup.policy=compact, so every record needs a "
                         f"key; record {row} of the request has none")


class BufferFull(SparklogError):
    """Back-pressure: accepted-but-unflushed bytes would exceed ``buffer.memory``."""

    code = "buffer_full"

    def __init__(self, buffered: int, incoming: int, limit: int, retry_after_s: int = 1):
        self.buffered, self.incoming, self.limit = buffered, incoming, limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the gateway holds {buffered} unflushed bytes; {incoming} more would "
                         f"exceed buffer.memory={limit}: retry after {retry_after_s} s")


class ShuttingDown(SparklogError):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("the gateway is shutting down and accepts no more records")


class NotLeader(SparklogError):
    """This gateway no longer writes the partition (another gateway claimed it)."""

    code = "not_leader"

    def __init__(self, topic: str, partition: int, reason: str):
        self.topic, self.partition, self.reason = topic, partition, reason
        super().__init__(f"this gateway does not lead {topic}-{partition}: {reason}")


class FlushFailed(SparklogError):
    """Writing a batch to the store failed; nothing of it is visible (retriable)."""

    code = "flush_failed"

    def __init__(self, topic: str, partition: int, reason: str):
        self.topic, self.partition, self.reason = topic, partition, reason
        super().__init__(f"flushing {topic}-{partition} to the store failed: {reason}; "
                         "none of the batch's records were committed, retry")


class UnknownCluster(SparklogError, LookupError):
    code = "unknown_cluster"

    def __init__(self, cluster_id: str, known: str):
        self.cluster_id, self.known = cluster_id, known
        super().__init__(f"cluster {cluster_id!r} is not this one ({known!r})")


class NestingTooDeep(BadRequest):
    """A JSON body nests arrays/objects deeper than ``max.json.nesting.depth``."""

    code = "nesting_too_deep"

    def __init__(self, limit: int, where: str = "the body"):
        self.limit, self.where = limit, where
        super().__init__(f"{where} nests JSON arrays/objects deeper than "
                         f"max.json.nesting.depth={limit}")


class UncompressedTooLarge(RequestTooLarge):
    """An Arrow body whose buffers, once expanded, would exceed
    ``max.uncompressed.request.size`` (a compression bomb, or a huge declared length)."""

    code = "uncompressed_too_large"

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        SparklogError.__init__(self, f"the Arrow body expands to at least {size} bytes, more than "
                                     f"max.uncompressed.request.size={limit}")


class ControlRequestTooLarge(RequestTooLarge):
    """The body of a route other than produce passed ``max.control.request.size``
    (413 like any RequestTooLarge; the message names the limit that applies)."""

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        SparklogError.__init__(self, f"the request body has at least {size} bytes, more than "
                                     f"max.control.request.size={limit}")


class RequestTimeout(SparklogError):
    """A request did not arrive whole (headers and body) within ``request.read.timeout.ms``
    of its first byte, or of the connection's start (answered 408, connection closed)."""

    code = "request_timeout"

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms
        super().__init__(f"the request did not arrive whole within "
                         f"request.read.timeout.ms={timeout_ms}")


class TooManyConnections(SparklogError):
    """A connection beyond ``max.connections`` (answered 503, connection closed)."""

    code = "too_many_connections"

    def __init__(self, open_connections: int, limit: int):
        self.open_connections, self.limit = open_connections, limit
        super().__init__(f"the gateway has {open_connections} connections open, more than "
                         f"max.connections={limit}; retry later")


class RecordNotJson(SparklogError):
    """A record asked for in the JSON format whose key or value is not strict JSON
    (NaN, a number past a double, a lone surrogate, bytes written by the binary or
    Arrow paths). Like Kafka's RecordDeserializationException it names where the
    record is, so the client can read it in the binary format or seek past it."""

    code = "record_not_json"

    def __init__(self, topic: str, partition: int, offset: int, part: str, reason: str):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.part, self.reason = part, reason
        super().__init__(f"the {part} of record {topic}-{partition}@{offset} is not strict JSON "
                         f"({reason}): read it with Accept: "
                         f"application/vnd.kafka.binary.v2+json, or seek to offset {offset + 1}")
