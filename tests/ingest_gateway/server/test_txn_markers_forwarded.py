"""Transaction markers reach the partition's leader (issue 30): two hot gateway slots
of a broker application on one store, each leading one partition, with real Kafka
clients (confluent-kafka) over real sockets.

A transaction spanning both partitions commits and aborts with each marker written by
the partition's leader into its own hot journal (forwarded by WriteTxnMarkers to the
other slot), so no journal is sealed, no flush fails and no direct ``_log`` write is
counted; read_committed readers see the committed records and not the aborted ones.
A leader SIGKILLed between the coordinator's decision and its markers: nothing of the
transaction is visible to read_committed until the partition's new leader claims it and
a recovery writes the marker there. Hostile WriteTxnMarkers bodies get typed codes."""

from __future__ import annotations

import re
import signal
import urllib.request
import uuid

import pytest

from jobs.gateway_process import free_port, wait_for
from log_layout import open_log, transactions
from log_layout.brokers import OFFSETS_PARTITIONS, BrokerRegistry
from ingest_gateway.server.transaction_markers import (NO_BEFORE, decode_before,
                                                       encode_before)
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect
from tests.conftest import make_log_url
from tests.ingest_gateway.slots import SlotApplication

ck = pytest.importorskip("confluent_kafka")

TOPIC = "txm"
LEADERS = (0, 1)
TIMEOUT = 60


class HotKafkaSlots(SlotApplication):
    """Two slots with the hot tier on and a Kafka listener each (on any store)."""

    def __init__(self, store_url: str, options: dict | None = None):
        self.store_url, self.generation, self.gateways = store_url, 0, {}
        self.log = open_log(store_url, storage_options=options, fsync=False)
        self.registry = BrokerRegistry(self.log.store)
        for slot in (0, 1):
            port = free_port()
            self.gateways[slot] = KafkaGatewayProcess(
                store_url, storage_options=options, port=port, settings={
                    "gateway.broker.id": str(slot), "gateway.hot.enable": "true",
                    "gateway.advertised.listeners": f"http://127.0.0.1:{port}"})

    def wait_for_leaders(self, leaders=LEADERS) -> None:
        """Each partition claimed hot by its slot, and both slots' Kafka addresses
        registered (so the coordinator can reach the other)."""
        def ready() -> bool:
            ids = {s: (self.registry.gateway(s) or None) for s in self.gateways}
            if any(i is None or not i.kafka_port for i in ids.values()):
                return False
            for p, slot in enumerate(leaders):
                m = self.log.partition(TOPIC, p).snapshot(refresh=True)
                if m.leader != ids[slot].gateway_id or m.hot_journal is None:
                    return False
            return True
        wait_for(ready, timeout=TIMEOUT, what="both partitions led hot by their slots")


