"""Prometheus metrics of one gateway, in its own ``CollectorRegistry``, and the short
in-memory history the web console draws (``http.console``).

Exposed at ``/metrics`` (names as Kafka's broker metrics would read in Prometheus):

* records and bytes in per topic (``records_in_total``, ``bytes_in_total``: accepted
  produce) and out per topic (``records_out_total``, ``bytes_out_total``: records
  answered by the gateway's fetches, REST Proxy ``messages``, REST consumer instances
  and the console's browser; consumers reading the store directly pass no gateway
  and are not counted; bytes out are the Arrow size of the records' columns);
* requests by Kafka-like request type (``Produce``, ``Fetch``, ``JoinGroup``, ...: see
  :func:`request_type`) and status, and their latency as a histogram
  (``request_seconds``): the time from the request's arrival to its answer's end;
* flush latency, records per flush, bytes buffered, open connections;
* errors by machine-readable code, failed flushes per topic with the records they lost
  (answered at acks=0 or 1 before the flush failed), every ``out_of_order_sequence``
  answer (refused requests and batches dropped at flush);
* consumer group rebalances (completed generations) per group;
* transaction markers written by this gateway's coordinator, by route (``local``,
  ``forwarded``, ``direct`` with its reason: ``server.transaction_markers``);
* at scrape time, from the store (``add_collector``): per-partition log start, log
  end and size, consumer lag per group and partition, maintenance runs and the bytes
  they reclaimed (collectors the HTTP layer registers: ``http.console_data``).

The history (:class:`History`) is a ring of samples of the in/out totals, one per
``HISTORY_INTERVAL_S`` while the app runs, and of each group's total lag.
"""

from __future__ import annotations

import bisect
import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

__all__ = ["GatewayMetrics", "History", "CONTENT_TYPE_LATEST", "request_type"]

#: seconds between two throughput samples, and how many are kept (10 minutes)
HISTORY_INTERVAL_S = 1.0
HISTORY_SAMPLES = 600
#: lag samples kept per group, and groups kept (the least recently sampled goes first)
LAG_SAMPLES = 360
LAG_GROUPS = 1000

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                    5, 10, 30)


