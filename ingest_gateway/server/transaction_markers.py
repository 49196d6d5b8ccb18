"""Transaction markers sent to the partition's leader, as Kafka's coordinator does.

The transaction coordinator (``log_layout.transactions``: an end, a recovery, a
timeout's or an ``init_transactions``' abort) calls a ``MarkerWriter`` once per
partition, from a worker thread. :class:`MarkerRouter` is this gateway's, and writes
each marker where the partition's records are being written, so a hot partition's
journal (``gateway.hot.enable``) takes the marker in its next flush instead of being
sealed by a write into the partition's ``_log``:

1. **This gateway leads it** (its batcher writes the partition with a hot journal):
   the marker goes through the leader's own writer, into the journal (``local``).
2. **Another slot leads it** (the broker application's assignment,
   ``ClusterMember.leader``): the marker is forwarded to that slot's Kafka listener
   as Kafka's broker-to-broker **WriteTxnMarkers** (``forwarded``; the address from
   the slot's registration, ``log_layout.brokers``; the transport is an adapter,
   :class:`KafkaMarkerTransport`). A leader that no longer leads it answers
   ``NOT_LEADER_OR_FOLLOWER`` (its writer was fenced: the leader epoch's fencing
   holds for markers too) and the router asks the assignment again, up to
   ``FORWARD_ATTEMPTS`` times.
3. **Otherwise** (no cluster, no leader known, the leader unreachable or refusing,
   a listener this transport cannot log in to, or a partition not hot): today's
   write into the partition's ``_log`` (:meth:`MarkerRouter.direct`): correct
   whoever leads (it seals a hot journal, whose leader then claims again), only
   slower. Every such write of a hot-tier gateway is counted in
   ``sparklog_gateway_txn_markers_total{route="direct",reason=...}``.

**On the wire** a forwarded marker is one WriteTxnMarkers v2 entry: producer id,
epoch, result, the partition, ``transaction_version`` 2 for a strict (bumped,
KIP-890) marker and 1 otherwise, and in ``coordinator_epoch`` (which sparklog has no
use for: the transaction log orders its changes by exclusive versions) the marker's
``before`` bound (``txn_writes``): ``-2`` for none, ``-(before + 3)`` for one. Kafka's
own admin client sends -1 or a coordinator epoch >= 0 there (``kafka-transactions.sh
abort``: an ABORT at the producer's epoch in the partition), so the two are told
apart; both need ClusterAction on the cluster (``kafka.admin_transactions``). A
``before`` past what the field holds is not forwarded (route 3).
"""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
import weakref
from typing import Any, NamedTuple

from ingest_gateway.server.gateway import Gateway
from log_layout import Fenced, PartitionWriter
from log_layout.brokers import BrokerRegistry, GatewayInfo

__all__ = ["Marker", "MarkerRouter", "KafkaMarkerTransport", "router", "encode_before",
           "decode_before", "NO_BEFORE", "API_WRITE_TXN_MARKERS"]

API_WRITE_TXN_MARKERS = 27
#: the WriteTxnMarkers version sent (the listener offers 1-2; 2 carries the marker's
#: transaction version)
SENT_VERSION = 2
#: ``coordinator_epoch`` of a forwarded marker without a ``before`` bound (module doc)
NO_BEFORE = -2
#: how often a forward is tried while leaders answer NOT_LEADER_OR_FOLLOWER or move
#: (the assignment is re-read each second: ``cluster_member.REFRESH_S``)
FORWARD_ATTEMPTS = 5
#: the wait between those tries
FORWARD_RETRY_S = 0.5
#: a forward's connect and answer timeout: past it the leader counts as unreachable
FORWARD_TIMEOUT_S = 10.0
#: how long a slot's registration (its Kafka address) is reused
REGISTRATION_TTL_S = 1.0
#: Kafka's NOT_LEADER_OR_FOLLOWER, NONE
NOT_LEADER_OR_FOLLOWER, NONE = 6, 0
_INT32_MIN = -(2 ** 31)


class Marker(NamedTuple):
    """One partition's marker, as the coordinator asks for it (``txn_writes``)."""

    topic: str
    partition: int
    producer_id: int
    epoch: int
    commit: bool
    strict: bool
    before: int | None


