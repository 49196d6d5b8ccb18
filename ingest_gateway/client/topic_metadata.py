"""What the producer knows of its topics (Kafka's ``ProducerMetadata``): partition counts
and ``max.message.bytes``, asked from any gateway once and kept.

Every gateway reads the topics from the store, so any reachable one may answer
``GET /topics/{topic}``. The limit is read again before a record over it is refused
(it may have been raised since).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import urllib3

from ingest_gateway.client.batch import NO_LIMIT
from ingest_gateway.errors import ProduceError
from ingest_gateway.protocol.connection_security import AUTH_ERRORS, auth_error


class TopicMetadata:
    """Partition counts and record limits per topic, read through ``router`` (a
    :class:`~ingest_gateway.client.cluster.ClusterRouter`)."""

    def __init__(self, router: Any):
        self._router = router
        self._partitions: dict[str, int] = {}
        #: topic -> its max.message.bytes, read with the partition count
        self._max_record: dict[str, int] = {}

    def partitions(self, topic: str) -> int:
        """The topic's partition count (asked from a gateway once, then kept); raises
        ProduceError (unknown topic, or no gateway reachable)."""
        n = self._partitions.get(topic)
        return self.read(topic) if n is None else n

    def known_partitions(self, topic: str, default: int) -> int:
        """The partition count if already read, else ``default`` (never asks a gateway)."""
        return self._partitions.get(topic, default)

    def max_record(self, topic: str) -> int:
        """The topic's max.message.bytes as last read (NO_LIMIT before the first read)."""
        return self._max_record.get(topic, NO_LIMIT)

    def read(self, topic: str) -> int:
        """Ask a gateway for the topic's partition count and max.message.bytes; the count.
        Raises ProduceError, or NotAuthenticated / NotAuthorized for a 401 / 403."""
        path = f"/topics/{quote(topic, safe='')}"
        try:
            r = self._router.any_gateway(lambda s: s.send("GET", path))
            doc = json.loads(r.data or b"null")
        except AUTH_ERRORS:
            raise
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            raise ProduceError(topic, -1, None, "connection",
                               f"cannot read the topic's metadata: {e}") from None
        denied = auth_error(r.status, doc if isinstance(doc, dict) else {})
        if denied is not None:
            raise denied
        if r.status != 200:
            raise ProduceError(topic, -1, r.status, (doc or {}).get("error", ""),
                               (doc or {}).get("message", r.data.decode(errors="replace")))
        limit = (doc.get("configs") or {}).get("max.message.bytes")
        self._max_record[topic] = NO_LIMIT if limit is None else int(limit)
        n = self._partitions[topic] = len(doc["partitions"])
        return n