def _metrics(gw) -> dict[tuple[str, str], float]:
    """(metric, labels) -> value of the gateway's txn-marker and flush-failure series."""
    text = urllib.request.urlopen(f"{gw.url}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"(sparklog_gateway_(?:txn_markers|flush_failures)_total)\{(.*)\} (\S+)",
                     line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def _routes(gws) -> dict[str, float]:
    out: dict[str, float] = {}
    for gw in gws:
        for (name, labels), v in _metrics(gw).items():
            if name == "sparklog_gateway_txn_markers_total":
                route = re.search(r'route="(\w+)"', labels).group(1)
                out[route] = out.get(route, 0) + v
    return out


def _failed_flushes(gws) -> float:
    return sum(v for gw in gws for (name, _), v in _metrics(gw).items()
               if name == "sparklog_gateway_flush_failures_total")


def _read_committed(bootstrap: str, count: int) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                     "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(len(LEADERS))])
        got: list[bytes] = []
        wait_for(lambda: got.extend(m.value() for m in c.consume(100, 0.5)
                                    if m.error() is None) or len(got) >= count,
                 timeout=TIMEOUT, what=f"{count} committed records")
        return got
    finally:
        c.close()


def _app(tmp_path, url: str | None = None, options: dict | None = None) -> HotKafkaSlots:
    app = HotKafkaSlots(url or str(tmp_path / "store"), options)
    app.log.create_topic(TOPIC, {"partitions": len(LEADERS)})
    return app


def _produce(bootstrap: str, tid: str, values: list[tuple[int, bytes]], *, end: str):
    """One transaction of ``values`` (partition, value); ``end``: commit, abort, or
    none (records flushed, the producer closed without ending)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                     "linger.ms": 5})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    for part, value in values:
        p.produce(TOPIC, value=value, partition=part)
    assert p.flush(TIMEOUT) == 0
    if end == "commit":
        p.commit_transaction(TIMEOUT)
    elif end == "abort":
        p.abort_transaction(TIMEOUT)
    return p


@pytest.mark.parametrize("backend", ["file", pytest.param("s3", marks=pytest.mark.slow)])
def test_a_transaction_over_two_leaders_ends_in_their_journals_without_a_seal(
        backend, request, tmp_path):
    app = _app(tmp_path, *make_log_url(backend, request, tmp_path))
    with app.running():
        app.publish_assignment({TOPIC: LEADERS}, offsets=(0,) * OFFSETS_PARTITIONS)
        app.wait_for_leaders()
        gws = list(app.gateways.values())
        epochs = [app.log.partition(TOPIC, p).snapshot(refresh=True).leader_epoch
                  for p in range(2)]
        for slot, gw in app.gateways.items():  # the coordinator on each side in turn
            p = _produce(gw.bootstrap, f"t-{slot}",
                         [(0, b"c0-%d" % slot), (1, b"c1-%d" % slot)], end="commit")
            p.begin_transaction()  # the next transaction of the same producer, aborted
            p.produce(TOPIC, value=b"a0-%d" % slot, partition=0)
            p.produce(TOPIC, value=b"a1-%d" % slot, partition=1)
            assert p.flush(TIMEOUT) == 0
            p.abort_transaction(TIMEOUT)
            del p
        routes = _routes(gws)
        assert routes.get("direct", 0) == 0 and routes.get("forwarded", 0) >= 4
        assert routes.get("local", 0) >= 4
        assert _failed_flushes(gws) == 0
        for p in range(2):  # not sealed, never claimed again, each marker in the journal
            m = app.log.partition(TOPIC, p).snapshot(refresh=True)
            assert m.hot_journal is not None and m.leader_epoch == epochs[p]
            markers = [s for s in m.segments if s.control]
            assert len(markers) == 4 and all(s.file.startswith("_hot/") for s in markers)
            assert not m.open_txns
        got = _read_committed(gws[0].bootstrap, 4)
        assert sorted(got) == [b"c0-0", b"c0-1", b"c1-0", b"c1-1"]


@pytest.mark.slow
def test_a_leader_killed_between_the_decision_and_its_marker(tmp_path):
    """The coordinator decides (PrepareCommit) and dies before any marker; the leader of
    partition 1 is SIGKILLed too. read_committed sees nothing of the transaction; once
    slot 0 claims partition 1 and the transactional id is taken up again there (its
    recovery writes the markers, both into slot 0's journal), it sees all of it."""
    app = _app(tmp_path)
    with app.running():
        app.publish_assignment({TOPIC: LEADERS}, offsets=(0,) * OFFSETS_PARTITIONS)
        app.wait_for_leaders()
        gw0, gw1 = app.gateways[0], app.gateways[1]
        old = _produce(gw0.bootstrap, "crash", [(0, b"x0"), (1, b"x1")], end="none")
        doc = transactions.describe(app.log, "crash")

        def decide_then_die(*_a, **_k) -> None:
            raise RuntimeError("the coordinator died after its commit point")

        with pytest.raises(RuntimeError):  # v2 end: the decision is durable, no marker
            transactions.end_transaction(app.log, "crash", doc["producer_id"], doc["epoch"],
                                         True, bump=True, markers=decide_then_die)
        assert transactions.describe(app.log, "crash")["state"] == transactions.PREPARE_COMMIT
        gw1.proc.send_signal(signal.SIGKILL)
        gw1.proc.wait(30)
        for p in range(2):  # nothing half visible
            part = app.log.partition(TOPIC, p)
            assert part.read_table(0, isolation_level="read_committed").num_rows == 0
        app.publish_assignment({TOPIC: (0, 0)}, offsets=(0,) * OFFSETS_PARTITIONS, live=(0,))
        app.wait_for_leaders((0, 0))
        _produce(gw0.bootstrap, "crash", [], end="commit")  # init_transactions recovers
        assert transactions.describe(app.log, "crash")["state"] in transactions.IDLE
        assert _routes([gw0]).get("direct", 0) == 0
        for p in range(2):
            m = app.log.partition(TOPIC, p).snapshot(refresh=True)
            assert [s.control for s in m.segments][-1] and not m.open_txns
            assert m.segments[-1].file.startswith("_hot/") and m.hot_journal is not None
        assert sorted(_read_committed(gw0.bootstrap, 2)) == [b"x0", b"x1"]
        del old


def _forward(gw, *, topic=TOPIC, partition=0, pid=5, epoch=0, commit=True,
             coordinator_epoch=NO_BEFORE, version=2) -> int:
    from kio.schema.write_txn_markers.v2 import request as m2

    kw = {"transaction_version": 2} if version == 2 else {}
    with connect(gw) as s:
        _, resp = call(s, m2.WriteTxnMarkersRequest(markers=(m2.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, **kw,
            topics=(m2.WritableTxnMarkerTopic(name=topic, partition_indexes=(partition,)),)),
        )), version)
    return resp.markers[0].topics[0].partitions[0].error_code


def test_hostile_forwarded_markers_get_typed_codes(tmp_path):
    app = _app(tmp_path)
    with app.running():
        app.publish_assignment({TOPIC: LEADERS}, offsets=(0,) * OFFSETS_PARTITIONS)
        app.wait_for_leaders()
        gw0 = app.gateways[0]
        before = app.log.partition(TOPIC, 1).snapshot(refresh=True)
        assert _forward(gw0, partition=1) == 6  # NOT_LEADER_OR_FOLLOWER: slot 1 leads it
        assert _forward(gw0, pid=-1) == 42 and _forward(gw0, epoch=-5) == 42
        assert _forward(gw0, topic="no-such-topic") == 3
        assert _forward(gw0, partition=99) == 3 and _forward(gw0, partition=-1) == 3
        assert _forward(gw0, topic="bad/name") != 0
        # an admin-shaped COMMIT (coordinator epoch >= -1) stays refused
        assert _forward(gw0, coordinator_epoch=0) == 42
        # the smallest bound, a producer with nothing open: only its epoch is recorded, a
        # version without a segment, through the journal (an entry without an object), not
        # sealed back to _log
        journal = app.log.partition(TOPIC, 0).snapshot(refresh=True).hot_journal
        assert _forward(gw0, coordinator_epoch=-(2 ** 31)) == 0
        m = app.log.partition(TOPIC, 0).snapshot(refresh=True)
        assert not any(s.control for s in m.segments) and m.producers[5].epoch == 0
        assert m.hot_journal == journal is not None and "direct" not in _routes([gw0])
        # the journal is whole: partition 0 takes records again (claimed back)
        p = ck.Producer({"bootstrap.servers": gw0.bootstrap})
        p.produce(TOPIC, value=b"after", partition=0)
        assert p.flush(TIMEOUT) == 0
        assert app.log.partition(TOPIC, 0).read_table(0).num_rows == 1
        assert app.log.partition(TOPIC, 1).snapshot(refresh=True).leader_epoch == \
            before.leader_epoch
        assert gw0.proc.poll() is None


def test_a_marker_bound_round_trips_through_coordinator_epoch():
    for before in (None, 0, 1, 12345, 2 ** 31 - 3):
        assert decode_before(encode_before(before)) == (True, before)
    assert encode_before(2 ** 31 - 2) is None and encode_before(-1) is None
    for admin in (-1, 0, 7, 2 ** 31 - 1):  # Kafka admin clients' values: not forwarded
        assert decode_before(admin) == (False, None)


def test_a_marker_never_bypasses_the_fence_of_a_claim(tmp_path):
    """Another writer claims partition 1 (a higher leader epoch, slot 1's journal
    sealed) after the transaction's records and before its end: slot 1, still named
    by the assignment, refuses the marker (its writer is fenced: NOT_LEADER_OR_FOLLOWER
    to a forward, as to its own coordinator), and the coordinator, after its tries,
    writes it into ``_log`` at the new epoch, counted as a direct write."""
    app = _app(tmp_path)
    with app.running():
        app.publish_assignment({TOPIC: LEADERS}, offsets=(0,) * OFFSETS_PARTITIONS)
        app.wait_for_leaders()
        gws = list(app.gateways.values())
        p = _produce(gws[0].bootstrap, "fence", [(0, b"f0"), (1, b"f1")], end="none")
        fenced = app.log.partition(TOPIC, 1).snapshot(refresh=True).leader_epoch
        app.log.partition(TOPIC, 1).claim("intruder")
        p.commit_transaction(TIMEOUT)
        routes = {}
        for gw in gws:
            for (name, labels), v in _metrics(gw).items():
                if name == "sparklog_gateway_txn_markers_total" and 'route="direct"' in labels:
                    routes[re.search(r'reason="(\w+)"', labels).group(1)] = v
        assert sum(routes.values()) == 1 and set(routes) <= {"not_leader", "fenced"}
        m = app.log.partition(TOPIC, 1).snapshot(refresh=True)
        assert m.leader == "intruder" and m.leader_epoch > fenced and not m.open_txns
        assert m.segments[-1].control and not m.segments[-1].file.startswith("_hot/")
        m0 = app.log.partition(TOPIC, 0).snapshot(refresh=True)
        assert m0.segments[-1].control and m0.segments[-1].file.startswith("_hot/")
        assert sorted(_read_committed(gws[0].bootstrap, 2)) == [b"f0", b"f1"]


def test_a_partition_added_but_never_written_keeps_its_journal_whole(tmp_path):
    """A transaction that added partition 0 and wrote nothing there ends with a version
    that only records the producer's epoch (no marker segment): a journal entry with
    partitions and no object. Readers take it (they once refused it, breaking the
    journal, so every partition of it was claimed again and EndTxn answered
    KAFKA_STORAGE_ERROR): it goes through the journal like any marker, and the journal
    goes on for the other partition."""
    import datetime

    from kio.schema.add_partitions_to_txn.v3 import request as apt
    from kio.schema.end_txn.v3 import request as et
    from kio.schema.init_producer_id.v3 import request as ipi

    app = _app(tmp_path)
    with app.running():
        app.publish_assignment({TOPIC: (0, 0)}, offsets=(0,) * OFFSETS_PARTITIONS)
        app.wait_for_leaders((0, 0))
        gw0 = app.gateways[0]
        journal = app.log.partition(TOPIC, 1).snapshot(refresh=True).hot_journal
        with connect(gw0) as s:
            _, init = call(s, ipi.InitProducerIdRequest(
                transactional_id="empty", producer_id=-1, producer_epoch=-1,
                transaction_timeout=datetime.timedelta(seconds=60)), 3)
            assert init.error_code == 0
            _, added = call(s, apt.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="empty",
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=(apt.AddPartitionsToTxnTopic(name=TOPIC,
                                                                 partitions=(0,)),)), 3)
            [topic] = added.results_by_topic_v3_and_below
            assert topic.results_by_partition[0].partition_error_code == 0
            _, ended = call(s, et.EndTxnRequest(
                transactional_id="empty", producer_id=init.producer_id,
                producer_epoch=init.producer_epoch, committed=False), 3)
            assert ended.error_code == 0
        assert _routes([gw0]) == {"local": 1}
        m = app.log.partition(TOPIC, 0).snapshot(refresh=True)
        assert init.producer_id in m.producers and not m.segments
        assert m.hot_journal == journal  # not sealed back to _log
        # the journal is not broken: partition 1 is still written through it
        p = ck.Producer({"bootstrap.servers": gw0.bootstrap})
        p.produce(TOPIC, value=b"still", partition=1)
        assert p.flush(TIMEOUT) == 0
        m1 = app.log.partition(TOPIC, 1).snapshot(refresh=True)
        assert m1.hot_journal == journal and m1.segments[-1].file.startswith("_hot/")