def encode_before(before: int | None) -> int | None:
    """``coordinator_epoch`` carrying ``before`` (module doc); None when it does not fit."""
    if before is None:
        return NO_BEFORE
    if before < 0 or -(before + 3) < _INT32_MIN:
        return None
    return -(before + 3)


def decode_before(coordinator_epoch: int) -> tuple[bool, int | None]:
    """(whether ``coordinator_epoch`` marks a coordinator's forwarded marker, its
    ``before`` bound)."""
    if coordinator_epoch > NO_BEFORE:
        return False, None
    return True, None if coordinator_epoch == NO_BEFORE else -coordinator_epoch - 3


class ForwardRefused(Exception):
    """The leader answered a forwarded marker with an error code other than
    NOT_LEADER_OR_FOLLOWER (``code``)."""

    def __init__(self, code: int):
        self.code = code
        super().__init__(f"the leader answered error code {code}")


class KafkaMarkerTransport:
    """Sends one marker as a WriteTxnMarkers request to a Kafka listener (PLAINTEXT;
    ``client_id`` names the sender) and returns the partition's error code. Raises
    OSError (unreachable, closed, timed out) or ValueError (an answer that does not
    parse or does not answer the partition)."""

    def __init__(self, client_id: str = "sparklog-txn-markers",
                 timeout_s: float = FORWARD_TIMEOUT_S):
        self.client_id, self.timeout_s = client_id, timeout_s

    def send(self, host: str, port: int, marker: Marker) -> int:
        from kio.index import load_response_schema
        from kio.schema.write_txn_markers.v2 import request as wtm
        from kio.serial import entity_reader, entity_writer
        from kio.static.primitive import i8, i16, i32, i64

        ce = encode_before(marker.before)
        if ce is None:
            raise ValueError(f"before={marker.before} does not fit a WriteTxnMarkers request")
        req = wtm.WriteTxnMarkersRequest(markers=(wtm.WritableTxnMarker(
            producer_id=i64(marker.producer_id), producer_epoch=i16(marker.epoch),
            transaction_result=marker.commit, coordinator_epoch=i32(ce),
            transaction_version=i8(2 if marker.strict else 1),
            topics=(wtm.WritableTxnMarkerTopic(name=marker.topic,
                                               partition_indexes=(i32(marker.partition),)),)),))
        cid = self.client_id.encode()
        body = io.BytesIO()
        entity_writer(wtm.WriteTxnMarkersRequest)(body, req)
        payload = struct.pack(">hhih", API_WRITE_TXN_MARKERS, SENT_VERSION, 1, len(cid)) + \
            cid + b"\0" + body.getvalue()
        with socket.create_connection((host, port), timeout=self.timeout_s) as s:
            s.sendall(struct.pack(">i", len(payload)) + payload)
            data = _exactly(s, struct.unpack(">i", _exactly(s, 4))[0])
        cls = load_response_schema(API_WRITE_TXN_MARKERS, SENT_VERSION)
        try:
            answer, _ = entity_reader(cls)(data, 5)  # correlation id, header tags
            [part] = [p for m in answer.markers for t in m.topics if t.name == marker.topic
                      for p in t.partitions if p.partition_index == marker.partition]
        except Exception as e:  # noqa: BLE001 - whatever kio raises on a bad answer
            raise ValueError(f"a WriteTxnMarkers answer that does not parse: {e}") from None
        return int(part.error_code)


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the leader closed the connection")
        buf += chunk
    return buf


