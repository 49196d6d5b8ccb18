"""Prometheus metrics of one gateway, in its own ``CollectorRegistry``.

Exposed at ``/metrics``: records and bytes in per topic, flush latency, records
per flush (batch size), bytes buffered (accepted, not yet flushed), requests by
route and status, errors by machine-readable code, failed flushes per topic
with the records they lost (answered at acks=0 or 1 before the flush failed), and
every ``out_of_order_sequence`` answer (refused requests and batches dropped at flush).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["GatewayMetrics", "CONTENT_TYPE_LATEST"]


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records_in = Counter("sparklog_gateway_records_in", "records accepted",
                                  ["topic"], registry=r)
        self.bytes_in = Counter("sparklog_gateway_bytes_in", "bytes of records accepted",
                                ["topic"], registry=r)
        self.flush_seconds = Histogram(
            "sparklog_gateway_flush_seconds", "time to write a segment and commit its manifest",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r)
        self.batch_records = Histogram(
            "sparklog_gateway_batch_records", "records per flushed segment",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000), registry=r)
        self.buffer_bytes = Gauge("sparklog_gateway_buffer_bytes",
                                  "bytes accepted but not yet flushed", registry=r)
        self.errors = Counter("sparklog_gateway_errors", "refused requests and failed flushes",
                              ["code"], registry=r)
        self.requests = Counter("sparklog_gateway_requests", "HTTP requests", ["route", "status"],
                                registry=r)
        self.flush_failures = Counter(
            "sparklog_gateway_flush_failures", "flushes that failed: none of their records "
            "were written", ["topic", "error"], registry=r)
        self.records_lost = Counter(
            "sparklog_gateway_records_lost", "records answered at acks=0 or 1 whose flush "
            "then failed: acknowledged, never written", ["topic"], registry=r)
        self.out_of_order_sequence = Counter(
            "sparklog_gateway_out_of_order_sequence", "idempotent batches answered "
            "out_of_order_sequence (a gap or an overlap in a producer's sequence); zero in "
            "normal operation: a batch that overtook its predecessor is held, not refused",
            registry=r)
        # Children are cached: .labels() costs more than .inc() on the hot path.
        self._topic_children: dict[str, tuple[Counter, Counter]] = {}

    def watch_buffer(self, read: Callable[[], float]) -> None:
        self.buffer_bytes.set_function(read)

    def accepted(self, topic: str, records: int, nbytes: int) -> None:
        children = self._topic_children.get(topic)
        if children is None:
            children = self._topic_children[topic] = (self.records_in.labels(topic),
                                                      self.bytes_in.labels(topic))
        children[0].inc(records)
        children[1].inc(nbytes)

    def flushed(self, seconds: float, records: int) -> None:
        self.flush_seconds.observe(seconds)
        self.batch_records.observe(records)

    def flush_failed(self, topic: str, code: str, records_lost: int) -> None:
        self.flush_failures.labels(topic, code).inc()
        self.records_lost.labels(topic).inc(records_lost)

    def out_of_order(self) -> None:
        self.out_of_order_sequence.inc()

    def rejected(self, code: str) -> None:
        self.errors.labels(code).inc()

    def request(self, route: str, status: int) -> None:
        self.requests.labels(route, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