class History:
    """Samples of the gateway's totals and of group lags (thread-safe, bounded).

    ``sample`` appends ``(time_s, records_in, bytes_in, records_out, bytes_out)``
    totals, the gateway's and each topic's (``topic_totals``: topic -> the same four);
    :meth:`rates` turns consecutive samples into per-second rates.
    """

    def __init__(self, totals: list[int], topic_totals: dict[str, list[int]] | None = None,
                 *, samples: int = HISTORY_SAMPLES) -> None:
        self._totals = totals
        self._topic_totals = {} if topic_totals is None else topic_totals
        self._ring: collections.deque[tuple[float, tuple[int, ...], dict[str, tuple]]] = \
            collections.deque(maxlen=samples)
        self._lags: dict[str, collections.deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def sample(self, now: float | None = None) -> None:
        """Record the totals as they are now (``now``: wall-clock seconds)."""
        t = time.time() if now is None else now
        topics = {k: tuple(v) for k, v in list(self._topic_totals.items())}
        with self._lock:
            self._ring.append((t, tuple(self._totals), topics))

    def rates(self, topic: str | None = None) -> list[tuple[float, float, float, float, float]]:
        """``(time_s, records_in/s, bytes_in/s, records_out/s, bytes_out/s)`` between
        consecutive samples, oldest first: the gateway's, or ``topic``'s."""
        with self._lock:
            ring = [(t, totals if topic is None else topics.get(topic, (0, 0, 0, 0)))
                    for t, totals, topics in self._ring]
        out = []
        for (t0, a), (t1, b) in zip(ring, ring[1:]):
            dt = t1 - t0
            if dt > 0:
                out.append((t1, *((y - x) / dt for x, y in zip(a, b))))
        return out

    def record_lag(self, group: str, lag: int, now: float | None = None) -> None:
        """Record ``group``'s total lag (records over all its partitions)."""
        t = time.time() if now is None else now
        with self._lock:
            ring = self._lags.pop(group, None)  # re-inserted: the dict keeps sampling order
            if ring is None:
                ring = collections.deque(maxlen=LAG_SAMPLES)
                if len(self._lags) >= LAG_GROUPS:
                    del self._lags[next(iter(self._lags))]
            self._lags[group] = ring
            ring.append((t, lag))

    def lags(self, group: str) -> list[tuple[float, int]]:
        """``(time_s, total lag)`` samples of ``group``, oldest first."""
        with self._lock:
            return list(self._lags.get(group, ()))


class RequestStats:
    """``sparklog_gateway_requests_total`` {request, status} and the histogram
    ``sparklog_gateway_request_seconds`` {request}, kept as plain ints and floats: only the
    event loop adds to them (no lock), a scrape reads a copy (a collector)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}
        #: per request type: one count per bucket of _LATENCY_BUCKETS, +Inf, then the sum
        self.latency: dict[str, list[float]] = {}

    def observe(self, kind: str, status: int, seconds: float) -> None:
        key = (kind, status)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        hist = self.latency.get(kind)
        if hist is None:
            hist = self.latency[kind] = [0] * (len(_LATENCY_BUCKETS) + 1) + [0.0]
        hist[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        hist[-1] += seconds

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        total = CounterMetricFamily("sparklog_gateway_requests", "HTTP requests by request "
                                    "type and status", labels=["request", "status"])
        for (kind, status), n in sorted(dict(self.counts).items()):
            total.add_metric([kind, str(status)], n)
        yield total
        hist = HistogramMetricFamily("sparklog_gateway_request_seconds", "time from a "
                                     "request's arrival to the end of its answer",
                                     labels=["request"])
        for kind, counts in sorted(dict(self.latency).items()):
            counts = list(counts)
            cumulative, buckets = 0, []
            for bound, n in zip((*_LATENCY_BUCKETS, math.inf), counts):
                cumulative += n
                buckets.append((floatToGoString(bound), cumulative))
            hist.add_metric([kind], buckets, counts[-1])
        yield hist


class _Collector:
    """Adapts a function that yields metric families to the registry's collector API."""

    def __init__(self, fn: Callable[[], Iterable[Metric]]):
        self.fn = fn

    def describe(self) -> list[Metric]:
        return []  # nothing at registration: collecting reads the store

    def collect(self) -> Iterable[Metric]:
        return self.fn()


class GatewayMetrics:
    """Every metric of one gateway; its methods are what the engine and the HTTP layer
    call when something happens (each cheap: the produce path calls them)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records_in = Counter("sparklog_gateway_records_in", "records accepted",
                                  ["topic"], registry=r)
        self.bytes_in = Counter("sparklog_gateway_bytes_in", "bytes of records accepted",
                                ["topic"], registry=r)
        self.records_out = Counter("sparklog_gateway_records_out", "records answered by fetches",
                                   ["topic"], registry=r)
        self.bytes_out = Counter("sparklog_gateway_bytes_out", "bytes of records answered by "
                                 "fetches (Arrow size of their columns)", ["topic"], registry=r)
        self.flush_seconds = Histogram(
            "sparklog_gateway_flush_seconds", "time to write a segment and commit its manifest",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r)
        self.batch_records = Histogram(
            "sparklog_gateway_batch_records", "records per flushed segment",
            buckets=(1, 10, 100, 1_000, 10_000, 100_000, 1_000_000), registry=r)
        self.buffer_bytes = Gauge("sparklog_gateway_buffer_bytes",
                                  "bytes accepted but not yet flushed", registry=r)
        self.connections = Gauge("sparklog_gateway_connections", "open client connections",
                                 registry=r)
        self.errors = Counter("sparklog_gateway_errors", "refused requests and failed flushes",
                              ["code"], registry=r)
        # requests_total and request_seconds: plain counts exported at scrape time
        # (prometheus_client's Counter and Histogram took ~2.3 us a request, these ~0.5)
        self.requests = RequestStats()
        r.register(self.requests)
        self.rebalances = Counter("sparklog_gateway_group_rebalances", "consumer group "
                                  "generations completed by this gateway's coordinator",
                                  ["group"], registry=r)
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
        self.txn_markers = Counter(
            "sparklog_gateway_txn_markers", "transaction markers this gateway's coordinator "
            "wrote, by route: local (into its own hot journal), forwarded (to the leading "
            "gateway, WriteTxnMarkers), direct (into the partition's _log, sealing a hot "
            "journal: the fallback, with the reason)", ["route", "reason"], registry=r)
        # Children are cached: .labels() costs more than .inc() on the hot path.
        self._topic_children: dict[str, tuple[Any, Any, list[int]]] = {}
        self._out_children: dict[str, tuple[Any, Any, list[int]]] = {}
        #: records in, bytes in, records out, bytes out (plain ints: the history's source)
        self.totals = [0, 0, 0, 0]
        self.topic_totals: dict[str, list[int]] = {}  # the same, per topic
        self.history = History(self.totals, self.topic_totals)

    def watch_buffer(self, read: Callable[[], float]) -> None:
        self.buffer_bytes.set_function(read)

    def watch_connections(self, read: Callable[[], float]) -> None:
        """Report ``read()`` as the open connections (the server calls it once)."""
        self.connections.set_function(read)

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Add metric families computed at each scrape (``collect`` may read the store:
        ``/metrics`` renders off the event loop)."""
        self.registry.register(_Collector(collect))

    def _topic(self, topic: str) -> list[int]:
        totals = self.topic_totals.get(topic)
        if totals is None:
            totals = self.topic_totals[topic] = [0, 0, 0, 0]
        return totals

    def accepted(self, topic: str, records: int, nbytes: int) -> None:
        children = self._topic_children.get(topic)
        if children is None:
            children = self._topic_children[topic] = (
                self.records_in.labels(topic), self.bytes_in.labels(topic), self._topic(topic))
        children[0].inc(records)
        children[1].inc(nbytes)
        for totals in (self.totals, children[2]):
            totals[0] += records
            totals[1] += nbytes

    def fetched(self, topic: str, records: int, nbytes: int) -> None:
        """``records`` of ``topic`` (``nbytes``) answered to a consumer."""
        children = self._out_children.get(topic)
        if children is None:
            children = self._out_children[topic] = (
                self.records_out.labels(topic), self.bytes_out.labels(topic), self._topic(topic))
        children[0].inc(records)
        children[1].inc(nbytes)
        for totals in (self.totals, children[2]):
            totals[2] += records
            totals[3] += nbytes

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

    def rebalanced(self, group: str) -> None:
        """A generation of ``group`` completed (the coordinator's hook)."""
        self.rebalances.labels(group).inc()

    def request(self, kind: str, status: int, seconds: float) -> None:
        """One answered request of type ``kind`` (see :func:`request_type`)."""
        self.requests.observe(kind, status, seconds)

    def render(self) -> bytes:
        """The text exposition format (runs the collectors: may read the store)."""
        return generate_latest(self.registry)


_GROUP_ROUTES = {"heartbeat": ("Heartbeat", "Heartbeat"),
                 "offsets": ("OffsetCommit", "OffsetFetch")}
_CONSUMER_ROUTES = {"records": "Fetch", "offsets": None, "subscription": "Subscribe",
                    "assignments": "Subscribe", "positions": "Seek", "heartbeat": "Heartbeat"}


def request_type(method: str, path: str) -> str:
    """The Kafka request type an HTTP request stands for (a bounded set: paths are the
    client's to choose, label values must not be)."""
    parts = path.strip("/").split("/")
    head = parts[0]
    post = method == "POST"
    if head == "topics":
        if len(parts) in (2, 4) and post:
            return "Produce"
        if parts[-1] == "messages":
            return "Fetch"
        return "ListOffsets" if parts[-1] == "offsets" else "Metadata"
    if head == "fetch":
        return "Fetch" if len(parts) == 1 else "Operations"  # /fetch/waiting
    if head == "groups":
        if len(parts) == 1:
            return "ListGroups"
        if parts[-1] in _GROUP_ROUTES:
            return _GROUP_ROUTES[parts[-1]][0 if post else 1]
        if len(parts) >= 3 and parts[2] == "members":
            return "JoinGroup" if post else "LeaveGroup"
        return "DescribeGroups"
    if head == "consumers":
        sub = parts[4] if len(parts) > 4 else ""  # /consumers/g/instances/i/<sub>[/...]
        if sub == "offsets":
            return "OffsetCommit" if post else "OffsetFetch"
        if sub in _CONSUMER_ROUTES:
            return _CONSUMER_ROUTES[sub] or "Consumer"
        return "CreateConsumer" if post else "DeleteConsumer" if method == "DELETE" \
            else "Consumer"
    if head == "v3":
        if parts[-1] in ("records", "records:batch"):
            return "Produce"
        if "consumer-groups" in parts:
            return "DescribeGroups"
        if parts[-1] == "producers":
            return "InitProducerId"
        if parts[-1] == "offset":
            return "ListOffsets"
        return "Metadata" if method == "GET" else "Admin"
    if head in ("metadata", "brokers"):
        return "Metadata"
    if head == "ui":
        return "Console"
    if head in ("metrics", "healthz", "readyz", "openapi.json", "docs", "redoc"):
        return "Operations"
    return "Other"


access_log = logging.getLogger("sparklog.access")


class Instrumented:
    """The gateway's ASGI app with each HTTP request counted and timed in ``metrics``
    (:meth:`GatewayMetrics.request`) and, if ``log_requests``, one access-log line on the
    ``sparklog.access`` logger at INFO: client, method, path and query as sent, status,
    body bytes answered, milliseconds, request type. Everything else (``state``, ...) is
    the wrapped app's. Measured around a do-nothing app: ~1.7 us a request, and ~20-30 us
    more with the access log on (a LogRecord, its formatting, a write)."""

    def __init__(self, app: Any, metrics: GatewayMetrics, *, log_requests: bool = False):
        self.app = app
        self.metrics = metrics
        self.log_requests = log_requests
        self._kinds: dict[tuple[str, str], str] = {}  # request_type by (method, path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what a client reads when the app fails before answering
        sent = 0

        def counting_send(message: Any) -> Any:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                sent += len(message.get("body", b""))
            return send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            seconds = time.perf_counter() - started
            key = (scope["method"], scope["path"])
            kind = self._kinds.get(key)
            if kind is None:
                kind = request_type(*key)
                if len(self._kinds) < 10_000:  # bounded: paths are the clients' to choose
                    self._kinds[key] = kind
            self.metrics.request(kind, status, seconds)
            if self.log_requests and access_log.isEnabledFor(logging.INFO):
                self._log(scope, kind, status, sent, seconds)

    @staticmethod
    def _log(scope: Any, kind: str, status: int, sent: int, seconds: float) -> None:
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else "-"
        # raw_path: as sent (percent-encoded, no control characters), so a path cannot
        # forge a second log line
        target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        ms = round(seconds * 1000, 3)
        access_log.info('%s "%s %s HTTP/%s" %d %d %.3fms %s', where, scope["method"], target,
                        scope.get("http_version", "1.1"), status, sent, ms, kind,
                        extra={"client": where, "method": scope["method"], "path": target,
                               "status": status, "bytes": sent, "duration_ms": ms,
                               "request": kind})