class MarkerRouter:
    """This gateway's ``transactions.MarkerWriter`` (module doc); thread-safe."""

    def __init__(self, gateway: Gateway, transport: Any = None, *,
                 attempts: int = FORWARD_ATTEMPTS, retry_s: float = FORWARD_RETRY_S):
        self.gateway, self.attempts, self.retry_s = gateway, attempts, retry_s
        self.transport = transport or KafkaMarkerTransport(f"sparklog-{gateway.batcher.id}")
        self._registry = BrokerRegistry(gateway.log.store)
        self._seen: dict[int, tuple[float, GatewayInfo | None]] = {}
        self._lock = threading.Lock()
        self._counter = gateway.metrics.txn_markers

    def __call__(self, topic: str, partition: int, producer_id: int, epoch: int,
                 commit: bool, *, now_ms: int, strict: bool = False,
                 before: int | None = None) -> None:
        """Write one marker (module doc: here, at the leader, or into ``_log``). Raises
        Fenced (the coordinator calls again), InvalidProducerEpoch, StoreError."""
        marker = Marker(topic, partition, producer_id, epoch, commit, strict, before)
        why = self._write_here(marker, now_ms)
        if why is None:
            return
        if self.gateway.settings.gateway.hot_enable:  # off: _log is where it belongs
            reason = self._forward(marker)
            if reason is None:
                return
            self.count("direct", reason)
        self.direct(topic, partition, producer_id, epoch, commit, now_ms=now_ms,
                    strict=strict, before=before)

    def direct(self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool,
               *, now_ms: int, strict: bool = False, before: int | None = None) -> None:
        """Write the marker into the partition's ``_log`` (sealing a hot journal that
        has the partition). Raises Fenced, InvalidProducerEpoch, StoreError."""
        part = self.gateway.log.partition(topic, partition)
        PartitionWriter(part, part.snapshot()).write_marker(
            producer_id, epoch, commit, now_ms=now_ms, strict=strict, before=before)

    def write_here(self, marker: Marker, now_ms: int) -> bool:
        """Write ``marker`` through this gateway's hot writer of its partition; False
        when it writes none (or that writer was fenced: another leader has it).
        Raises InvalidProducerEpoch, StoreError."""
        return self._write_here(marker, now_ms) is None

    def _write_here(self, marker: Marker, now_ms: int) -> str | None:
        """:meth:`write_here`: None once written, else why not (``not_hot``,
        ``fenced``)."""
        state = self.gateway.batcher.writing(marker.topic, marker.partition)
        if state is None or state.writer.journal is None:
            return "not_hot"
        try:
            state.writer.write_marker(marker.producer_id, marker.epoch, marker.commit,
                                      now_ms=now_ms, strict=marker.strict,
                                      before=marker.before)
        except Fenced:
            return "fenced"  # another leader claimed it: ask the assignment
        self.count("local", "")
        return None

    def _forward(self, marker: Marker) -> str | None:
        """Send ``marker`` to its leader; None once written there, else why not (the
        ``reason`` label of a direct write)."""
        cluster = self.gateway.cluster
        if cluster is None:
            return "no_cluster"
        if encode_before(marker.before) is None:
            return "unencodable"
        if not self.gateway.settings.gateway.kafka_listeners.strip().upper().startswith(
                "PLAINTEXT://"):
            return "listener_security"  # a login between gateways is not built
        reason = "no_leader"
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.retry_s)
            where = cluster.leader(marker.topic, marker.partition)
            slot = where.get("slot") if where else None
            if not isinstance(slot, int):
                reason = "no_leader"
                continue
            if slot == self.gateway.node_id:  # assigned here, not written here now
                written = self.gateway.batcher.writing(marker.topic, marker.partition)
                return "not_claimed" if written is None else "fenced"
            info = self._registration(slot)
            if info is None or not info.kafka_host or info.kafka_port <= 0:
                reason = "no_address"
                continue
            try:
                code = self.transport.send(info.kafka_host, info.kafka_port, marker)
            except (OSError, ValueError):
                return "unreachable"  # e.g. killed: _log is right, whoever leads next
            if code == NONE:
                self.count("forwarded", "")
                return None
            if code != NOT_LEADER_OR_FOLLOWER:
                return f"refused_{code}"
            reason = "not_leader"
        return reason

    def _registration(self, slot: int) -> GatewayInfo | None:
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(slot)
        if seen is not None and now - seen[0] < REGISTRATION_TTL_S:
            return seen[1]
        info = self._registry.gateway(slot)
        with self._lock:
            self._seen[slot] = (now, info)
        return info

    def count(self, route: str, reason: str) -> None:
        """One marker more in ``sparklog_gateway_txn_markers_total``."""
        self._counter.labels(route, reason).inc()


_ROUTERS: "weakref.WeakKeyDictionary[Gateway, MarkerRouter]" = weakref.WeakKeyDictionary()
_ROUTERS_LOCK = threading.Lock()


def router(gateway: Gateway) -> MarkerRouter:
    """The gateway's one :class:`MarkerRouter` (made at its first use)."""
    with _ROUTERS_LOCK:
        r = _ROUTERS.get(gateway)
        if r is None:
            r = _ROUTERS[gateway] = MarkerRouter(gateway)
        return r
