"""Two gateways that both believe they lead, and a frozen leader that wakes up (issue 13).

Real gateway processes on 127.0.0.1 over one local store; the broker application's
assignment is published by the test (``BrokerRegistry.publish``), so every step is
deterministic. What must hold whatever the interleaving: one commit per manifest
version wins, the loser is fenced (503 ``not_leader``) and writes nothing, every
acknowledged record is in the log exactly once at its acknowledged offset, and no
offset is taken twice. A zombie that sees a successor in its slot stops serving.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time

import pytest

from ingest_gateway.client import Producer
from jobs.gateway_process import GatewayProcess, wait_for
from log_layout import open_log
from log_layout.brokers import OFFSETS_PARTITIONS, OFFSETS_TOPIC, Assignment, BrokerRegistry
from tests.ingest_gateway.slots import leader, slot_gateway

JSON_V2 = "application/vnd.kafka.json.v2+json"


def publish(log, generation: int, slots: dict[int, str], leader_of_all: int,
            partitions: int) -> Assignment:
    a = Assignment(1, generation, slots, tuple(sorted(slots)),
                   {"t": (leader_of_all,) * partitions,
                    OFFSETS_TOPIC: (leader_of_all,) * OFFSETS_PARTITIONS})
    assert BrokerRegistry(log.store).publish(a)
    return a


def read_back(log, partitions: int) -> tuple[collections.Counter, dict, int]:
    seen: collections.Counter = collections.Counter()
    where, twice = {}, 0
    for p in range(partitions):
        table = log.partition("t", p).read_table(0)
        offsets = table.column("offset").to_pylist()
        twice += len(offsets) - len(set(offsets))
        for o, v in zip(offsets, table.column("value").to_pylist()):
            seen[v] += 1
            where[v] = (p, o)
    return seen, where, twice


def test_two_gateways_writing_one_partition_one_wins_each_version_and_the_loser_is_fenced(
        tmp_path):
    """A standalone gateway (it leads everything) and slot 1 of an application that was
    assigned the same partition: both write partition 0 at once, each claim fencing
    the other. Every answered record is there once; the refused ones are nowhere."""
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 1})
    rogue = GatewayProcess(store)
    member = slot_gateway(store, 1)
    with rogue, member:
        publish(log, 1, {1: member.url}, 1, 1)
        wait_for(lambda: leader(log, 0).startswith("gw1"), what="slot 1 to claim partition 0")
        answers: dict[str, list] = {"rogue": [], "member": []}

        def write(name: str, gw: GatewayProcess) -> None:
            for i in range(60):
                value = f"{name}-{i}"
                status, body, _ = gw.request("POST", "/topics/t/partitions/0",
                                             body={"records": [{"value": value}]},
                                             content_type=JSON_V2)
                answers[name].append((value, status, body))

        threads = [threading.Thread(target=write, args=(n, g))
                   for n, g in (("rogue", rogue), ("member", member))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    seen, where, twice = read_back(log, 1)
    assert twice == 0
    refused = 0
    for name, results in answers.items():
        for value, status, body in results:
            stored = f'"{value}"'.encode()
            if status == 200:
                assert seen[stored] == 1, (name, value)
                assert where[stored] == (0, body["offsets"][0]["offset"])
            else:
                assert status == 503 and body["error"] == "not_leader", body
                assert seen[stored] == 0, (name, value)  # refused: written nowhere
                refused += 1
    assert refused > 0, "nobody was fenced: both cannot have led"
    # versions are one chain: offsets 0..n-1 without a hole
    m = log.partition("t", 0).snapshot(refresh=True)
    assert sum(seen.values()) == m.next_offset


@pytest.mark.slow
def test_a_frozen_leader_is_fenced_by_the_new_leader_and_stops_once_replaced(tmp_path):
    """Slot 0 leads everything and is SIGSTOPped under an idempotent producer's load;
    the assignment moves everything to slot 1 (which claims it), and a successor of
    slot 0 starts elsewhere. On SIGCONT the zombie's pending commits are fenced, it
    sees the successor's higher slot epoch and stops serving; nothing acknowledged is
    lost or doubled."""
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 2})
    zombie, other = slot_gateway(store, 0), slot_gateway(store, 1)
    successor = None
    with zombie, other:
        slots = {0: zombie.url, 1: other.url}
        publish(log, 1, slots, 0, 2)
        wait_for(lambda: all(leader(log, p).startswith("gw0") for p in range(2)),
                 what="slot 0 to claim")
        producer = Producer(f"{zombie.url},{other.url}", acks="all", linger_ms=2,
                            request_timeout_ms=2000, retry_backoff_ms=20)
        sent, stop = [], threading.Event()

        def load() -> None:
            n = 0
            while not stop.is_set():
                sent.append((b"v%d" % n, producer.send("t", b"v%d" % n, partition=n % 2)))
                n += 1
                time.sleep(0.002)

        sender = threading.Thread(target=load)
        sender.start()
        try:
            wait_for(lambda: sum(h.done() for _v, h in list(sent)) >= 100,
                     what="records acknowledged by slot 0")
            os.kill(zombie.proc.pid, signal.SIGSTOP)
            publish(log, 2, slots, 1, 2)
            wait_for(lambda: all(leader(log, p).startswith("gw1") for p in range(2)),
                     what="slot 1 to claim")
            successor = slot_gateway(store, 0).start()  # Spark re-ran slot 0 elsewhere
            registry = BrokerRegistry(log.store)  # it registered before it answered
            assert registry.gateway(0).epoch == 2 and registry.gateway(0).url == successor.url
            os.kill(zombie.proc.pid, signal.SIGCONT)
            # it sees the successor's epoch at its next heartbeat and stops serving
            assert zombie.proc.wait(30) == 0
        finally:
            os.kill(zombie.proc.pid, signal.SIGCONT) if zombie.proc.poll() is None else None
            stop.set()
            sender.join(30)
            producer.flush(60)
            producer.close()
            if successor is not None:
                successor.stop()
    acked = {}
    for value, handle in sent:
        meta = handle.result(0)  # every record was acknowledged, after retries
        acked[value] = (meta.partition, meta.offset)
    seen, where, twice = read_back(log, 2)
    assert twice == 0
    assert all(seen[v] == 1 and where[v] == at for v, at in acked.items())
    registry = BrokerRegistry(log.store)
    assert registry.gateway(0).epoch == 2 and registry.gateway(0).url == successor.url
